"""bench.scaling_model: the save policies' transfer counts and the simulated schedule's shape."""

from __future__ import annotations

import pytest

from bench import scaling_model
from bench.scaling_model import Costs, Storage, simulate

COSTS = Costs(
    edge_rate=100_000,
    cores=4,
    hogwild_efficiency=1.0,
    storage_mbps=100.0,
    overhead_s=0.0,
    partition_bytes=50e6,  # 0.5 s to move one
    edges_per_bucket=400_000,  # 1 s of compute
)


def test_every_bucket_saves_both_partitions_and_on_eviction_only_what_leaves() -> None:
    ours, pbg = Storage("every-bucket"), Storage("on-eviction")
    a, b, c = ("node", 0), ("node", 1), ("node", 2)
    for storage in (ours, pbg):
        assert storage.start("m0", {a, b}) == 2  # both read
        storage.finish("m0", {a, b})
        assert storage.start("m0", {a, c}) == (1 if storage is ours else 2)  # c read; on eviction b saved too
        storage.finish("m0", {a, c})
    assert (ours.reads, ours.writes) == (3, 4)
    assert pbg.flush() == 2 and (pbg.reads, pbg.writes) == (3, 3)


def test_a_partition_trained_elsewhere_is_read_again_and_its_unsaved_holder_saves_it_first() -> None:
    storage = Storage("on-eviction")
    a, b, c = ("node", 0), ("node", 1), ("node", 2)
    storage.start("m0", {a, b})
    storage.finish("m0", {a, b})
    assert storage.start("m1", {b, c}) == 3  # m0 saves b, m1 reads b and c
    storage.finish("m1", {b, c})
    assert storage.start("m0", {a, b}) == 2  # m0's b is stale: m1 saves it, m0 rereads it


@pytest.mark.parametrize("policy", scaling_model.POLICIES)
def test_one_machine_s_epoch_is_its_buckets_back_to_back(policy: str) -> None:
    epoch = simulate(4, 1, COSTS, policy)
    if policy == "every-bucket":
        assert epoch["writes"] == 2 * 16 - 4  # a diagonal bucket holds one partition
    else:
        assert epoch["reads"] == epoch["writes"]
    moved = epoch["reads"] + epoch["writes"]
    assert epoch["seconds"] == pytest.approx(16 * 1.0 + moved * 0.5)


def test_machines_beyond_half_the_partitions_do_not_help() -> None:
    seconds = {m: simulate(8, m, COSTS, "every-bucket")["seconds"] for m in (1, 2, 4, 8)}
    assert seconds[2] < seconds[1] / 1.8 and seconds[4] < seconds[2] / 1.6
    assert seconds[8] >= seconds[4]  # at most 4 buckets of an 8x8 grid train at once
