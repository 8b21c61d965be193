"""HogwildWorkers: this process is worker 0, children start when a job needs them, prestarted ones are adopted."""

from __future__ import annotations

import os

import pytest
import torch
from _pool_jobs import init_state, raise_in_worker_0, raise_in_worker_1, whoami, write_payload

from pbg_core.parallel.hogwild import HogwildWorkers


def test_hogwild_workers_run_share_zero_in_this_process_and_the_rest_in_children() -> None:
    with HogwildWorkers(2, init_state, "p", start_method="forkserver") as workers:
        results = workers.run(whoami, [1, 2])
        assert [r[0] for r in results] == [0, 1]
        assert results[0][1] == os.getpid() and results[1][1] != os.getpid()
        assert [r[2] for r in results] == [2, 4]
        assert [r[3] for r in results] == [1, 1]  # one torch thread in every worker
        assert torch.get_num_threads() >= 1  # restored afterwards
        assert workers.run(whoami, [5])[0][2] == 10  # fewer args than workers


def test_hogwild_workers_local_error_is_raised_after_children_reply() -> None:
    with HogwildWorkers(2, init_state, None, start_method="forkserver") as workers:
        with pytest.raises(ValueError, match="worker 1"):
            workers.run(raise_in_worker_1, [None, None])  # the child raises
        with pytest.raises(ValueError, match="bad value"):
            workers.run(raise_in_worker_0, [None, None])  # this process raises
        assert [r[0] for r in workers.run(whoami, [0, 0])] == [0, 1]  # still in sync


def test_single_hogwild_worker_needs_no_child() -> None:
    workers = HogwildWorkers(1, init_state, None)
    assert workers.pids == [os.getpid()]
    assert workers.run(whoami, [3])[0][:3] == (0, os.getpid(), 6)
    workers.close()


def test_hogwild_children_start_only_when_a_job_needs_them() -> None:
    with HogwildWorkers(3, init_state, "p") as workers:
        assert workers.run(whoami, [4])[0][:3] == (0, os.getpid(), 8)
        assert workers.pids == [os.getpid()]  # one arg: this process only, nothing started
        results = workers.run(whoami, [1, 2, 3])
        assert [r[0] for r in results] == [0, 1, 2] and len(set(workers.pids)) == 3
        assert workers.run(whoami, [1, 2])[1][1] == results[1][1]  # the same children afterwards


def test_prestarted_children_are_adopted_and_initialised_with_the_payload() -> None:
    from pbg_core.parallel.worker_boot import close_prestarted, prestart_children, take_prestarted

    payload = torch.zeros(3).share_memory_()
    prestart_children(2)
    try:
        warm = take_prestarted(2)
        assert warm is not None and take_prestarted(2) is None  # taken once
        pids = [proc.pid for proc in warm.processes]
        with HogwildWorkers(3, init_state, payload, prestarted=warm) as workers:
            assert workers.pids[1:] == pids  # adopted at once, not started again
            assert workers.run(write_payload, [0.5, 1.5, 2.5]) == [True, True, True]
            assert payload[:3].tolist() == [0.5, 1.5, 2.5]  # the payload arrived as shared memory
    finally:
        close_prestarted()


def test_forked_prestarted_children_work_and_fork_falls_back_to_spawn_with_threads() -> None:
    import threading

    from pbg_core.parallel.worker_boot import start_children

    payload = torch.zeros(2).share_memory_()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()  # pytest's process may have threads already; make sure it has one more
    try:
        spawned = start_children(1, start_method="fork")
        assert type(spawned.processes[0]).__name__ == "SpawnProcess"
        spawned.close()
    finally:
        stop.set()
        other.join()
    if threading.active_count() == 1:
        forked = start_children(1, start_method="fork")
        assert type(forked.processes[0]).__name__ == "ForkProcess"
        with HogwildWorkers(2, init_state, payload, prestarted=forked) as workers:
            assert workers.run(write_payload, [3.0, 4.0]) == [True, True]
            assert payload.tolist() == [3.0, 4.0]
