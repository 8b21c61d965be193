"""pbg_core.model.max_norm: PBG's ``F.embedding(max_norm=...)`` lookups, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pbg_core.model.max_norm import renorm_table_, renormed_rows


def _table(seed: int, count: int = 12, dim: int = 4) -> torch.Tensor:
    return torch.randn(count, dim, generator=torch.Generator().manual_seed(seed)) * 2


def test_renormed_rows_without_max_norm_is_index_select_and_leaves_the_table() -> None:
    table = _table(0)
    before = table.clone()
    idx = torch.tensor([3, 0, 3, 11])
    out = torch.empty(4, 4)
    assert torch.equal(renormed_rows(table, idx, None, out=out), before[idx])
    assert torch.equal(out, before[idx]) and torch.equal(table, before)


def test_renormed_rows_with_max_norm_is_bit_identical_to_torch_embedding_in_rows_and_table() -> None:
    """PBG looks rows up with ``F.embedding(max_norm=...)``, which renorms the table in place."""
    table, ref_table = _table(1), _table(1)
    idx = torch.tensor([5, 2, 5, 7, 0])  # a duplicate row is scaled once, the same in both copies
    rows = renormed_rows(table, idx, 1.5)
    want = F.embedding(idx, ref_table, max_norm=1.5)
    assert torch.equal(rows, want)
    assert torch.equal(table, ref_table)
    assert bool((table.norm(dim=1)[idx] <= 1.5 + 1e-6).all())


def test_renorm_table_scales_only_rows_above_max_norm() -> None:
    table = _table(2)
    norms = table.norm(dim=1)
    ref = table.clone()
    F.embedding(torch.arange(12), ref, max_norm=4.0)
    renorm_table_(table, 4.0)
    assert torch.equal(table, ref)
    small = norms <= 4.0
    assert bool(small.any()) and bool((~small).any())  # the seed exercises both branches
    assert torch.equal(table[small], _table(2)[small])


def _wide_rows(seed: int, max_norm: float) -> torch.Tensor:
    """500 rows of 100 dims, norms spread over 0..4 * max_norm (most of them renormed)."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(500, 100, generator=gen)
    return rows / rows.norm(dim=1, keepdim=True) * torch.rand(500, 1, generator=gen) * 4 * max_norm


def test_one_lookup_can_leave_rows_above_max_norm_so_a_second_changes_them() -> None:
    """Why lookups without gradient settle: PBG's single scaling is not idempotent in float32."""
    table = _wide_rows(3, 1.0)
    renorm_table_(table, 1.0)
    once = table.clone()
    renorm_table_(table, 1.0)
    assert not torch.equal(table, once)


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 3.0, 123.4])
def test_a_settled_row_is_the_same_whatever_lookups_came_before(max_norm: float) -> None:
    x0 = _wide_rows(4, max_norm)
    settled = x0.clone()
    renorm_table_(settled, max_norm, settle=True)
    assert bool((settled.norm(dim=1) <= max_norm * (1 + 1e-6)).all())
    for lookups in range(4):
        table = x0.clone()
        for _ in range(lookups):  # training's (PBG's) single scalings, then an evaluation
            renormed_rows(table, torch.arange(0, 500, 3), max_norm)
            renorm_table_(table, max_norm)
        idx = torch.tensor([7, 1, 7, 499])
        rows = renormed_rows(table, idx, max_norm, settle=True)
        assert torch.equal(rows, settled[idx])
        renorm_table_(table, max_norm, settle=True)
        assert torch.equal(table, settled), lookups
    again = settled.clone()
    renorm_table_(again, max_norm, settle=True)
    renorm_table_(again, max_norm)
    assert torch.equal(again, settled)  # a settled row is left alone by any later lookup
