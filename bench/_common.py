"""What every benchmark script shares: tool locations, measured subprocess runs, tables, JSON.

Measured runs sample the *whole process tree* of the command (the CLI plus its HOGWILD workers)
from /proc every ``sample_interval`` seconds, so peak memory includes children. Two figures:
- ``peak_rss_bytes``: the largest sum of VmRSS over the tree. Shared-memory pages (embeddings in
  /dev/shm that every worker maps) count once per process, exactly as ``ps``/psutil would report.
- ``peak_pss_bytes``: the largest sum of Pss (smaps_rollup), where a shared page is split among
  the processes that map it, so the sum does not double count. This is the fairer memory figure.
Sampling can miss a spike shorter than the interval; both sides are sampled the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
WORK_DIR = BENCH_DIR / "work"
OURS_VENV = REPO_ROOT / ".venv"
PBG_VENV = BENCH_DIR / ".pbg-venv"


class ToolMissingError(RuntimeError):
    """A benchmark needs an executable that is not installed."""


def ours_bin(name: str = "pbg") -> Path:
    """Path of our CLI (``.venv/bin/pbg``); raises ToolMissingError naming the fix if absent."""
    path = OURS_VENV / "bin" / name
    if not path.exists():
        raise ToolMissingError(f"{path} not found: run `make setup` first")
    return path


def pbg_bin(tool: str) -> Path:
    """Path of a PyPI torchbiggraph 1.0.0 console script in bench/.pbg-venv."""
    path = PBG_VENV / "bin" / tool
    if not path.exists():
        raise ToolMissingError(f"{path} not found: run `make pbg-venv` first")
    return path


@dataclass
class RunResult:
    """One measured command: exit status, wall time, peak tree memory and captured output.

    ``started_at`` is the wall clock (``time.time()``) at spawn, to place the command's own log
    timestamps on the same axis; ``wall_s`` runs from spawn to the moment its exit is reaped.
    """

    argv: list[str]
    cwd: str
    returncode: int
    started_at: float
    wall_s: float
    peak_rss_bytes: int
    peak_pss_bytes: int
    peak_processes: int
    stdout_path: str
    stderr_path: str
    stdout: str = field(repr=False, default="")
    stderr: str = field(repr=False, default="")

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def summary(self) -> dict[str, object]:
        """JSON-friendly record without the (possibly long) captured output."""
        record = asdict(self)
        record.pop("stdout")
        record["stderr_tail"] = tail(record.pop("stderr"), 15)
        return record


def tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])


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


def run_measured(
    argv: list[str | Path],
    cwd: Path,
    log_name: str,
    env: dict[str, str] | None = None,
    sample_interval: float = 0.2,
) -> RunResult:
    """Run ``argv`` in ``cwd``, sampling its process tree's memory until it exits.

    stdout/stderr go to ``cwd/<log_name>.out`` / ``.err`` (files, not pipes, so a chatty tool
    never blocks on a full pipe) and are read back into the result. A thread blocks in
    ``wait()``, so the exit is timed to the moment it happens, not to the next memory sample.

    Args:
        argv: Command and arguments.
        cwd: Working directory (created if missing).
        log_name: Base name of the two log files.
        env: Extra environment variables on top of ours.
        sample_interval: Seconds between memory samples.

    Returns:
        The measured RunResult (a non-zero exit is recorded, not raised).
    """
    cwd.mkdir(parents=True, exist_ok=True)
    out_path, err_path = cwd / f"{log_name}.out", cwd / f"{log_name}.err"
    command = [str(arg) for arg in argv]
    peak_rss = peak_pss = peak_procs = 0
    with out_path.open("w") as out, err_path.open("w") as err:
        started_at, start = time.time(), time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, env={**os.environ, **(env or {})})
        exited, ended = threading.Event(), [start]

        def reap() -> None:
            proc.wait()
            ended[0] = time.perf_counter()
            exited.set()

        threading.Thread(target=reap, daemon=True).start()
        while not exited.is_set():
            rss, pss, procs = tree_memory(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            peak_procs = max(peak_procs, procs)
            exited.wait(sample_interval)
    wall = ended[0] - start
    return RunResult(
        argv=command,
        cwd=str(cwd),
        returncode=proc.returncode,
        started_at=started_at,
        wall_s=wall,
        peak_rss_bytes=peak_rss,
        peak_pss_bytes=peak_pss,
        peak_processes=peak_procs,
        stdout_path=str(out_path),
        stderr_path=str(err_path),
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
    )


@contextlib.contextmanager
def measurement_lock(path: Path | None) -> Iterator[None]:
    """Hold an exclusive flock(2) on ``path`` (created if missing) for the block; no-op if None.

    The same lock as ``flock PATH command`` takes, so measured commands of several people on
    one shared machine never overlap.
    """
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """Fixed-width text table; floats get 4 significant digits, None prints as ``-``."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            # Large figures (edges/s, MiB) read best as grouped integers, small ones as 4 digits.
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, rule, *body])


def write_json(name: str, payload: dict[str, object]) -> Path:
    """Write ``payload`` to bench/results/<name>.json (atomic rename) and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path


def machine_info() -> dict[str, object]:
    """Facts that make a result file interpretable later: CPUs, Python, torch, time."""
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "")
    except OSError:
        pass
    import torch  # local: keeps `--help` of the scripts fast

    return {
        "hostname": platform.node(),
        "cpu_model": model,
        "usable_cpus": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def mib(num_bytes: int | None) -> float | None:
    """Bytes to MiB (None stays None)."""
    return None if num_bytes is None else num_bytes / 2**20
