"""train_edges / eval_edges: batching order, an exact training step, determinism, eval."""

import math
from types import SimpleNamespace

import pytest
import torch
from fast_path_cases import entity_types, fake_config, make_relation

from pbg_core.edgelist import EdgeList, EntityList, TensorList
from pbg_core.evaluation.metrics import FilterIndex
from pbg_core.model.embedder import build_model
from pbg_core.session.build import worker_settings
from pbg_core.training.batching import eval_edges, iter_batches, train_edges
from pbg_core.training.settings import build_evaluator, build_trainer
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side


def make_config(**overrides: object) -> SimpleNamespace:
    """:func:`fake_config` on one entity type ``e``: 3 dimensions, batches of 4, 2 batch negatives."""
    cfg = fake_config(
        entities=entity_types("e"),
        relations=[make_relation(lhs="e", rhs="e", weight=1.0)],
        dimension=3,
        batch_size=4,
        num_batch_negs=2,
        num_uniform_negs=0,
    )
    cfg.__dict__.update(overrides)
    return cfg


def one_table(table: torch.Tensor) -> BucketTables:
    state = torch.zeros(table.shape[0])
    return BucketTables(
        {("e", Side.LHS): table, ("e", Side.RHS): table}, {("e", Side.LHS): state, ("e", Side.RHS): state}
    )


def test_iter_batches_groups_by_relation_in_order() -> None:
    rel = torch.tensor([0, 1, 0, 0, 1, 2, 0])
    idx = torch.tensor([6, 5, 4, 3, 2, 1, 0])
    batches = list(iter_batches(rel, idx, 2, one_group=False, generator=torch.Generator().manual_seed(0)))
    assert sorted(torch.cat(batches).tolist()) == list(range(7))
    for b in batches:
        assert len(b) <= 2 and len(set(rel[b].tolist())) == 1
    zeros = torch.cat([b for b in batches if rel[b[0]] == 0]).tolist()
    assert zeros == [6, 3, 2, 0]  # each relation keeps the given order
    dyn = list(iter_batches(rel, idx, 3, one_group=True, generator=torch.Generator()))
    assert [b.tolist() for b in dyn] == [[6, 5, 4], [3, 2, 1], [0]]


def test_one_relation_type_batches_as_grouping_would() -> None:
    rel = torch.zeros(10, dtype=torch.long)
    idx = torch.randperm(10, generator=torch.Generator().manual_seed(1))
    grouped = list(iter_batches(rel, idx, 4, one_group=False, generator=torch.Generator().manual_seed(0)))
    sliced = list(iter_batches(rel, idx, 4, one_group=True, generator=torch.Generator().manual_seed(0)))
    assert [b.tolist() for b in grouped] == [b.tolist() for b in sliced]


def test_one_training_step_equals_dense_reference() -> None:
    torch.manual_seed(0)
    cfg = make_config()
    table = torch.randn(6, 3)
    ref = table.clone().requires_grad_()
    edges = EdgeList.from_tensors(torch.tensor([0, 1, 2, 1]), torch.tensor([3, 4, 5, 3]), 0)
    trainer = build_trainer(worker_settings(cfg), build_model(cfg, 0))
    stats = train_edges(trainer, one_table(table), edges, torch.arange(4), torch.Generator().manual_seed(0))
    # Reference: chunks {0,1} and {2,3}; each positive against its chunk-mate on each side.
    loss = ref.new_zeros(())
    lhs, rhs = edges.lhs.tensor, edges.rhs.tensor
    for i in range(4):
        mate = i ^ 1
        pos = ref[lhs[i]] @ ref[rhs[i]]
        loss = loss + torch.relu(0.1 - pos + ref[lhs[mate]] @ ref[rhs[i]])
        loss = loss + torch.relu(0.1 - pos + ref[lhs[i]] @ ref[rhs[mate]])
    loss.backward()
    g = ref.grad
    touched = g.abs().sum(1) > 0
    want = ref.detach() - 0.1 * g / (g.pow(2).mean(1, keepdim=True).sqrt() + 1e-10) * touched.unsqueeze(1)
    assert stats.count == 4 and stats.metrics["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert torch.allclose(table, want, atol=1e-6)


def test_weights_multiply_loss_and_stats_shape() -> None:
    torch.manual_seed(0)
    edges = EdgeList.from_tensors(torch.arange(4), torch.tensor([3, 2, 1, 0]), 0)
    table = torch.randn(4, 3)
    losses = []
    for rel_weight, edge_weight in ((1.0, None), (3.0, None), (1.0, torch.full((4,), 0.5))):
        cfg = make_config(lr=0.0, margin=10.0)
        cfg.relations[0].weight = rel_weight
        e = EdgeList(edges.lhs, edges.rhs, edges.rel, edge_weight)
        trainer = build_trainer(worker_settings(cfg), build_model(cfg, 0))
        stats = train_edges(trainer, one_table(table.clone()), e, torch.arange(4), torch.Generator())
        losses.append(stats.metrics["loss"])
        assert set(stats.metrics) == {"loss", "reg", "violators_lhs", "violators_rhs"}
    assert losses[1] == pytest.approx(3 * losses[0]) and losses[2] == pytest.approx(0.5 * losses[0])


def test_training_is_deterministic_and_learns() -> None:
    def run(seed: int) -> tuple[torch.Tensor, list[float]]:
        torch.manual_seed(1)
        cfg = make_config(
            dimension=8,
            num_batch_negs=10,
            num_uniform_negs=5,
            batch_size=40,
            lr=0.3,
            loss_fn="softmax",
            global_emb=True,
            comparator="dot",
            relation_lr=0.05,
        )
        model = build_model(cfg, 0)
        table = torch.randn(50, 8) * 0.1
        lhs = torch.arange(50).repeat(4)
        edges = EdgeList.from_tensors(lhs, (lhs * 7 + 3) % 50, 0)
        gen = torch.Generator().manual_seed(seed)
        trainer = build_trainer(worker_settings(cfg), model)
        tables = one_table(table)
        losses = [
            train_edges(trainer, tables, edges, torch.randperm(200, generator=gen), gen).metrics["loss"]
            for _ in range(15)
        ]
        return table, losses

    t1, l1 = run(5)
    t2, l2 = run(5)
    assert torch.equal(t1, t2) and l1 == l2
    assert l1[-1] < 0.7 * l1[0]


def test_eval_all_negs_with_filter_hand_computed() -> None:
    cfg = make_config(batch_size=10)
    cfg.relations[0].all_negs = True
    table = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 0]])
    edges = EdgeList.from_tensors(torch.tensor([0]), torch.tensor([3]), 0)
    evaluator = build_evaluator(worker_settings(cfg), build_model(cfg, 0), during_training=False)
    stats = eval_edges(evaluator, one_table(table), edges, torch.arange(1), torch.Generator())
    # pos = e0.e3 = 1. lhs negatives x.e3 = [1(own, masked), 1, 0, 2] -> rank 1 + 2 = 3
    # rhs negatives e0.x = [1, 0, 0, 1(own, masked)] -> rank 1 + 1 = 2
    assert stats.count == 1
    assert stats.metrics["pos_rank"] == pytest.approx(2.5)
    assert stats.metrics["mrr"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert stats.metrics["r1"] == 0.0 and stats.metrics["r10"] == 1.0
    known = FilterIndex.build(EdgeList.from_tensors(torch.tensor([3, 0]), torch.tensor([3, 0]), 0))
    filtered = eval_edges(evaluator, one_table(table), edges, torch.arange(1), torch.Generator(), known)
    # filter removes (3, r, 3) from lhs negatives -> rank 2 ; (0, r, 0) from rhs -> rank 1
    assert filtered.metrics["pos_rank"] == pytest.approx(1.5)
    assert math.isfinite(filtered.metrics["loss"])


def test_filtered_negatives_score_masked_and_stay_in_the_auc_pool() -> None:
    """PBG's filtered evaluator gives known edges -1e9: beaten in the AUC's pool, not dropped from it."""
    cfg = make_config(batch_size=100)
    cfg.relations[0].all_negs = True
    table = torch.ones(6, 3)
    table[0] = torch.tensor([0.1, 0.0, 0.0])  # e0 . x is small: every unfiltered negative beats the positive
    edges = EdgeList.from_tensors(torch.zeros(100, dtype=torch.long), torch.zeros(100, dtype=torch.long), 0)
    others = torch.arange(5)
    known = FilterIndex.build(
        EdgeList.from_tensors(
            torch.cat([torch.zeros(5, dtype=torch.long), others]),
            torch.cat([others, torch.zeros(5, dtype=torch.long)]),
            0,
        )
    )
    evaluator = build_evaluator(worker_settings(cfg), build_model(cfg, 0), during_training=False)
    stats = eval_edges(evaluator, one_table(table), edges, torch.arange(100), torch.Generator().manual_seed(0), known)
    # Per side 6 negatives: own (masked), 4 filtered (-1e9), e5 beats the positive: rank 2.
    assert stats.metrics["pos_rank"] == pytest.approx(2.0 * 100)
    # PBG's pool holds all 6 scores of each row, 5/6 of them beaten: AUC about 0.83 (200 draws).
    # Dropping the filtered ones would leave own + e5 in the pool: about 0.5.
    assert 0.72 < stats.metrics["auc"] / 100 < 0.95


def test_eval_loss_carries_the_relation_weight() -> None:
    edges = EdgeList.from_tensors(torch.arange(4), torch.tensor([3, 2, 1, 0]), 0)
    table = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    losses = []
    for weight in (1.0, 3.0):
        cfg = make_config(margin=10.0)
        cfg.relations[0].weight = weight
        evaluator = build_evaluator(worker_settings(cfg), build_model(cfg, 0), during_training=False)
        losses.append(
            eval_edges(evaluator, one_table(table.clone()), edges, torch.arange(4), torch.Generator()).metrics["loss"]
        )
    assert losses[0] > 0 and losses[1] == pytest.approx(3 * losses[0])


def test_eval_all_negs_renormalises_every_candidate_with_max_norm() -> None:
    """PBG looks all entities up with max_norm: a long candidate is scored at norm max_norm."""
    cfg = make_config(batch_size=10, max_norm=1.0)
    cfg.relations[0].all_negs = True
    table = torch.tensor([[1.0, 0, 0], [0.9, 0, 0], [3.0, 4.0, 0], [0, 0, 1.0]])
    edges = EdgeList.from_tensors(torch.tensor([0]), torch.tensor([1]), 0)
    evaluator = build_evaluator(worker_settings(cfg), build_model(cfg, 0), during_training=False)
    stats = eval_edges(evaluator, one_table(table), edges, torch.arange(1), torch.Generator())
    # pos = e0.e1 = 0.9; e2 (norm 5) is renormed to (0.6, 0.8, 0).
    # rhs negatives e0.x = [1 (beats), own, 0.6, 0] -> rank 2; lhs x.e1 = [own, 0.81, 0.54, 0] -> rank 1.
    # Unrenormed, e2 would score 3 and 2.7: ranks 3 and 2, MRR 0.42.
    assert stats.metrics["mrr"] == pytest.approx((1 / 2 + 1) / 2)
    assert table[2].tolist() == pytest.approx([0.6, 0.8, 0.0], abs=1e-6)  # in the table, as PBG's lookup


def test_featurized_entities_use_bag_means_and_train() -> None:
    cfg = make_config(num_uniform_negs=3)
    cfg.entities["e"].featurized = True
    bags = TensorList(torch.tensor([0, 2, 3, 3, 5]), torch.tensor([0, 1, 2, 3, 4]))  # one bag is empty
    ents = EntityList(torch.zeros(4, dtype=torch.long), bags)
    edges = EdgeList(ents, ents[torch.tensor([1, 0, 3, 2])], torch.zeros(4, dtype=torch.long))
    table = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    before = table.clone()
    trainer = build_trainer(worker_settings(cfg), build_model(cfg, 0))
    stats = train_edges(trainer, one_table(table), edges, torch.arange(4), torch.Generator())
    assert stats.count == 4 and math.isfinite(stats.metrics["loss"])
    assert not torch.equal(table, before)


def test_max_norm_renormalises_table_rows() -> None:
    cfg = make_config(max_norm=1.0, lr=0.0)
    table = torch.tensor([[3.0, 4.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.5, 0.0]])
    edges = EdgeList.from_tensors(torch.tensor([0, 1]), torch.tensor([2, 3]), 0)
    trainer = build_trainer(worker_settings(cfg), build_model(cfg, 0))
    train_edges(trainer, one_table(table), edges, torch.arange(2), torch.Generator())
    assert table.norm(dim=1).tolist() == pytest.approx([1.0, 0.1, 1.0, 0.5], abs=1e-5)
