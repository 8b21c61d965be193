"""A command's process tree read from /proc: its members, their memory, their writes, its group.

Memory, two figures over the tree:
- RSS: the sum of VmRSS. Shared-memory pages (embeddings in /dev/shm that every worker maps)
  count once per process that maps them, exactly as ``ps``/psutil would report.
- PSS: the sum of Pss (smaps_rollup), where a shared page is split among the processes that map
  it, so the sum does not double count. This is the fairer memory figure.

Writes: ``/proc/<pid>/io`` ``write_bytes``, the bytes a process caused to be sent to a block
device (page-cache pages it dirtied; tmpfs such as /dev/shm is not counted).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids for every process visible in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                # The command name (field 2) may contain spaces and parentheses: split after it.
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process exited while we were scanning
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def process_tree(root: int) -> list[int]:
    """``root`` and all its live descendants."""
    children = _children_map()
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def _kib_field(path: str, key: str) -> int:
    """Value in bytes of a ``Key:   123 kB`` line of a /proc file, 0 if unreadable."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_memory(root: int) -> tuple[int, int, int]:
    """(sum of RSS, sum of PSS, process count) over the tree rooted at ``root``."""
    pids = process_tree(root)
    rss = sum(_kib_field(f"/proc/{pid}/status", "VmRSS:") for pid in pids)
    pss = sum(_kib_field(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
    return rss, pss, len(pids)


def proc_io(pid: int) -> dict[str, int]:
    """``/proc/<pid>/io`` as a dict (empty when unreadable or gone)."""
    try:
        with open(f"/proc/{pid}/io") as handle:
            return {k: int(v) for k, v in (line.split(":") for line in handle if ":" in line)}
    except (OSError, ValueError):
        return {}


def tree_writes(root: int) -> int:
    """The sum of ``write_bytes`` over the live tree rooted at ``root``."""
    return sum(proc_io(pid).get("write_bytes", 0) for pid in process_tree(root))


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (at most 200 characters; empty if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200].strip()
    except OSError:
        return ""


def group_pids(pgid: int) -> list[int]:
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


def kill_and_wait(pgid: int, pids: list[int], timeout_s: float = 10.0) -> None:
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
    while pids and (alive := group_pids(pgid)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {alive} of group {pgid} survived SIGKILL for {timeout_s} s")
        time.sleep(0.05)
