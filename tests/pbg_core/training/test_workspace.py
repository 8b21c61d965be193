"""scratch: per-thread buffers reused by name, grown when a larger shape is asked for."""

import threading

import torch

from pbg_core.training.workspace import scratch


def test_scratch_buffers_are_reused_and_grow() -> None:
    first = scratch("test_buf", (2, 3))
    again = scratch("test_buf", (3, 2))
    assert again.data_ptr() == first.data_ptr() and again.shape == (3, 2)
    bigger = scratch("test_buf", (4, 4))
    assert bigger.shape == (4, 4) and bigger.numel() == 16
    other = scratch("test_buf", (2,), torch.float64)
    assert other.dtype == torch.float64


def test_each_thread_has_its_own_buffers() -> None:
    mine = scratch("test_thread_buf", (4,))
    theirs: list[torch.Tensor] = []
    thread = threading.Thread(target=lambda: theirs.append(scratch("test_thread_buf", (4,))))
    thread.start()
    thread.join()
    assert theirs[0].data_ptr() != mine.data_ptr()
