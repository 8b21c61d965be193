"""tasks.artifacts against a real (temporary) Prefect API: create, then read back; their keys.

A tiny flow defined here calls the artifact functions; the artifacts are read back
through the client, filtered by that flow run's id.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from prefect.context import get_run_context
from prefect.testing.utilities import prefect_test_harness

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.session.iterations import Iteration
from storage.stats_log import StatsLog
from tasks.artifacts import (
    artifact_key,
    iteration_key,
    publish_iteration_table,
    publish_summary,
    retrain_history_key,
    start_progress,
    summary_by_caller,
    update_progress,
)
from tasks.runs import open_run

ITERATION = Iteration(
    index=1,
    epoch_idx=0,
    num_epochs=2,
    edge_path_idx=1,
    num_edge_paths=2,
    edge_path="/data/edges_b",
    edge_chunk_idx=0,
    num_edge_chunks=1,
)


ITERATION_OUTSIDE_KEY = "pbg-outside-epoch-001-path-2-chunk-1"


@pytest.fixture(scope="module", autouse=True)
def harness() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=180):
        yield


def stats_row(lhs: int, rhs: int, index: int, epoch: int, loss: float, mrr: float) -> dict[str, Any]:
    return {
        "lhs_partition": lhs,
        "rhs_partition": rhs,
        "index": index,
        "stats": {"count": 400, "metrics": {"loss": loss}},
        "epoch_idx": epoch,
        "edge_path_idx": 0,
        "edge_chunk_idx": 0,
        "timing": {"train": 2.0, "save": 0.5},
        "io": {"bytes_read": 1_000_000, "bytes_written": 250_000, "seconds": 0.25},
        "eval_stats_after": {"count": 40, "metrics": {"mrr": mrr, "r10": 0.75}},
    }


def make_config(tmp_path: Path, name: str) -> ConfigSchema:
    return parse_config(
        {
            "entity_path": str(tmp_path / "entities"),
            "edge_paths": [str(tmp_path / "edges")],
            "checkpoint_path": str(tmp_path / name),
            "entities": {"node": {"num_partitions": 2}},
            "relations": [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "translation"}],
            "dimension": 8,
            "num_epochs": 2,
            "workers": 1,
            "seed": 0,
            "storage_options": {"key": "AKIAEXAMPLE", "secret": "s3cr3t-never-shown"},
        }
    )


def read_artifacts(flow_run_id: UUID) -> list[Any]:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return sorted(found, key=lambda a: a.created)


def current_flow_run_id() -> UUID:
    return get_run_context().flow_run.id


def test_artifacts_of_a_training_like_flow(tmp_path: Path) -> None:
    config = make_config(tmp_path, "My Model_v2")
    rows = [stats_row(0, 0, 4, 0, 2.0, 0.25), stats_row(0, 1, 5, 1, 1.0, 0.5)]
    StatsLog(config.checkpoint_path).write(rows)

    @flow(name="artifacts-test")
    def fake_training() -> tuple[UUID, UUID | None]:
        progress = start_progress(1, 4, "buckets trained")
        update_progress(progress, 3, 4)
        run = open_run(config)
        publish_iteration_table(ITERATION, [rows[1], None], resumed=1, config=config)
        publish_summary(run, version=2, total_iterations=2)
        return current_flow_run_id(), progress

    run_id, progress_id = fake_training()
    assert progress_id is not None
    progress, table, summary = read_artifacts(run_id)

    assert (progress.id, progress.type, progress.data) == (progress_id, "progress", 75.0)
    assert progress.description == "75%: 3 of 4 buckets trained"  # on the card, moved with the bar

    assert (table.type, table.key) == ("table", "pbg-my-model-v2-epoch-001-path-2-chunk-1")
    assert table.description.startswith(
        f"{ITERATION.label}, version 2, 1 bucket(s) trained, 1 resumed from an earlier attempt. "
        "in-training MRR (sampled): the 5% of each bucket held out of training"
    )
    assert json.loads(table.data) == [
        {
            "bucket": "(0, 1)",
            "loss": 1.0,
            "in-training MRR before": None,
            "in-training MRR after": 0.5,
            "in-training Hits@10 before": None,
            "in-training Hits@10 after": 0.75,
            "edges_per_s": 200.0,
            "io_mb": 1.25,
            "io_s": 0.25,
            "seconds": 2.5,
        }
    ]

    assert (summary.type, summary.key) == ("markdown", "pbg-summary-my-model-v2")
    assert summary.description == "pbg training summary, checkpoint version 2 (2 of 2 iteration(s) done)"
    assert "| 1 | 2 | 0.25 |" in summary.data and "| 2 | 1 | 0.5 |" in summary.data  # both epochs
    assert "](data:image/svg+xml;base64," in summary.data  # the drawn curve
    assert "s3cr3t-never-shown" not in summary.data


def test_an_iteration_table_goes_on_the_run_it_names(tmp_path: Path) -> None:
    """The training flow posts each table from a thread of its own onto the iteration's subflow."""
    config = make_config(tmp_path, "placed")

    @flow(name="artifacts-iteration")
    def iteration() -> UUID:
        return current_flow_run_id()

    @flow(name="artifacts-placement-test")
    def parent() -> tuple[UUID, UUID]:
        child = iteration()
        publish_iteration_table(
            ITERATION,
            [stats_row(0, 0, 4, 0, 2.0, 0.25)],
            resumed=0,
            config=config,
            flow_run_id=str(child),
        )
        return current_flow_run_id(), child

    parent_id, child_id = parent()
    assert read_artifacts(parent_id) == []
    (table,) = read_artifacts(child_id)
    assert (table.type, table.key, table.flow_run_id) == ("table", "pbg-placed-epoch-001-path-2-chunk-1", child_id)


def test_failures_are_logged_and_never_fail_the_flow(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, "broken")
    Path(config.checkpoint_path).mkdir()
    (Path(config.checkpoint_path) / "training_stats.json").write_text("not json\n")

    @flow(name="artifacts-failures-test")
    def fails_quietly() -> UUID:
        update_progress(uuid4(), 1, 2)  # no such artifact: the API answers 404
        publish_summary(open_run(config), version=1, total_iterations=2)  # unreadable stats file
        start_progress(0, 0, "empty run")  # total 0: complete, not a division by zero
        return current_flow_run_id()

    with caplog.at_level(logging.WARNING):
        run_id = fails_quietly()
    (progress,) = read_artifacts(run_id)  # the summary was not posted
    assert (progress.type, progress.data) == ("progress", 100.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("could not update the progress artifact (the run goes on)" in m for m in warnings), warnings
    assert any("could not publish the run summary" in m and "BadDataError" in m for m in warnings), warnings


def test_noops_outside_a_flow_run(tmp_path: Path) -> None:
    config = make_config(tmp_path, "outside")
    StatsLog(config.checkpoint_path).write([stats_row(0, 0, 0, 0, 1.0, 0.5)])
    assert start_progress(1, 2, "outside") is None
    assert update_progress(uuid4(), 1, 2) is None
    assert publish_iteration_table(ITERATION, [stats_row(0, 0, 0, 0, 1.0, 0.5)], resumed=0, config=config) is None
    assert publish_summary(open_run(config), version=1, total_iterations=2) is None
    with get_client(sync_client=True) as client:
        created = client.read_artifacts()
    assert [
        a for a in created if a.flow_run_id is None or a.key in {"pbg-summary-outside", ITERATION_OUTSIDE_KEY}
    ] == []
    assert [a.description for a in created if a.description == "outside"] == []


def test_progress_moves_at_most_once_a_second_but_always_reaches_the_end() -> None:
    @flow(name="progress-throttle-test")
    def ticking() -> tuple[UUID, list[float]]:
        progress = start_progress(0, 10, "buckets trained")
        seen = []
        for done in (1, 2, 3):  # within a second: only the first moves the bar
            update_progress(progress, done, 10)
            seen.append(read_progress(progress))
        update_progress(progress, 10, 10)  # the end always does
        seen.append(read_progress(progress))
        return progress, seen

    progress, seen = ticking()
    assert seen == [10.0, 10.0, 10.0, 100.0]
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(artifact_filter=ArtifactFilter(id={"any_": [progress]}))
    assert artifact.description == "100%: 10 of 10 buckets trained"


def test_progress_without_counts_shows_the_percentage_and_what_runs() -> None:
    @flow(name="progress-no-counts-test")
    def importing() -> UUID | None:
        progress = start_progress(0, 1, "importing 2 input(s) into /e", counts=False)
        update_progress(progress, 370, 1000)
        return progress

    progress = importing()
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(artifact_filter=ArtifactFilter(id={"any_": [progress]}))
    assert (artifact.data, artifact.description) == (37.0, "37%: importing 2 input(s) into /e")
    assert artifact.description.isascii()


def read_progress(artifact_id: UUID | None) -> float:
    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(id={"any_": [artifact_id]}))[0].data


# ---- keys ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My Model_v2", "pbg-summary-my-model-v2"),
        ("ckpt", "pbg-summary-ckpt"),
        ("  --Weird!!name..  ", "pbg-summary-weird-name"),
        ("Modèle été", "pbg-summary-modele-ete"),
        ("___", "pbg-summary-run"),
        ("", "pbg-summary-run"),
    ],
)
def test_artifact_key(text: str, expected: str) -> None:
    assert artifact_key(text) == expected


def test_artifact_key_is_always_valid_and_bounded() -> None:
    for text in ["A" * 500, "日本語", "a/b\\c", "x-" * 80, "UPPER lower 123"]:
        key = artifact_key(text)
        assert re.fullmatch(r"pbg-summary-[a-z0-9]+(-[a-z0-9]+)*", key), key
        assert len(key) <= 100


def iteration(epoch: int, epochs: int, path: int = 0, paths: int = 1, chunk: int = 0, chunks: int = 1) -> Iteration:
    index = (epoch * paths + path) * chunks + chunk
    return Iteration(
        index=index,
        epoch_idx=epoch,
        num_epochs=epochs,
        edge_path_idx=path,
        num_edge_paths=paths,
        edge_path=f"/data/p{path}",
        edge_chunk_idx=chunk,
        num_edge_chunks=chunks,
    )


def test_iteration_key_names_the_checkpoint_and_the_iteration_one_based() -> None:
    assert iteration_key("My Model_v2", iteration(2, 10, 0, 1, 1, 4)) == "pbg-my-model-v2-epoch-003-path-1-chunk-2"
    assert iteration_key("ckpt", iteration(0, 5)) == "pbg-ckpt-epoch-001-path-1-chunk-1"
    assert iteration_key("___", iteration(0, 1)) == "pbg-run-epoch-001-path-1-chunk-1"


def test_iteration_keys_sort_in_training_order() -> None:
    for epochs, paths, chunks in [(12, 3, 11), (1500, 2, 1), (3, 12, 2)]:
        its = [
            iteration(e, epochs, p, paths, c, chunks)
            for e in range(epochs)
            for p in range(paths)
            for c in range(chunks)
        ]
        keys = [iteration_key("ckpt", it) for it in its]
        assert sorted(keys) == keys and len(set(keys)) == len(keys), (epochs, paths, chunks)


def test_iteration_key_is_always_valid_and_bounded() -> None:
    for name in ["A" * 500, "日本語", "a/b\\c", "x-" * 80, ""]:
        key = iteration_key(name, iteration(41, 1000, 2, 3, 9, 10))
        assert re.fullmatch(r"pbg-[a-z0-9]+(-[a-z0-9]+)*", key), key
        assert len(key) <= 100 and key.endswith("-epoch-0042-path-3-chunk-10"), key


# ---- a retraining root's history -------------------------------------------------------------
@pytest.mark.parametrize(
    ("root", "expected"),
    [
        ("/work/demo/out/umls-retrain", "pbg-retrain-work-demo-out-umls-retrain"),
        ("s3://bucket/models/UMLS", "pbg-retrain-s3-bucket-models-umls"),
        ("file:///srv/Modèle/", "pbg-retrain-file-srv-modele"),
        ("///", "pbg-retrain-run"),
    ],
)
def test_retrain_history_key(root: str, expected: str) -> None:
    assert retrain_history_key(root) == expected


def test_a_long_roots_history_key_keeps_its_tail() -> None:
    key = retrain_history_key("/very/" + "deep/" * 40 + "nightly-umls")
    assert len(key) <= 100 and key.startswith("pbg-retrain-") and key.endswith("-deep-nightly-umls")
    assert re.fullmatch(r"pbg-retrain-[a-z0-9]+(-[a-z0-9]+)*", key), key


def test_the_nested_training_run_leaves_the_summary_to_its_caller(tmp_path: Path) -> None:
    """Two nights: the nested run posts no pbg-summary; each night adds a version of the root's key."""
    config = make_config(tmp_path, "run-20261205T030000Z-7d3e91aa")
    StatsLog(config.checkpoint_path).write([stats_row(0, 0, 0, 0, 1.0, 0.5)])
    key = retrain_history_key(str(tmp_path))

    @flow(name="artifacts-nested-pbg")
    def nested(run: str) -> UUID:
        publish_summary(run, version=1, total_iterations=2)  # what the pbg flow does at its end
        return current_flow_run_id()

    @flow(name="artifacts-retrain-like")
    def night(words: str) -> tuple[UUID, UUID]:
        run = open_run(config)
        with summary_by_caller():
            child = nested(run)
        publish_summary(
            run, version=1, total_iterations=2, extra_sections=["## Retraining data"], key=key, description=words
        )
        return current_flow_run_id(), child

    first, first_child = night("2026-12-05 03:00 UTC: promoted run-x (generation 1)")
    second, _ = night("2026-12-06 03:00 UTC: not promoted run-y (generation 2): reason")
    assert read_artifacts(first_child) == []  # no pbg-summary-run-... of the run directory
    summaries = [a for run_id in (first, second) for a in read_artifacts(run_id)]
    assert [(a.key, a.description) for a in summaries] == [
        (key, "2026-12-05 03:00 UTC: promoted run-x (generation 1)"),
        (key, "2026-12-06 03:00 UTC: not promoted run-y (generation 2): reason"),
    ]
    assert "## Retraining data" in summaries[-1].data and "![learning curve" in summaries[-1].data

    @flow(name="artifacts-plain-pbg")
    def plain() -> UUID:
        nested(open_run(config))  # outside summary_by_caller: a plain pbg run keeps its summary
        return current_flow_run_id()

    plain()
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key={"any_": ["pbg-summary-run-20261205t030000z-7d3e91aa"]})
        )
    assert len(found) == 1
