"""PartitionTopology: PBG's partitioned/unpartitioned rule, buckets and their partitions."""

from __future__ import annotations

import pytest

from pbg_core.errors import ConfigError
from pbg_core.session.partitions import PartitionTopology
from pbg_core.types import Bucket, Side


def _social() -> PartitionTopology:
    # user (4 parts) follows user; user likes item (unpartitioned); tag (1) tags item.
    return PartitionTopology.build(
        {"user": 4, "item": 1, "tag": 1, "unused": 7},
        [("user", "user"), ("user", "item"), ("tag", "item")],
    )


def test_sides_counts_and_types() -> None:
    topo = _social()
    assert (topo.nparts_lhs, topo.nparts_rhs) == (4, 4)
    assert topo.partitioned(Side.LHS) == {"user"}
    assert topo.unpartitioned(Side.LHS) == {"tag"}
    assert topo.partitioned(Side.RHS) == {"user"}
    assert topo.unpartitioned(Side.RHS) == {"item"}
    assert topo.is_partitioned("user") and not topo.is_partitioned("item")
    # a type used by no relation is on no side and never needs memory
    assert "unused" not in topo.num_partitions


def test_buckets_are_lexicographic() -> None:
    topo = PartitionTopology.build({"a": 2, "b": 3}, [("a", "b")])
    assert topo.buckets() == [Bucket(0, 0), Bucket(0, 1), Bucket(0, 2), Bucket(1, 0), Bucket(1, 1), Bucket(1, 2)]


def test_bucket_needs_per_side() -> None:
    topo = _social()
    bucket = Bucket(2, 3)
    assert topo.side_partitions(bucket, Side.LHS) == [("tag", 0), ("user", 2)]
    assert topo.side_partitions(bucket, Side.RHS) == [("item", 0), ("user", 3)]
    assert topo.bucket_partitions(bucket) == [("user", 2), ("user", 3)]
    assert topo.bucket_partitions(Bucket(1, 1)) == [("user", 1)]
    assert topo.partitioned_keys() == [("user", 0), ("user", 1), ("user", 2), ("user", 3)]
    assert topo.unpartitioned_keys() == [("item", 0), ("tag", 0)]


def test_one_side_partitioned_other_side_unpartitioned() -> None:
    topo = PartitionTopology.build({"doc": 3, "word": 1}, [("doc", "word")])
    assert (topo.nparts_lhs, topo.nparts_rhs) == (3, 1)
    assert topo.buckets() == [Bucket(0, 0), Bucket(1, 0), Bucket(2, 0)]
    assert topo.bucket_partitions(Bucket(2, 0)) == [("doc", 2)]
    assert topo.unpartitioned(Side.RHS) == {"word"}


def test_single_partition_everywhere_makes_every_type_partitioned() -> None:
    topo = PartitionTopology.build({"a": 1, "b": 1}, [("a", "b"), ("b", "b")])
    assert (topo.nparts_lhs, topo.nparts_rhs) == (1, 1)
    assert topo.partitioned(Side.LHS) == {"a", "b"}
    assert topo.unpartitioned(Side.RHS) == set()
    assert topo.bucket_partitions(Bucket(0, 0)) == [("a", 0), ("b", 0)]
    assert topo.unpartitioned_keys() == []
    assert topo.slots_needed("b") == 1


def test_slots_needed() -> None:
    topo = _social()
    assert topo.slots_needed("user") == 2  # off-diagonal buckets hold two user partitions
    assert topo.slots_needed("item") == 1
    one_sided = PartitionTopology.build({"doc": 3, "word": 1}, [("doc", "word")])
    assert one_sided.slots_needed("doc") == 1  # swap evicts before it loads
    with pytest.raises(ConfigError, match="'nope' is not used by any relation; known: item, tag, user"):
        topo.slots_needed("nope")


def test_resident_slots_lie_between_what_a_bucket_needs_and_every_partition() -> None:
    topo = _social()
    partitioned = sorted(topo.partitioned_types)
    assert topo.resident_slots() == {t: topo.slots_needed(t) for t in partitioned}
    assert topo.resident_slots(1) == topo.resident_slots()  # never fewer than a bucket needs
    assert topo.resident_slots(100) == {t: topo.num_partitions[t] for t in partitioned}  # never more than exist
    one_sided = PartitionTopology.build({"doc": 3, "word": 1}, [("doc", "word")])
    assert one_sided.resident_slots(2) == {"doc": 2}


def test_mixed_partition_counts_on_a_side_name_types_and_counts() -> None:
    with pytest.raises(ConfigError) as info:
        PartitionTopology.build({"a": 2, "b": 3, "c": 1, "d": 4}, [("a", "c"), ("b", "c"), ("c", "d")])
    assert info.value.problems == [
        "lhs: all partitioned entity types on one side must have a single value of num_partitions "
        "(types with 1 partition are unpartitioned); got a=2, b=3"
    ]


def test_same_count_on_a_side_but_different_across_sides_is_fine() -> None:
    topo = PartitionTopology.build({"a": 2, "b": 5}, [("a", "b")])
    assert (topo.nparts_lhs, topo.nparts_rhs) == (2, 5)


def test_every_input_problem_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        PartitionTopology.build({"a": 0, "f": 2}, [("a", "zz")], featurized=["f", "ghost"])
    assert info.value.problems == [
        "relations.0.rhs: unknown entity type 'zz'; known: a, f",
        "entities.a.num_partitions: 0 is not allowed; must be an int >= 1",
        "entities.f.num_partitions: 2 is not allowed for a featurized entity type; featurized "
        "types must be unpartitioned (num_partitions = 1)",
        "featurized entity type 'ghost' is unknown; known: a, f",
    ]


def test_no_relations_is_an_error() -> None:
    with pytest.raises(ConfigError, match="at least one relation is required"):
        PartitionTopology.build({"a": 1}, [])


def test_bucket_outside_grid() -> None:
    with pytest.raises(ValueError, match=r"bucket \( 4 , 0 \) is outside the 4 x 4 bucket grid"):
        _social().side_partitions(Bucket(4, 0), Side.LHS)
