"""fast_dynamic: which dynamic-relation batches it takes, and that it trains exactly like autograd."""

from types import SimpleNamespace

import pytest
import torch
from fast_path_cases import clone_tables, fake_config, make_relation, make_tables
from fast_path_cases import random_edges as shared_random_edges

from pbg_core.edgelist import EdgeList
from pbg_core.model.embedder import build_model
from pbg_core.model.losses import build_loss
from pbg_core.session.build import worker_settings
from pbg_core.training import fast_dynamic
from pbg_core.training.batching import train_edges
from pbg_core.training.settings import BatchSettings, build_trainer
from pbg_core.training.tables import BucketTables

NUM_RELS = 4


def make_config(
    operator: str = "complex_diagonal", lhs: str = "a", rhs: str = "a", **overrides: object
) -> SimpleNamespace:
    """A dynamic-relation softmax config with one ``operator`` relation from ``lhs`` to ``rhs``."""
    return fake_config(
        **{
            "relations": [make_relation(operator, lhs, rhs)],
            "dynamic_relations": True,
            "loss_fn": "softmax",
            **overrides,
        }
    )


def randomize_operators(model: torch.nn.Module, seed: int) -> None:
    """Move the operators off their identity-like start, so their gradients matter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=gen))


def run_both(
    cfg: SimpleNamespace, edges: EdgeList, seed: int = 0, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple:
    """Train the same edges with and without the fast paths; returns both (stats, tables, model).

    With ``monkeypatch``, also checks that the fast run took :func:`fast_dynamic.train_batch`.
    """
    calls: list[int] = []
    if monkeypatch is not None:
        original = fast_dynamic.train_batch
        monkeypatch.setattr(fast_dynamic, "train_batch", lambda *args: calls.append(1) or original(*args))
    out = []
    base = make_tables(cfg, seed)
    for fast in (True, False):
        tables = clone_tables(base)
        model = build_model(cfg, NUM_RELS)
        randomize_operators(model, seed)
        trainer = build_trainer(worker_settings(cfg), model)
        trainer.fast_path = fast
        stats = train_edges(trainer, tables, edges, torch.arange(len(edges)), torch.Generator().manual_seed(seed + 1))
        out.append((stats, tables, model, trainer.model_optimizer))
    if monkeypatch is not None:
        assert calls, "the fast run never took fast_dynamic.train_batch"
    return out[0], out[1], base


def random_edges(num: int, seed: int, weights: bool = False) -> EdgeList:
    return shared_random_edges(num, seed, weights, NUM_RELS)


def assert_same(fast: tuple, slow: tuple, base: BucketTables) -> None:
    (fast_stats, fast_tables, fast_model, fast_opt), (slow_stats, slow_tables, slow_model, slow_opt) = fast, slow
    assert fast_stats.count == slow_stats.count
    for name, value in slow_stats.metrics.items():
        # With 30 entities a negative is often the positive's own entity and ties with it:
        # rounding decides those (a tie or two per run).
        tolerance = {"rel": 0.02, "abs": 2} if name.startswith("violators") else {"rel": 1e-5, "abs": 1e-5}
        assert fast_stats.metrics[name] == pytest.approx(value, **tolerance), name
    for key, table in slow_tables.embeddings.items():
        if key[0] == "a":
            assert not torch.equal(table, base.embeddings[key])  # training moved the table
        torch.testing.assert_close(fast_tables.embeddings[key], table, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast_tables.optim_state[key], slow_tables.optim_state[key], rtol=1e-5, atol=1e-5)
    for (name, param), other in zip(fast_model.named_parameters(), slow_model.parameters(), strict=True):
        torch.testing.assert_close(param, other, rtol=1e-5, atol=1e-5, msg=name)
    if slow_opt is not None:
        for mine, theirs in zip(fast_opt.sums, slow_opt.sums, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("operator", ["complex_diagonal", "diagonal", "translation", "none"])
@pytest.mark.parametrize("loss_fn", ["ranking", "softmax", "logistic"])
@pytest.mark.parametrize("reg", [0.0, 1e-2])
def test_fast_dynamic_matches_autograd(
    operator: str, loss_fn: str, reg: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_config(operator, loss_fn=loss_fn, margin=1.0, regularization_coef=reg)
    plain = operator == "none" and not reg  # pbg_core.training.fast_paths takes these
    fast, slow, base = run_both(cfg, random_edges(24, seed=3), monkeypatch=None if plain else monkeypatch)
    assert_same(fast, slow, base)
    if reg:
        assert fast[0].metrics["reg"] > 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"disable_lhs_negs": True},
        {"disable_rhs_negs": True, "loss_fn": "logistic"},
        {"disable_rhs_negs": True, "loss_fn": "ranking", "regularization_coef": 1e-2},
        {"num_uniform_negs": 0},
        {"max_norm": 1.0, "regularization_coef": 1e-2},
        {"num_batch_negs": 12, "batch_size": 12, "loss_fn": "ranking"},
        {"num_batch_negs": 50},  # chunk = the whole (smaller) batch
        {"relation_lr": 0.5, "regularization_coef": 1e-2},
    ],
)
def test_fast_dynamic_matches_autograd_variants(overrides: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow, base = run_both(make_config(**overrides), random_edges(24, seed=4), monkeypatch=monkeypatch)
    assert_same(fast, slow, base)


@pytest.mark.parametrize("operator", ["complex_diagonal", "translation"])
def test_fast_dynamic_with_weights_and_two_entity_types(operator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(operator, rhs="b", regularization_coef=1e-2)
    fast, slow, base = run_both(cfg, random_edges(24, seed=5, weights=True), monkeypatch=monkeypatch)
    assert_same(fast, slow, base)


def test_fast_dynamic_draws_the_same_negatives_over_many_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(num_uniform_negs=5, regularization_coef=1e-3)
    fast, slow, base = run_both(cfg, random_edges(60, seed=7), monkeypatch=monkeypatch)
    assert_same(fast, slow, base)


def test_supports_only_the_row_wise_cases() -> None:
    cfg = make_config()
    model, loss, settings = build_model(cfg, NUM_RELS), build_loss("softmax"), BatchSettings(12, 4, 3)
    assert fast_dynamic.supports(model, loss, settings, 12)
    assert fast_dynamic.supports(model, loss, settings, 3)  # one chunk of 3
    assert fast_dynamic.supports(model, loss, settings, 10)  # a short last chunk is padded
    assert not fast_dynamic.supports(model, loss, BatchSettings(12, 0, 3), 12)  # uniform-only mode
    assert not fast_dynamic.supports(model, loss, BatchSettings(12, 4, 3, True, True), 12)
    assert not fast_dynamic.supports(model, loss, settings, 0)
    for cfg in (
        make_config(comparator="cos"),
        make_config(comparator="l2"),
        make_config(bias=True),
        make_config("linear"),
        make_config("affine"),
        make_config(dynamic_relations=False),
    ):
        assert not fast_dynamic.supports(build_model(cfg, NUM_RELS), loss, settings, 12), cfg


@pytest.mark.parametrize("operator", ["complex_diagonal", "translation", "diagonal"])
@pytest.mark.parametrize("loss_fn", ["ranking", "softmax", "logistic"])
def test_padded_last_chunks_train_identically(operator: str, loss_fn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 26 edges in batches of 10 with chunks of 4: every batch ends in a padded chunk
    # (10 = 4 + 4 + 2, 6 = 4 + 2).
    cfg = make_config(operator, loss_fn=loss_fn, margin=1.0, batch_size=10, regularization_coef=1e-2)
    fast, slow, base = run_both(cfg, random_edges(26, seed=9, weights=True), monkeypatch=monkeypatch)
    assert_same(fast, slow, base)


def test_padded_chunks_with_disabled_sides_and_two_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    for overrides in ({"disable_lhs_negs": True}, {"rhs": "b", "num_uniform_negs": 0}, {"max_norm": 1.0}):
        cfg = make_config(batch_size=10, regularization_coef=1e-2, **overrides)
        fast, slow, base = run_both(cfg, random_edges(26, seed=10), monkeypatch=monkeypatch)
        assert_same(fast, slow, base)
