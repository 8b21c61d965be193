"""storage.exporting.relations: relation rows and the parameter order PBG exports them in.

Whole exports (standard and dynamic mode, a relation-name mismatch) are in ``test_exporter.py``.
"""

from __future__ import annotations

import io

import pytest
import torch

from storage.exporting.relations import operator_params, write_rows


def test_write_rows_formats_float32_values_with_nine_decimals() -> None:
    out = io.StringIO()
    values = torch.tensor([[0.1, -2.0], [1e-10, 3.5]], dtype=torch.float32)
    assert write_rows(out, ["r\trhs", "s\trhs"], values) == 2
    # 0.1 as float32 widened to double, as PBG prints a float32 element
    assert out.getvalue() == "r\trhs\t0.100000001\t-2.000000000\ns\trhs\t0.000000000\t3.500000000\n"


def test_write_rows_refuses_keys_and_rows_that_disagree() -> None:
    with pytest.raises(ValueError, match="got 1 keys for 2 rows of values"):
        write_rows(io.StringIO(), ["r"], torch.zeros(2, 3))


def test_operator_params_follow_the_declaration_order_then_the_rest() -> None:
    """State dicts may list parameters in any order; PBG exports in named_parameters() order."""
    state = {
        "rhs_operators.1.translation": torch.zeros(2),
        "rhs_operators.1.extra": torch.ones(1),
        "rhs_operators.1.linear_transformation": torch.eye(2),
        "rhs_operators.10.translation": torch.full((2,), 9.0),  # another index sharing the prefix digits
        "lhs_operators.1.translation": torch.full((2,), 7.0),
    }
    got = operator_params(state, "rhs", 1, "affine", dynamic=False)
    assert [name for name, _ in got] == ["linear_transformation", "translation", "extra"]
    assert torch.equal(got[1][1], torch.zeros(2))


def test_dynamic_and_parameterless_operators() -> None:
    state = {"lhs_operators.0.imag": torch.zeros(3, 1), "lhs_operators.0.real": torch.ones(3, 1)}
    assert [n for n, _ in operator_params(state, "lhs", 0, "complex_diagonal", dynamic=True)] == ["real", "imag"]
    assert operator_params({}, "rhs", 0, "none", dynamic=False) == []
