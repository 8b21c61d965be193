"""Fused numba kernels against the torch formulations they replace."""

import math

import pytest
import torch

from pbg_core.kernels import fused
from pbg_core.training.optimizers import EPS, RowAdagrad


def _torch_row_adagrad(table, state, indices, grads, lr):
    """Reference: coalesce repeated rows, then the row-wise Adagrad update."""
    rows, slot = torch.unique(indices, return_inverse=True)
    summed = torch.zeros(rows.numel(), grads.shape[1], dtype=grads.dtype).index_add_(0, slot, grads)
    state[rows] += summed.pow(2).mean(1)
    table[rows] -= lr * summed / (state[rows].sqrt() + EPS).unsqueeze(1)


def test_row_adagrad_matches_coalesced_reference_with_repeats() -> None:
    gen = torch.Generator().manual_seed(3)
    table, state = torch.randn(500, 16, generator=gen), torch.rand(500, generator=gen)
    indices = torch.randint(0, 40, (300,), generator=gen)  # many repeats
    grads = torch.randn(300, 16, generator=gen)
    want_t, want_s = table.clone(), state.clone()
    _torch_row_adagrad(want_t, want_s, indices, grads.clone(), 0.3)
    slots = torch.empty(500, dtype=torch.long)
    fused.row_adagrad_(table, state, indices, grads.clone(), slots, 0.3, EPS)
    assert torch.allclose(state, want_s, rtol=1e-5, atol=1e-6)
    assert torch.allclose(table, want_t, rtol=1e-5, atol=1e-6)


def test_row_adagrad_hand_computed() -> None:
    table, state = torch.zeros(3, 2), torch.tensor([0.0, 1.0, 0.0])
    grads = torch.tensor([[1.0, 1.0], [2.0, 0.0], [1.0, 3.0]])
    fused.row_adagrad_(table, state, torch.tensor([1, 0, 1]), grads, torch.empty(3, dtype=torch.long), 0.5, EPS)
    # row 1: g = (2, 4), G = 1 + (4 + 16) / 2 = 11; row 0: g = (2, 0), G = 2
    assert state.tolist() == pytest.approx([2.0, 11.0, 0.0])
    assert table[1].tolist() == pytest.approx([-1 / math.sqrt(11), -2 / math.sqrt(11)])
    assert table[0].tolist() == pytest.approx([-1 / math.sqrt(2), 0.0])
    assert table[2].tolist() == [0.0, 0.0]


def test_row_adagrad_is_deterministic_and_used_by_the_optimizer() -> None:
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(100, 8, generator=gen)
    indices, grads = torch.randint(0, 30, (200,), generator=gen), torch.randn(200, 8, generator=gen)
    results = []
    for _ in range(2):
        table, state = base.clone(), torch.zeros(100)
        RowAdagrad(0.1).step(table, state, indices, grads)
        results.append(table)
    assert torch.equal(results[0], results[1])
    assert not torch.equal(results[0], base)


def test_row_adagrad_optimizer_falls_back_for_float64() -> None:
    table, state = torch.zeros(2, 2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    assert not fused.accepts((table, state))
    RowAdagrad(0.5).step(table, state, torch.tensor([0, 0]), torch.ones(2, 2, dtype=torch.float64))
    assert state.tolist() == pytest.approx([4.0, 0.0])


def _torch_ranking(negs, pos, weights, margin):
    unclamped = (negs - pos.unsqueeze(-1)) + margin  # PBG's F.margin_ranking_loss, target -1
    hinge = unclamped.clamp_min(0)
    active = (unclamped >= 0).to(negs.dtype)  # clamp_min's gradient: a tie at the hinge is active
    loss = (hinge.sum(-1) * weights).sum((1, 2))
    violators = (negs > pos.unsqueeze(-1)).sum((1, 2, 3))
    return loss, violators, active.sum((1, 2, 3)), active * weights.unsqueeze(-1), -active.sum(-1) * weights


@pytest.mark.parametrize("sides", [1, 2])
def test_ranking_matches_torch(sides: int) -> None:
    gen = torch.Generator().manual_seed(sides)
    negs = torch.randn(sides, 4, 5, 7, generator=gen)
    negs[..., 0] = -1e9  # a masked entry
    pos, weights = torch.randn(4, 5, generator=gen), torch.rand(4, 5, generator=gen) + 0.5
    loss, violators, active, grad, grad_pos = _torch_ranking(negs, pos, weights, 0.2)
    out_pos = torch.empty(sides, 4, 5)
    sums = fused.ranking_grads_(negs, pos, weights, 0.2, out_pos)
    assert sums[:, 0].tolist() == pytest.approx(loss.tolist(), rel=1e-5)
    assert sums[:, 1].tolist() == violators.tolist()
    assert sums[:, 2].tolist() == active.tolist()
    assert torch.allclose(negs, grad) and torch.allclose(out_pos, grad_pos)


def test_ranking_hand_computed() -> None:
    negs = torch.tensor([[[[0.5, -1.0, 2.0]]]])
    out_pos = torch.empty(1, 1, 1)
    sums = fused.ranking_grads_(negs, torch.tensor([[1.0]]), torch.tensor([[2.0]]), 0.1, out_pos)
    # hinges: max(0, 0.1 - 1 + x) = 0, 0, 1.1 -> loss 2 * 1.1; one violator (2.0 > 1.0)
    assert sums[0].tolist() == pytest.approx([2.2, 1.0, 1.0])
    assert negs.flatten().tolist() == [0.0, 0.0, 2.0]
    assert out_pos.item() == -2.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # the kernel, then loss_grads' torch version
def test_ranking_tie_at_the_hinge_is_active_as_pbg(dtype: torch.dtype) -> None:
    """(t - s) + margin == 0 exactly: PBG's clamp_min passes the gradient (relu would not)."""
    from pbg_core.model.losses import RankingLoss
    from pbg_core.training.loss_grads import ranking_grads

    pos = torch.tensor([[1.0, 2.0]], dtype=dtype)
    negs = torch.tensor([[[[0.5, 1.0], [2.0, 1.5]]]], dtype=dtype)  # hinges 0 (tie), 0.5, 0.5, 0 (tie)
    (side,) = ranking_grads(RankingLoss(margin=0.5), pos, negs, 1.0)
    assert float(side.loss) == pytest.approx(1.0)
    assert side.grad_neg.flatten().tolist() == [1.0, 1.0, 1.0, 1.0]
    assert side.grad_pos.flatten().tolist() == [-2.0, -2.0]
    assert float(side.active) == 4.0 and float(side.violators) == 0.0  # ties are not violators


def test_ranking_keeps_nan_in_the_loss() -> None:
    negs = torch.tensor([[[[0.0, float("nan")]]]])
    sums = fused.ranking_grads_(negs, torch.tensor([[1.0]]), torch.tensor([[1.0]]), 0.1, torch.empty(1, 1, 1))
    assert math.isnan(sums[0, 0])


def test_accepts_only_contiguous_cpu_float32_and_int64() -> None:
    x = torch.zeros(4, 4)
    assert fused.accepts((x,), (torch.zeros(3, dtype=torch.long),))
    assert not fused.accepts((x.t(),))
    assert not fused.accepts((x,), (torch.zeros(3, dtype=torch.int32),))


def _torch_softmax(negs, pos, weights):
    """Reference: the softmax loss through autograd (float64)."""
    negs, pos = negs.double().requires_grad_(), pos.double().requires_grad_()
    lse = negs.logsumexp(-1)
    loss = ((torch.logaddexp(pos, lse) - pos) * weights.double()).sum()
    loss.backward()
    return float(loss.detach()), negs.grad.float(), pos.grad.float(), int((negs > pos.unsqueeze(-1)).sum())


def test_softmax_matches_autograd() -> None:
    gen = torch.Generator().manual_seed(5)
    negs = 4 * torch.randn(3, 5, 9, generator=gen)
    negs[:, :, :5].diagonal(dim1=1, dim2=2).add_(-1e9)  # masked entries
    negs[0, 0, 1:] = -60.0  # tiny exps next to a big one
    pos, weights = 4 * torch.randn(3, 5, generator=gen), torch.rand(3, 5, generator=gen) + 0.5
    loss, grad, grad_pos, violators = _torch_softmax(negs, pos, weights)
    out_pos = torch.empty(3, 5)
    sums = fused.softmax_grads_(negs, pos, weights, out_pos)
    assert sums[0] == pytest.approx(loss, rel=1e-6)
    assert sums[1] == violators > 0
    torch.testing.assert_close(negs, grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out_pos, grad_pos, rtol=1e-5, atol=1e-7)
    assert (negs[:, :, :5].diagonal(dim1=1, dim2=2) == 0).all()


def test_softmax_exp_is_within_two_ulp() -> None:
    x = torch.linspace(-87.0, 0.0, 200_001)
    row = x.clone()
    kbits = torch.empty(x.numel(), dtype=torch.int32).numpy()
    total = fused._exp_shifted(row.numpy(), 0.0, kbits, kbits.view("float32"))
    want = torch.exp(x.double())
    assert ((row.double() - want).abs() / want).max() < 2.4e-7  # 2 ulp of float32
    assert total == pytest.approx(float(want.sum()), rel=1e-5)


def test_softmax_keeps_nan_in_the_loss() -> None:
    negs = torch.tensor([[[0.0, float("nan"), 1.0]]])
    sums = fused.softmax_grads_(negs, torch.tensor([[1.0]]), torch.tensor([[1.0]]), torch.empty(1, 1))
    assert math.isnan(sums[0])


_WARM_UP_CHECK = """
from types import SimpleNamespace
import torch
from pbg_core.edgelist import EdgeList
from pbg_core.kernels import complex_diagonal, fused
from pbg_core.model.embedder import build_model
from pbg_core.session.build import worker_settings
from pbg_core.training.batching import train_edges
from pbg_core.training.settings import build_trainer
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side

fused.warm_up()
complex_diagonal.warm_up()
dispatchers = [fused._row_adagrad, fused._ranking, fused._softmax,
               complex_diagonal._complex_forward, complex_diagonal._complex_backward]
before = [len(d.signatures) for d in dispatchers]
for operator, loss_fn, dynamic in (("complex_diagonal", "softmax", True), ("none", "ranking", False)):
    cfg = SimpleNamespace(
        entities={"a": SimpleNamespace(num_partitions=1, featurized=False, dimension=None)},
        relations=[SimpleNamespace(name="r", lhs="a", rhs="a", weight=1.0, operator=operator, all_negs=False)],
        dimension=8, comparator="dot", bias=False, global_emb=False, regularizer="N3",
        regularization_coef=1e-3 if dynamic else 0.0, dynamic_relations=dynamic, loss_fn=loss_fn, margin=0.1,
        max_norm=None, batch_size=8, num_batch_negs=4, num_uniform_negs=3, disable_lhs_negs=False,
        disable_rhs_negs=False, lr=0.1, relation_lr=None, eval_num_batch_negs=None, eval_num_uniform_negs=None,
        operator_init="identity",
    )
    cfg.entity_dimension = lambda name: 8
    table, state = torch.randn(20, 8), torch.zeros(20)
    keys = (("a", Side.LHS), ("a", Side.RHS))
    tables = BucketTables({key: table for key in keys}, {key: state for key in keys})
    rel = torch.randint(2, (16,)) if dynamic else torch.zeros(16, dtype=torch.long)
    edges = EdgeList.from_tensors(torch.randint(20, (16,)), torch.randint(20, (16,)), rel)
    trainer = build_trainer(worker_settings(cfg), build_model(cfg, 2))
    train_edges(trainer, tables, edges, torch.arange(16), torch.Generator())
after = [len(d.signatures) for d in dispatchers]
assert after == before, (before, after)
"""


def test_warm_up_loads_the_signatures_training_uses() -> None:
    """In a fresh process, training after warm_up compiles nothing new (no first-batch stall)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _WARM_UP_CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
