"""Memory this process may use: the tighter of its memory cgroup's headroom and the kernel's MemAvailable.

- cgroup v2 (``0::/path`` in ``/proc/self/cgroup``, the ``cgroup2`` mount in mountinfo):
  ``memory.max - (memory.current - inactive_file)`` at the process's cgroup and every ancestor
  up to the mount (a parent's limit binds its children too); ``max`` means no limit.
- cgroup v1 (the ``memory`` controller's line and mount): ``memory.limit_in_bytes -
  (memory.usage_in_bytes - total_inactive_file)`` likewise; a limit of 2^62 or more (the
  kernel's page-rounded LONG_MAX) means none.
- ``MemAvailable`` of ``/proc/meminfo``: what the kernel thinks can be allocated without swapping.
- Free space of ``/dev/shm`` plus the plan's private overhead: partition slots, the model, its
  optimizer state and a bucket's edges live in shared memory (the HOGWILD workers map them), which
  torch allocates as files in ``/dev/shm``. A container's ``/dev/shm`` is often far smaller than
  its memory (docker's default is 64 MB), and a full one fails the allocation, so it bounds
  everything but the private overhead.

Inactive file pages are page cache the kernel reclaims before the cgroup's OOM killer runs
(docker's ``stats`` subtracts them the same way); counting them as used would report a
container that has read a large file as full. Reads only small text files; no import of
torch, fsspec or Prefect (``pbg train`` checks this before its server starts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pbg_core.session.memory_plan import FIXED_OVERHEAD_BYTES, Available

UNLIMITED = 1 << 62


@dataclass(frozen=True)
class HostFiles:
    """Where the kernel's figures are read from (tests give files of the same format under tmp_path)."""

    meminfo: str = "/proc/meminfo"
    cgroup: str = "/proc/self/cgroup"
    mountinfo: str = "/proc/self/mountinfo"
    shm: str | None = "/dev/shm"  # None: not counted


def memory_available(files: HostFiles | None = None) -> Available | None:
    """The smallest of the cgroup headroom, MemAvailable and /dev/shm's room, naming its source; None if none is known."""
    files = files or HostFiles()
    shm = shared_memory_room(files.shm) if files.shm else None
    candidates = [c for c in (cgroup_headroom(files), meminfo_available(files.meminfo), shm) if c is not None]
    return min(candidates, key=lambda a: a.num_bytes, default=None)


def shared_memory_room(path: str) -> Available | None:
    """Free space of the shared-memory file system at ``path`` plus the private overhead; None if absent."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    source = (
        f"{free / 1e9:.2f} GB free in {path} (shared memory: partition slots, model, edges) plus "
        f"{FIXED_OVERHEAD_BYTES / 2**30:.1f} GiB private overhead; docker: --shm-size"
    )
    return Available(free + FIXED_OVERHEAD_BYTES, source)


def meminfo_available(path: str) -> Available | None:
    """``MemAvailable`` of a ``/proc/meminfo``-format file, None when absent or unreadable."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key == "MemAvailable":
                    number, unit = (value.split() + ["B"])[:2]
                    scale = 1024 if unit.lower() == "kb" else 1
                    return Available(int(number) * scale, f"MemAvailable in {path}")
    except (OSError, ValueError):
        return None
    return None


def cgroup_headroom(files: HostFiles) -> Available | None:
    """The memory cgroup's headroom (v2 first, then v1), None without a limited memory cgroup."""
    for version, controller, fstype in ((2, "", "cgroup2"), (1, "memory", "cgroup")):
        directory = cgroup_dir(files, controller, fstype)
        if directory is None:
            continue
        found = _tightest(directory[0], directory[1], version)
        if found is not None:
            return found
    return None


def cgroup_dir(files: HostFiles, controller: str, fstype: str) -> tuple[str, str] | None:
    """(the process's cgroup directory, its mount point) for ``controller`` ("" for v2), or None."""
    path = _cgroup_path(files.cgroup, controller)
    mount = _mount_of(files.mountinfo, controller, fstype) if path is not None else None
    if path is None or mount is None:
        return None
    root, mount_point = mount
    relative = path[len(root) :] if root != "/" and path.startswith(root) else path
    directory = os.path.normpath(os.path.join(mount_point, relative.lstrip("/")))
    return (directory, mount_point) if os.path.isdir(directory) else (mount_point, mount_point)


def _cgroup_path(path: str, controller: str) -> str | None:
    """The cgroup path of ``controller`` in a ``/proc/self/cgroup`` file ("" = the v2 line ``0::``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                hierarchy, controllers, cgroup = line.rstrip("\n").split(":", 2)
                if controller == "" and hierarchy == "0" and controllers == "":
                    return cgroup
                if controller and controller in controllers.split(","):
                    return cgroup
    except (OSError, ValueError):
        return None
    return None


def _mount_of(path: str, controller: str, fstype: str) -> tuple[str, str] | None:
    """(root, mount point) of the cgroup mount of ``fstype`` holding ``controller``, from mountinfo."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                fields, _, tail = line.partition(" - ")
                parts, after = fields.split(), tail.split()
                if len(parts) < 5 or len(after) < 3 or after[0] != fstype:
                    continue
                if controller and controller not in after[2].split(","):
                    continue
                return parts[3], parts[4]
    except OSError:
        return None
    return None


def _tightest(directory: str, mount_point: str, version: int) -> Available | None:
    """The smallest headroom over ``directory`` and its ancestors down to ``mount_point``."""
    limit_name, usage_name, inactive = (
        ("memory.max", "memory.current", "inactive_file")
        if version == 2
        else ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    )
    best: Available | None = None
    current = directory
    while True:
        limit = _read_number(os.path.join(current, limit_name))
        usage = _read_number(os.path.join(current, usage_name))
        if limit is not None and limit < UNLIMITED and usage is not None:
            reclaimable = _stat_field(os.path.join(current, "memory.stat"), inactive)
            headroom = max(0, limit - max(0, usage - reclaimable))
            if best is None or headroom < best.num_bytes:
                source = f"cgroup v{version} {limit_name} - {usage_name} of {current}"
                best = Available(headroom, source)
        if os.path.normpath(current) == os.path.normpath(mount_point) or current == os.path.dirname(current):
            return best
        current = os.path.dirname(current)


def _read_number(path: str) -> int | None:
    """The integer in a one-line cgroup file; ``max`` reads as unlimited, a missing file as None."""
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except OSError:
        return None
    if text == "max":
        return UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def _stat_field(path: str, key: str) -> int:
    """One field of a ``memory.stat`` file (0 when absent)."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return 0
    return 0
