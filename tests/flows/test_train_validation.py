"""Validation during training, through the real ``pbg`` flow: rows, best.json, early stopping, the equality
with ``pbg eval --filtered``, the table artifact and the log line."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from flows.evaluate import pbg_eval
from flows.train import pbg
from pbg_core.config import parse_config
from storage.best_version import read_best
from storage.errors import DataNotFound
from storage.validation_log import ValidationLog

pytestmark = pytest.mark.integration

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]


def validated_config(graph: Any, config_for: Any, checkpoint: Path, **fields: Any) -> dict[str, Any]:
    """The planted graph with its test edges as validation edges, ranked against every node."""
    base = {"relations": ALL_NEGS, "num_uniform_negs": 0, "validation": {"edge_path": graph.test_path}}
    return config_for(graph, checkpoint, **(base | fields))


def versions_on_disk(checkpoint: Path) -> list[int]:
    return sorted(int(p.name.split(".v")[1].split(".")[0]) for p in checkpoint.glob("model.v*.h5"))


def filtered_eval(config: dict[str, Any], graph: Any, version: int | str | None = None, **sampling: Any) -> Any:
    """``pbg eval --filtered`` of the validation edges (train and validation edges filtered)."""
    evaluated = parse_config({**config, "edge_paths": [graph.test_path]})
    extra = {} if version is None else {"version": version}
    return pbg_eval(config=evaluated, filter_paths=[graph.train_path, graph.test_path], **sampling, **extra)


@pytest.fixture(scope="module")
def validated(graph: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """4 epochs validated every epoch; best.json and the files the run leaves."""
    config = validated_config(graph, config_for, tmp_path_factory.mktemp("validated") / "ckpt", num_epochs=4)
    result = pbg(config=parse_config(config))
    return {"config": config, "result": result, "checkpoint": Path(config["checkpoint_path"])}


def test_every_epoch_leaves_a_row_and_the_best_version_is_kept(validated: dict[str, Any]) -> None:
    checkpoint = validated["checkpoint"]
    rows = ValidationLog(str(checkpoint)).read()
    assert [(r.version, r.epoch) for r in rows] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert all(r.count > 0 and not r.sampled and 0 < r.mrr <= 1 for r in rows)
    best = read_best(str(checkpoint))
    assert best is not None and best.row == max(rows, key=lambda r: (r.mrr, -r.version))
    assert versions_on_disk(checkpoint) == sorted({best.version, 4})  # the latest and the best, nothing else


def test_the_validation_mrr_is_pbg_eval_filtered_of_that_version(validated: dict[str, Any], graph: Any) -> None:
    rows = ValidationLog(str(validated["checkpoint"])).read()
    latest = filtered_eval(validated["config"], graph)
    assert latest["mrr"] == rows[-1].mrr and latest["r10"] == rows[-1].r10 and latest["count"] == rows[-1].count


def test_the_table_artifact_has_a_row_per_validation(validated: dict[str, Any]) -> None:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pbg-validation-ckpt"])), limit=50
        )
    latest = max((a for a in found if str(validated["checkpoint"]) in (a.description or "")), key=lambda a: a.created)
    table = json.loads(latest.data) if isinstance(latest.data, str) else latest.data
    assert [row["version"] for row in table] == [1, 2, 3, 4]
    assert set(table[0]) == {"epoch", "version", "mrr", "r1", "r10", "count", "sampled", "best"}
    best = read_best(str(validated["checkpoint"]))
    assert best is not None and [row["version"] for row in table if row["best"]] == [best.version]


def test_the_summary_draws_every_validation_and_names_the_best_validated_epoch(validated: dict[str, Any]) -> None:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pbg-summary-ckpt"])), limit=50
        )
    summary = max((a for a in found if str(validated["checkpoint"]) in (a.data or "")), key=lambda a: a.created)
    image = re.search(r"\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", summary.data)
    assert image is not None
    svg = base64.b64decode(image.group(1)).decode()
    best = read_best(str(validated["checkpoint"]))
    assert best is not None and "validation MRR" in svg and f"best: epoch {best.row.epoch}, {best.row.mrr:.3f}" in svg
    assert svg.count('r="2.5"') == 4  # one dot per validation
    assert f"best epoch {best.row.epoch}: validation MRR {best.row.mrr:.3f}" in summary.data


def test_early_stopping_ends_the_run_completed(graph: Any, config_for: Any, tmp_path: Path) -> None:
    # min_delta 1: nothing after the first validation counts as an improvement; patience 1 stops at v2.
    config = validated_config(
        graph, config_for, tmp_path / "ckpt", num_epochs=3, early_stopping={"patience": 1, "min_delta": 1.0}
    )
    state = pbg(config=parse_config(config), return_state=True)
    assert state.is_completed()
    result = state.result()
    assert result["version"] == 2 and result["stopped"].startswith("early stopping: mrr did not improve by more than 1")
    assert [r.version for r in ValidationLog(config["checkpoint_path"]).read()] == [1, 2]
    assert not (Path(config["checkpoint_path"]) / "model.v3.h5").exists()  # iteration 3 never started


@pytest.mark.slow  # four runs of the pbg flow (about 35 s)
def test_early_stopping_ends_the_run_and_a_rerun_trains_nothing(graph: Any, config_for: Any, tmp_path: Path) -> None:
    # min_delta 1: nothing after the first validation counts as an improvement; patience 2 stops at v3.
    config = validated_config(
        graph, config_for, tmp_path / "ckpt", num_epochs=8, early_stopping={"patience": 2, "min_delta": 1.0}
    )
    state = pbg(config=parse_config(config), return_state=True)
    assert state.is_completed()
    first = state.result()
    assert first["version"] == 3 and first["stopped"].startswith("early stopping: mrr did not improve by more than 1")
    assert [r.version for r in ValidationLog(config["checkpoint_path"]).read()] == [1, 2, 3]

    again = pbg(config=parse_config(config))
    assert again["version"] == 3 and again["iterations"] == [] and again["stopped"] == first["stopped"]

    longer = pbg(config=parse_config(config), overrides=["early_stopping.patience=3"])
    assert longer["version"] == 4 and longer["stopped"].endswith("patience 3)")

    free = pbg(config=parse_config(config), overrides=["early_stopping=null"])
    assert free["version"] == 8 and "stopped" not in free
    assert [r.version for r in ValidationLog(config["checkpoint_path"]).read()] == list(range(1, 9))


def test_a_sampled_validation_equals_the_sampled_pbg_eval(graph: Any, config_for: Any, tmp_path: Path) -> None:
    validation = {"edge_path": graph.test_path, "sample_edges": 150, "candidates": 40, "every_epochs": 2}
    config = validated_config(graph, config_for, tmp_path / "ckpt", num_epochs=2, validation=validation)
    pbg(config=parse_config(config))
    (row,) = ValidationLog(config["checkpoint_path"]).read()
    assert (row.version, row.epoch, row.count, row.sampled) == (2, 2, 150, True)
    sampled = filtered_eval(config, graph, sample_edges=150, candidates=40)
    assert sampled["mrr"] == row.mrr and sampled["count"] == 150


def test_pbg_eval_of_the_best_version_is_its_row(validated: dict[str, Any], graph: Any) -> None:
    best = read_best(str(validated["checkpoint"]))
    assert best is not None
    assert filtered_eval(validated["config"], graph, version="best")["mrr"] == best.row.mrr
    assert filtered_eval(validated["config"], graph, version=best.version)["mrr"] == best.row.mrr
    gone = next(v for v in (1, 2, 3) if v != best.version)
    with pytest.raises(DataNotFound, match=f"no checkpoint version {gone} to evaluate; versions present: "):
        filtered_eval(validated["config"], graph, version=gone)


def test_sampled_training_negatives_validate_against_all_entities(graph: Any, config_for: Any, tmp_path: Path) -> None:
    """Training samples 10 uniform negatives; the validation still ranks against every node, as
    `pbg eval --filtered -p relations.0.all_negs=true -p num_uniform_negs=0` does."""
    sampled = [{**ALL_NEGS[0], "all_negs": False}]
    config = config_for(
        graph,
        tmp_path / "ckpt",
        relations=sampled,
        num_uniform_negs=10,
        num_epochs=1,
        validation={"edge_path": graph.test_path},
    )
    pbg(config=parse_config(config))
    (row,) = ValidationLog(config["checkpoint_path"]).read()
    ranked = filtered_eval({**config, "relations": ALL_NEGS, "num_uniform_negs": 0}, graph)
    assert row.count == ranked["count"] and row.mrr == ranked["mrr"]
