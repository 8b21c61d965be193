"""pbg_core.training.row_gather: row requests, coalesced updates, bag means."""

from __future__ import annotations

import torch

from pbg_core.edgelist import EntityList, TensorList
from pbg_core.training.optimizers import EPS, RowAdagrad
from pbg_core.training.row_gather import RowGather, bag_mean
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side


def _table(seed: int, count: int = 12, dim: int = 4) -> torch.Tensor:
    return torch.randn(count, dim, generator=torch.Generator().manual_seed(seed)) * 2


def test_requests_on_a_shared_table_are_coalesced_into_one_optimizer_step() -> None:
    """Both sides share one table: the update equals one step on the concatenated gradients."""
    table, state = _table(3), torch.zeros(12)
    keys = (("a", Side.LHS), ("a", Side.RHS))
    tables = BucketTables(dict.fromkeys(keys, table), dict.fromkeys(keys, state))
    gather = RowGather(tables, max_norm=None, requires_grad=True)
    idx_l, idx_r = torch.tensor([1, 4, 4]), torch.tensor([4, 9])
    handles = gather.add(keys[0], idx_l), gather.add(keys[1], idx_r)
    gather.fetch()
    weights = torch.randn(5, 4, generator=torch.Generator().manual_seed(4))
    rows = torch.cat([gather.get(h) for h in handles])
    (rows * weights).sum().backward()

    want_table, want_state = table.clone(), state.clone()
    RowAdagrad(0.1).step(want_table, want_state, torch.cat([idx_l, idx_r]), weights.clone())
    gather.apply(RowAdagrad(0.1))
    assert torch.allclose(table, want_table, atol=1e-6) and torch.allclose(state, want_state)
    # row 4 got three gradients, summed before its one Adagrad step
    summed = weights[1] + weights[2] + weights[3]
    assert torch.allclose(state[4], summed.pow(2).mean())
    assert torch.allclose(table[4], _table(3)[4] - 0.1 * summed / (state[4].sqrt() + EPS), atol=1e-6)


def test_requests_without_gradient_are_skipped() -> None:
    table, state = _table(5), torch.zeros(12)
    key = ("a", Side.LHS)
    gather = RowGather(BucketTables({key: table}, {key: state}), max_norm=None, requires_grad=False)
    gather.add(key, torch.tensor([0, 1]))
    gather.fetch()
    assert not gather.get(0).requires_grad
    gather.apply(RowAdagrad(0.1))
    assert torch.equal(table, _table(5)) and not state.any()


def test_bag_mean_averages_each_bag_and_gives_zeros_for_an_empty_one() -> None:
    offsets = torch.tensor([0, 2, 2, 5])
    features = TensorList(offsets, torch.tensor([0, 1, 2, 3, 4]))
    entities = EntityList(torch.zeros(3, dtype=torch.long), features)
    rows = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    want = torch.tensor([[1.0, 2.0], [0.0, 0.0], [6.0, 7.0]])
    assert torch.equal(bag_mean(rows, entities), want)
