"""storage.retraining.state: a run directory's retrain.json, and which runs a later run may start from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.errors import BadDataError
from storage.retraining.state import GateResult, RetrainState, may_start_from, read_state, write_state


def test_state_round_trips_and_decides_what_a_later_run_starts_from(store_root: str) -> None:
    url = f"{store_root}/run-20260301T000000Z-0000000a"
    assert read_state(url) is None and may_start_from(url)  # no file: a run without a gate
    state = RetrainState(generation=3, new_generations=[3], holdouts=["h"], edge_paths=["e"])
    write_state(url, state)
    assert read_state(url) == state and not may_start_from(url)  # pending: never judged
    passed = state.measured("trained", {"mrr": 0.5, "count": 10.0}).judged(GateResult("passed", "fine"))
    write_state(url, passed)
    assert may_start_from(url) and read_state(url) == passed
    write_state(url, passed.judged(GateResult("failed", "worse")))
    assert not may_start_from(url)


def test_a_run_that_has_not_imported_yet_keeps_minus_one_in_the_file(tmp_path: Path) -> None:
    write_state(str(tmp_path), RetrainState(generation=None, base_generation=2, received=False))
    assert json.loads((tmp_path / "retrain.json").read_text())["generation"] == -1  # the file format of before
    assert read_state(str(tmp_path)) == RetrainState(generation=None, base_generation=2, received=False)


def test_a_broken_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "retrain.json").write_text('{"generation": 1, "gate": "maybe"}')
    with pytest.raises(BadDataError, match="retrain.json.*gate 'maybe' is not one of pending, passed, failed"):
        read_state(str(tmp_path))
    (tmp_path / "retrain.json").write_text('{"generations": 1}')
    with pytest.raises(BadDataError, match="not a retraining state"):
        read_state(str(tmp_path))
