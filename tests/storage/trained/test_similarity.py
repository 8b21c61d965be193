"""storage.trained.similarity: exact nearest entities equal a numpy brute force for every comparator.

Real checkpoint versions on local disk (tests/storage/trained/similar_checkpoints.py): type ``e``
in three partitions of unequal sizes, read one partition at a time; with and without bias, global
embeddings and ``max_norm``; in blocks smaller than a partition and in one block.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from disk_state import changes, tree_state
from similar_checkpoints import brute_force, clustered_tables, make_config, open_version, write_version

from pbg_core.errors import UsageError
from storage.checkpoint_reader import CheckpointReader
from storage.trained.checkpoint_rows import CheckpointRows, TypeRows
from storage.trained.row_ids import RowIds
from storage.trained.similarity import SimilarEntities, exact_neighbours

SIZES = [23, 9, 16]
QUERIES = [(0, 0), (0, 22), (1, 4), (2, 15), (2, 0), (1, 4), (0, 7)]  # every partition, ends, a repeat
K = 6


def type_rows(reader: CheckpointReader, max_norm: float | None) -> TypeRows:
    return TypeRows(CheckpointRows(reader, max_norm), "e")


def ids(pairs: list[tuple[int, int]]) -> RowIds:
    return RowIds(torch.tensor([p for p, _ in pairs]), torch.tensor([o for _, o in pairs]))


@pytest.mark.parametrize("block_columns", [5, 4096], ids=["blocks", "whole"])
@pytest.mark.parametrize(
    ("comparator", "bias", "global_emb", "max_norm"),
    [
        (comparator, bias, global_emb, max_norm)
        for comparator, bias in itertools.product(["dot", "cos", "l2", "squared_l2"], [False, True])
        for global_emb, max_norm in [(False, None), (True, 1.5)]
    ],
)
def test_exact_neighbours_equal_a_brute_force(
    tmp_path: Path, comparator: str, bias: bool, global_emb: bool, max_norm: float | None, block_columns: int
) -> None:
    config = make_config(tmp_path, 3, 5, comparator=comparator, bias=bias, global_emb=global_emb, max_norm=max_norm)
    tables = clustered_tables(SIZES, 5, clusters=4, seed=7)
    write_version(config, 1, tables)
    model, reader = open_version(config)
    got = exact_neighbours(model, type_rows(reader, max_norm), ids(QUERIES), K, block_columns=block_columns)
    want = brute_force(model, config, tables, QUERIES, K)
    for q, expected in enumerate(want):
        assert got.partitions[q].tolist() == [p for _, p, _ in expected]
        assert got.offsets[q].tolist() == [o for _, _, o in expected]
        assert torch.allclose(got.scores[q].double(), torch.tensor([s for s, _, _ in expected]), rtol=1e-5, atol=1e-5)
    if max_norm is not None:
        assert bool((torch.cat(tables).norm(dim=1) > max_norm).any())  # the renorm bites


def test_ties_keep_the_lowest_partition_and_offset_and_a_twin_is_not_itself(tmp_path: Path) -> None:
    config = make_config(tmp_path, 2, 4, comparator="squared_l2")
    twin = torch.tensor([1.0, 2.0, 0.0, -1.0])
    tables = [torch.zeros(6, 4), torch.zeros(5, 4)]
    tables[0][[1, 4]] = twin  # three copies: two in partition 0, one in partition 1
    tables[1][2] = twin
    tables[0][0] = tables[1][0] = tables[1][4] = twin + 1.0  # three more, tied among themselves
    write_version(config, 1, tables)
    model, reader = open_version(config)
    got = exact_neighbours(model, type_rows(reader, None), ids([(0, 4), (1, 2)]), 4, block_columns=3)
    assert got.scores[:, :2].tolist() == [[0.0, 0.0], [0.0, 0.0]]  # the other copies, not itself
    assert got.partitions.tolist() == [[0, 1, 0, 1], [0, 0, 0, 1]]
    assert got.offsets.tolist() == [[1, 2, 0, 0], [1, 4, 0, 0]]


def test_k_outside_the_types_other_entities_is_one_usage_error_and_writes_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path, 3, 5)
    write_version(config, 1, clustered_tables(SIZES, 5, clusters=4, seed=1))
    similar = SimilarEntities(*open_version(config))
    before = tree_state(tmp_path)
    for k in (0, -3, sum(SIZES)):
        with pytest.raises(UsageError) as caught:
            similar.nearest("e", ids([(0, 1)]), k)
        assert str(caught.value) == (
            f"k={k}: entity type 'e' has 48 entities, so at most 47 neighbours of one (an entity is not its own); "
            "give 1..47"
        )
    assert similar.nearest("e", ids([(0, 1)]), 47).offsets.shape == (1, 47)  # every other entity
    assert changes(before, tree_state(tmp_path)) == []


@pytest.mark.parametrize("comparator", ["l2", "squared_l2"])
def test_approximate_search_with_a_distance_and_a_bias_is_refused_before_any_work(
    tmp_path: Path, comparator: str
) -> None:
    config = make_config(tmp_path, 3, 5, comparator=comparator, bias=True)
    write_version(config, 1, clustered_tables(SIZES, 5, clusters=4, seed=1))
    similar = SimilarEntities(*open_version(config))
    before = tree_state(tmp_path)
    with pytest.raises(UsageError) as caught:
        similar.nearest("e", ids([(0, 1)]), 3, approximate=True)
    assert str(caught.value) == (
        f"approximate search needs a faiss metric, and comparator {comparator!r} with bias=true has none (the bias "
        "is added to a distance); search exactly instead (without --approximate)"
    )
    assert changes(before, tree_state(tmp_path)) == []  # no index file
    assert similar.nearest("e", ids([(0, 1)]), 3).offsets.shape == (1, 3)  # exact search answers


def test_partitions_are_read_into_one_reused_buffer(tmp_path: Path) -> None:
    config = make_config(tmp_path, 3, 5)
    tables = clustered_tables(SIZES, 5, clusters=4, seed=2)
    write_version(config, 1, tables)
    rows = type_rows(open_version(config)[1], None)
    seen = [(part, table.data_ptr(), table.clone()) for part, table in rows.partitions()]
    assert [part for part, _, _ in seen] == [0, 1, 2]
    assert len({ptr for _, ptr, _ in seen}) == 1  # one buffer, of the largest partition's size
    assert all(torch.equal(table, tables[part]) for part, _, table in seen)
    assert rows.count == 48 and rows.ids.starts.tolist() == [0, 23, 32]
    both = rows.row_ids(torch.tensor([0, 22, 23, 31, 32, 47, -1]))
    assert both.partitions.tolist() == [0, 0, 1, 1, 2, 2, -1] and both.offsets.tolist() == [0, 22, 0, 8, 0, 15, -1]
    assert rows.global_ids(both).tolist() == [0, 22, 23, 31, 32, 47, -1]
