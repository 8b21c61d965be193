"""Only transient faults are retried."""

from __future__ import annotations

import errno

from prefect.states import Failed

from pbg_core.errors import BucketAbandoned, ClusterError, MachineLost
from tasks._policies import is_transient, retry_if_transient


class Throttled(Exception):
    transient = True


def test_transient_classification() -> None:
    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert is_transient(OSError(errno.ETIMEDOUT, "timed out"))
    assert is_transient(Throttled())
    assert not is_transient(FileNotFoundError(errno.ENOENT, "missing"))
    assert not is_transient(ValueError("bad format"))


def test_transient_cause_is_found_through_wrapping() -> None:
    try:
        try:
            raise ConnectionResetError("reset")
        except ConnectionResetError as inner:
            raise RuntimeError("upload failed") from inner
    except RuntimeError as outer:
        assert is_transient(outer)


def test_retry_condition_reads_the_failed_state() -> None:
    assert retry_if_transient(None, None, Failed(data=ConnectionResetError()))
    assert not retry_if_transient(None, None, Failed(data=ValueError("bad")))


def test_a_cluster_error_is_never_a_storage_fault_to_retry() -> None:
    # A lost worker or scheduler has its own handling; a timeout inside it must not look transient.
    for error_type in (ClusterError, MachineLost, BucketAbandoned):
        try:
            try:
                raise TimeoutError("waited")
            except TimeoutError as cause:
                raise error_type("dask_address tcp://h:1: lost") from cause
        except ClusterError as exc:
            assert not is_transient(exc)
