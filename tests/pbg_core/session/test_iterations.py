"""Iteration schedule, automatic edge-chunk count, preservation rule."""

from __future__ import annotations

import pytest

from pbg_core.session.iterations import build_iterations, compute_num_edge_chunks, should_preserve


def test_iterations_nest_epochs_paths_chunks_and_commit_consecutive_versions() -> None:
    its = build_iterations(num_epochs=2, edge_paths=["a", "b"], num_edge_chunks=3)
    assert len(its) == 12
    assert [it.version for it in its] == list(range(1, 13))
    assert [(it.epoch_idx, it.edge_path_idx, it.edge_chunk_idx) for it in its[:4]] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 0, 2),
        (0, 1, 0),
    ]
    assert its[-1].edge_path == "b"
    assert its[7].label == "epoch 2/2, path 1/2, chunk 2/3"


def test_metadata_has_pbg_iteration_attributes() -> None:
    it = build_iterations(3, ["p"], 2)[3]
    assert it.metadata() == {
        "num_epochs": 3,
        "epoch_idx": 1,
        "num_edge_paths": 1,
        "edge_path_idx": 0,
        "edge_path": "p",
        "num_edge_chunks": 2,
        "edge_chunk_idx": 1,
    }


@pytest.mark.parametrize(
    ("configured", "sizes", "limit", "expected"),
    [(None, [10, 25], 10, 3), (None, [0], 10, 1), (None, [], 5, 1), (4, [1_000_000], 10, 4), (None, [10], 10, 1)],
)
def test_num_edge_chunks_follows_pbg(configured: int | None, sizes: list[int], limit: int, expected: int) -> None:
    assert compute_num_edge_chunks(configured, sizes, limit) == expected


def test_preserve_after_every_kth_finished_epoch_only() -> None:
    its = build_iterations(num_epochs=6, edge_paths=["a", "b"], num_edge_chunks=2)
    preserved = [(it.index, should_preserve(it, 2)) for it in its if should_preserve(it, 2)]
    # the last iteration of epochs 2, 4, 6 (1-based) -> snapshots epoch_2, epoch_4, epoch_6
    assert preserved == [(7, 2), (15, 4), (23, 6)]
    assert all(should_preserve(it, None) is None for it in its)
