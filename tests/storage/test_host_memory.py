"""storage.host_memory: cgroup v2 / v1 headroom and MemAvailable, from files in the kernel's formats."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pbg_core.session.memory_plan import FIXED_OVERHEAD_BYTES
from storage.host_memory import HostFiles, cgroup_headroom, meminfo_available, memory_available, shared_memory_room

MEMINFO = """MemTotal:       24683664 kB
MemFree:         1931724 kB
MemAvailable:   21721696 kB
Buffers:          346436 kB
"""


def host(tmp_path: Path, cgroup: str, mountinfo: str, meminfo: str = MEMINFO) -> HostFiles:
    (tmp_path / "meminfo").write_text(meminfo)
    (tmp_path / "cgroup").write_text(cgroup)
    (tmp_path / "mountinfo").write_text(mountinfo)
    return HostFiles(str(tmp_path / "meminfo"), str(tmp_path / "cgroup"), str(tmp_path / "mountinfo"), shm=None)


def write(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text)


def v2_tree(tmp_path: Path, limit: str, parent_limit: str) -> HostFiles:
    """A cgroup2 mount at tmp/cg; the process in /user.slice/job (its parent has its own limit)."""
    root = tmp_path / "cg"
    write(root / "user.slice", memory_max=parent_limit, memory_current="1000000000\n", memory_stat="anon 1\n")
    write(
        root / "user.slice" / "job",
        memory_max=limit,
        memory_current="3000000000\n",
        memory_stat="anon 2000000000\nfile 1000000000\ninactive_file 600000000\nactive_file 400000000\n",
    )
    mountinfo = (
        "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
        f"35 25 0:30 / {root} rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    return host(tmp_path, "0::/user.slice/job\n", mountinfo)


def test_meminfo_available_in_bytes(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    found = meminfo_available(str(tmp_path / "meminfo"))
    assert found is not None and found.num_bytes == 21721696 * 1024
    assert found.source == f"MemAvailable in {tmp_path / 'meminfo'}"
    (tmp_path / "old").write_text("MemTotal: 1 kB\n")  # kernels before 3.14 have no MemAvailable
    assert meminfo_available(str(tmp_path / "old")) is None
    assert meminfo_available(str(tmp_path / "missing")) is None


def test_cgroup_v2_limit_minus_usage_less_inactive_file(tmp_path: Path) -> None:
    files = v2_tree(tmp_path, "8000000000\n", "max\n")
    found = cgroup_headroom(files)
    # 8 GB - (3 GB - 0.6 GB of inactive page cache) = 5.6 GB; the parent has no limit
    assert found is not None and found.num_bytes == 5_600_000_000
    assert found.source == f"cgroup v2 memory.max - memory.current of {tmp_path / 'cg' / 'user.slice' / 'job'}"
    assert memory_available(files) == found  # tighter than MemAvailable (22.2 GB)


def test_cgroup_v2_a_tighter_parent_limit_binds(tmp_path: Path) -> None:
    files = v2_tree(tmp_path, "max\n", "4000000000\n")
    found = cgroup_headroom(files)
    assert found is not None and found.num_bytes == 3_000_000_000
    assert str(tmp_path / "cg" / "user.slice") in found.source


def test_meminfo_wins_when_smaller_than_the_cgroup(tmp_path: Path) -> None:
    files = v2_tree(tmp_path, "100000000000\n", "max\n")
    found = memory_available(files)
    assert found is not None and found.source.startswith("MemAvailable")


def test_cgroup_v1_memory_controller(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    write(root, memory_limit_in_bytes="9223372036854771712\n", memory_usage_in_bytes="9340719104\n")
    write(
        root / "process_api" / "abc",
        memory_limit_in_bytes="2147483648\n",
        memory_usage_in_bytes="1073741824\n",
        memory_stat="cache 10\ntotal_inactive_file 73741824\n",
    )
    mountinfo = (
        f"31 23 0:28 / {tmp_path} rw,relatime - tmpfs tmpfs rw,mode=755\n"
        f"32 31 0:29 / {tmp_path / 'cpu'} rw,relatime - cgroup cgroup rw,cpu\n"
        f"35 31 0:32 / {root} rw,relatime - cgroup cgroup rw,memory\n"
    )
    files = host(tmp_path, "4:memory:/process_api/abc\n2:cpuacct:/\n0::/\n", mountinfo)
    found = cgroup_headroom(files)
    # 2 GiB - (1 GiB - 70.3 MiB inactive) ; the root's page-rounded LONG_MAX means no limit
    assert found is not None and found.num_bytes == 2147483648 - (1073741824 - 73741824)
    assert found.source.startswith("cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes of ")


def test_no_cgroup_limit_falls_back_to_meminfo(tmp_path: Path) -> None:
    files = v2_tree(tmp_path, "max\n", "max\n")
    assert cgroup_headroom(files) is None
    found = memory_available(files)
    assert found is not None and found.num_bytes == 21721696 * 1024


def test_this_host_has_a_figure() -> None:
    found = memory_available()
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024  # MemTotal, the first line
    assert found is not None and 0 < found.num_bytes <= total


def test_shared_memory_room_is_free_space_plus_the_private_overhead(tmp_path: Path) -> None:
    room = shared_memory_room(str(tmp_path))
    stat = os.statvfs(tmp_path)
    assert room is not None
    # Another process may write to the disk between the two statvfs calls: within 64 MiB.
    assert abs(room.num_bytes - (stat.f_bavail * stat.f_frsize + FIXED_OVERHEAD_BYTES)) < 64 << 20
    assert str(tmp_path) in room.source and "--shm-size" in room.source
    assert shared_memory_room(str(tmp_path / "absent")) is None


def test_a_small_shared_memory_bounds_the_figure(tmp_path: Path, small_disk: Callable[[int], Path]) -> None:
    files = host(tmp_path, "0::/\n", "")
    shm = small_disk(16 << 20)  # a real 16 MiB tmpfs, as docker's --shm-size=16m
    found = memory_available(HostFiles(files.meminfo, files.cgroup, files.mountinfo, shm=str(shm)))
    assert found is not None and found.num_bytes == (16 << 20) + FIXED_OVERHEAD_BYTES
    assert found.source.startswith(f"0.02 GB free in {shm} (shared memory")
