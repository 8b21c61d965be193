"""pbg_core.distributed.bucket_locks: PBG's lock server rules, and a lost machine's bucket given back."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from pbg_core.distributed.bucket_locks import BucketLocks
from pbg_core.errors import UsageError
from pbg_core.types import Bucket, PartitionKey


def grid(n: int) -> list[Bucket]:
    return [Bucket(lhs, rhs) for lhs in range(n) for rhs in range(n)]


def one_type(bucket: Bucket) -> tuple[Sequence[PartitionKey], Sequence[PartitionKey]]:
    """One partitioned type ``node`` on both sides (a social graph)."""
    return [("node", bucket.lhs)], [("node", bucket.rhs)]


def two_types(bucket: Bucket) -> tuple[Sequence[PartitionKey], Sequence[PartitionKey]]:
    """``user`` on the lhs and ``item`` on the rhs (a bipartite graph): sides never collide."""
    return [("user", bucket.lhs)], [("item", bucket.rhs)]


def locks(n: int, tree_init: bool = False, sides=one_type, **rows: float) -> BucketLocks:
    return BucketLocks(buckets=grid(n), sides=sides, average_rows=rows or {"node": 100.0}, tree_init=tree_init)


def test_no_partition_is_held_twice_and_every_bucket_trains_once() -> None:
    rng = random.Random(7)
    server = locks(6, tree_init=True)
    machines, trained, waits = [f"m{i}" for i in range(3)], [], 0
    while server.remaining:
        machine = rng.choice(machines)
        if machine in server.running:
            trained.append(server.release(machine))
            continue
        if server.acquire(machine) is None:
            waits += 1
        holders = [key for bucket in server.running.values() for key in {*one_type(bucket)[0], *one_type(bucket)[1]}]
        assert len(holders) == len(set(holders)), server.running  # no (entity, partition) in two places
    assert sorted(trained) == grid(6) and waits > 0


def test_cost_rule_prefers_the_bucket_reusing_what_the_machine_holds() -> None:
    server = locks(4)
    assert server.acquire("a") == Bucket(0, 0)  # no previous bucket: every cost is 0, the smallest wins
    server.release("a")
    assert server.acquire("a") == Bucket(0, 1)  # keeps node 0: cost 100 (node 1 in), vs 200 for (1, 1)
    server.release("a")
    assert server.acquire("a") == Bucket(1, 0)  # the same two partitions: cost 0


def test_cost_weighs_each_type_by_its_average_partition_size() -> None:
    server = locks(3, sides=two_types, user=1000.0, item=10.0)
    server.finished.update({Bucket(0, 0)})
    server.previous["a"] = Bucket(0, 0)
    # Keeping the big user partition and swapping the small item one costs 20; the reverse 2000.
    assert server.acquire("a") == Bucket(0, 1)


def test_a_bucket_whose_partitions_are_held_elsewhere_waits() -> None:
    server = locks(2)
    assert server.acquire("a") == Bucket(0, 0)
    assert server.acquire("b") == Bucket(1, 1)  # (0, 1) and (1, 0) both need node 0, held by a
    assert server.acquire("c") is None  # every partition is held: at most n/2 buckets at once
    server.release("a")
    assert server.acquire("c") is None  # (0, 1) and (1, 0) still need node 1, held by b
    server.release("b")
    assert server.acquire("c") == Bucket(0, 1)
    assert server.held_keys() == {("node", 0): "c", ("node", 1): "c"}


def test_bipartite_sides_lock_separately() -> None:
    server = locks(2, sides=two_types, user=1.0, item=1.0)
    assert [server.acquire(m) for m in ("a", "b", "c")] == [Bucket(0, 0), Bucket(1, 1), None]


def test_tree_init_starts_a_bucket_only_from_a_side_already_trained() -> None:
    server = locks(4, tree_init=True)
    assert server.acquire("a") == Bucket(0, 0)
    # Buckets without node 0 on a side cannot start: node 1..3 are untouched yet.
    assert server.acquire("b") is None
    server.release("a")
    assert server.acquire("b") == Bucket(0, 1)
    assert server.acquire("a") is None  # everything left needs node 0 or 1 (held by b) to grow the tree
    plain = locks(4)
    plain.acquire("a")
    assert plain.acquire("b") == Bucket(1, 1)  # without the rule it could


def test_tree_init_prefers_a_bucket_that_starts_a_new_partition() -> None:
    server = locks(4, tree_init=True)
    server.acquire("a")
    server.release("a")  # (0, 0)
    assert server.acquire("a") == Bucket(0, 1)
    server.release("a")
    # PBG's cost rule alone would keep "a" on nodes 0 and 1 with (1, 0), and "b" idle meanwhile.
    assert server.acquire("a") == Bucket(0, 2)
    assert server.acquire("b") == Bucket(1, 3)  # starts node 3 (node 1 is trained and free)
    server.release("a")
    server.release("b")
    # Every node has started: the cost rule alone decides again.
    assert server.acquire("a") == Bucket(2, 0)  # the same nodes as its (0, 2)


def test_a_resumed_pass_counts_its_finished_buckets_for_the_tree() -> None:
    server = BucketLocks(grid(3), one_type, {"node": 1.0}, tree_init=True, finished={Bucket(0, 0), Bucket(0, 1)})
    assert server.remaining == 7
    assert server.acquire("a") == Bucket(0, 2)  # node 0 was trained before the resume: (0, 2) grows the tree
    assert server.acquire("b") == Bucket(1, 1)  # so was node 1


def test_a_lost_machine_gives_its_bucket_back() -> None:
    server = locks(2)
    assert server.acquire("a") == Bucket(0, 0)
    assert server.abandon("a") == Bucket(0, 0)
    assert server.held_keys() == {} and "a" not in server.previous
    assert server.acquire("b") == Bucket(0, 0)  # trained again, from its last saved state
    assert server.abandon("gone") is None


def test_misuse_names_the_machine_and_what_it_holds() -> None:
    server = locks(2)
    server.acquire("a")
    with pytest.raises(UsageError, match=r"machine 'a' still holds bucket \(0, 0\); release it first"):
        server.acquire("a")
    with pytest.raises(UsageError, match=r"machine 'b' holds no bucket; running: a \(0, 0\)"):
        server.release("b")
