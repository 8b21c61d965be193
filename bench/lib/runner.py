"""One measured command: exit status, wall time, peak memory of its whole process tree, and on
request the bytes it wrote and a deadline. Every benchmark's commands run through :func:`run_measured`.

The tree (the CLI plus its HOGWILD workers, Prefect's server, Dask processes) is sampled from
/proc every ``sample_interval`` seconds (bench.lib.processes: RSS and PSS), so peak memory
includes children. Sampling can miss a spike shorter than the interval; both sides of a
comparison are sampled the same way. The exit is timed when it happens (a thread waits for it),
not at the next sample.

Bytes written (``io=True``): the kernel adds a reaped child's ``/proc/<pid>/io`` figures (its own
reaped children included) to its parent's. So the main process's figure read *after every
descendant is reaped and before the main process itself is reaped* covers the whole tree: the
waiting thread uses ``os.waitid(P_PID, pid, WEXITED | WNOWAIT)``, which leaves the exited process
a zombie whose ``/proc/<pid>/io`` is still readable, reads it, then reaps it. A descendant reaped
by a process outside the tree (re-parented to init) would be missed, so the sum over the live
tree is also sampled and the larger of the two is kept. ``cancelled_write_bytes`` (dirty pages
dropped before write-back: a file truncated or deleted soon after being written) is reported
beside it; the physical writes are ``write_bytes - cancelled_write_bytes`` at most.

Own process group (``own_group=True``): the command runs in its own session; after the main
process exits, anything left in the group gets SIGKILL and the run records which pids were
left. A :class:`Deadline` sends the group SIGINT at its time, then SIGTERM after ``grace_s``,
then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.lib.processes import cmdline, group_pids, kill_and_wait, proc_io, tree_memory, tree_writes

SUMMARY_FIELDS = (
    "argv",
    "cwd",
    "returncode",
    "started_at",
    "wall_s",
    "peak_rss_bytes",
    "peak_pss_bytes",
    "peak_processes",
    "stdout_path",
    "stderr_path",
)
IO_METHOD_AT_EXIT = "main process /proc/<pid>/io at exit (WNOWAIT; reaped children included)"
IO_METHOD_SAMPLED = "sum over the live tree, sampled (larger than the main process's figure at exit)"


@dataclass(frozen=True)
class Deadline:
    """Stop the command's group ``seconds`` after spawn, or after ``start_marker`` first shows in its
    stdout or stderr (so start-up does not eat into it): SIGINT, SIGTERM ``grace_s`` later, then SIGKILL."""

    seconds: float
    grace_s: float = 30.0
    start_marker: str | None = None


@dataclass
class RunResult:
    """One measured command: exit status, wall time, peak tree memory, writes, signals, captured output.

    ``started_at`` is the wall clock (``time.time()``) at spawn, to place the command's own log
    timestamps on the same axis; ``wall_s`` runs from spawn to the moment its exit is reaped.
    The ``write_bytes`` figures are 0 and ``write_bytes_method`` empty unless measured (``io=True``).
    """

    argv: list[str]
    cwd: str
    returncode: int
    started_at: float
    wall_s: float
    peak_rss_bytes: int  # summed RSS: counts a page shared by k processes k times
    peak_pss_bytes: int  # summed PSS: each shared page split among its sharers, so counted once
    peak_processes: int
    stdout_path: str
    stderr_path: str
    write_bytes: int = 0
    cancelled_write_bytes: int = 0
    write_bytes_method: str = ""
    signals: list[str] = field(default_factory=list)
    leftover_pids: list[int] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # "pid command line" of each leftover
    stdout: str = field(repr=False, default="")
    stderr: str = field(repr=False, default="")
    cpu: dict[str, object] | None = field(repr=False, default=None)  # set by bench.lib.quiet.run_together

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def text(self) -> str:
        """stdout and stderr of the command."""
        return self.stdout + "\n" + self.stderr

    def summary(self) -> dict[str, object]:
        """JSON-friendly record without the (possibly long) captured output."""
        record: dict[str, object] = {name: getattr(self, name) for name in SUMMARY_FIELDS}
        record["stderr_tail"] = tail(self.stderr, 15)
        return record


def tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])


class _Reaper(threading.Thread):
    """Waits for the main process without reaping it, reads its io figures, then reaps it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        self.proc, self.exited, self.ended, self.io = proc, threading.Event(), 0.0, {}

    def run(self) -> None:
        os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        self.ended = time.perf_counter()
        self.io = proc_io(self.proc.pid)  # a zombie: its children are reaped, it is not yet
        self.proc.wait()
        self.exited.set()


def _signal_step(pgid: int, elapsed: float, deadline: Deadline, sent: list[str]) -> None:
    """Send the next signal of SIGINT -> SIGTERM -> SIGKILL when its time has come."""
    steps = (
        (deadline.seconds, signal.SIGINT),
        (deadline.seconds + deadline.grace_s, signal.SIGTERM),
        (deadline.seconds + 2 * deadline.grace_s, signal.SIGKILL),
    )
    for at, sig in steps[len(sent) :]:
        if elapsed < at:
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        sent.append(f"{sig.name} at {elapsed:.1f} s")


def _has_marker(paths: tuple[Path, ...], marker: str) -> bool:
    """Whether any of the files contains ``marker`` (read whole: only used before it appears)."""
    return any(marker in path.read_text(errors="replace") for path in paths if path.exists())


@dataclass
class _Peaks:
    rss: int = 0
    pss: int = 0
    processes: int = 0
    writes: int = 0


def run_measured(
    argv: list[str | Path],
    cwd: Path,
    log_name: str,
    env: dict[str, str] | None = None,
    sample_interval: float = 0.2,
    *,
    io: bool = False,
    own_group: bool = False,
    deadline: Deadline | None = None,
) -> RunResult:
    """Run ``argv`` in ``cwd``, sampling its process tree until it exits (see the module docstring).

    stdout/stderr go to ``cwd/<log_name>.out`` / ``.err`` (files, not pipes, so a chatty tool
    never blocks on a full pipe) and are read back into the result.

    Long because the sampling loop, the deadline's signals and the clean-up of the group are one
    sequence around one process.

    Args:
        argv: Command and arguments.
        cwd: Working directory (created if missing).
        log_name: Base name of the two log files.
        env: Extra environment variables on top of ours.
        sample_interval: Seconds between samples.
        io: Also measure the bytes the tree wrote.
        own_group: Run in its own session; kill what is left of the group after the main process exits.
        deadline: Stop the group at this deadline (implies ``own_group``).

    Returns:
        The measured RunResult (a non-zero exit is recorded, not raised).
    """
    cwd.mkdir(parents=True, exist_ok=True)
    out_path, err_path = cwd / f"{log_name}.out", cwd / f"{log_name}.err"
    command = [str(arg) for arg in argv]
    own_group = own_group or deadline is not None
    peaks, sent = _Peaks(), []
    with out_path.open("w") as out, err_path.open("w") as err:
        started_at, start = time.time(), time.perf_counter()
        proc = subprocess.Popen(
            command, cwd=cwd, stdout=out, stderr=err, env={**os.environ, **(env or {})}, start_new_session=own_group
        )
        reaper = _Reaper(proc)
        reaper.start()
        clock_start = None if deadline and deadline.start_marker else start
        while not reaper.exited.is_set():
            _sample(proc.pid, peaks, io)
            if (
                deadline is not None
                and clock_start is None
                and _has_marker((out_path, err_path), deadline.start_marker)
            ):
                clock_start = time.perf_counter()
            if deadline is not None and clock_start is not None:
                _signal_step(proc.pid, time.perf_counter() - clock_start, deadline, sent)
            reaper.exited.wait(sample_interval)
    leftovers = group_pids(proc.pid) if own_group else []
    described = [f"{pid} {cmdline(pid)}" for pid in leftovers]
    kill_and_wait(proc.pid, leftovers)
    at_exit = reaper.io.get("write_bytes", 0)
    return RunResult(
        argv=command,
        cwd=str(cwd),
        returncode=proc.returncode,
        started_at=started_at,
        wall_s=reaper.ended - start,
        peak_rss_bytes=peaks.rss,
        peak_pss_bytes=peaks.pss,
        peak_processes=peaks.processes,
        stdout_path=str(out_path),
        stderr_path=str(err_path),
        write_bytes=max(at_exit, peaks.writes) if io else 0,
        cancelled_write_bytes=reaper.io.get("cancelled_write_bytes", 0) if io else 0,
        write_bytes_method=(IO_METHOD_SAMPLED if peaks.writes > at_exit else IO_METHOD_AT_EXIT) if io else "",
        signals=sent,
        leftover_pids=leftovers,
        leftovers=described,
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
    )


def _sample(pid: int, peaks: _Peaks, io: bool) -> None:
    """One sample of the tree's memory (and writes) into ``peaks``."""
    rss, pss, processes = tree_memory(pid)
    peaks.rss, peaks.pss, peaks.processes = max(peaks.rss, rss), max(peaks.pss, pss), max(peaks.processes, processes)
    if io:
        peaks.writes = max(peaks.writes, tree_writes(pid))
