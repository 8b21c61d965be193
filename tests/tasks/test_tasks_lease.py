"""tasks.lease: the run's checkpoint lease, taken by handle, renewed in the background,
checked before a commit and released (the lease file itself: tests/storage/test_lease.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pbg_core.config import parse_config
from storage.fs import changes
from storage.lease import CheckpointLease, LeaseHeldError, LeaseLostError
from tasks.lease import acquire_lease, check_lease, release_lease
from tasks.runs import opened_run


def test_a_second_run_on_the_checkpoint_is_refused_until_the_first_releases(make_config: Any) -> None:
    config = parse_config(make_config())
    with opened_run(config) as first, opened_run(parse_config(make_config())) as second:
        key = acquire_lease.fn(first)
        try:
            assert key == config.checkpoint_path
            with pytest.raises(LeaseHeldError, match="pbg"):
                acquire_lease.fn(second)
            check_lease(key)  # still ours: no error
        finally:
            release_lease.fn(key)
        assert CheckpointLease(key, "probe").read() is None  # the lease file is gone
        release_lease.fn(key)  # idempotent
        release_lease.fn(acquire_lease.fn(second))  # and the checkpoint is free again


def test_a_lease_lost_is_reported_before_the_next_commit(make_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBG_LEASE_TTL_SECONDS", "0.3")  # renewed every 0.1 s
    config = parse_config(make_config())
    with opened_run(config) as run:
        key = acquire_lease.fn(run)
        try:
            time.sleep(0.5)  # outlives one ttl: only the renewing thread keeps it ours
            holder = CheckpointLease(key, "probe").read()
            assert holder is not None and holder.expires_at > time.time()  # renewed
            check_lease(key)
            changes.remove(CheckpointLease(key, "probe").url)  # as if another run had taken it over
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    check_lease(key)
                except LeaseLostError as exc:
                    assert key in str(exc)
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the renewing thread never saw the lease taken over")
        finally:
            release_lease.fn(key)


def test_a_run_is_refused_while_an_import_writes_its_entity_path_and_keeps_imports_out(make_config: Any) -> None:
    from disk_state import changes, tree_state

    from storage.entity_lease import acquire_import, import_lease, importing
    from tasks.lease import reading_entities

    config = parse_config(make_config())
    with opened_run(config) as run:
        with importing(config.entity_path, "pbg import config.json day2.tsv --append"):
            before = tree_state(config.entity_path)
            with pytest.raises(LeaseHeldError, match=r"is being imported into by run 'pbg import config.json day2"):
                acquire_lease.fn(run)
            assert changes(before, tree_state(config.entity_path)) == []
            with pytest.raises(LeaseHeldError, match="is being imported into"), reading_entities(run):
                pytest.fail("an evaluation read the entity_path during an import")
        assert CheckpointLease(config.checkpoint_path, "probe").read() is None  # not left held by the refusal
        key = acquire_lease.fn(run)
        try:
            with pytest.raises(LeaseHeldError, match=r"is being read by run 'pbg'"):
                acquire_import(import_lease(config.entity_path, "pbg import"), config.entity_path)
        finally:
            release_lease.fn(key)
        with importing(config.entity_path, "pbg import"):  # the run is done: imports may start
            pass
