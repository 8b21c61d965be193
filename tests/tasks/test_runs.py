"""tasks.runs: a run's config and stores, opened once and looked up by handle."""

from __future__ import annotations

from typing import Any

import pytest

import tasks.runs
from pbg_core.config import parse_config
from tasks.runs import close_run, get_run, open_run, open_stores_ahead, opened_run


def counted_opens(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Configs passed to the real ``open_run_stores`` by tasks.runs, in call order."""
    calls: list[Any] = []
    real = tasks.runs.open_run_stores

    def counting(config: Any) -> Any:
        calls.append(config)
        return real(config)

    monkeypatch.setattr(tasks.runs, "open_run_stores", counting)
    return calls


def test_a_run_holds_its_config_and_the_stores_opened_from_it(
    make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = counted_opens(monkeypatch)
    config = parse_config(make_config())
    with opened_run(config) as handle:
        run = get_run(handle)
        assert run.config is config and get_run(handle) is run  # every lookup: the same stores
        assert run.stores.checkpoint.url == config.checkpoint_path
        assert [store.url for store in run.stores.edges] == config.edge_paths
    assert opens == [config]
    with pytest.raises(LookupError, match=f"run {handle!r} is not open in this process"):
        get_run(handle)
    close_run(handle)  # idempotent


def test_stores_opened_ahead_are_adopted_by_the_run_of_an_equal_config(
    make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = counted_opens(monkeypatch)
    ahead = open_stores_ahead(parse_config(make_config(seed=3)))
    handle = open_run(parse_config(make_config(seed=3)))  # parsed again by the caller: equal, not the same
    try:
        assert get_run(handle).stores is ahead and len(opens) == 1
    finally:
        close_run(handle)
    open_stores_ahead(parse_config(make_config(seed=3)))
    other = open_run(parse_config(make_config(seed=4)))  # another config: its own stores, the others dropped
    try:
        assert len(opens) == 3 and opens[-1].seed == 4
        again = open_run(parse_config(make_config(seed=3)))
        assert len(opens) == 4  # the stores opened ahead were dropped with the other run
        close_run(again)
    finally:
        close_run(other)
