"""storage.trained.small_work: a small product on one thread, the thread count put back after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from storage.trained.small_work import SHARED_WORK_MIN, threads_for


@pytest.fixture
def two_threads() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


@pytest.mark.usefixtures("two_threads")
def test_a_small_product_runs_on_one_thread_and_the_count_comes_back() -> None:
    with threads_for(SHARED_WORK_MIN - 1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_threads")
def test_a_large_product_keeps_every_thread() -> None:
    with threads_for(SHARED_WORK_MIN):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_threads")
def test_the_count_comes_back_after_an_error() -> None:
    with pytest.raises(KeyboardInterrupt), threads_for(1):
        raise KeyboardInterrupt
    assert torch.get_num_threads() == 2
