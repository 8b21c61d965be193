"""storage.retraining.run_config: a retraining run trains only training edges (issue 34).

The UMLS example's layout, small: ``pbg import train valid test`` by hand (the import manifest's
generation 0, outside ``incoming.edges_dir``), then two days received by retraining runs. The
run trains what the config's patterns match (train) and the received days, never valid or test;
a holdout or ``validation.edge_path`` among the paths to train is refused before anything is
written; a gated run whose holdout is too small for its gate warns.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import fsspec
import pytest
from disk_state import changes, tree_state
from test_arrivals import day, receive_now, write

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.retraining.options import IncomingOptions, RetrainOptions
from storage.retraining.run_config import run_config
from storage.retraining.state import read_state
from tasks.retrain import receive_arrivals

RUN_KEY = "run-20261205T030000Z-7d3e91aa"
SPLITS = ("train", "valid", "test")


def demo_like(root: Path, **fields: Any) -> Any:
    """The example's config: the data dir imported by hand, ``edge_paths`` the train pattern."""
    return parse_config(
        {
            "entities": {"user": {"num_partitions": 1}},
            "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
            "dimension": 4,
            "entity_path": str(root / "data"),
            "edge_paths": [str(root / "data" / "train*_partitioned")],
            "checkpoint_path": str(root / "runs"),
        }
        | fields
    )


def imported_by_hand(root: Path) -> None:
    """``pbg import config train.txt valid.txt test.txt``: generation 0, under data/, not edges_dir."""
    for number, split in enumerate(SPLITS):
        write(str(root / "kg" / f"{split}.txt"), day(number * 100, 100))
    paths = [str(root / "data" / f"{split}_partitioned") for split in SPLITS]
    files = [str(root / "kg" / f"{split}.txt") for split in SPLITS]
    import_edges(demo_like(root, edge_paths=paths), files, ImportOptions(lhs_col=0, rhs_col=1), seed=0)


def incoming(root: Path) -> IncomingOptions:
    return IncomingOptions(
        inputs=str(root / "in"), edges_dir=str(root / "data" / "incoming-edges"), holdout_fraction=0.2
    )


def two_days(root: Path) -> Any:
    """Day 1 and day 2 received by two runs (generations 1 and 2); the second run's arrivals."""
    config = demo_like(root)
    write(str(root / "in" / "day1.tsv"), day(300, 60))
    receive_now(config, incoming(root), 0)
    write(str(root / "in" / "day2.tsv"), day(360, 60))
    return receive_now(config, incoming(root), 0)


def test_a_night_trains_the_train_split_and_the_received_days_never_valid_or_test(tmp_path: Path) -> None:
    imported_by_hand(tmp_path)
    arrivals = two_days(tmp_path)
    edges = tmp_path / "data" / "incoming-edges"
    assert arrivals.new_generations == [1, 2]
    assert arrivals.edge_paths == [str(edges / "gen0001-day1_partitioned"), str(edges / "gen0002-day2_partitioned")]
    assert arrivals.outside == [str(tmp_path / "data" / f"{split}_partitioned") for split in SPLITS]
    chosen = run_config(demo_like(tmp_path), RetrainOptions(incoming=incoming(tmp_path)), RUN_KEY, arrivals)
    assert chosen.edge_paths == [
        str(tmp_path / "data" / "train_partitioned"),
        str(edges / "gen0001-day1_partitioned"),
        str(edges / "gen0002-day2_partitioned"),
    ]


def test_a_holdout_or_the_validation_edges_among_the_paths_to_train_are_refused(tmp_path: Path) -> None:
    imported_by_hand(tmp_path)
    arrivals = two_days(tmp_path)
    options = RetrainOptions(incoming=incoming(tmp_path))
    valid = str(tmp_path / "data" / "valid_partitioned")
    everything = demo_like(tmp_path, edge_paths=[str(tmp_path / "data" / "*_partitioned")])
    validated = everything.model_copy(update={"validation": parse_config_validation(valid)})
    renamed = tmp_path / "data" / "incoming-edges" / "day1-copy"  # a holdout under another name
    fsspec.filesystem("file").copy(arrivals.holdouts[0], str(renamed), recursive=True)
    copied = demo_like(tmp_path, edge_paths=[str(tmp_path / "data" / "train_partitioned"), str(renamed)])
    before = tree_state(tmp_path)
    with pytest.raises(ConfigError) as raised:
        run_config(validated, options, RUN_KEY, arrivals)
    assert "\n" not in str(raised.value)
    assert f"edge_paths: {valid} is validation.edge_path" in str(raised.value)
    with pytest.raises(ConfigError, match=rf"edge_paths: {renamed} is a holdout \(it holds split.json"):
        run_config(copied, options, RUN_KEY, arrivals)
    assert changes(before, tree_state(tmp_path)) == []  # no run directory, no config.json


def test_a_gated_night_with_a_small_holdout_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    imported_by_hand(tmp_path)
    write(str(tmp_path / "in" / "day1.tsv"), day(300, 60))
    gated = RetrainOptions(incoming=incoming(tmp_path), max_mrr_drop=0.1)
    with caplog.at_level(logging.WARNING, logger="tasks"):
        arrivals = receive_arrivals.fn(demo_like(tmp_path), gated, RUN_KEY)
    assert arrivals.held is not None and 0 < arrivals.held < 100
    warned = [r.getMessage() for r in caplog.records if "holdout edges, fewer than the 100" in r.getMessage()]
    assert warned and warned[0].startswith(f"the quality gate measures the new data on {arrivals.held} holdout edges")
    state = read_state(f"{tmp_path / 'runs'}/{RUN_KEY}")
    assert state is not None and state.holdout_warning == warned[0]  # for the run's summary


def parse_config_validation(edge_path: str) -> Any:
    """A validation section on ``edge_path`` (parsed as the schema does)."""
    from pbg_core.config.quality_sections import ValidationSchema

    return ValidationSchema(edge_path=edge_path)
