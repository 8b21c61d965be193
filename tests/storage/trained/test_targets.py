"""storage.trained.targets: predict's loop against a numpy brute force, one partition buffer for every partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from numpy_scores import NumpyModel, rank_bounds
from small_models import committed, graph_edges, imported, raw_config

from pbg_core.config import parse_config
from pbg_core.model.embedder import MultiRelationEmbedder, build_model
from pbg_core.session.parts import ModelState
from pbg_core.types import Side
from storage.checkpoint_reader import CheckpointReader
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.trained.checkpoint_rows import CheckpointRows
from storage.trained.known_edges import KnownEdges
from storage.trained.targets import Located, TargetGroup, rank_targets

K = 5


class RecordingRows(CheckpointRows):
    """The real rows, noting every buffer made and every partition read (where its rows went)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.buffers: list[torch.Tensor] = []
        self.reads: list[tuple[str, int, int]] = []

    def buffer(self, shapes: Any) -> torch.Tensor:
        self.buffers.append(super().buffer(shapes))
        return self.buffers[-1]

    def partition(self, entity: str, part: int, buffer: torch.Tensor) -> torch.Tensor:
        table = super().partition(entity, part, buffer)
        self.reads.append((entity, part, table.data_ptr()))
        return table


@pytest.fixture
def loaded(tmp_path: Path) -> tuple[Any, RecordingRows, MultiRelationEmbedder]:
    """A committed model with max_norm (rows above it), its rows and its embedder."""
    config = parse_config(raw_config(tmp_path, max_norm=1.5, bias=True))
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config)
    reader = CheckpointReader(config, None, ["drug", "disease"], "to read")
    embedder = build_model(config, 0)
    ModelState(embedder, None).restore(reader.checkpoints, reader.version, None)
    return config, RecordingRows(reader, config.max_norm), embedder


def located(config: Any, entity: str, names: list[str]) -> Located:
    """Where ``names`` are, from the entity files (the checkpoint's names)."""
    store = EntityStore(config.entity_path)
    where = {name: (part, offset) for part in range(2) for offset, name in enumerate(store.load_names(entity, part))}
    return Located(entity, np.array([where[n][0] for n in names]), np.array([where[n][1] for n in names]))


def names_of(config: Any, entity: str) -> list[list[str]]:
    store = EntityStore(config.entity_path)
    return [store.load_names(entity, part) for part in range(2)]


def check_against_brute_force(
    config: Any, group: TargetGroup, result: Any, rel: int, anchors: list[str], known: Any = None
) -> None:
    """Top lists hold the best scores but known ones (numpy float64, 1e-5), in order; answers' ranks
    and scores within the brute force's."""
    reference = NumpyModel(config)
    partitions = names_of(config, group.target)
    for i, anchor in enumerate(anchors):
        truth = partitions[group.answers.part[i]][group.answers.offset[i]] if group.answers is not None else None
        scores, answer_score, names = reference.scores(group.side, rel, anchor, truth or partitions[0][0])
        excluded = known(anchor) if known is not None else set()
        kept = np.array([name not in excluded for name in names])
        got = result.scores[i].numpy()
        assert np.allclose(got, np.sort(scores[kept])[::-1][:K], rtol=1e-5, atol=1e-5)
        assert np.all(np.diff(got) <= 0)
        found = [
            partitions[p][o] for p, o in zip(result.partitions[i].tolist(), result.offsets[i].tolist(), strict=True)
        ]
        assert not set(found) & excluded
        assert np.allclose([scores[names.index(n)] for n in found], got, rtol=1e-5, atol=1e-5)
        if truth is None:
            continue
        assert np.isclose(float(result.answer_score[i]), answer_score, rtol=1e-5, atol=1e-5)
        low, high = rank_bounds(scores, answer_score, names, truth, excluded)
        assert low <= int(result.answer_rank[i]) <= high
        own = [names.index(n) for n in partitions[group.answers.part[i]]]
        low, high = rank_bounds(scores[own], answer_score, [names[j] for j in own], truth, excluded)
        assert low <= int(result.answer_partition_rank[i]) <= high


def test_tails_and_heads_of_two_relations_equal_a_brute_force_with_one_buffer_for_every_partition(loaded: Any) -> None:
    config, rows, embedder = loaded
    heads = ["aspirin", "drug5", "drug20", "insulin"]
    tails = ["diabetes", "disease3", "asthma", "disease17"]
    groups = [
        TargetGroup(
            Side.RHS, 0, located(config, "drug", heads), "disease", (13, 13), located(config, "disease", tails)
        ),
        TargetGroup(Side.LHS, 0, located(config, "disease", tails), "drug", (15, 15), located(config, "drug", heads)),
        TargetGroup(Side.RHS, 1, located(config, "drug", heads), "drug", (15, 15)),
    ]
    results = rank_targets(rows, embedder, groups, K)
    check_against_brute_force(config, groups[0], results[0], 0, heads)
    check_against_brute_force(config, groups[1], results[1], 0, tails)
    check_against_brute_force(config, groups[2], results[2], 1, heads)
    assert results[2].answer_rank is None
    # Each partition of each ranked type read once, every one into the one buffer.
    assert [(entity, part) for entity, part, _ in rows.reads] == [
        ("disease", 0),
        ("disease", 1),
        ("drug", 0),
        ("drug", 1),
    ]
    assert len(rows.buffers) == 1 and {ptr for _, _, ptr in rows.reads} == {rows.buffers[0].data_ptr()}
    assert rows.buffers[0].numel() == 15 * 6  # the largest partition, no more


def test_filtered_ranking_leaves_each_bucket_s_known_edges_out(loaded: Any) -> None:
    config, rows, embedder = loaded
    heads = ["aspirin", "drug5", "drug20", "insulin", "metformin", "drug11"]
    tails = ["diabetes", "disease3", "asthma", "disease17", "influenza", "disease0"]
    group = TargetGroup(
        Side.RHS, 0, located(config, "drug", heads), "disease", (13, 13), located(config, "disease", tails)
    )
    assert len(set(group.anchors.part.tolist())) == 2  # anchors of both partitions: two buckets each
    known = KnownEdges([EdgeStore(config.edge_paths[0])])
    (result,) = rank_targets(rows, embedder, [group], K, known)
    edges = graph_edges()

    def known_tails(head: str) -> set[str]:
        return {tail for lhs, rel, tail in edges if lhs == head and rel == "treats"}

    assert all(known_tails(head) for head in heads)
    check_against_brute_force(config, group, result, 0, heads, known_tails)
