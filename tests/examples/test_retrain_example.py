"""The nightly retraining example trains only training edges (issue 34).

The schedule ``nightly_retrain`` of ``deployments/prefect.yaml`` retrains the UMLS example after
``examples/umls/run_demo.sh`` imported train, valid and test (the import manifest's generation 0,
outside ``incoming.edges_dir``). Here: the schedule's own parameters, read from the file, with
``demo-out/umls`` moved to a temporary directory; a tiny import of three files as the demo does
it; two days dropped into the inbox; then the flow's first two tasks (receive, prepare). The
run's config must train train and the days, and no ``valid_``, ``test_`` or ``_holdout`` path;
the demo's small days are below the size the schedule's 0.05 gate needs, which the run says.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.retraining.options import RetrainOptions
from tasks.config import resolve_config
from tasks.retrain import prepare_retrain, receive_arrivals

REPO = Path(__file__).resolve().parents[2]
DEMO = "demo-out/umls"
RUN_KEY = "run-20261205T030000Z-7d3e91aa"


def nightly_parameters() -> dict[str, Any]:
    """The ``nightly_retrain`` schedule's parameters as deployments/prefect.yaml gives them."""
    document = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())
    parameters: dict[str, Any] = document["definitions"]["schedules"]["nightly_retrain"]["parameters"]
    return parameters


def moved(value: Any, root: Path) -> Any:
    """``value`` with every ``demo-out/umls`` path under ``root`` instead (strings, lists, dicts)."""
    if isinstance(value, str):
        return value.replace(DEMO, str(root / DEMO))
    if isinstance(value, list):
        return [moved(item, root) for item in value]
    if isinstance(value, dict):
        return {key: moved(item, root) for key, item in value.items()}
    return value


def triples(start: int, count: int) -> str:
    return "".join(f"e{i}\trel{i % 3}\te{(i * 7 + 3) % (start + count)}\n" for i in range(start, start + count))


def test_the_nightly_schedule_trains_train_and_the_new_days_never_valid_test_or_a_holdout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    parameters = moved(nightly_parameters(), tmp_path)
    example = moved(
        json.loads((REPO / parameters["config_url"].replace(str(tmp_path) + "/", "")).read_text()), tmp_path
    )
    config_url = tmp_path / "config.json"
    config_url.write_text(json.dumps(example))
    config = resolve_config.fn(None, str(config_url), parameters["overrides"])
    options = RetrainOptions.model_validate(parameters["retrain"])
    assert options.incoming is not None and options.gated

    data = tmp_path / DEMO / "data"
    kg = tmp_path / "kg"
    kg.mkdir()
    for number, split in enumerate(("train", "valid", "test")):  # run_demo.sh: pbg import CONFIG train valid test
        (kg / f"{split}.txt").write_text(triples(number * 200, 200))
    imported = config.model_copy(
        update={"edge_paths": [str(data / f"{s}_partitioned") for s in ("train", "valid", "test")]}
    )
    columns = ImportOptions(lhs_col=0, rel_col=1, rhs_col=2)
    import_edges(imported, [str(kg / f"{s}.txt") for s in ("train", "valid", "test")], columns, seed=0)
    inbox = Path(options.incoming.inputs)
    inbox.mkdir(parents=True)
    (inbox / "day1.tsv").write_text(triples(600, 300))
    (inbox / "day2.tsv").write_text(triples(900, 300))

    with caplog.at_level(logging.WARNING, logger="tasks"):
        arrivals = receive_arrivals.fn(config, options, RUN_KEY)
    run_config = prepare_retrain.fn(config, options, RUN_KEY, arrivals)

    names = [path.rstrip("/").rpartition("/")[2] for path in run_config.edge_paths]
    wrong = [name for name in names if name.startswith(("valid_", "test_")) or name.endswith("_holdout")]
    assert wrong == [], f"the nightly schedule would train {wrong}"
    assert names == ["train_partitioned", "gen0001-day1_partitioned", "gen0001-day2_partitioned"]
    assert arrivals.held is not None and arrivals.held < 400  # the demo's days: too small for a 0.05 gate
    assert any("holdout edges, fewer than the 400" in record.getMessage() for record in caplog.records)
