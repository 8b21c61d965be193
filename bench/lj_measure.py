"""One measured command for bench/livejournal.py: tree memory, bytes written, and a deadline.

Bytes written: Linux's ``/proc/<pid>/io`` ``write_bytes`` counts the bytes a process caused to
be sent to a block device (page-cache pages it dirtied; tmpfs such as /dev/shm is not counted),
and when a parent reaps a child the kernel adds the child's figures (its own reaped children
included) to the parent's. So the main process's figure read *after every descendant is
reaped and before the main process itself is reaped* covers the whole tree. The reaper thread
waits with ``os.waitid(P_PID, pid, WEXITED | WNOWAIT)``, which leaves the exited process a
zombie whose ``/proc/<pid>/io`` is still readable, reads it, then reaps it. A descendant reaped
by a process outside the tree (re-parented to init) would be missed, so the sum over the live
tree is also sampled every interval and the larger of the two is kept. ``cancelled_write_bytes``
(dirty pages dropped before write-back: a file truncated or deleted soon after being written)
is reported next to it; the physical writes are ``write_bytes - cancelled_write_bytes`` at most.

Deadline: the command runs in its own session (process group); at ``deadline_s`` the group gets
SIGINT, then SIGTERM after ``grace_s``, then SIGKILL; after the main process exits, anything left
in the group gets SIGKILL too and the run records which pids were left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import process_tree, tree_memory


@dataclass
class Measured:
    """Exit status, wall time, peak tree memory (RSS and PSS), bytes written, and the signals sent."""

    argv: list[str]
    returncode: int
    wall_s: float
    peak_rss_bytes: int  # summed RSS: counts a page shared by k processes k times
    peak_pss_bytes: int  # summed PSS: each shared page split among its sharers, so counted once
    write_bytes: int
    cancelled_write_bytes: int
    write_bytes_method: str
    stdout_path: str
    stderr_path: str
    signals: list[str] = field(default_factory=list)
    leftover_pids: list[int] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # "pid command line" of each leftover

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def text(self) -> str:
        """stdout and stderr of the command, read back from their files."""
        return (
            Path(self.stdout_path).read_text(errors="replace")
            + "\n"
            + Path(self.stderr_path).read_text(errors="replace")
        )


def proc_io(pid: int) -> dict[str, int]:
    """``/proc/<pid>/io`` as a dict (empty when unreadable or gone)."""
    try:
        with open(f"/proc/{pid}/io") as handle:
            return {k: int(v) for k, v in (line.split(":") for line in handle if ":" in line)}
    except (OSError, ValueError):
        return {}


def _tree_writes(root: int) -> int:
    return sum(proc_io(pid).get("write_bytes", 0) for pid in process_tree(root))


def _cmdline(pid: int) -> str:
    """The command line of ``pid`` (at most 200 characters; empty if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200].strip()
    except OSError:
        return ""


def _group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _kill_and_wait(pgid: int, pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGKILL ``pids``, then wait until none of the group is alive (a zombie counts as gone).

    Raises:
        RuntimeError: if some are still alive after ``timeout_s`` (named, to be killed by hand).
    """
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while pids and (alive := _group_pids(pgid)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {alive} of group {pgid} survived SIGKILL for {timeout_s} s")
        time.sleep(0.05)


def _has_marker(paths: tuple[Path, ...], marker: str) -> bool:
    """Whether any of the files contains ``marker`` (read whole: only used before it appears)."""
    return any(marker in path.read_text(errors="replace") for path in paths if path.exists())


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


def _signal_step(pgid: int, elapsed: float, deadline_s: float | None, grace_s: float, sent: list[str]) -> None:
    """Send the next signal of SIGINT -> SIGTERM -> SIGKILL when its time has come."""
    if deadline_s is None:
        return
    steps = (
        (deadline_s, signal.SIGINT),
        (deadline_s + grace_s, signal.SIGTERM),
        (deadline_s + 2 * grace_s, signal.SIGKILL),
    )
    for at, sig in steps[len(sent) :]:
        if elapsed < at:
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        sent.append(f"{sig.name} at {elapsed:.1f} s")


def run_io_measured(
    argv: list[str],
    cwd: Path,
    log_name: str,
    env: dict[str, str] | None = None,
    deadline_s: float | None = None,
    grace_s: float = 30.0,
    interval: float = 0.5,
    start_marker: str | None = None,
) -> Measured:
    """Run ``argv`` in ``cwd`` (own process group), sampling memory and writes until it exits.

    ``deadline_s`` counts from spawn, or from the first sample that finds ``start_marker`` in
    the command's stdout or stderr (so start-up does not eat into it).

    Long because the sampling loop, the deadline signals and the clean-up of the group are one
    sequence around one process.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    out_path, err_path = cwd / f"{log_name}.out", cwd / f"{log_name}.err"
    peak_rss = peak_pss = peak_writes = 0
    sent: list[str] = []
    with out_path.open("w") as out, err_path.open("w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv, cwd=cwd, stdout=out, stderr=err, env={**os.environ, **(env or {})}, start_new_session=True
        )
        reaper = _Reaper(proc)
        reaper.start()
        clock_start = None if start_marker else start
        while not reaper.exited.is_set():
            rss, pss, _ = tree_memory(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            peak_writes = max(peak_writes, _tree_writes(proc.pid))
            if clock_start is None and _has_marker((out_path, err_path), start_marker or ""):
                clock_start = time.perf_counter()
            if clock_start is not None:
                _signal_step(proc.pid, time.perf_counter() - clock_start, deadline_s, grace_s, sent)
            reaper.exited.wait(interval)
    leftovers = _group_pids(proc.pid)
    described = [f"{pid} {_cmdline(pid)}" for pid in leftovers]
    _kill_and_wait(proc.pid, leftovers)
    at_exit = reaper.io.get("write_bytes", 0)
    method = "main process /proc/<pid>/io at exit (WNOWAIT; reaped children included)"
    if peak_writes > at_exit:
        method = "sum over the live tree, sampled (larger than the main process's figure at exit)"
    return Measured(
        argv=list(argv),
        returncode=proc.returncode,
        wall_s=reaper.ended - start,
        peak_rss_bytes=peak_rss,
        peak_pss_bytes=peak_pss,
        write_bytes=max(at_exit, peak_writes),
        cancelled_write_bytes=reaper.io.get("cancelled_write_bytes", 0),
        write_bytes_method=method,
        stdout_path=str(out_path),
        stderr_path=str(err_path),
        signals=sent,
        leftover_pids=leftovers,
        leftovers=described,
    )
