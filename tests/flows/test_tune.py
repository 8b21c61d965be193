"""The ``pbg-tune`` flow on the planted graph: real Optuna on SQLite, real ``pbg`` runs as trials.

The trials' values come from a seeded random sampler over a categorical learning rate, so the
trials' order of values is known (seed 6: 0.1, 0.1, 1e30; seed 0 over [1e-5, 0.1]: 0.1, 1e-5).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from flows.train import pbg
from flows.tune import pbg_tune
from pbg_core.config import parse_config
from storage.best_version import read_best
from storage.config_loader import load_search_space
from tasks.tune_listeners import listening
from tasks.tune_study import ask_trial, close_study, open_study

pytestmark = pytest.mark.integration

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]


def tuned_config(graph: Any, config_for: Any, root: Path, **fields: Any) -> dict[str, Any]:
    """The planted graph, 2 epochs, its test edges as validation edges ranked against every node."""
    base = {"relations": ALL_NEGS, "num_uniform_negs": 0, "validation": {"edge_path": graph.test_path}}
    return config_for(graph, root / "ckpt", **(base | {"num_epochs": 2, "eval_fraction": 0.0} | fields))


def write_space(path: Path, seed: int, choices: list[float], pruner: dict[str, Any]) -> str:
    space = {
        "study": "lr",
        "sampler": {"type": "random", "seed": seed},
        "pruner": pruner,
        "params": {"lr": {"type": "categorical", "choices": choices}},
    }
    path.write_text(yaml.safe_dump(space))
    return str(path)


@pytest.mark.slow  # four pbg runs, two at a time: 16 s here alone, 50 s with the 2 cores shared
def test_three_trials_on_two_slots_one_diverges_and_the_best_config_trains(
    graph: Any, config_for: Any, tmp_path: Path
) -> None:
    config = tuned_config(graph, config_for, tmp_path)
    space = write_space(tmp_path / "space.yaml", 6, [0.1, 1.0e30], {"type": "none"})
    result = pbg_tune(space_url=space, trials=3, config=parse_config(config), parallel=2)

    study_dir = Path(config["checkpoint_path"]) / "tune-lr"
    assert result["study_dir"] == str(study_dir) and result["finished"] == 3
    rows = {row["trial"]: row for row in result["trials"]}
    assert [rows[n]["lr"] for n in (0, 1, 2)] == [0.1, 0.1, 1e30]
    assert [rows[n]["state"] for n in (0, 1, 2)] == ["COMPLETE", "COMPLETE", "FAIL"]
    assert rows[2]["reason"].startswith("diverged: ")
    for n in (0, 1):
        trial_dir = study_dir / "trials" / f"trial-{n:04d}"
        best = read_best(str(trial_dir))
        assert best is not None and rows[n]["mrr"] == best.value and rows[n]["epochs"] == 2
        assert json.loads((trial_dir / "config.json").read_text())["seed"] == n  # base seed 0 + number
    best = result["best"]
    assert best["number"] == max((0, 1), key=lambda n: (rows[n]["mrr"], -n)) and best["overrides"] == ["lr=0.1"]
    assert json.loads((study_dir / "best_trial.json").read_text())["number"] == best["number"]
    assert (study_dir / "study.db").is_file() and json.loads((study_dir / "space.json").read_text())["study"] == "lr"

    written = json.loads((study_dir / "best_config.json").read_text())
    assert written["lr"] == 0.1 and written["checkpoint_path"] == str(study_dir / "best")
    assert written["seed"] == 0 and written["validation"]["metric"] == "mrr"
    trained = pbg(config=parse_config(written))
    assert trained["version"] == 2 and read_best(str(study_dir / "best")) is not None

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pbg-tune-lr"])))
    latest = max((a for a in found if str(study_dir) in (a.description or "")), key=lambda a: a.created)
    table = json.loads(latest.data) if isinstance(latest.data, str) else latest.data
    assert [row["state"] for row in table] == ["COMPLETE", "COMPLETE", "FAIL"]
    assert set(table[0]) == {"trial", "state", "lr", "mrr", "epochs", "seconds", "reason"}


@pytest.mark.slow  # two pbg runs one after the other: 19 s here alone, 31 s with the 2 cores shared
def test_a_hopeless_trial_is_pruned_and_stops_as_early_stopping_does(
    graph: Any, config_for: Any, tmp_path: Path
) -> None:
    config = tuned_config(graph, config_for, tmp_path, num_epochs=3)
    space = write_space(tmp_path / "space.yaml", 0, [1.0e-5, 0.1], {"type": "median", "startup_trials": 1})
    result = pbg_tune(space_url=space, trials=2, config=parse_config(config), study_dir=str(tmp_path / "study"))

    first, second = result["trials"]
    assert (first["lr"], first["state"], first["epochs"]) == (0.1, "COMPLETE", 3)
    assert (second["lr"], second["state"]) == (1e-5, "PRUNED")
    assert second["reason"].startswith("pruned by study lr (validation 1, epoch 1)") and second["epochs"] == 1
    assert not (tmp_path / "study" / "trials" / "trial-0001" / "model.v2.h5").exists()  # it stopped after v1
    assert result["best"]["number"] == 0 and result["finished"] == 2


def test_a_trial_a_kill_left_running_resumes_in_its_directory(graph: Any, config_for: Any, tmp_path: Path) -> None:
    config = tuned_config(graph, config_for, tmp_path, num_epochs=1)
    space_file = write_space(tmp_path / "space.yaml", 6, [0.1, 1.0e30], {"type": "none"})
    study_dir = tmp_path / "study"
    killed = open_study.fn(load_search_space(space_file), str(study_dir), space_file)
    left = ask_trial(killed)  # asked, never told: as after a kill -9
    close_study(killed)

    result = pbg_tune(space_url=space_file, trials=1, config=parse_config(config), study_dir=str(study_dir))
    assert [(r["trial"], r["state"]) for r in result["trials"]] == [(0, "INTERRUPTED"), (1, "COMPLETE")]
    assert result["trials"][1]["lr"] == left.params["lr"] and result["finished"] == 1
    assert result["trials"][1]["reason"] == "(resumed trial 0)"
    assert result["best"]["checkpoint_dir"] == left.checkpoint_dir  # trained in the interrupted trial's directory
    assert read_best(left.checkpoint_dir) is not None and not (study_dir / "trials" / "trial-0001").exists()


def test_the_deployment_is_pbg_tune_slash_tune_and_its_schema_describes_every_parameter() -> None:
    from prefect.utilities.callables import parameter_schema_from_entrypoint

    deployments = yaml.safe_load(Path("deployments/prefect.yaml").read_text())["deployments"]
    (tune,) = [d for d in deployments if d["name"] == "tune"]
    assert tune["entrypoint"] == "flows/tune.py:pbg_tune" and pbg_tune.name == "pbg-tune"  # so: pbg-tune/tune
    schema = parameter_schema_from_entrypoint(tune["entrypoint"]).model_dump()
    expected = {"space_url", "trials", "config", "config_url", "overrides", "parallel", "timeout_seconds", "study_dir"}
    expected.add("dask_address")
    assert set(schema["properties"]) == expected and set(schema["required"]) == {"space_url", "trials"}
    assert all(schema["properties"][name].get("description") for name in expected)


def test_a_listener_s_reason_ends_the_pbg_run_as_early_stopping_does(
    graph: Any, config_for: Any, tmp_path: Path
) -> None:
    config = tuned_config(graph, config_for, tmp_path, num_epochs=3)
    heard: list[tuple[int, int]] = []

    def listener(index: int, epoch: int, value: float) -> str | None:
        heard.append((index, epoch))
        return "pruned by study s (validation 2, epoch 2)" if index == 2 else None

    with listening(config["checkpoint_path"], listener):
        result = pbg(config=parse_config(config))
    assert heard == [(1, 1), (2, 2)]
    assert result["version"] == 2 and result["stopped"] == "pruned by study s (validation 2, epoch 2)"
    assert not (Path(config["checkpoint_path"]) / "model.v3.h5").exists()  # iteration 3 never started


def test_a_timeout_that_has_passed_asks_for_no_trial(graph: Any, config_for: Any, tmp_path: Path) -> None:
    config = tuned_config(graph, config_for, tmp_path)
    space = write_space(tmp_path / "space.yaml", 6, [0.1, 1.0e30], {"type": "none"})
    # The deadline (a millisecond after the flow started) has passed before the first trial could be asked.
    result = pbg_tune(space_url=space, trials=3, config=parse_config(config), timeout_seconds=0.001)
    assert result["finished"] == 0 and result["trials"] == [] and "best" not in result
    study_dir = Path(config["checkpoint_path"]) / "tune-lr"
    assert (study_dir / "study.db").is_file() and not (study_dir / "trials").exists()
    assert not (study_dir / "best_config.json").exists()
