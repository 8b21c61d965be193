"""Scheduled retraining: options, the run's config, latest.json and pruning, two consecutive runs.

Task bodies run through ``.fn()``; the end-to-end test trains the planted graph with the
same task bodies the ``pbg`` flow runs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from disk_state import changes, tree_state

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.errors import ConfigError
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.errors import DataNotFound
from storage.lease import LeaseHeldError
from storage.retraining.arrivals import receive
from storage.retraining.options import IncomingOptions, RetrainOptions
from storage.retraining.state import RetrainState, read_state, write_state
from tasks.buckets import swap_partitions
from tasks.checkpoint import remove_old_version, switch_version, write_checkpoint
from tasks.plan import plan_training
from tasks.retrain import (
    acquire_retrain_lease,
    finish_retrain,
    imported_data,
    importer_for,
    prepare_retrain,
    receive_arrivals,
)
from tasks.runs import open_run
from tasks.sessions import close_training_session, get_session, open_training_session

KEY, SECRET = "AKIAPLANTEDRETRAIN", "planted-retrain-s3cr3t"
FIRST = "run-20260301T000000Z-0000000a"
SECOND = "run-20260302T000000Z-0000000b"


def plant_edge_dir(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "edges_0_0.h5").write_bytes(b"")


def commit(run_dir: Path, version: int) -> None:
    """A committed version (no config.json: its model file is all that completeness can check)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"model.v{version}.h5").write_bytes(b"h5")
    (run_dir / "checkpoint_version.txt").write_text(f"{version}\n")


@pytest.fixture
def root_config(make_config: Any, tmp_path: Path) -> ConfigSchema:
    """A config whose checkpoint_path is a root and whose edge path is a glob; with credentials."""
    plant_edge_dir(tmp_path / "edges" / "part-000")
    raw = make_config(
        "root",
        edge_paths=[str(tmp_path / "edges" / "part-*")],
        init_path=str(tmp_path / "seed"),
        storage_options={"key": KEY, "secret": SECRET},
    )
    return parse_config(raw)


def test_first_start_expands_globs_and_a_retry_reuses_its_choice(root_config: ConfigSchema, tmp_path: Path) -> None:
    options = RetrainOptions()
    run_config = prepare_retrain.fn(root_config, options, FIRST)
    run_dir = tmp_path / "root" / FIRST
    assert run_config.checkpoint_path == str(run_dir)
    assert run_config.edge_paths == [str(tmp_path / "edges" / "part-000")]
    assert run_config.init_path == str(tmp_path / "seed")  # no earlier run: the config's own
    assert run_config.storage_options_for_fs() == {"key": KEY, "secret": SECRET}  # credentials intact
    saved = (run_dir / "config.json").read_text()
    assert SECRET not in saved and json.loads(saved)["edge_paths"] == run_config.edge_paths

    plant_edge_dir(tmp_path / "edges" / "part-001")  # an import between runs
    commit(tmp_path / "root" / "run-20260201T000000Z-00000001", 2)
    retry = prepare_retrain.fn(root_config, options, FIRST)
    assert retry == run_config  # same run: same edge paths, same init

    later = prepare_retrain.fn(root_config, options, SECOND)
    assert later.edge_paths == [str(tmp_path / "edges" / "part-000"), str(tmp_path / "edges" / "part-001")]
    assert later.init_path == str(tmp_path / "root" / "run-20260201T000000Z-00000001")
    commit(tmp_path / "root" / FIRST, 1)
    own_init = prepare_retrain.fn(
        root_config, RetrainOptions(init_from_previous=False), "run-20260303T000000Z-0000000c"
    )
    assert own_init.init_path == str(tmp_path / "seed")
    with pytest.raises(ValueError, match="'run-today' is not a run directory name"):
        prepare_retrain.fn(root_config, options, "run-today")


def test_the_run_config_is_the_resolved_one_with_its_paths_replaced(root_config: ConfigSchema, tmp_path: Path) -> None:
    """No second parse: every other field is the resolved config's own (credentials as SecretStr)."""
    run_config = prepare_retrain.fn(root_config, RetrainOptions(), FIRST)
    changed = {"checkpoint_path", "edge_paths"}
    assert {k: v for k, v in vars(run_config).items() if k not in changed} == {
        k: v for k, v in vars(root_config).items() if k not in changed
    }
    assert run_config.storage_options is root_config.storage_options


def test_a_saved_run_config_of_the_wrong_type_is_named(root_config: ConfigSchema, tmp_path: Path) -> None:
    """The run directory's config.json is read back: a bad edge_paths or init_path there is refused."""
    run_dir = tmp_path / "root" / FIRST
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"edge_paths": "edges/part-000", "init_path": 7}))
    with pytest.raises(ConfigError) as raised:
        prepare_retrain.fn(root_config, RetrainOptions(), FIRST)
    assert raised.value.problems == [
        "init_path: 7 is not a str | None",
        "edge_paths: 'edges/part-000' is not a list[str]",
    ]
    assert FIRST in str(raised.value)


def test_a_pattern_matching_nothing_is_named(make_config: Any, tmp_path: Path) -> None:
    pattern = str(tmp_path / "edges" / "none-*")
    config = parse_config(make_config("root", edge_paths=[pattern]))
    with pytest.raises(FileNotFoundError, match=re.escape(f"{pattern}: this edge_paths pattern matches no directory")):
        prepare_retrain.fn(config, RetrainOptions(), FIRST)
    assert not (tmp_path / "root" / FIRST).exists()


def test_finish_refuses_a_checkpoint_outside_the_root(root_config: ConfigSchema, tmp_path: Path) -> None:
    stray = root_config.model_copy(update={"checkpoint_path": str(tmp_path / "elsewhere" / FIRST)})
    with pytest.raises(ValueError, match="is not a run directory .* directly under the root"):
        finish_retrain.fn(open_run(stray), root_config.checkpoint_path, RetrainOptions())


def train_run(config: ConfigSchema, run_config: ConfigSchema, train_buckets: Any) -> None:
    """Every remaining iteration of ``run_config``, committed, through the flow's task bodies."""
    plan = plan_training.fn(open_run(run_config))
    handle = open_training_session.fn(open_run(run_config))
    try:
        for iteration in plan.remaining:
            train_buckets(handle, iteration)
            write_checkpoint.fn(handle, iteration)
            switch_version.fn(handle, iteration)
            remove_old_version.fn(handle, iteration)
    finally:
        close_training_session.fn(handle)


def test_second_run_starts_from_the_first_and_trains_the_new_edge_directory(
    graph: Any, make_config: Any, tmp_path: Path, train_buckets: Any
) -> None:
    edges = tmp_path / "edges"
    shutil.copytree(graph.train_path, edges / "part-000")
    raw = make_config(
        "root",
        edge_paths=[str(edges / "part-*")],
        num_epochs=1,
        relations=[{"name": "linked", "lhs": "node", "rhs": "node", "operator": "translation"}],
    )
    config, options = parse_config(raw), RetrainOptions(keep_last=1)
    root = tmp_path / "root"

    first = prepare_retrain.fn(config, options, FIRST)
    train_run(config, first, train_buckets)
    assert finish_retrain.fn(open_run(first), config.checkpoint_path, options) == []
    assert json.loads((root / "latest.json").read_text())["run"] == FIRST
    first_store = CheckpointStore(first.checkpoint_path)
    first_model, _ = first_store.load_model(1)
    first_embeddings, _ = first_store.load_embeddings("node", 0, 1)

    shutil.copytree(graph.test_path, edges / "part-001")  # imported between the runs
    second = prepare_retrain.fn(config, options, SECOND)
    assert second.init_path == str(root / FIRST)
    assert second.edge_paths == [str(edges / "part-000"), str(edges / "part-001")]

    handle = open_training_session.fn(open_run(second))
    try:
        session = get_session(handle)
        assert session.model_state.source == "init_path version 1"
        own = session.model_state.model.state_dict()
        assert "rhs_operators.0.translation" in first_model  # the relation operator's parameter
        assert own.keys() == first_model.keys()
        assert all(torch.equal(own[k], first_model[k]) for k in first_model)
        swap_partitions.fn(handle, Bucket(0, 0))
        assert torch.equal(session.residency.handle(("node", 0)).embeddings, first_embeddings)
    finally:
        close_training_session.fn(handle)

    train_run(config, second, train_buckets)
    second_store = CheckpointStore(second.checkpoint_path)
    assert second_store.read_version() == 2  # one epoch x two edge paths
    last = second_store.load_metadata(2).iteration
    assert (last["edge_path_idx"], last["edge_path"]) == (1, str(edges / "part-001"))
    trained, _ = second_store.load_embeddings("node", 0, 2)
    assert not torch.equal(trained, first_embeddings)

    assert finish_retrain.fn(open_run(second), config.checkpoint_path, options) == [str(root / FIRST)]
    assert sorted(p.name for p in root.iterdir()) == ["latest.json", SECOND]
    latest = json.loads((root / "latest.json").read_text())
    assert {k: latest[k] for k in ("run", "checkpoint_path", "version")} == {
        "run": SECOND,
        "checkpoint_path": str(root / SECOND),
        "version": 2,
    }


def user_project(project: Path) -> tuple[ConfigSchema, RetrainOptions]:
    """A small retraining project: inbox ``in/``, edges ``edges/``, import ``data/``, runs ``runs/``."""
    cfg = parse_config(
        {
            "entities": {"user": {"num_partitions": 1}},
            "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
            "dimension": 4,
            "entity_path": str(project / "data"),
            "edge_paths": [str(project / "edges" / "gen*_partitioned")],
            "checkpoint_path": str(project / "runs"),
        }
    )
    (project / "in").mkdir(parents=True, exist_ok=True)
    incoming = IncomingOptions(inputs=str(project / "in"), edges_dir=str(project / "edges"))
    return cfg, RetrainOptions(incoming=incoming)


def day_file(project: Path, name: str, start: int, count: int) -> None:
    (project / "in" / name).write_text(
        "".join(f"u{i}\tu{(i * 7 + 3) % (start + count)}\n" for i in range(start, start + count))
    )


def plant_promoted(project: Path, name: str, generation: int) -> Path:
    """A complete committed run whose gate passed after training ``generation``, named by latest.json."""
    run = project / "runs" / name
    run.mkdir(parents=True)
    for file in ("model.v1.h5", "embeddings_user_0.v1.h5"):
        (run / file).write_bytes(b"h5")
    (run / "config.json").write_text(
        json.dumps({"entities": {"user": {}}, "relations": [{"lhs": "user", "rhs": "user"}]})
    )
    (run / "retrain.json").write_text(json.dumps({"generation": generation, "gate": "passed"}))
    (run / "checkpoint_version.txt").write_text("1\n")
    (project / "runs" / "latest.json").write_text(json.dumps({"run": name, "checkpoint_path": str(run), "version": 1}))
    return run


def test_a_retry_after_the_import_still_trains_what_arrived(tmp_path: Path) -> None:
    cfg, options = user_project(tmp_path)
    assert options.incoming is not None
    day_file(tmp_path, "day0.tsv", 0, 50)
    receive(options.incoming, imported_data(cfg), importer_for(cfg, options.incoming, 0), None, 0)
    # The first attempt chose its base (generation 0), imported day 1, then was killed.
    write_state(str(tmp_path / "runs" / SECOND), RetrainState(generation=-1, base_generation=0, received=False))
    day_file(tmp_path, "day1.tsv", 50, 20)
    receive(options.incoming, imported_data(cfg), importer_for(cfg, options.incoming, 0), 0, 0)

    arrivals = receive_arrivals.fn(cfg, options, SECOND)
    assert arrivals.imported == [] and arrivals.new_generations == [1] and len(arrivals.holdouts) == 1
    state = read_state(str(tmp_path / "runs" / SECOND))
    assert state is not None and state.received and state.base_generation == 0 and state.new_generations == [1]

    fsspec.filesystem("file").rm(arrivals.holdouts[0], recursive=True)
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound, match="this run's holdout is gone since its first attempt split it"):
        receive_arrivals.fn(cfg, options, SECOND)
    assert changes(before, tree_state(tmp_path)) == []


def test_the_next_run_after_a_move_knows_what_was_received_from_retrain_json(tmp_path: Path) -> None:
    cfg, options = user_project(tmp_path / "project")
    day_file(tmp_path / "project", "day0.tsv", 0, 50)
    first = receive_arrivals.fn(cfg, options, FIRST)
    state = read_state(str(tmp_path / "project" / "runs" / FIRST))
    assert state is not None and [(r["relative"], r["generation"]) for r in state.received_files] == [("day0.tsv", 0)]
    assert first.received_files == state.received_files

    shutil.move(str(tmp_path / "project"), str(tmp_path / "moved"))
    cfg, options = user_project(tmp_path / "moved")
    second = receive_arrivals.fn(cfg, options, SECOND)
    assert second.imported == [] and second.edge_paths == [
        str(tmp_path / "moved" / "edges" / "gen0000-day0_partitioned")
    ]


@pytest.mark.parametrize("loss", ["deleted", "half-copied"])
def test_a_latest_json_naming_a_lost_run_stops_the_run_before_it_writes(tmp_path: Path, loss: str) -> None:
    cfg, options = user_project(tmp_path)
    day_file(tmp_path, "day0.tsv", 0, 50)
    receive(options.incoming, imported_data(cfg), importer_for(cfg, options.incoming, 0), None, 0)
    promoted = plant_promoted(tmp_path, FIRST, 0)
    if loss == "deleted":
        shutil.rmtree(promoted)
    else:
        (promoted / "embeddings_user_0.v1.h5").unlink()
    day_file(tmp_path, "day1.tsv", 50, 20)
    before = tree_state(tmp_path)
    for start in (lambda: receive_arrivals.fn(cfg, options, SECOND), lambda: prepare_retrain.fn(cfg, options, SECOND)):
        with pytest.raises(DataNotFound, match=f"runs/latest.json: names the promoted run {FIRST}, but "):
            start()
    assert changes(before, tree_state(tmp_path)) == []


def test_a_starting_run_whose_generation_the_import_no_longer_has_is_refused(tmp_path: Path) -> None:
    cfg, options = user_project(tmp_path)
    day_file(tmp_path, "day0.tsv", 0, 50)
    receive(options.incoming, imported_data(cfg), importer_for(cfg, options.incoming, 0), None, 0)
    plant_promoted(tmp_path, FIRST, 5)  # it trained generation 5: the import was replaced since
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound) as raised:
        receive_arrivals.fn(cfg, options, SECOND)
    assert str(raised.value).startswith(
        f"{tmp_path / 'data' / 'import_manifest.json'}: lists generation(s) [0], but {FIRST} (the run this one "
        "starts from) trained import generation 5"
    )
    assert changes(before, tree_state(tmp_path)) == []
    shutil.rmtree(tmp_path / "data")  # the import removed: a plain import now would renumber every entity
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound, match=f"data: holds no import, but {FIRST} .* trained import generation 5"):
        receive_arrivals.fn(cfg, options, SECOND)
    assert changes(before, tree_state(tmp_path)) == []


def test_a_second_retraining_run_on_the_root_stops_at_its_lease(tmp_path: Path) -> None:
    """Another process holds the root's lease (as a retraining run does for its whole length)."""
    cfg, _ = user_project(tmp_path)
    (tmp_path / "runs").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LEASE, str(tmp_path / "runs")], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = tree_state(tmp_path)
        with pytest.raises(LeaseHeldError, match=r"runs/lease.json: the checkpoint is being written by run 'holder'"):
            acquire_retrain_lease.fn(cfg)
        assert changes(before, tree_state(tmp_path)) == []
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(ValueError, match="cannot be a glob pattern"):
        acquire_retrain_lease.fn(cfg.model_copy(update={"checkpoint_path": str(tmp_path / "runs*")}))


REPO = Path(__file__).resolve().parents[2]
HOLD_LEASE = """
import sys, time
from storage.lease import CheckpointLease
CheckpointLease(sys.argv[1], "holder", ttl=120).acquire()
print("held", flush=True)
time.sleep(120)
"""
