"""``operator_init`` end to end through the ``pbg`` flow (in-process, under the Prefect test harness).

The planted graph of ``tests/conftest.py`` with a ``complex_diagonal`` relation, seed 0, one worker.
With ``relation_lr=0`` the operators keep their start, so the first committed version holds it:
the run's seeded normal draw with ``operator_init=normal``, exactly PBG's 1 + 0i with ``identity``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from flows.train import pbg
from pbg_core.config import parse_config
from pbg_core.model.embedder import build_model
from storage.checkpoints import CheckpointStore

RELATIONS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "complex_diagonal"}]
HALF = 8  # complex coordinates of the fixture's dimension 16


def relation_params(checkpoint: str, version: int) -> dict[str, torch.Tensor]:
    """The operator parameters of ``version``'s model file, by private name."""
    state, _ = CheckpointStore(checkpoint).load_model(version)
    return {name: value for name, value in state.items() if "operators" in name}


def test_a_normal_start_is_what_the_first_version_holds_when_operators_do_not_learn(make_config: Any) -> None:
    raw = make_config("normal", relations=RELATIONS, operator_init="normal", relation_lr=0.0, num_epochs=1)
    config = parse_config(raw)
    assert pbg(config=config)["version"] == 1
    stored = relation_params(config.checkpoint_path, 1)
    expected = {k: v for k, v in build_model(config, 0, seed=0).state_dict().items() if "operators" in k}
    assert stored.keys() == expected.keys() == {"rhs_operators.0.real", "rhs_operators.0.imag"}
    assert all(torch.equal(stored[name], expected[name]) for name in stored)
    assert 0 < stored["rhs_operators.0.real"].abs().max() < 0.01  # N(0, init_scale²), not PBG's 1


def test_the_identity_start_is_pbgs_in_the_same_run(make_config: Any) -> None:
    """The control of the test above: the same run with the default start holds exactly 1 + 0i."""
    config = parse_config(make_config("identity", relations=RELATIONS, relation_lr=0.0, num_epochs=1))
    assert config.operator_init == "identity"
    assert pbg(config=config)["version"] == 1
    stored = relation_params(config.checkpoint_path, 1)
    assert torch.equal(stored["rhs_operators.0.real"], torch.ones(HALF))
    assert torch.equal(stored["rhs_operators.0.imag"], torch.zeros(HALF))


def test_a_normal_start_trains_and_its_operators_learn(make_config: Any) -> None:
    config = parse_config(make_config("learn", relations=RELATIONS, operator_init="normal", operator_init_scale=0.1))
    result = pbg(config=config)
    assert [iteration["version"] for iteration in result["iterations"]] == [1, 2, 3]  # every epoch committed
    lines = (Path(config.checkpoint_path) / "training_stats.json").read_text().splitlines()
    losses = [row["stats"]["metrics"]["loss"] for row in map(json.loads, lines) if "stats" in row]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)  # one bucket per epoch
    start = build_model(config, 0, seed=0).state_dict()["rhs_operators.0.real"]
    trained = relation_params(config.checkpoint_path, 3)["rhs_operators.0.real"]
    assert 0 < start.abs().max() < 0.5 and not torch.equal(trained, start)  # started at N(0, 0.1²), then moved
