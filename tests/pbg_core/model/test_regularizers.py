"""N3: hand-computed penalties, complex moduli, unsupported operators."""

import pytest
import torch

from pbg_core.errors import ConfigError
from pbg_core.model.operators import build_operator
from pbg_core.model.regularizers import REGULARIZERS, N3Regularizer, build_regularizer


def test_standard_mode_operator_term_times_chunks() -> None:
    reg = N3Regularizer(0.5)
    op = build_operator("translation", 2)
    with torch.no_grad():
        op.translation.copy_(torch.tensor([1.0, -2.0]))
    src = torch.tensor([[1.0, -1.0], [2.0, 0.0]])
    dst = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    # |src|^3 = 1 + 1 + 8 ; |dst|^3 = 1 ; |t|^3 = 1 + 8, times the 3 chunks (as PBG), not per positive
    assert reg.penalty([src, dst], op, num_chunks=3).item() == pytest.approx(0.5 * (10 + 1 + 9 * 3))


def test_dynamic_complex_uses_moduli_and_per_edge_params() -> None:
    reg = N3Regularizer(1.0)
    op = build_operator("complex_diagonal", 2, num_dynamic_relations=2)
    with torch.no_grad():
        op.real.copy_(torch.tensor([[3.0], [1.0]]))
        op.imag.copy_(torch.tensor([[4.0], [0.0]]))
    x = torch.tensor([[3.0, 4.0]])  # modulus 5
    got = reg.penalty([x, torch.zeros(1, 2)], op, num_chunks=1, rel=torch.tensor([0]))
    assert got.item() == pytest.approx(125 + 125)


def test_none_operator_penalises_embeddings_only() -> None:
    reg = build_regularizer("N3", 2.0)
    got = reg.penalty([torch.tensor([[-2.0]]), torch.tensor([[1.0]])], build_operator("none", 1), num_chunks=1)
    assert got.item() == pytest.approx(2.0 * 9)


def test_zero_coef_disables_and_linear_is_rejected() -> None:
    assert build_regularizer("N3", 0.0) is None
    assert REGULARIZERS.names() == ["N3"]
    with pytest.raises(ConfigError, match="not defined for operator 'linear'"):
        N3Regularizer(1e-3).check_operator("linear", build_operator("linear", 4))
    N3Regularizer(1e-3).check_operator("diagonal", build_operator("diagonal", 4))
