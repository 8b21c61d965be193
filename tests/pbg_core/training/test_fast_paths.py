"""fast_paths: which batches it takes, and that it trains exactly like the autograd path."""

from types import SimpleNamespace

import pytest
import torch
from fast_path_cases import COUNT, clone_tables, make_tables, random_edges
from fast_path_cases import fake_config as make_config

from pbg_core.edgelist import EdgeList
from pbg_core.model.embedder import build_model
from pbg_core.model.losses import build_loss
from pbg_core.session.build import worker_settings
from pbg_core.training import fast_backward, fast_paths
from pbg_core.training.batching import train_edges
from pbg_core.training.settings import BatchSettings, build_trainer
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side


def run_both(cfg: SimpleNamespace, edges: EdgeList, num_rels: int = 1, seed: int = 0) -> tuple:
    """Train the same edges with and without the fast path; returns both (stats, tables)."""
    out = []
    base = make_tables(cfg, seed)
    for fast in (True, False):
        tables = clone_tables(base)
        trainer = build_trainer(worker_settings(cfg), build_model(cfg, num_rels))
        trainer.fast_path = fast
        stats = train_edges(trainer, tables, edges, torch.arange(len(edges)), torch.Generator().manual_seed(seed + 1))
        out.append((stats, tables))
    return out[0], out[1], base


def assert_same(fast: tuple, slow: tuple, base: BucketTables) -> None:
    (fast_stats, fast_tables), (slow_stats, slow_tables) = fast, slow
    assert fast_stats.count == slow_stats.count
    for name, value in slow_stats.metrics.items():
        # With 30 entities a negative is often the positive's own entity and ties with it;
        # rounding decides those (test_violators_are_exact_without_ties checks the count).
        rel = 0.02 if name.startswith("violators") else 1e-5
        assert fast_stats.metrics[name] == pytest.approx(value, rel=rel, abs=1e-5), name
    for key, table in slow_tables.embeddings.items():
        if slow_stats.metrics["loss"] > 0 and key[0] == "a":
            assert not torch.equal(table, base.embeddings[key])  # training moved the table
        torch.testing.assert_close(fast_tables.embeddings[key], table, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast_tables.optim_state[key], slow_tables.optim_state[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("comparator", ["dot", "cos"])
@pytest.mark.parametrize("loss_fn", ["ranking", "softmax", "logistic"])
@pytest.mark.parametrize("weights", [False, True])
def test_fast_path_matches_autograd(comparator: str, loss_fn: str, weights: bool) -> None:
    cfg = make_config(comparator=comparator, loss_fn=loss_fn, margin=1.0)
    fast, slow, base = run_both(cfg, random_edges(24, seed=3, weights=weights))
    assert_same(fast, slow, base)
    assert fast[0].metrics["violators_lhs"] > 0  # the ranking margin really is active


@pytest.mark.parametrize(
    "overrides",
    [
        {"disable_lhs_negs": True},
        {"disable_rhs_negs": True},
        {"disable_rhs_negs": True, "loss_fn": "logistic"},
        {"num_uniform_negs": 0},
        {"num_uniform_negs": 0, "disable_lhs_negs": True, "loss_fn": "softmax"},
        {"max_norm": 1.0, "comparator": "cos"},
        {"num_batch_negs": 12, "batch_size": 12, "loss_fn": "softmax"},
        {"num_batch_negs": 50},  # chunk = the whole (smaller) batch
    ],
)
def test_fast_path_matches_autograd_variants(overrides: dict) -> None:
    fast, slow, base = run_both(make_config(**overrides), random_edges(24, seed=4))
    assert_same(fast, slow, base)


def test_fast_path_with_two_entity_types_and_dynamic_relations() -> None:
    rel = SimpleNamespace(name="r", lhs="a", rhs="b", weight=2.0, operator="none", all_negs=False)
    cfg = make_config(relations=[rel], loss_fn="softmax")
    fast, slow, base = run_both(cfg, random_edges(24, seed=5))
    assert_same(fast, slow, base)
    dyn = make_config(dynamic_relations=True, comparator="cos")
    fast, slow, base = run_both(dyn, random_edges(24, seed=6, num_rels=3), num_rels=3)
    assert_same(fast, slow, base)


def test_fast_path_draws_the_same_negatives_as_autograd_path() -> None:
    # Same stats over several batches only if every uniform negative is identical.
    fast, slow, base = run_both(make_config(num_uniform_negs=5, loss_fn="logistic"), random_edges(60, seed=7))
    assert_same(fast, slow, base)


def test_violators_are_exact_without_ties() -> None:
    # Distinct entities and batch negatives only: no negative can tie with its positive.
    edges = EdgeList.from_tensors(torch.arange(12), torch.arange(12, 24), 0)
    fast, slow, _base = run_both(make_config(num_uniform_negs=0, lr=0.0), edges)
    assert fast[0].metrics["violators_lhs"] == slow[0].metrics["violators_lhs"] > 0
    assert fast[0].metrics["violators_rhs"] == slow[0].metrics["violators_rhs"] > 0


@pytest.mark.parametrize("comparator", ["dot", "cos"])
def test_fast_path_matches_autograd_at_ranking_hinge_ties(comparator: str) -> None:
    """0/1 embeddings and margin 1: dot scores are integers, so many pairs sit exactly at the hinge
    ((t - s) + 1 == 0); both paths pass their gradient (PBG's clamp_min) and train alike."""
    cfg = make_config(comparator=comparator, margin=1.0, num_uniform_negs=0)
    edges = EdgeList.from_tensors(torch.arange(12), torch.arange(12, 24), 0)
    base = make_tables(cfg, 0)
    table = base.embeddings[("a", Side.LHS)]
    table.copy_(torch.randint(0, 2, table.shape, generator=torch.Generator().manual_seed(5)).float())
    if comparator == "dot":
        lhs, rhs = table[:12].view(3, 4, -1), table[12:24].view(3, 4, -1)
        hinge = (lhs @ rhs.transpose(1, 2) - (lhs * rhs).sum(-1).unsqueeze(1)) + 1.0  # [chunk, rhs pos, lhs neg]
        off_diagonal = ~torch.eye(4, dtype=torch.bool)
        assert int((hinge.transpose(1, 2)[:, off_diagonal] == 0).sum()) > 3  # ties really occur
    out = []
    for fast in (True, False):
        tables = clone_tables(base)
        trainer = build_trainer(worker_settings(cfg), build_model(cfg, 0))
        trainer.fast_path = fast
        out.append((train_edges(trainer, tables, edges, torch.arange(12), torch.Generator()), tables))
    assert_same(out[0], out[1], base)


def test_supports_only_the_plain_cases() -> None:
    cfg = make_config()
    model, loss, settings = build_model(cfg, 1), build_loss("ranking"), BatchSettings(12, 4, 3)
    assert fast_paths.supports(model, loss, settings, 0, 12)
    assert not fast_paths.supports(model, loss, settings, 0, 10)  # short last chunk
    assert fast_paths.supports(model, loss, settings, 0, 3)  # one chunk of 3
    assert not fast_paths.supports(model, loss, BatchSettings(12, 0, 3), 0, 12)  # uniform-only mode
    assert not fast_paths.supports(model, loss, BatchSettings(12, 4, 3, True, True), 0, 12)
    assert not fast_paths.supports(model, build_loss("ranking"), settings, 0, 0)
    for overrides in (
        {"comparator": "l2"},
        {"bias": True},
        {"global_emb": True},
        {"regularization_coef": 1e-3},
        {"relations": [SimpleNamespace(name="r", lhs="a", rhs="a", weight=1.0, operator="diagonal", all_negs=False)]},
        {"relations": [SimpleNamespace(name="r", lhs="a", rhs="a", weight=1.0, operator="none", all_negs=True)]},
    ):
        assert not fast_paths.supports(build_model(make_config(**overrides), 1), loss, settings, 0, 12), overrides


def test_unsupported_batches_still_train_identically() -> None:
    # 26 edges in batches of 12: the last batch (2 edges) has one chunk; 12 / 4 fills chunks;
    # a translation operator goes through autograd in both runs.
    rel = SimpleNamespace(name="r", lhs="a", rhs="a", weight=1.0, operator="translation", all_negs=False)
    fast, slow, base = run_both(make_config(relations=[rel]), random_edges(26, seed=8))
    assert_same(fast, slow, base)
    fast, slow, base = run_both(make_config(batch_size=10), random_edges(26, seed=9))  # padded chunks
    assert_same(fast, slow, base)


# ---- sparse backward of the ranking loss (pbg_core.training.fast_backward) ---------------------------
def run_backward(cfg: SimpleNamespace, edges: EdgeList, threshold: float, base: BucketTables) -> tuple:
    """Train ``edges`` on a copy of ``base`` with the sparse threshold forced to ``threshold``."""
    tables = clone_tables(base)
    trainer = build_trainer(worker_settings(cfg), build_model(cfg, 1))
    old = fast_backward.SPARSE_MAX_DENSITY
    fast_backward.SPARSE_MAX_DENSITY = threshold
    try:
        stats = train_edges(trainer, tables, edges, torch.arange(len(edges)), torch.Generator().manual_seed(1))
    finally:
        fast_backward.SPARSE_MAX_DENSITY = old
    return stats, tables


def aligned_tables(cfg: SimpleNamespace, noise: float) -> BucketTables:
    """Tables "a" and "b" where b's row i is a's row i plus ``noise``: edge (i, i) scores high."""
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(COUNT, cfg.dimension, generator=gen)
    b = a + noise * torch.randn(COUNT, cfg.dimension, generator=gen)
    embs = {("a", Side.LHS): a, ("a", Side.RHS): a, ("b", Side.LHS): b, ("b", Side.RHS): b}
    states = {key: torch.rand(COUNT, generator=gen) for key in (("a", Side.LHS), ("b", Side.LHS))}
    return BucketTables(embs, {(name, side): states[(name, Side.LHS)] for name, side in embs})


@pytest.mark.parametrize("few", [True, False])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("comparator", ["dot", "cos"])
def test_sparse_backward_matches_dense(few: bool, weights: bool, comparator: str) -> None:
    rel = SimpleNamespace(name="r", lhs="a", rhs="b", weight=1.5, operator="none", all_negs=False)
    cfg = make_config(relations=[rel], comparator=comparator, dimension=8, margin=0.5)
    gen = torch.Generator().manual_seed(12)
    ids = torch.randperm(COUNT, generator=gen)[:24]
    edges = EdgeList.from_tensors(ids, ids, 0, torch.rand(24, generator=gen) + 0.5 if weights else None)
    base = aligned_tables(cfg, 0.5 if few else 3.0)
    dense_stats, dense = run_backward(cfg, edges, -1.0, base)
    sparse_stats, sparse = run_backward(cfg, edges, 1.0, base)
    viol = dense_stats.metrics["violators_lhs"] + dense_stats.metrics["violators_rhs"]
    negatives = 2 * 24 * (4 + 3)
    # Few: under 5% of the negatives violate, yet the margin keeps some pairs active.
    assert (viol < 0.05 * negatives and dense_stats.metrics["loss"] > 0) if few else viol > 0.15 * negatives, viol
    for name, value in dense_stats.metrics.items():
        assert sparse_stats.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    for key, table in dense.embeddings.items():
        assert not torch.equal(table, base.embeddings[key])  # every table got a gradient
        torch.testing.assert_close(sparse.embeddings[key], table, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sparse.optim_state[key], dense.optim_state[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"disable_lhs_negs": True}, {"disable_rhs_negs": True}, {"num_uniform_negs": 0}, {"comparator": "cos"}],
)
def test_sparse_backward_matches_autograd(overrides: dict) -> None:
    # A shared table (lhs and rhs of type "a"): one accumulation for both sides.
    cfg = make_config(margin=1.0, **overrides)
    # Seed chosen so no negative ties its positive (30 entities): rounding would decide ties
    # differently in any two implementations, dense fast path included.
    edges = random_edges(24, seed=16, weights=True)
    base = make_tables(cfg, 0)
    sparse_stats, sparse = run_backward(cfg, edges, 1.0, base)
    slow_trainer = build_trainer(worker_settings(cfg), build_model(cfg, 1))
    slow_trainer.fast_path = False
    slow = clone_tables(base)
    slow_stats = train_edges(slow_trainer, slow, edges, torch.arange(24), torch.Generator().manual_seed(1))
    assert_same((sparse_stats, sparse), (slow_stats, slow), base)


def test_sparse_backward_is_deterministic() -> None:
    cfg = make_config(margin=0.5)
    edges, base = random_edges(48, seed=14), make_tables(make_config(), 2)
    first, second = run_backward(cfg, edges, 1.0, base)[1], run_backward(cfg, edges, 1.0, base)[1]
    for key, table in first.embeddings.items():
        assert torch.equal(table, second.embeddings[key])
        assert torch.equal(first.optim_state[key], second.optim_state[key])


def test_ranking_pairs_by_hand() -> None:
    # One chunk of 2 positives; LHS rows [p0, p1, u0] (n_l = 3), RHS rows [q0, q1] (n_r = 2, no uniforms).
    table = torch.arange(10.0).view(5, 2)
    tables = BucketTables({("e", Side.LHS): table, ("e", Side.RHS): table.clone()})
    keys = (("e", Side.LHS), ("e", Side.RHS))
    rows = fast_backward.BatchRows(tables, keys, (torch.tensor([0, 1]), torch.tensor([2, 3])),
                                   [torch.tensor([[4]]), None], 2, None)  # fmt: skip
    grad_lhs_neg = torch.tensor([[[0.0, 0.0, 2.0], [1.0, 0.0, 0.0]]])  # RHS q0 vs LHS u0; RHS q1 vs LHS p0
    grad_rhs_neg = torch.tensor([[[0.0, 3.0], [0.0, 0.0]]])  # LHS p0 vs RHS q1
    grad_pos = (torch.tensor([[-2.0, -1.0]]), torch.tensor([[-3.0, 0.0]]))
    lhs, rhs, values = fast_backward.ranking_pairs(rows, grad_lhs_neg, grad_rhs_neg, grad_pos)
    got = sorted(zip(lhs.tolist(), rhs.tolist(), values.tolist(), strict=True))
    assert got == [(0, 0, -5.0), (0, 1, 1.0), (0, 1, 3.0), (1, 1, -1.0), (2, 0, 2.0)]


def test_fast_path_with_reused_buffers_across_batch_shapes() -> None:
    # Same process, buffers grown by a larger batch then reused by a smaller one.
    for cfg in (make_config(batch_size=24, num_uniform_negs=7), make_config(batch_size=8, num_uniform_negs=2)):
        fast, slow, base = run_both(cfg, random_edges(48, seed=11))
        assert_same(fast, slow, base)


def test_ranking_torch_fallback_matches_the_fused_kernel() -> None:
    from pbg_core.model.losses import RankingLoss
    from pbg_core.training.loss_grads import ranking_grads

    gen = torch.Generator().manual_seed(5)
    negs, pos = torch.randn(2, 3, 4, 6, generator=gen), torch.randn(3, 4, generator=gen)
    weights = torch.rand(3, 4, generator=gen)
    fused = ranking_grads(RankingLoss(0.1), pos, negs.clone(), weights)
    fallback = ranking_grads(RankingLoss(0.1), pos.double(), negs.double(), weights.double())  # float64: no kernel
    for a, b in zip(fused, fallback, strict=True):
        assert float(a.loss) == pytest.approx(float(b.loss), rel=1e-5)
        assert float(a.violators) == float(b.violators) and float(a.active) == float(b.active)
        assert torch.allclose(a.grad_pos.double(), b.grad_pos) and torch.allclose(a.grad_neg.double(), b.grad_neg)
