"""The in-process registry through which a run's validations reach a tuning trial's pruner."""

from __future__ import annotations

import pytest

from tasks.tune_listeners import listening, notify


def test_a_listener_hears_its_directory_only_and_only_inside_its_block() -> None:
    heard: list[tuple[int, int, float]] = []

    def listener(index: int, epoch: int, value: float) -> str | None:
        heard.append((index, epoch, value))
        return "pruned by study s" if value < 0.5 else None

    with listening("/study/trials/trial-0001/", listener):
        assert notify("/study/trials/trial-0001", 1, 2, 0.7) is None
        assert notify("/study/trials/trial-0001", 2, 4, 0.3) == "pruned by study s"
        assert notify("/study/trials/trial-0002", 1, 2, 0.1) is None  # another run: nobody listens
    assert notify("/study/trials/trial-0001", 3, 6, 0.1) is None
    assert heard == [(1, 2, 0.7), (2, 4, 0.3)]


def test_two_listeners_on_one_directory_are_refused() -> None:
    with listening("/d", lambda i, e, v: None):
        second = listening("/d/", lambda i, e, v: None)
        with pytest.raises(ValueError, match="already listens"):
            second.__enter__()
    with listening("/d", lambda i, e, v: None):  # released after its block
        pass
