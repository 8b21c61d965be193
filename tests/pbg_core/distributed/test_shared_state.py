"""The merges of a machine's bucket into the coordinator's shared parameters (distributed_shared_merge)."""

from __future__ import annotations

import pytest
import torch

from pbg_core.distributed import shared_state


def tensors(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"model.w": torch.randn(3, 4, generator=generator), "adagrad.0": torch.rand(5, generator=generator)}


def test_delta_keeps_both_concurrent_buckets_full_steps() -> None:
    start = tensors(0)
    coordinator = shared_state.snapshot(start)
    first, second = tensors(1), tensors(2)  # two machines' changes, both trained from ``start``
    shared_state.MERGES["delta"](coordinator, start, first)
    shared_state.MERGES["delta"](coordinator, start, second)
    for name in start:
        torch.testing.assert_close(coordinator[name], start[name] + first[name] + second[name])


def test_average_takes_the_mean_of_the_copy_and_the_machine_s_result() -> None:
    start, change = tensors(0), tensors(1)
    coordinator = {name: tensor + 1.0 for name, tensor in start.items()}  # another bucket landed meanwhile
    before = shared_state.snapshot(coordinator)
    shared_state.MERGES["average"](coordinator, start, change)
    for name in start:
        torch.testing.assert_close(coordinator[name], (before[name] + start[name] + change[name]) / 2)


def test_a_change_from_another_config_is_refused_by_name() -> None:
    start = tensors(0)
    wrong = {**tensors(1), "model.w": torch.zeros(2, 4)}
    with pytest.raises(ValueError, match=r"model\.w: shape \(2, 4\), expected \(3, 4\)"):
        shared_state.MERGES["average"](shared_state.snapshot(start), start, wrong)
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        shared_state.MERGES["delta"](shared_state.snapshot(start), start, {**tensors(1), "extra": torch.zeros(1)})


def test_every_config_choice_has_a_merge() -> None:
    from typing import get_args

    from pbg_core.config.validators import SharedMerge

    assert set(get_args(SharedMerge)) == set(shared_state.MERGES)
