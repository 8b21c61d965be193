"""WorkerPool: reuse, shared memory, exception propagation, death detection, closing.

Job functions are module-level here because children import them by reference.
The forkserver starts once per test process; later pools fork from it in ~0.1 s.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import types

import pytest
import torch

from pbg_core.errors import WorkerDiedError
from pbg_core.parallel.hogwild import WorkerPool, default_num_workers
from pbg_core.parallel.memory import EmbeddingPool, PoolBuffers, SlotSpec
from pbg_core.types import Side


# ---- functions run in the children -------------------------------------------------------
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


# ---- HogwildWorkers: this process is worker 0 ----------------------------------------------
def test_hogwild_workers_run_share_zero_in_this_process_and_the_rest_in_children() -> None:
    from pbg_core.parallel.hogwild import HogwildWorkers

    with HogwildWorkers(2, init_state, "p", start_method="forkserver") as workers:
        results = workers.run(whoami, [1, 2])
        assert [r[0] for r in results] == [0, 1]
        assert results[0][1] == os.getpid() and results[1][1] != os.getpid()
        assert [r[2] for r in results] == [2, 4]
        assert [r[3] for r in results] == [1, 1]  # one torch thread in every worker
        assert torch.get_num_threads() >= 1  # restored afterwards
        assert workers.run(whoami, [5])[0][2] == 10  # fewer args than workers


def test_hogwild_workers_local_error_is_raised_after_children_reply() -> None:
    from pbg_core.parallel.hogwild import HogwildWorkers

    with HogwildWorkers(2, init_state, None, start_method="forkserver") as workers:
        with pytest.raises(ValueError, match="worker 1"):
            workers.run(raise_in_worker_1, [None, None])  # the child raises
        with pytest.raises(ValueError, match="bad value"):
            workers.run(raise_in_worker_0, [None, None])  # this process raises
        assert [r[0] for r in workers.run(whoami, [0, 0])] == [0, 1]  # still in sync


def test_single_hogwild_worker_needs_no_child() -> None:
    from pbg_core.parallel.hogwild import HogwildWorkers

    workers = HogwildWorkers(1, init_state, None)
    assert workers.pids == [os.getpid()]
    assert workers.run(whoami, [3])[0][:3] == (0, os.getpid(), 6)
    workers.close()


def test_hogwild_children_start_only_when_a_job_needs_them() -> None:
    from pbg_core.parallel.hogwild import HogwildWorkers

    with HogwildWorkers(3, init_state, "p") as workers:
        assert workers.run(whoami, [4])[0][:3] == (0, os.getpid(), 8)
        assert workers.pids == [os.getpid()]  # one arg: this process only, nothing started
        results = workers.run(whoami, [1, 2, 3])
        assert [r[0] for r in results] == [0, 1, 2] and len(set(workers.pids)) == 3
        assert workers.run(whoami, [1, 2])[1][1] == results[1][1]  # the same children afterwards


def test_prestarted_children_are_adopted_and_initialised_with_the_payload() -> None:
    from pbg_core.parallel.hogwild import HogwildWorkers
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


def test_prestarted_children_of_another_count_are_stopped_not_adopted() -> None:
    from pbg_core.parallel import worker_boot
    from pbg_core.parallel.worker_boot import close_prestarted, prestart_children, take_prestarted

    prestart_children(2)
    processes = list(worker_boot._warm.processes)
    assert take_prestarted(1) is None
    assert not any(proc.is_alive() for proc in processes)
    close_prestarted()  # idempotent


def test_forked_prestarted_children_work_and_fork_falls_back_to_spawn_with_threads() -> None:
    import threading

    from pbg_core.parallel.hogwild import HogwildWorkers
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


def test_prestarted_children_never_adopted_exit_when_closed() -> None:
    from pbg_core.parallel.worker_boot import close_prestarted, prestart_children, take_prestarted

    prestart_children(1)
    warm = take_prestarted(1)
    assert warm is not None and warm.processes[0].is_alive()
    warm.close()
    assert warm.processes == []
    close_prestarted()


def raise_in_worker_0(state: dict, args: None) -> str:
    if state["index"] == 0:
        raise ValueError("bad value 3 in worker 0")
    return "ok"


# ---- children die with the process that started them --------------------------------------
_ORPHAN_SCRIPT = """
import sys, time
from pbg_core.parallel.hogwild import WorkerPool
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


def test_a_forked_child_dies_by_sigterm_even_if_the_parent_turns_sigterm_into_an_exception() -> None:
    """`pbg` makes SIGTERM raise KeyboardInterrupt; a forked child inherits that, and the pool
    stops children with SIGTERM: they must end by the signal, not with a traceback."""
    import signal

    from pbg_core.parallel.worker_boot import start_children

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        children = start_children(1, start_method="fork")
    finally:
        signal.signal(signal.SIGTERM, previous)
    child = children.processes[0]
    try:
        os.kill(child.pid, signal.SIGTERM)  # as soon as it exists: held until it has reset its handlers
        child.join(30)
        assert child.exitcode == -signal.SIGTERM
    finally:
        children.close()
