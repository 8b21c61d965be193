"""storage.retraining.holdout: an in-place, repeatable holdout split of an edge path."""

from __future__ import annotations

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.types import Bucket
from storage.edges import EdgeStore
from storage.retraining.holdout import held_out, holdout_path_of, split_holdout


def edge_list(n: int, seed: int) -> EdgeList:
    g = torch.Generator().manual_seed(seed)
    return EdgeList.from_tensors(torch.randint(0, 500, (n,), generator=g), torch.randint(0, 500, (n,), generator=g), 0)


def as_set(edges: EdgeList) -> set[tuple[int, int, int]]:
    return set(zip(edges.lhs.tensor.tolist(), edges.rhs.tensor.tolist(), edges.rel.tolist(), strict=True))


def write_grid(url: str) -> dict[Bucket, EdgeList]:
    store = EdgeStore(url)
    grid = {Bucket(i, j): edge_list(2000, 10 * i + j) for i in range(2) for j in range(2)}
    for bucket, edges in grid.items():
        store.save(bucket, edges)
    return grid


def test_the_holdout_path_sits_next_to_the_edge_path() -> None:
    assert holdout_path_of("s3://b/edges/gen0001-day1_partitioned") == "s3://b/edges/gen0001-day1_holdout"
    assert holdout_path_of("/data/edges/") == "/data/edges_holdout"


def test_the_mask_depends_on_the_edge_and_the_seed_only() -> None:
    edges = edge_list(20000, 0)
    mask = held_out(edges, 0.1, seed=7)
    assert 0.09 < mask.float().mean().item() < 0.11
    reordered = torch.randperm(len(edges), generator=torch.Generator().manual_seed(1))
    assert torch.equal(held_out(edges[reordered], 0.1, seed=7), mask[reordered])
    assert not torch.equal(held_out(edges, 0.1, seed=8), mask)
    assert not held_out(edges, 0.0, seed=7).any()


def test_a_split_moves_each_edge_to_exactly_one_side_and_repeating_it_changes_nothing(store_root: str) -> None:
    url = f"{store_root}/gen0001-day1_partitioned"
    grid = write_grid(url)
    first = split_holdout(url, 0.1, seed=3)
    again = split_holdout(url, 0.1, seed=3)
    assert first == again and first.kept + first.held == 8000 and 600 < first.held < 1000
    train, holdout = EdgeStore(url), EdgeStore(holdout_path_of(url))
    for bucket, edges in grid.items():
        kept, held = train.load(bucket), holdout.load(bucket)
        assert len(kept) + len(held) == len(edges)
        assert as_set(kept) | as_set(held) == as_set(edges) and not as_set(kept) & as_set(held)


def test_a_split_killed_between_its_two_writes_is_completed_by_the_next_one(tmp_path: object) -> None:
    url = f"{tmp_path}/e_partitioned"
    grid = write_grid(url)
    bucket = Bucket(1, 0)
    edges = grid[bucket]
    EdgeStore(holdout_path_of(url)).save(bucket, edges[held_out(edges, 0.2, 5)])  # the holdout written, then killed
    report = split_holdout(url, 0.2, seed=5)
    held = EdgeStore(holdout_path_of(url)).load(bucket)
    assert as_set(held) == as_set(edges[held_out(edges, 0.2, 5)]) and len(held) == int(held_out(edges, 0.2, 5).sum())
    assert report.kept + report.held == 8000


def test_a_later_split_with_another_fraction_keeps_the_first_one(tmp_path: object) -> None:
    url = f"{tmp_path}/e_partitioned"
    write_grid(url)
    first = split_holdout(url, 0.1, seed=3)
    assert split_holdout(url, 0.3, seed=4) == first  # the recorded fraction and seed win: nothing lost
