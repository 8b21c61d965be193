"""tasks.retrain_gate: a holdout is not ranked against rows of other names (the verdict itself:
tests/storage/retraining/test_gate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from disk_state import changes, tree_state
from test_by_name import EDGES, committed, imported
from test_by_name import config_for as by_name_config

from storage.checkpoint_names import NamesChangedError
from storage.retraining.state import RetrainState, write_state
from tasks.retrain_gate import evaluate_holdout
from tasks.runs import opened_run


def test_the_trained_model_is_not_ranked_on_a_holdout_whose_names_moved(tmp_path: Path) -> None:
    """The holdout's edges are ids of the import now: a checkpoint of other names is refused, nothing written."""
    imported(tmp_path, EDGES, seed=0)
    config = by_name_config(tmp_path)
    committed(config)
    write_state(config.checkpoint_path, RetrainState(generation=1, holdouts=[str(tmp_path / "edges")]))
    imported(tmp_path, EDGES[5:] + [("u99", "bought", "i99")], seed=0)  # imported again under the run
    before = tree_state(tmp_path)
    with opened_run(config) as run, pytest.raises(NamesChangedError, match=r"the quality gate would rank each moved"):
        evaluate_holdout.fn(run, "trained")
    assert changes(before, tree_state(tmp_path)) == []
