"""Shared inputs of the fast-path tests (test_fast_paths, test_fast_dynamic): a small config,
seeded tables and edges. Tables of entity types on both sides are shared, as in training."""

from types import SimpleNamespace

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side

COUNT = 30


def make_relation(operator: str = "none", lhs: str = "a", rhs: str = "a", weight: float = 1.5) -> SimpleNamespace:
    """A relation ``r`` as the trainer reads it."""
    return SimpleNamespace(name="r", lhs=lhs, rhs=rhs, weight=weight, operator=operator, all_negs=False)


def entity_types(*names: str) -> dict[str, SimpleNamespace]:
    """Unpartitioned, unfeaturized entity types of the config's dimension."""
    return {name: SimpleNamespace(num_partitions=1, featurized=False, dimension=None) for name in names}


def fake_config(**overrides: object) -> SimpleNamespace:
    """The fields the trainer reads: one ``none`` relation on ``a``, ranking loss, 6 dimensions."""
    cfg = SimpleNamespace(
        entities=entity_types("a", "b"),
        relations=[make_relation()],
        dimension=6,
        comparator="dot",
        bias=False,
        global_emb=False,
        regularizer="N3",
        regularization_coef=0.0,
        dynamic_relations=False,
        operator_init="identity",
        loss_fn="ranking",
        margin=0.1,
        max_norm=None,
        batch_size=12,
        num_batch_negs=4,
        num_uniform_negs=3,
        disable_lhs_negs=False,
        disable_rhs_negs=False,
        lr=0.1,
        relation_lr=None,
        eval_num_batch_negs=None,
        eval_num_uniform_negs=None,
    )
    cfg.__dict__.update(overrides)
    cfg.entity_dimension = lambda name: cfg.dimension
    return cfg


def make_tables(cfg: SimpleNamespace, seed: int) -> BucketTables:
    """One table per entity type; an entity type on both sides shares its table and state."""
    gen = torch.Generator().manual_seed(seed)
    embs, states = {}, {}
    for name in cfg.entities:
        table, state = torch.randn(COUNT, cfg.dimension, generator=gen), torch.rand(COUNT, generator=gen)
        for side in (Side.LHS, Side.RHS):
            embs[(name, side)], states[(name, side)] = table, state
    return BucketTables(embs, states)


def clone_tables(tables: BucketTables) -> BucketTables:
    """A deep copy that keeps shared tables shared."""
    copies: dict[int, torch.Tensor] = {}

    def dup(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in copies:
            copies[id(t)] = t.clone()
        return copies[id(t)]

    return BucketTables(
        {k: dup(v) for k, v in tables.embeddings.items()}, {k: dup(v) for k, v in tables.optim_state.items()}
    )


def random_edges(num: int, seed: int, weights: bool = False, num_rels: int = 1) -> EdgeList:
    gen = torch.Generator().manual_seed(seed)
    lhs, rhs = torch.randint(COUNT, (num,), generator=gen), torch.randint(COUNT, (num,), generator=gen)
    rel = torch.randint(num_rels, (num,), generator=gen)
    weight = torch.rand(num, generator=gen) + 0.5 if weights else None
    return EdgeList.from_tensors(lhs, rhs, rel, weight)
