"""pbg_core.parallel.worker: exceptions crossing the process boundary and the job wire protocol."""

from __future__ import annotations

import multiprocessing
import os

import pytest
import torch

from pbg_core.errors import ConfigError
from pbg_core.parallel.worker import encode_job, pack_exception, recv_job, send_job, unpack_exception


class _NeedsTwoArgs(Exception):
    """Pickles, but cannot be rebuilt: its __init__ takes two arguments and args holds one."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:  # noqa: BLE001 - the point: capture it with its traceback
        return caught


def test_a_picklable_exception_comes_back_as_itself_with_the_child_traceback_as_a_note() -> None:
    packed = pack_exception(_raised(ConfigError(["lr: bad"], "c.json")))
    exc = unpack_exception(3, packed)
    assert isinstance(exc, ConfigError) and exc.problems == ["lr: bad"] and exc.source == "c.json"
    (note,) = exc.__notes__
    assert note.startswith("traceback in HOGWILD worker 3:\n") and "_raised" in note


def test_an_exception_that_cannot_be_rebuilt_becomes_a_runtime_error_naming_it() -> None:
    packed = pack_exception(_raised(_NeedsTwoArgs("x", "y")))
    assert packed[0] is None
    exc = unpack_exception(1, packed)
    assert type(exc) is RuntimeError
    assert str(exc).startswith("HOGWILD worker 1 raised _NeedsTwoArgs: x/y\ntraceback in HOGWILD worker 1:")


def test_a_job_without_descriptors_round_trips() -> None:
    here, there = multiprocessing.Pipe()
    with here, there:
        message, fds = encode_job(("train", {"bucket": (0, 1)}, [1.5]))
        assert fds == []
        send_job(here, message, fds)
        assert recv_job(there) == ("train", {"bucket": (0, 1)}, [1.5])


def test_shared_tensors_travel_as_descriptors_and_the_receiver_sees_the_same_memory() -> None:
    """As a worker does: the received table is the parent's shared memory, not a copy."""
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor":
        pytest.skip("tensors are shared by file name under this strategy: no descriptors to pass")
    table = torch.zeros(4, 3).share_memory_()
    here, there = multiprocessing.Pipe()
    with here, there:
        message, fds = encode_job({"table": table, "lr": 0.1})
        assert len(fds) == 1
        open_before = len(os.listdir("/proc/self/fd"))
        send_job(here, message, fds)
        got = recv_job(there)
    got["table"][2, 1] = 7.0
    assert table[2, 1] == 7.0 and got["lr"] == 0.1
    del got
    assert len(os.listdir("/proc/self/fd")) <= open_before  # no received descriptor leaked
