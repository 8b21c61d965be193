"""pbg_core.session.partition_io: one background thread, jobs in order, outcomes collected by the caller."""

import threading

import pytest
import torch

from pbg_core.parallel.memory import EmbeddingPool, SlotSpec
from pbg_core.session.partition_io import PartitionIo


@pytest.fixture
def handles() -> list:
    pool = EmbeddingPool.allocate({"e": SlotSpec(max_count=2, dim=3, num_slots=3)})
    return [pool.acquire("e", part, 2) for part in range(3)]


def test_jobs_run_in_submission_order_on_one_thread(handles: list) -> None:
    io = PartitionIo()
    ran: list[tuple[int, str]] = []
    gate = threading.Event()

    def job(part: int) -> int:
        gate.wait(5)
        ran.append((part, threading.current_thread().name))
        return 10 * part

    try:
        for part in (2, 0, 1):
            io.submit(("e", part), "load", handles[part], f"p{part}", lambda part=part: job(part))
        assert io.finished() == []  # all held by the gate
        assert io.oldest("load", "e") == ("e", 2)
        gate.set()
        assert io.wait(("e", 1)).future.result()[0] == 10  # the last one: the others ran before it
        assert [part for part, _ in ran] == [2, 0, 1]
        assert {name for _, name in ran} == {ran[0][1]} and ran[0][1].startswith("pbg-partition-io")
        assert sorted(job.key for job in io.finished()) == [("e", 0), ("e", 2)]
        assert io.pending == {}
    finally:
        io.close()


def test_a_failed_job_raises_where_it_is_collected_and_a_second_job_per_key_is_refused(handles: list) -> None:
    io = PartitionIo()
    try:

        def fails() -> int:
            raise OSError("disk full")

        io.submit(("e", 0), "save", handles[0], 3, fails)
        with pytest.raises(RuntimeError, match=r"partition \('e', 0\) already has a save in flight"):
            io.submit(("e", 0), "load", handles[0], "v1", lambda: 0)
        job = io.wait(("e", 0))
        with pytest.raises(OSError, match="disk full"):
            job.future.result()
        assert torch.equal(job.handle.embeddings, handles[0].embeddings)
    finally:
        io.close()
