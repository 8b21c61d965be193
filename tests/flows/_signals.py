"""Run a ``pbg`` command as a terminal would, signal it when a line shows, and watch what follows.

The command runs in its own session (a terminal's foreground job: Ctrl-C reaches its whole
process group). :func:`signal_when` sends the signal to that group (or to the command only),
as soon as a line of its output matches; it records every process descended from the command
at that moment, so a test can check that none outlives it. :func:`run_pbg` runs a command (a
rerun or a resume) to its end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PBG = str(Path(sys.executable).with_name("pbg"))
EXIT_WITHIN_SECONDS = 5.0  # from the signal to the command's exit


@dataclass
class Signalled:
    """What happened to a command signalled by :func:`signal_when`."""

    returncode: int | None
    output: str
    signalled: bool
    seconds_to_exit: float  # from the signal to the command's exit
    descendants: dict[int, str] = field(default_factory=dict)  # pid -> start time, under the command when signalled


def children_of() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its start time (so a reused pid is not mistaken for it)."""
    tree, found, todo = children_of(), {}, [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            stat = _stat(child)
            if stat is not None:
                found[child] = stat[19]
            todo.append(child)
    return found


def alive(pid: int, started: str) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs (a zombie counts as gone)."""
    stat = _stat(pid)
    return stat is not None and stat[19] == started and stat[0] != "Z"


def signal_when(
    args: list[str],
    when: str | Callable[[int], bool],
    signum: int,
    env: dict[str, str],
    cwd: Path,
    group: bool = True,
    timeout: float = 300.0,
) -> Signalled:
    """Run ``pbg ARGS``; send ``signum`` once an output line matches ``when`` (a regex), or once
    ``when(pid)`` (polled every 5 ms with the command's pid) is true; wait for the exit."""
    process = subprocess.Popen(
        [PBG, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    lines: list[str] = []
    sent: list[float] = []
    below: dict[int, str] = {}
    lock = threading.Lock()

    def send() -> None:
        with lock:
            if not sent and process.poll() is None:
                below.update(descendants(process.pid))
                (os.killpg if group else os.kill)(process.pid, signum)
                sent.append(time.monotonic())

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            if isinstance(when, str) and re.search(when, line):
                send()

    def poll() -> None:
        while not sent and process.poll() is None:
            if callable(when) and when(process.pid):
                send()
            time.sleep(0.005)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if callable(when):
        threading.Thread(target=poll, daemon=True).start()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        # A hang is a finding: report it with the command's output and what was running,
        # rather than as the bare TimeoutExpired that hides both.
        hung = descendants(process.pid)
        lines.append(f"\n[signal_when: no exit within {timeout:.0f} s; signalled: {bool(sent)}; still running: ")
        lines.append(", ".join(f"{pid} {_cmdline(pid)}" for pid in [process.pid, *hung]) + "]\n")
        lines.extend(_stacks([process.pid, *hung]))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    exited = time.monotonic()
    reader.join(10)
    return Signalled(process.returncode, "".join(lines), bool(sent), exited - sent[0] if sent else 0.0, below)


def _stacks(pids: list[int]) -> list[str]:
    """Each process's Python stacks (``py-spy dump``, a dev dependency), to say where a hang waits."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return ["[py-spy not installed: no stacks]\n"]
    dumps = []
    for pid in pids:
        try:
            done = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
            dumps.append(f"[stacks of {pid}]\n{done.stdout}{done.stderr}\n")
        except (OSError, subprocess.TimeoutExpired) as exc:
            dumps.append(f"[stacks of {pid}: {exc}]\n")
    return dumps


def _cmdline(pid: int) -> str:
    """The command line of ``pid`` (shortened), or '?' if gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"


def leftovers(pids: dict[int, str], grace: float = 5.0) -> set[int]:
    """Those of ``pids`` (pid -> start time) still running after up to ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        running = {pid for pid, started in pids.items() if alive(pid, started)}
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def run_pbg(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pbg ARGS`` to its end."""
    return subprocess.run([PBG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=400, check=False)
