"""Operators: PBG parameter names and init, hand-computed outputs, gradchecks."""

import pytest
import torch

from pbg_core.errors import ConfigError
from pbg_core.model.operators import DYNAMIC_OPERATORS, OPERATORS, build_operator

X = torch.tensor([[1.0, 2.0, 3.0, 4.0]])


def test_names_and_initial_parameters() -> None:
    assert OPERATORS.names() == ["affine", "complex_diagonal", "diagonal", "linear", "none", "translation"]
    assert DYNAMIC_OPERATORS.names() == OPERATORS.names()
    shapes = {k: tuple(v.shape) for k, v in build_operator("affine", 4).state_dict().items()}
    assert shapes == {"linear_transformation": (4, 4), "translation": (4,)}
    dyn = build_operator("complex_diagonal", 4, num_dynamic_relations=3).state_dict()
    assert set(dyn) == {"real", "imag"} and dyn["real"].shape == (3, 2)
    assert set(build_operator("linear", 4, 2).state_dict()) == {"linear_transformations"}
    assert set(build_operator("translation", 4, 2).state_dict()) == {"translations"}
    assert set(build_operator("diagonal", 4, 2).state_dict()) == {"diagonals"}
    for name in OPERATORS.names():  # every operator starts as the identity
        assert torch.equal(build_operator(name, 4)(X), X)
        assert torch.equal(build_operator(name, 4, 2)(X.repeat(2, 1), torch.tensor([0, 1])), X.repeat(2, 1))


def test_hand_computed_outputs() -> None:
    with torch.no_grad():
        tr = build_operator("translation", 4)
        tr.translation.copy_(torch.tensor([1.0, 0, 0, -1]))
        assert tr(X).tolist() == [[2.0, 2.0, 3.0, 3.0]]
        lin = build_operator("affine", 4)
        lin.linear_transformation.copy_(torch.tensor([[0.0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 2, 0], [0, 0, 0, 1]]))
        lin.translation.fill_(1.0)
        assert lin(X).tolist() == [[3.0, 2.0, 7.0, 5.0]]  # A x + t
        cd = build_operator("complex_diagonal", 4)
        cd.real.copy_(torch.tensor([0.0, 2.0]))
        cd.imag.copy_(torch.tensor([1.0, 0.0]))
        # (1 + 3i) * i = -3 + i ; (2 + 4i) * 2 = 4 + 8i ; layout [re..., im...]
        assert cd(X).tolist() == [[-3.0, 4.0, 1.0, 8.0]]


def test_dynamic_uses_each_rows_relation() -> None:
    op = build_operator("diagonal", 2, num_dynamic_relations=2)
    with torch.no_grad():
        op.diagonals.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    out = op(torch.ones(3, 2), torch.tensor([1, 0, 1]))
    assert out.tolist() == [[3.0, 4.0], [1.0, 2.0], [3.0, 4.0]]


def test_complex_diagonal_needs_even_dimension() -> None:
    with pytest.raises(ConfigError, match="even dimension.*got 5"):
        build_operator("complex_diagonal", 5)


@pytest.mark.parametrize("name", ["translation", "diagonal", "linear", "affine", "complex_diagonal"])
def test_gradcheck(name: str) -> None:
    torch.manual_seed(0)
    op = build_operator(name, 4, num_dynamic_relations=3).double()
    rel = torch.tensor([2, 0, 2])
    x = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    params = tuple(op.parameters())

    def f(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(
            op, dict(zip([n for n, _ in op.named_parameters()], ps, strict=True)), (x, rel)
        )

    assert torch.autograd.gradcheck(f, (x, *[p.detach().requires_grad_() for p in params]))
