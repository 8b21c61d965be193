"""Jobs run in the children of the parallel tests: module-level, since children import them by reference."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import types

import torch

from pbg_core.parallel.memory import PoolBuffers
from pbg_core.types import Side


def init_state(index: int, payload: object) -> dict[str, object]:
    return {"index": index, "payload": payload}


def init_fails(index: int, payload: object) -> None:
    raise KeyError(f"no such thing in worker {index}")


def whoami(state: dict, args: int) -> tuple[int, int, int, int]:
    return state["index"], os.getpid(), args * 2, torch.get_num_threads()


def write_payload(state: dict, value: float) -> bool:
    payload: torch.Tensor = state["payload"]
    payload[state["index"]] = value
    return payload.is_shared()


def fill_arg(state: dict, tensor: torch.Tensor) -> None:
    tensor.fill_(state["index"] + 10)


def bump_all(state: dict, tensors: list[torch.Tensor]) -> int:
    for tensor in tensors:
        tensor.add_(1)
    return len(tensors)


def open_fds(state: dict, args: object) -> int:
    return len(os.listdir("/proc/self/fd"))


def raise_in_worker_1(state: dict, args: None) -> str:
    if state["index"] == 1:
        raise ValueError("bad value 7 in worker 1")
    return "fine"


class TwoArgError(Exception):
    """Pickles, but cannot be rebuilt (its __init__ needs two arguments)."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")


def raise_unrebuildable(state: dict, args: None) -> None:
    raise TwoArgError("left", "right")


def exit_3_in_worker_1(state: dict, args: None) -> str:
    if state["index"] == 1:
        os._exit(3)
    time.sleep(60)  # the survivor is busy: the parent must not wait for it
    return "survivor"


def sigkill_self(state: dict, args: None) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def segfault(state: dict, args: None) -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV in native code


def train_slots(state: dict, slot_map: dict) -> float:
    buffers: PoolBuffers = state["payload"]
    embeddings, row_state = buffers.views(slot_map)
    table = embeddings["user", Side.LHS]
    table.add_(1.0)  # the same object on both sides: added once
    row_state["user", Side.RHS].fill_(5.0)
    return float(table.sum())


def _module_only_in_parent() -> types.ModuleType:
    """A module the parent can pickle functions from but children cannot import."""
    module = types.ModuleType("only_in_parent")
    exec("def job(state, args):\n    return args\n", module.__dict__)
    sys.modules["only_in_parent"] = module
    return module


def raise_in_worker_0(state: dict, args: None) -> str:
    if state["index"] == 0:
        raise ValueError("bad value 3 in worker 0")
    return "ok"
