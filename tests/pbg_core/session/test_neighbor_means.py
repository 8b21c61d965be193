"""pbg_core.session.neighbor_means: new entities start at the mean of their trained neighbors."""

from __future__ import annotations

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.session.neighbor_means import GraphShape, neighbor_means
from pbg_core.types import Bucket


class Edges:
    """An edge source holding one list per bucket."""

    def __init__(self, buckets: dict[Bucket, EdgeList]) -> None:
        self.buckets = buckets

    def num_edges(self, bucket: Bucket) -> int:
        return len(self.buckets.get(bucket, EdgeList.cat([])))

    def load_chunk(self, bucket: Bucket, chunk_idx: int, num_chunks: int, shared: bool = False) -> EdgeList:
        return self.buckets[bucket]

    def stamp(self, bucket: Bucket) -> None:
        return None


def edges(lhs: list[int], rhs: list[int], rel: list[int] | int = 0) -> EdgeList:
    rels = torch.tensor(rel) if isinstance(rel, list) else rel
    return EdgeList.from_tensors(torch.tensor(lhs), torch.tensor(rhs), rels)


OLD = {("user", 0): torch.arange(12.0).reshape(4, 3), ("user", 1): -torch.arange(9.0).reshape(3, 3)}
SUMS = {("user", 0): torch.tensor([1.0, 2.0, 3.0, 4.0]), ("user", 1): torch.tensor([10.0, 20.0, 30.0])}


def old_rows(key: tuple[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    return OLD[key], SUMS[key]


def two_partitions(**changes: object) -> GraphShape:
    values: dict[str, object] = {
        "relation_sides": [("user", "user")],
        "num_partitions": {"user": 2},
        "counts": {("user", 0): 6, ("user", 1): 4},
        "old_counts": {("user", 0): 4, ("user", 1): 3},
        "buckets": [Bucket(0, 0), Bucket(0, 1), Bucket(1, 0), Bucket(1, 1)],
    }
    return GraphShape(**{**values, **changes})  # type: ignore[arg-type]


def test_a_new_row_is_the_mean_of_its_old_neighbors_on_either_side_and_in_any_partition() -> None:
    source = Edges(
        {
            Bucket(0, 0): edges([4, 1], [0, 4]),  # user/0 row 4 (new): neighbors row 0 (rhs) and row 1 (lhs)
            Bucket(0, 1): edges([4, 5], [2, 3]),  # row 4 -> user/1 row 2 (old); row 5 -> user/1 row 3 (new)
        }
    )
    rows = neighbor_means(two_partitions(), [source], old_rows)
    offsets, vectors, sums = rows[("user", 0)]
    assert offsets.tolist() == [4]  # row 5's only neighbor is new itself: left random
    expected = (OLD[("user", 0)][0] + OLD[("user", 0)][1] + OLD[("user", 1)][2]) / 3
    torch.testing.assert_close(vectors[0], expected)
    torch.testing.assert_close(sums, torch.tensor([(1.0 + 2.0 + 30.0) / 3]))  # their Adagrad sums' mean too
    assert ("user", 1) not in rows  # its new row 3 has only a new neighbor


def test_nothing_is_read_when_the_init_checkpoint_holds_every_row() -> None:
    shape = two_partitions(old_counts={("user", 0): 6, ("user", 1): 4})

    def never(key: object) -> tuple[torch.Tensor, torch.Tensor]:
        raise AssertionError("no partition should be read")

    assert neighbor_means(shape, [Edges({})], never) == {}


def test_relations_touching_a_featurized_type_are_ignored() -> None:
    shape = GraphShape(
        relation_sides=[("user", "user"), ("user", "tag")],
        num_partitions={"user": 1, "tag": 1},
        counts={("user", 0): 5, ("tag", 0): 2},
        old_counts={("user", 0): 4, ("tag", 0): 2},
        featurized=frozenset({"tag"}),
    )
    source = Edges({Bucket(0, 0): edges([4, 4], [0, 1], [1, 0])})  # rel 1 (to tags) skipped
    old = {("user", 0): torch.arange(12.0).reshape(4, 3), ("tag", 0): torch.ones(2, 3)}
    offsets, vectors, _ = neighbor_means(shape, [source], lambda key: (old[key], torch.zeros(len(old[key]))))[
        ("user", 0)
    ]
    assert offsets.tolist() == [4]
    torch.testing.assert_close(vectors[0], old[("user", 0)][1])
