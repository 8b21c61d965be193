"""pbg_core.session.memory_plan: the resident partitions and the bytes a run needs, on hand-computed sizes."""

from __future__ import annotations

import math

import pytest

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.session.memory_plan import (
    EDGE_BYTES,
    FIXED_OVERHEAD_BYTES,
    GIB,
    Available,
    EntitySize,
    MemoryPlanError,
    RunSizes,
    model_bytes,
    plan_memory,
    run_sizes,
    smallest_fitting_partitions,
)
from pbg_core.session.partitions import PartitionTopology

ROW = 10 * 4 + 4  # d=10: 10 float32 embeddings + 1 float32 Adagrad sum
SLOT = 1000 * ROW  # 1000 rows per partition
EDGES = 100 * EDGE_BYTES


def sizes(partitions: int = 8, two_sided: bool = True, unpartitioned_rows: int = 0, model: int = 0) -> RunSizes:
    """One partitioned type of ``partitions`` x 1000 rows at d=10; 100 edges per chunk."""
    extra = {"small": EntitySize(unpartitioned_rows, unpartitioned_rows, 1, 10)} if unpartitioned_rows else {}
    return RunSizes(
        num_partitions=partitions,
        two_sided=two_sided,
        partitioned={"node": EntitySize(1000, 1000 * partitions, partitions, 10)},
        unpartitioned=extra,
        model_bytes=model,
        chunk_edges=100,
    )


def available(num_bytes: int) -> Available:
    return Available(num_bytes, "test")


FIXED = EDGES + FIXED_OVERHEAD_BYTES


def test_as_many_as_fit_leaving_two_in_flight() -> None:
    plan = plan_memory(sizes(), available(FIXED + 6 * SLOT))  # 6 slots: 4 resident + 2 in flight
    assert (plan.resident, plan.in_flight, plan.slot_bytes) == (4, 2, SLOT)
    assert plan.total_bytes == FIXED + 6 * SLOT
    assert plan_memory(sizes(), available(FIXED + 7 * SLOT)).resident == 5


def test_every_partition_resident_needs_nothing_in_flight() -> None:
    # 8 slots hold all 8 partitions: nothing is loaded or evicted mid-pass.
    plan = plan_memory(sizes(), available(FIXED + 8 * SLOT))
    assert (plan.resident, plan.in_flight) == (8, 0)
    assert plan.total_bytes == FIXED + 8 * SLOT


def test_unpartitioned_types_and_model_count_once() -> None:
    plan = plan_memory(sizes(unpartitioned_rows=500, model=4000), available(FIXED + 500 * ROW + 4000 + 6 * SLOT))
    assert (plan.resident, plan.unpartitioned_bytes, plan.model_bytes) == (4, 500 * ROW, 4000)


def test_describe_is_one_line_with_every_figure() -> None:
    plan = plan_memory(sizes(), Available(FIXED + 6 * SLOT, "MemAvailable in /proc/meminfo"))
    assert plan.describe() == (
        "memory plan: 4 of 8 partitions resident + 2 in flight x 0.00 GB, model 0.00 GB, edges 0.00 GB, "
        f"overhead 1.5 GiB = {(FIXED + 6 * SLOT) / 1e9:.2f} GB of {(FIXED + 6 * SLOT) / 1e9:.2f} GB available "
        "(MemAvailable in /proc/meminfo)"
    )
    assert "\n" not in plan.describe()


def test_one_sided_types_need_one_resident() -> None:
    plan = plan_memory(sizes(two_sided=False), available(FIXED + 3 * SLOT))
    assert (plan.resident, plan.in_flight) == (1, 2)


def test_requested_resident_partitions() -> None:
    assert plan_memory(sizes(), available(FIXED + 8 * SLOT), requested=3).resident == 3
    assert plan_memory(sizes(), available(FIXED + 8 * SLOT), requested=50).resident == 8  # capped at all 8
    with pytest.raises(MemoryPlanError, match=r"^resident_partitions: 6 needs .* at most 4 fit"):
        plan_memory(sizes(), available(FIXED + 6 * SLOT), requested=6)
    with pytest.raises(MemoryPlanError, match=r"^resident_partitions: 1 is not allowed here; .* needs 2"):
        plan_memory(sizes(), available(FIXED + 8 * SLOT), requested=1)


LJ_NODES, LJ_DIM = 4_850_000, 1024
LJ_SLOT = math.ceil(LJ_NODES / 8) * (LJ_DIM * 4 + 4)  # 606,250 rows x 4100 B = 2.49 GB
LJ_CHUNK = 68_500_000 * 99 // 100 // 64  # the largest of 64 even buckets of the 99 % train split


def lj_sizes(partitions: int = 8) -> RunSizes:
    """LiveJournal at PBG's config: one type 'user' on both sides, d=1024, operator none, no global emb."""
    rows = math.ceil(LJ_NODES / partitions)
    return RunSizes(
        num_partitions=partitions,
        two_sided=True,
        partitioned={"user": EntitySize(rows, LJ_NODES, partitions, LJ_DIM)},
        unpartitioned={},
        model_bytes=0,
        chunk_edges=LJ_CHUNK,
    )


def test_livejournal_on_24_gib_keeps_all_8_partitions() -> None:
    plan = plan_memory(lj_sizes(), available(24 * GIB))
    assert plan.slot_bytes == LJ_SLOT == 2_485_625_000
    # 8 x 2.49 GB + 0.06 GB of edges + 1.5 GiB = 21.55 GB <= 25.77 GB
    assert (plan.resident, plan.in_flight) == (8, 0)
    assert "8 of 8 partitions resident + 0 in flight x 2.49 GB" in plan.describe()


def test_livejournal_on_20_gb_keeps_5_and_2_in_flight() -> None:
    # (20 - 1.61 - 0.06) GB / 2.49 GB = 7.4 slots: 5 resident + 2 in flight
    plan = plan_memory(lj_sizes(), available(20 * 10**9))
    assert (plan.resident, plan.in_flight) == (5, 2)


def test_too_few_partitions_names_the_count_that_fits() -> None:
    # One partition of LiveJournal (19.9 GB) and 16 GiB: 4 slots of 19.9 GB / n + 1.67 GB <= 17.18 GB
    # from n = 6 on (n = 5: 4 x 3.98 + 1.67 = 17.57 GB).
    one = lj_sizes(partitions=1)
    with pytest.raises(MemoryPlanError) as caught:
        plan_memory(one, available(16 * GIB))
    message = str(caught.value)
    assert "\n" not in message
    assert "1 partition(s) need at least 1 resident + 0 in flight x 19.89 GB" in message
    assert "17.18 GB is available (test)" in message
    assert message.endswith("use num_partitions >= 6 for entity type(s) user")
    brute = next(n for n in range(2, 100) if lj_sizes(n).need(lj_sizes(n).min_resident()) <= 16 * GIB)
    assert smallest_fitting_partitions(one, available(16 * GIB)) == brute == 6


def test_no_partition_count_helps_when_the_rest_does_not_fit() -> None:
    with pytest.raises(MemoryPlanError, match="no partition count fits: .* alone need 1.61 GB"):
        plan_memory(sizes(), available(FIXED_OVERHEAD_BYTES))


def config(**changes: object) -> ConfigSchema:
    raw = {
        "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}},
        "relations": [
            {"name": "buys", "lhs": "user", "rhs": "item", "operator": "linear"},
            {"name": "follows", "lhs": "user", "rhs": "user", "operator": "translation"},
        ],
        "dimension": 8,
        "entity_path": "e",
        "edge_paths": ["x"],
        "checkpoint_path": "c",
        **changes,
    }
    return parse_config(raw)


def test_model_bytes_from_the_config() -> None:
    # linear on item (8 x 8) + translation on user (8) + global embeddings (8 + 8), x 4 B x 2 (Adagrad)
    assert model_bytes(config(), 0) == (64 + 8 + 16) * 8
    assert model_bytes(config(global_emb=False), 0) == (64 + 8) * 8
    dynamic = config(
        dynamic_relations=True,
        global_emb=False,
        relations=[{"name": "all", "lhs": "user", "rhs": "user", "operator": "diagonal"}],
    )
    assert model_bytes(dynamic, 5) == 5 * (8 + 8) * 8  # 5 relation types, an operator on each side


def test_run_sizes_from_the_config_and_counts() -> None:
    cfg = config(entities={"user": {"num_partitions": 2}, "item": {"num_partitions": 1, "dimension": 4}})
    topology = PartitionTopology.build(
        {"user": 2, "item": 1},
        [(r.lhs, r.rhs) for r in cfg.relations],
    )
    counts = {("user", 0): 30, ("user", 1): 25, ("item", 0): 7}
    found = run_sizes(cfg, topology, counts, 0, chunk_edges=11)
    assert found.num_partitions == 2 and found.two_sided
    assert found.slot_bytes() == 30 * (8 * 4 + 4)
    assert found.unpartitioned_bytes == 7 * (4 * 4 + 4)
    assert found.edge_bytes == 11 * EDGE_BYTES
