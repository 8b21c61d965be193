"""One thread for a product too small to share between threads.

A single query ranks one row against a partition: a product of a few million multiply-adds,
well under a millisecond on one core. torch still runs it as a parallel region of every thread,
and on a busy machine (this 2-core one, with others' work on it) the region waits for a
descheduled thread's next time slice: a 16 x 200 x 135 product measured 15 ms on two threads and
0.02 ms on one, which made a single UMLS query 13-48 ms instead of 4. Products below
:data:`SHARED_WORK_MIN` multiply-adds therefore run on one thread; larger ones keep every thread.

``torch.set_num_threads`` is the process's setting, so while a small product runs, torch work in
another thread of the process runs on one thread too; the previous count is put back after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

# 16M multiply-adds: about 1 ms on one core of this machine, where a parallel region's hand-off
# costs 0.01-0.1 ms on an idle machine and a time slice (several ms) on a busy one.
SHARED_WORK_MIN = 1 << 24


@contextlib.contextmanager
def threads_for(multiply_adds: int) -> Iterator[None]:
    """Run the block on one thread if ``multiply_adds`` is below :data:`SHARED_WORK_MIN`, else as set."""
    previous = torch.get_num_threads()
    if multiply_adds >= SHARED_WORK_MIN or previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


__all__ = ["SHARED_WORK_MIN", "threads_for"]
