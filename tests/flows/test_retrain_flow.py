"""The ``pbg-retrain`` flow's runs with incoming files: import, grow, baseline, train (the ``pbg``
flow as a subflow), gate, promote; ``pbg retrain`` through the real CLI; ``pbg`` refusing ``retrain``.

Four runs on the planted graph (clusters of nodes; every 10th node first appears on day 1):
day 0 from scratch, day 1 grows the model and promotes, a run with nothing new is skipped, and
a day of corrupted edges (shuffled right-hand sides) fails the gate, leaving latest.json alone.
Then what a run must remember (issue 30): a moved project imports nothing it received before,
deleted run directories are refused instead of "a first run", and a second run on the same root
stops at the root's lease.

The runs that train are slow (each test about 40 s): run by `make test-long` (CI runs it), or with
``PBG_SLOW_TESTS=1``; the default run covers the pieces (tests/tasks/test_arrivals.py,
test_retrain.py, test_retrain_gate.py, tests/storage/test_received.py, ...) and the lease.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg
from _gate_runs import judge_state
from disk_state import changes, tree_state
from prefect.exceptions import FailedRun, ParameterTypeError

from flows.retrain import pbg_retrain
from flows.train import RETRAIN_MOVED, pbg
from pbg_core.config import parse_config
from storage.best_version import read_best
from storage.errors import DataNotFound
from storage.importing.manifest import read_manifest
from storage.lease import LeaseHeldError
from storage.retraining.options import IncomingOptions, RetrainOptions
from storage.retraining.run_complete import missing_from_run
from storage.retraining.state import read_state
from storage.validation_log import ValidationLog

slow = pytest.mark.slow


def planted_edges(rng: random.Random, per_node: int) -> list[tuple[str, str, str]]:
    """200 nodes in 10 clusters of 20; each node links to ``per_node`` members of its cluster."""
    edges = []
    for node in range(200):
        members = [m for m in range(node // 20 * 20, node // 20 * 20 + 20) if m != node]
        edges += [(f"n{node}", "linked", f"n{other}") for other in rng.sample(members, per_node)]
    return edges


def write_tsv(path: Path, edges: list[tuple[str, str, str]]) -> None:
    path.write_text("".join("\t".join(edge) + "\n" for edge in edges))


def is_new(name: str) -> bool:
    return int(name[1:]) % 10 == 9


def days(rng: random.Random) -> tuple[list[Any], list[Any], list[Any]]:
    edges = planted_edges(rng, 8)
    day0 = [e for e in edges if not is_new(e[0]) and not is_new(e[2])]
    day1 = [e for e in edges if is_new(e[0]) or is_new(e[2])]
    old = sorted({e[2] for e in day0})
    corrupted = [(lhs, rel, rng.choice(old)) for lhs, rel, _ in rng.sample(day0, len(day1))]  # rhs shuffled
    return day0, day1, corrupted


def config(root: Path, **fields: Any) -> Any:
    return parse_config(
        fields
        | {
            "entities": {"node": {"num_partitions": 2}},
            "relations": [{"name": "linked", "lhs": "node", "rhs": "node"}],
            "dimension": 16,
            "comparator": "dot",
            "loss_fn": "softmax",
            "lr": 0.2,
            "batch_size": 100,
            "num_batch_negs": 20,
            "num_uniform_negs": 20,
            "eval_fraction": 0,
            "entity_path": str(root / "data"),
            "edge_paths": [str(root / "edges" / "gen*_partitioned")],
            "checkpoint_path": str(root / "runs"),
            "init_new_entities": "neighbor_mean",
            "workers": 1,
            "hogwild_delay": 0,
            "seed": 0,
        }
    )


def latest(root: Path) -> str:
    return json.loads((root / "runs" / "latest.json").read_text())["run"]


@slow
def test_each_run_imports_what_arrived_and_only_a_passing_run_is_promoted(tmp_path: Path) -> None:
    day0, day1, corrupted = days(random.Random(7))
    inbox = tmp_path / "incoming"
    inbox.mkdir()
    edges = str(tmp_path / "edges")
    incoming = IncomingOptions(inputs=str(inbox), edges_dir=edges, rel_col=1, rhs_col=2, holdout_fraction=0.2)
    options = RetrainOptions(epochs=2, incoming=incoming, min_mrr=0.2, max_mrr_drop=0.1)
    cfg = config(tmp_path)

    write_tsv(inbox / "day0.tsv", day0)
    first = pbg_retrain(config=cfg, retrain=options)
    assert first["gate"]["gate"] == "passed" and first["gate"]["baseline"] is None  # nothing to compare with
    run1 = latest(tmp_path)

    write_tsv(inbox / "day1.tsv", day1)
    second = pbg_retrain(config=cfg, retrain=options)
    run2 = latest(tmp_path)
    assert run2 != run1 and second["gate"]["gate"] == "passed", second["gate"]["reason"]
    assert second["gate"]["new_generations"] == [1]
    state = read_state(str(tmp_path / "runs" / run2))
    assert state is not None and state.baseline is not None and state.trained is not None
    saved = json.loads((tmp_path / "runs" / run2 / "config.json").read_text())
    assert saved["init_path"].endswith(run1) and saved["num_epochs"] == 2
    assert sorted(Path(p).name for p in saved["edge_paths"]) == ["gen0000-day0_partitioned", "gen0001-day1_partitioned"]
    generations = read_manifest(str(tmp_path / "data"))["generations"]  # type: ignore[index]
    assert [g["inputs"] for g in generations] == [[str(inbox / "day0.tsv")], [str(inbox / "day1.tsv")]]

    skipped = pbg_retrain(config=cfg, retrain=options)
    assert "no new edge list" in skipped["skipped"] and latest(tmp_path) == run2
    with pytest.raises(FailedRun, match="on_no_new_data: fail"):  # a verdict (tests/flows/test_retrain_verdicts.py)
        pbg_retrain(config=cfg, retrain=options.model_copy(update={"on_no_new_data": "fail"}))

    write_tsv(inbox / "day2.tsv", corrupted)
    failed = pbg_retrain(config=cfg, retrain=options, return_state=True)
    assert failed.is_failed() and failed.name == "Failed"  # returned, not raised: one line, no traceback
    assert re.fullmatch(
        rf"quality gate failed, model not promoted \(latest.json still names {re.escape(str(tmp_path / 'runs' / run2))}\): "
        r"MRR 0\.\d+ on \d+ holdout edges of the new data, previous run 0\.\d+: .*retrain\.(min_mrr|max_mrr_drop) 0\.\d+",
        failed.message or "",
    ), failed.message
    assert judge_state(failed.state_details.flow_run_id) == (
        "FAILED",
        f"quality gate failed: {failed.message.split('): ', 1)[1]}",
    )
    assert latest(tmp_path) == run2
    rejected = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.name.startswith("run-"))[-1]
    assert read_state(str(tmp_path / "runs" / rejected)).gate == "failed"  # type: ignore[union-attr]


def options_for(root: Path, **gate: float) -> RetrainOptions:
    incoming = IncomingOptions(
        inputs=str(root / "incoming"), edges_dir=str(root / "edges"), rel_col=1, rhs_col=2, holdout_fraction=0.2
    )
    return RetrainOptions(epochs=2, incoming=incoming, **gate)


@slow
def test_validated_runs_keep_their_best_version_through_growing_and_pruning(tmp_path: Path) -> None:
    """Each retraining run validates on day 0's holdout and keeps its best version under its own best.json;
    the next run grows from the promoted run's committed version, and pruning deletes a run whole."""
    day0, day1, _ = days(random.Random(7))
    (tmp_path / "incoming").mkdir()
    holdout = str(tmp_path / "edges" / "gen0000-day0_holdout")
    validated = config(tmp_path, validation={"edge_path": holdout, "candidates": 10})
    options = options_for(tmp_path, max_mrr_drop=0.5).model_copy(update={"epochs": 3, "keep_last": 1})
    write_tsv(tmp_path / "incoming" / "day0.tsv", day0)
    first = pbg_retrain(config=validated, retrain=options)
    write_tsv(tmp_path / "incoming" / "day1.tsv", day1)
    second = pbg_retrain(config=validated, retrain=options)
    assert second["gate"]["gate"] == "passed", second["gate"]["reason"]
    run2 = Path(second["checkpoint_path"])
    assert not Path(first["checkpoint_path"]).exists()  # keep_last 1: the first run went whole
    assert missing_from_run(str(run2)) is None
    rows = ValidationLog(str(run2)).read()
    best = read_best(str(run2))
    # Two edge paths (day 0's and day 1's): two iterations an epoch, the second one validated.
    assert [(r.version, r.epoch) for r in rows] == [(2, 1), (4, 2), (6, 3)] and best is not None and best.row in rows
    on_disk = sorted(int(p.name[len("model.v") : -len(".h5")]) for p in run2.glob("model.v*.h5"))
    assert on_disk == sorted({best.version, 6})
    saved = json.loads((run2 / "config.json").read_text())
    assert saved["init_path"] == first["checkpoint_path"]  # grown from the promoted run's committed version


@slow
def test_a_moved_project_imports_nothing_it_received_before(tmp_path: Path) -> None:
    day0, day1, _ = days(random.Random(7))
    project = tmp_path / "project"
    (project / "incoming").mkdir(parents=True)
    write_tsv(project / "incoming" / "day0.tsv", day0)
    first = pbg_retrain(config=config(project), retrain=options_for(project, max_mrr_drop=0.1))
    assert first["gate"]["gate"] == "passed"

    shutil.move(str(project), str(tmp_path / "moved"))  # the whole project, paths in the config follow
    moved = tmp_path / "moved"
    write_tsv(moved / "incoming" / "day1.tsv", day1)
    second = pbg_retrain(config=config(moved), retrain=options_for(moved, max_mrr_drop=0.1))
    assert second["gate"]["gate"] == "passed" and second["gate"]["new_generations"] == [1]
    generations = read_manifest(str(moved / "data"))["generations"]  # type: ignore[index]
    assert [Path(g["inputs"][0]).name for g in generations] == ["day0.tsv", "day1.tsv"]  # day 0 not again
    saved = json.loads((moved / "runs" / latest(moved) / "config.json").read_text())
    assert saved["init_path"] == str(moved / "runs" / Path(first["checkpoint_path"]).name)
    assert saved["edge_paths"] == [str(moved / "edges" / f"gen000{d}-day{d}_partitioned") for d in (0, 1)]
    state = read_state(str(moved / "runs" / latest(moved)))
    assert state is not None and sorted(r["relative"] for r in state.received_files) == ["day0.tsv", "day1.tsv"]

    before = tree_state(moved / "data")
    skipped = pbg_retrain(config=config(moved), retrain=options_for(moved))
    assert "no new edge list" in skipped["skipped"] and changes(before, tree_state(moved / "data")) == []


@slow
def test_deleted_run_directories_are_refused_not_replaced_by_a_first_run(tmp_path: Path) -> None:
    day0, day1, _ = days(random.Random(7))
    (tmp_path / "incoming").mkdir()
    write_tsv(tmp_path / "incoming" / "day0.tsv", day0)
    pbg_retrain(config=config(tmp_path), retrain=options_for(tmp_path, max_mrr_drop=0.1))
    promoted = latest(tmp_path)
    shutil.rmtree(tmp_path / "runs" / promoted)  # "cleaning up" by hand; latest.json still names it
    write_tsv(tmp_path / "incoming" / "day1.tsv", day1)
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound) as raised:
        pbg_retrain(config=config(tmp_path), retrain=options_for(tmp_path, max_mrr_drop=0.1))
    assert str(raised.value).startswith(
        f"{tmp_path / 'runs' / 'latest.json'}: names the promoted run {promoted}, but "
        f"{tmp_path / 'runs' / promoted}: the directory does not exist. Training from scratch now would replace"
    )
    assert changes(before, tree_state(tmp_path)) == []


def test_a_second_retraining_run_on_the_same_root_stops_before_writing(tmp_path: Path) -> None:
    """Another process holds the root's lease, as a scheduled run does while it imports and trains."""
    (tmp_path / "incoming").mkdir()
    write_tsv(tmp_path / "incoming" / "day0.tsv", days(random.Random(7))[0])
    (tmp_path / "runs").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LEASE, str(tmp_path / "runs")], stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        before = tree_state(tmp_path)
        with pytest.raises(LeaseHeldError, match=r"runs/lease.json: the checkpoint is being written by run 'nightly'"):
            pbg_retrain(config=config(tmp_path), retrain=options_for(tmp_path))
        assert changes(before, tree_state(tmp_path)) == []
    finally:
        holder.kill()
        holder.wait()


@slow
def test_runs_without_incoming_each_get_a_directory_initialised_from_the_previous_one(
    graph_2x2: Any, config_for: Any, tmp_path: Path
) -> None:
    root = tmp_path / "retrain-root"
    config = parse_config(config_for(graph_2x2, root, num_epochs=1))
    options = RetrainOptions(keep_last=1)
    first = pbg_retrain(config=config, retrain=options)
    second = pbg_retrain(config=config, retrain=options)

    first_dir, second_dir = Path(first["checkpoint_path"]), Path(second["checkpoint_path"])
    assert first_dir.parent == root and second_dir.parent == root and first_dir != second_dir
    assert second["version"] == 1 and second["gate"] is None  # no incoming files: no gate
    saved = json.loads((second_dir / "config.json").read_text())
    assert Path(saved["init_path"]) == first_dir  # initialised from the previous run
    latest = json.loads((root / "latest.json").read_text())
    assert latest["run"] == second_dir.name and latest["version"] == 1
    assert not first_dir.exists()  # keep_last=1


def test_the_pbg_flow_refuses_a_retrain_parameter_in_one_line_naming_the_retraining_flow(tmp_path: Path) -> None:
    """A deployment run of pbg/train given `retrain` reaches the flow's parameter validation."""
    with pytest.raises(ParameterTypeError) as raised:
        pbg.validate_parameters({"config_url": "c.json", "retrain": {"keep_last": 2}})
    assert str(raised.value) == RETRAIN_MOVED and "\n" not in RETRAIN_MOVED
    assert "pbg-retrain/retrain" in RETRAIN_MOVED and "`pbg retrain CONFIG`" in RETRAIN_MOVED
    assert "retrain" not in pbg.parameters.properties
    with pytest.raises(ParameterTypeError, match="pbg-retrain/retrain"):  # bound by the engine before validation
        pbg.fn(config=config(tmp_path), retrain=RetrainOptions())
    assert pbg.validate_parameters({"config_url": "c.json", "retrain": None})["retrain"] is None  # older defaults


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect_home"))


def write_config(root: Path) -> None:
    raw = json.loads(config(root).model_dump_json())
    (root / "config.json").write_text(json.dumps({k: v for k, v in raw.items() if v is not None}))


def test_pbg_train_given_retrain_is_refused_in_one_line_naming_pbg_retrain(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    write_config(tmp_path)
    before = tree_state(tmp_path)
    done = run_pbg(cli_env, tmp_path, "train", "config.json", "-p", "retrain.epochs=1")
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "retrain: not a training config key" in done.stderr and "`pbg retrain CONFIG`" in done.stderr
    assert "pbg-retrain/retrain" in done.stderr
    assert changes(before, tree_state(tmp_path)) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--min-mrr", "0.2"], "retrain.min_mrr: a quality gate evaluates on a holdout"),
        (
            ["--incoming", "in", "--edges-dir", "e", "--holdout-fraction", "1.5"],
            "--holdout-fraction 1.5: Input should be less than 1",
        ),
        (["--edges-dir", "e"], "--incoming: Field required"),
        (
            ["--max-mrr-drop", "2", "--incoming", "in", "--edges-dir", "e"],
            "--max-mrr-drop 2.0: Input should be less than or equal to 1",
        ),
    ],
)
def test_bad_retrain_options_are_one_line_before_anything_starts(
    tmp_path: Path, cli_env: dict[str, str], options: list[str], message: str
) -> None:
    write_config(tmp_path)
    before = tree_state(tmp_path)
    done = run_pbg(cli_env, tmp_path, "retrain", "config.json", *options)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"pbg retrain: error: {message}") and len(done.stderr.strip().splitlines()) == 1
    assert changes(before, tree_state(tmp_path)) == []


def test_retrain_help_describes_every_option(cli_env: dict[str, str], tmp_path: Path) -> None:
    done = run_pbg(cli_env, tmp_path, "retrain", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for option in (
        "--incoming",
        "--edges-dir",
        "--keep-last",
        "--epochs",
        "--min-mrr",
        "--max-mrr-drop",
        "--on-no-new-data",
    ):
        assert option in text
    assert "Fraction of each imported file's edges held out from training" in text  # the field's description


@slow
def test_pbg_retrain_through_the_cli_promotes_then_skips(tmp_path: Path, cli_env: dict[str, str]) -> None:
    day0, day1, _ = days(random.Random(7))
    (tmp_path / "incoming").mkdir()
    write_config(tmp_path)
    args = [
        "retrain",
        "config.json",
        "--incoming",
        "incoming",
        "--edges-dir",
        "edges",
        "--rel-col",
        "1",
        "--rhs-col",
        "2",
    ]
    args += ["--holdout-fraction", "0.2", "--epochs", "2", "--max-mrr-drop", "0.1"]
    write_tsv(tmp_path / "incoming" / "day0.tsv", day0)
    first = run_pbg(cli_env, tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert f"retrained: {tmp_path / 'runs' / latest(tmp_path)} is at version 2; quality gate passed" in first.stdout
    write_tsv(tmp_path / "incoming" / "day1.tsv", day1)
    second = run_pbg(cli_env, tmp_path, *args)
    assert second.returncode == 0 and "quality gate passed" in second.stdout, second.stderr
    skipped = run_pbg(cli_env, tmp_path, *args, "--on-no-new-data", "fail")
    last = skipped.stderr.strip().splitlines()[-1]  # the run's log lines come first, as for `pbg train`
    assert skipped.returncode == 1 and last.startswith("pbg retrain: error: no new edge list under incoming")
    assert last.endswith("(retrain.on_no_new_data: fail)") and "Traceback" not in skipped.stderr


REPO = Path(__file__).resolve().parents[2]
HOLD_LEASE = """
import sys, time
from storage.lease import CheckpointLease
CheckpointLease(sys.argv[1], "nightly", ttl=120).acquire()
print("held", flush=True)
time.sleep(120)
"""
