"""Per-thread buffers reused from batch to batch by the hand-written training paths.

A batch's big temporaries (rows, gradients, scores: 0.4-1.6 MB each) freshly allocated
every batch come back from glibc as new pages: measured ~850 page faults and ~1.7 ms per
1000-edge batch, a third of the batch. :func:`scratch` hands out the same storage again.
Each HOGWILD worker process, and each thread in it, has its own buffers.
"""

from __future__ import annotations

import math
import threading

import torch


class _Workspace(threading.local):
    """Per-thread buffers by name (see the module docstring)."""

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}


_WORKSPACE = _Workspace()


def scratch(name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A reused, uninitialised buffer of ``shape``; valid until the next call with ``name``.

    Args:
        name: The buffer's role; two tensors alive at once need different names.
        shape: Wanted shape (the storage only grows).
        dtype: Wanted dtype.
    """
    numel = math.prod(shape)
    buf = _WORKSPACE.buffers.get(name)
    if buf is None or buf.numel() < numel or buf.dtype != dtype:
        buf = _WORKSPACE.buffers[name] = torch.empty(numel, dtype=dtype)
    return buf[:numel].view(shape)
