"""flows.run_names: what a flow run is called, built from its parameters and scheduled start, and
read back from the Prefect API (the harness of tests/flows/conftest.py)."""

from __future__ import annotations

import logging
import random
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
from prefect.context import FlowRunContext

from flows.retrain import pbg_retrain
from flows.run_names import checkpoint_subject, config_subject, format_name, rename_current_run, run_name, subject
from flows.train import pbg
from pbg_core.config import parse_config
from storage.retraining.options import IncomingOptions, RetrainOptions

NAME = re.compile(r"^train \S+, \d{4}-\d\d-\d\d \d\d:\d\d UTC$")
RUN_DIR = "run-20261205T030000Z-7d3e91aa"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("examples/umls/config.json", "umls"),  # a generic stem: its directory
        ("/srv/pbg/umls.yaml", "umls"),
        ("kinships.yml", "kinships"),
        ("s3://bucket/projects/fb15k/config.yaml", "fb15k"),
        ("s3://pbg-configs/config.json", "pbg-configs"),  # the bucket, when nothing else is above
        ("file:///data/wn18rr/configs/config.json", "wn18rr"),  # every generic name skipped
        ("config.json", "config"),  # nothing above: the stem as it is
    ],
)
def test_a_config_file_names_the_run_by_its_stem_or_the_directory_above_a_generic_one(url: str, expected: str) -> None:
    assert config_subject(url) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("demo-out/umls/model", "umls"),
        ("/data/fb15k/embeddings/", "embeddings"),
        ("ckpt", "ckpt"),
        ("s3://bucket/umls/checkpoints", "umls"),
        (f"demo-out/umls/retrain/{RUN_DIR}", f"umls {RUN_DIR}"),  # a retraining run: its root's name beside it
        (f"s3://models/{RUN_DIR}", f"models {RUN_DIR}"),
        (RUN_DIR, RUN_DIR),
        ("model", "model"),
    ],
)
def test_a_checkpoint_path_names_the_run_and_keeps_a_retraining_run_directory(path: str, expected: str) -> None:
    assert checkpoint_subject(path) == expected


def test_the_config_file_comes_before_the_checkpoint_path() -> None:
    inline = {"checkpoint_path": "demo-out/umls/model"}
    assert subject({"config_url": "examples/kg/nations.json", "config": None}) == "nations"
    assert subject({"config": inline}) == "umls"
    assert subject({"config": parse_config(_tiny_config("s3://b/wn18rr/model"))}) == "wn18rr"  # a parsed config too
    assert subject({"queries": ["q.tsv"]}) is None


def test_the_time_is_the_scheduled_start_in_utc_to_the_minute() -> None:
    paris = timezone(timedelta(hours=1))
    start = datetime(2026, 12, 5, 4, 0, 59, tzinfo=paris)
    assert format_name("retrain", "umls", None, start) == "retrain umls, 2026-12-05 03:00 UTC"
    naive = datetime(2026, 1, 2, 3, 4)  # taken as UTC
    assert format_name("train", "umls", None, naive) == "train umls, 2026-01-02 03:04 UTC"
    now = datetime.now(UTC)
    assert format_name("eval", "x", None, None) in {
        f"eval x, {moment:%Y-%m-%d %H:%M} UTC" for moment in (now, now + timedelta(minutes=1))
    }


def test_a_detail_follows_the_subject_or_the_kind() -> None:
    start = datetime(2026, 12, 5, 14, 20, tzinfo=UTC)
    predicted = "predict umls: test.txt -> top.tsv, 2026-12-05 14:20 UTC"
    assert format_name("predict", "umls", "test.txt -> top.tsv", start) == predicted
    assert format_name("import", None, "a.tsv, b.tsv", start) == "import a.tsv, b.tsv, 2026-12-05 14:20 UTC"
    assert format_name("train", None, None, start) == "train, 2026-12-05 14:20 UTC"


def test_names_of_ascii_paths_are_printable_ascii() -> None:
    start = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
    for kind in ("train", "retrain", "tune", "eval", "predict", "import"):
        for what in (config_subject("examples/umls/config.json"), checkpoint_subject(f"out/umls/retrain/{RUN_DIR}")):
            name = format_name(kind, what, "q.tsv -> top.tsv", start)
            assert name.isascii() and name.isprintable(), name


def test_renaming_outside_a_flow_run_does_nothing() -> None:
    rename_current_run("generation 3")  # no run, no client, nothing raised


@flow(flow_run_name=run_name("eval"))
def named_by_config_url(config_url: str) -> str:
    """A flow named as every pbg flow is; returns nothing of interest."""
    return config_url


@flow(flow_run_name=run_name("retrain"))
def renamed(config_url: str, details: list[str]) -> None:
    """Appends each detail to its own name, as pbg-retrain does once it knows its generation."""
    for detail in details:
        rename_current_run(detail)


def _read_run(flow_run_id: Any) -> Any:
    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def test_a_flow_run_is_named_for_its_config_file_and_scheduled_start() -> None:
    state = named_by_config_url("examples/umls/config.json", return_state=True)
    run = _read_run(state.state_details.flow_run_id)
    assert run.name == format_name("eval", "umls", None, run.expected_start_time)


def test_a_rename_appends_its_detail_once_and_the_api_keeps_it() -> None:
    state = renamed("s3://bucket/umls/config.json", ["generation 3", "generation 3"], return_state=True)
    run = _read_run(state.state_details.flow_run_id)
    assert run.name == format_name("retrain", "umls", None, run.expected_start_time) + ", generation 3"


def test_a_rename_the_api_refuses_is_logged_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """As when a run is deleted from the server while it runs: the PATCH gets a 404."""

    @flow(flow_run_name=run_name("retrain"))
    def deleted_meanwhile(config_url: str) -> str:
        context = FlowRunContext.get()
        assert context is not None and context.flow_run is not None
        gone = context.flow_run.model_copy(update={"id": uuid4()})  # a run id the server does not have
        with context.model_copy(update={"flow_run": gone}):
            rename_current_run("generation 3")
        assert gone.name == context.flow_run.name  # not renamed where the API said no
        return "went on"

    with caplog.at_level(logging.DEBUG, logger="flows.run_names"):
        state = deleted_meanwhile("examples/umls/config.json", return_state=True)
    assert state.is_completed() and state.result() == "went on"
    run = _read_run(state.state_details.flow_run_id)
    assert run.name == format_name("retrain", "umls", None, run.expected_start_time)
    failed = [r for r in caplog.records if r.name == "flows.run_names" and "renaming it failed" in r.getMessage()]
    assert [r.levelno for r in failed] == [logging.DEBUG], caplog.records


def test_a_training_run_is_named_for_what_it_trains_and_when(graph: Any, config_for: Any, tmp_path: Path) -> None:
    config = config_for(graph, tmp_path / "umls" / "model", num_epochs=1)
    state = pbg(config=parse_config(config), return_state=True)
    assert state.is_completed(), state.message
    run = _read_run(state.state_details.flow_run_id)
    assert NAME.match(run.name) and run.name.startswith("train umls, "), run.name
    assert run.name == format_name("train", "umls", None, run.expected_start_time)
    with get_client(sync_client=True) as client:
        subflows = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
        )
    assert [sub.name for sub in subflows] == ["epoch 1/1, path 1/1, chunk 1/1"]  # iterations keep their label


def _retraining(root: Path) -> tuple[Any, RetrainOptions]:
    """A retraining root ``<root>/umls/runs`` whose inbox ``<root>/incoming`` is empty."""
    (root / "incoming").mkdir()
    config = parse_config(
        _tiny_config(str(root / "umls" / "runs"))
        | {"entity_path": str(root / "data"), "edge_paths": [str(root / "edges" / "gen*_partitioned")]}
        | {"workers": 1, "hogwild_delay": 0, "seed": 0, "batch_size": 10, "num_uniform_negs": 5, "num_batch_negs": 5}
    )
    incoming = IncomingOptions(inputs=str(root / "incoming"), edges_dir=str(root / "edges"), rel_col=1, rhs_col=2)
    return config, RetrainOptions(epochs=1, incoming=incoming)


def test_a_retraining_run_with_nothing_new_says_so_in_its_name(tmp_path: Path) -> None:
    config, options = _retraining(tmp_path)
    state = pbg_retrain(config=config, retrain=options, return_state=True)
    assert state.is_completed() and "skipped" in state.result(), state.message
    run = _read_run(state.state_details.flow_run_id)
    assert run.name == format_name("retrain", "umls", None, run.expected_start_time) + ", nothing new"


@pytest.mark.slow
def test_a_retraining_run_names_the_generation_it_trains_and_its_training_subflow_the_run_directory(
    tmp_path: Path,
) -> None:
    config, options = _retraining(tmp_path)
    rng = random.Random(3)
    edges = [(f"n{rng.randrange(40)}", "r", f"n{rng.randrange(40)}") for _ in range(400)]
    (tmp_path / "incoming" / "day0.tsv").write_text("".join("\t".join(edge) + "\n" for edge in edges))
    state = pbg_retrain(config=config, retrain=options, return_state=True)
    assert state.is_completed(), state.message
    run = _read_run(state.state_details.flow_run_id)
    assert run.name == format_name("retrain", "umls", None, run.expected_start_time) + ", generation 0"
    with get_client(sync_client=True) as client:
        [training] = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
        )
    [run_dir] = [p.name for p in (tmp_path / "umls" / "runs").iterdir() if p.name.startswith("run-")]
    assert training.name == format_name("train", f"umls {run_dir}", None, training.expected_start_time)


def _tiny_config(checkpoint_path: str) -> dict[str, Any]:
    """The smallest valid config, to check a parsed config's checkpoint_path is read."""
    return {
        "dimension": 4,
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node"}],
        "entity_path": "data",
        "edge_paths": ["data/edges"],
        "checkpoint_path": checkpoint_path,
    }
