"""storage.remap.relation_params: dynamic relations' operator rows moved by relation name."""

from __future__ import annotations

import numpy as np
import torch

from pbg_core.training.optimizers import state_from_bytes, state_to_bytes
from storage.remap.relation_params import move_relations


def test_kept_relation_types_keep_their_rows_and_sums_new_ones_start_fresh() -> None:
    old = {
        "lhs_operators.0.translations": torch.arange(6.0).reshape(3, 2),
        "rhs_operators.0.translations": -torch.arange(6.0).reshape(3, 2),
    }
    sums = {"state": {0: {"sum": torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])}, 1: {"sum": torch.ones(3, 2)}}}
    fresh = {key: torch.full((4, 2), 7.0) for key in old}
    index = np.array([2, -1, 0, -1])  # now: old 2, new, old 0, new (old 1 dropped)
    moved, optim = move_relations(old, state_to_bytes(sums), index, fresh)
    assert moved["lhs_operators.0.translations"].tolist() == [[4, 5], [7, 7], [0, 1], [7, 7]]
    assert moved["rhs_operators.0.translations"].tolist() == [[-4, -5], [7, 7], [0, -1], [7, 7]]
    assert optim is not None
    state = state_from_bytes(optim)["state"]
    assert state[0]["sum"].tolist() == [[3, 3], [0, 0], [1, 1], [0, 0]]
    assert fresh["lhs_operators.0.translations"].tolist() == [[7.0, 7.0]] * 4  # the fresh model is left alone


def test_without_optimizer_state_only_the_parameters_move() -> None:
    old = {"lhs_operators.0.real": torch.tensor([[1.0], [2.0]])}
    moved, optim = move_relations(old, None, np.array([1, 0]), {"lhs_operators.0.real": torch.zeros(2, 1)})
    assert moved["lhs_operators.0.real"].tolist() == [[2.0], [1.0]] and optim is None
