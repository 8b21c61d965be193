"""WorkerPool: reuse, shared memory, exception propagation, death detection, closing.

Job functions are module-level here because children import them by reference.
The forkserver starts once per test process; later pools fork from it in ~0.1 s.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
import torch
from _pool_jobs import (
    _module_only_in_parent,
    bump_all,
    exit_3_in_worker_1,
    fill_arg,
    init_fails,
    init_state,
    open_fds,
    raise_in_worker_1,
    raise_unrebuildable,
    segfault,
    sigkill_self,
    train_slots,
    whoami,
    write_payload,
)

from pbg_core.errors import WorkerDiedError
from pbg_core.parallel.memory import EmbeddingPool, SlotSpec
from pbg_core.parallel.pool import WorkerPool
from pbg_core.parallel.worker_boot import default_num_workers
from pbg_core.types import Side


# ---- fixtures -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def payload() -> torch.Tensor:
    return torch.zeros(2).share_memory_()


@pytest.fixture(scope="module")
def pool(payload: torch.Tensor):
    with WorkerPool(2, init_state, payload) as workers:
        yield workers


def _process_gone(pid: int) -> bool:
    """Reaped: neither running nor a zombie (a zombie still has a /proc entry)."""
    return not os.path.exists(f"/proc/{pid}")


# ---- tests --------------------------------------------------------------------------------
def test_default_num_workers_is_usable_cores() -> None:
    assert default_num_workers() == len(os.sched_getaffinity(0))


def test_results_in_worker_order_same_children_every_run(pool: WorkerPool) -> None:
    seen = []
    for call in range(3):
        results = pool.run(whoami, [call, call + 100])
        assert [r[0] for r in results] == [0, 1]
        assert [r[2] for r in results] == [2 * call, 2 * (call + 100)]
        seen.append([r[1] for r in results])
    assert seen == [pool.pids] * 3
    assert os.getpid() not in pool.pids


def test_children_use_one_thread(pool: WorkerPool) -> None:
    assert [r[3] for r in pool.run(whoami, [0, 0])] == [1, 1]


def test_fewer_args_than_workers_and_too_many(pool: WorkerPool) -> None:
    assert [r[0] for r in pool.run(whoami, [5])] == [0]
    with pytest.raises(ValueError, match="got 3 worker args but the pool has 2 workers"):
        pool.run(whoami, [1, 2, 3])
    assert pool.run(whoami, [1, 1])[1][0] == 1  # nothing was sent: still in sync


def test_init_payload_arrives_as_shared_memory(pool: WorkerPool, payload: torch.Tensor) -> None:
    assert pool.run(write_payload, [1.5, 2.5]) == [True, True]
    assert payload.tolist() == [1.5, 2.5]


def test_tensor_args_are_shared_not_copied(pool: WorkerPool) -> None:
    data = torch.zeros(6)  # not shared yet: pickling moves it to shared memory in place
    pool.run(fill_arg, [data[:3], data[3:]])
    assert data.tolist() == [10, 10, 10, 11, 11, 11]


def test_many_tensors_repeats_and_empty_tensors_in_one_job(pool: WorkerPool) -> None:
    # 300 storages exceed one SCM_RIGHTS message (253 descriptors): sent in several.
    many = [torch.full((2,), float(i)) for i in range(300)]
    base = torch.zeros(4)
    repeated = [base[:2], base[2:], base]  # one storage, three views
    empty = torch.zeros(0)
    assert pool.run(bump_all, [many, [*repeated, empty]]) == [300, 4]
    assert [t.tolist() for t in many[:2]] == [[1.0, 1.0], [2.0, 2.0]]
    assert many[299].tolist() == [300.0, 300.0]
    assert base.tolist() == [2.0, 2.0, 2.0, 2.0]
    assert pool.run(bump_all, [many[:1], []]) == [1, 0]  # still in sync afterwards


def test_received_descriptors_are_closed_in_the_child(pool: WorkerPool) -> None:
    tensors = [torch.zeros(3) for _ in range(20)]
    before = pool.run(open_fds, [None, None])
    for _ in range(3):
        pool.run(bump_all, [tensors, tensors])
    assert pool.run(open_fds, [None, None]) == before


def test_child_exception_reraised_with_traceback_and_pool_survives(pool: WorkerPool) -> None:
    with pytest.raises(ValueError, match="bad value 7 in worker 1") as info:
        pool.run(raise_in_worker_1, [None, None])
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "traceback in HOGWILD worker 1" in notes
    assert "raise_in_worker_1" in notes
    assert pool.run(raise_in_worker_1, [None]) == ["fine"]


def test_unrebuildable_exception_becomes_runtime_error(pool: WorkerPool) -> None:
    with pytest.raises(RuntimeError, match=r"HOGWILD worker 0 raised TwoArgError: left/right") as info:
        pool.run(raise_unrebuildable, [None, None])
    assert "raise_unrebuildable" in str(info.value)
    assert not pool.closed


def test_unpicklable_job_raises_type_error_and_pool_survives(pool: WorkerPool) -> None:
    with pytest.raises(TypeError, match="module-level function"):
        pool.run(lambda state, args: None, [None, None])
    assert [r[0] for r in pool.run(whoami, [0, 0])] == [0, 1]


def test_embedding_pool_buffers_shared_with_workers() -> None:
    memory = EmbeddingPool.allocate({"user": SlotSpec(max_count=4, dim=2, num_slots=2)})
    handle = memory.acquire("user", 1, count=3)
    handle.embeddings.zero_()
    handle.state.zero_()
    slot_map = {("user", Side.LHS): handle.ref, ("user", Side.RHS): handle.ref}
    with WorkerPool(1, init_state, memory.buffers()) as workers:
        assert workers.run(train_slots, [slot_map]) == [6.0]
    assert handle.embeddings.tolist() == [[1.0, 1.0]] * 3
    assert handle.state.tolist() == [5.0] * 3


# Generous bound, far above the ~0.1 s this takes: waiting for the busy survivor (60 s) or
# hanging on the dead child's pipe (the bugs guarded against) fails instead of blocking.
@pytest.mark.timeout(20)
def test_os_exit_raises_worker_died_and_closes_pool() -> None:
    workers = WorkerPool(2, init_state, None)
    pids = list(workers.pids)
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(pid \d+\) died with exit code 3 "):
        workers.run(exit_3_in_worker_1, [None, None])
    assert workers.closed
    assert all(_process_gone(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        workers.run(whoami, [0, 0])


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("job", "code", "name"), [(sigkill_self, -9, "SIGKILL"), (segfault, -11, "SIGSEGV")])
def test_signal_death_raises_worker_died_naming_the_signal(job: object, code: int, name: str) -> None:
    workers = WorkerPool(1, init_state, None)
    with pytest.raises(WorkerDiedError, match=rf"worker 0 .* exit code {code} \(killed by {name}\)"):
        workers.run(job, [None])
    assert workers.closed


def test_init_fn_exception_raised_at_construction() -> None:
    with pytest.raises(KeyError, match="no such thing in worker 0") as info:
        WorkerPool(1, init_fails, None)
    assert "init_fails" in "\n".join(info.value.__notes__)


def test_close_reaps_children_and_is_idempotent() -> None:
    workers = WorkerPool(2, init_state, None)
    pids = list(workers.pids)
    workers.close()
    workers.close()
    assert workers.closed
    assert all(_process_gone(pid) for pid in pids)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_workers must be an int >= 1; got 0"):
        WorkerPool(0, init_state, None)
    with pytest.raises(ValueError, match="start_method 'fork' is not allowed; allowed: forkserver, spawn"):
        WorkerPool(1, init_state, None, start_method="fork")


def test_job_that_cannot_be_unpickled_in_the_child_is_an_error(pool: WorkerPool) -> None:
    # Pickles in the parent by reference, but the child cannot import the module
    # (made here, not at import time: children import this test module too).
    module = _module_only_in_parent()
    try:
        with pytest.raises(ModuleNotFoundError, match="only_in_parent") as info:
            pool.run(module.job, [None])
    finally:
        del sys.modules["only_in_parent"]
    assert "traceback in HOGWILD worker 0" in "\n".join(info.value.__notes__)
    assert [r[0] for r in pool.run(whoami, [0, 0])] == [0, 1]


# ---- children die with the process that started them --------------------------------------
_ORPHAN_SCRIPT = """
import sys, time
from pbg_core.parallel.pool import WorkerPool
import slow_jobs
with WorkerPool(2, slow_jobs.init, None, start_method=sys.argv[1]) as pool:
    print(" ".join(map(str, pool.pids)), flush=True)
    pool.run(slow_jobs.sleep, [120.0, 120.0])
"""
_SLOW_JOBS = (
    "import time\n\ndef init(index, payload):\n    return None\n\ndef sleep(state, seconds):\n    time.sleep(seconds)\n"
)


def _gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_workers_die_when_their_parent_is_killed_mid_job(tmp_path, start_method: str) -> None:
    """kill -9 of a flow run's process must not leave HOGWILD workers training for minutes."""
    import subprocess

    (tmp_path / "slow_jobs.py").write_text(_SLOW_JOBS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, start_method], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2, f"the script printed no worker pids (exit code {proc.poll()})"
        time.sleep(0.5)  # the jobs are running
        assert not any(_gone_or_zombie(pid) for pid in pids)
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 10
        while not all(_gone_or_zombie(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone_or_zombie(pid) for pid in pids), f"workers {pids} outlived their killed parent"
    finally:
        proc.kill()
        proc.wait(10)
