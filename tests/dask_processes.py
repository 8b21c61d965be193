"""A real Dask cluster for tests: ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1.

Started from their command lines, as a user starts them by hand, each in its own process
group (a worker's nanny and its worker process die together). The scheduler writes its
address to a scheduler file, which the workers and the test read. Nothing binds beyond the
loopback interface, and no dashboard is started. This directory is on their ``PYTHONPATH``
(after the repository's), so a test can send them this module's functions (Dask pickles them
by reference). ``tls`` (:mod:`tls_certs`) starts them all with ``--protocol tls`` and its
certificate. :func:`modified_sources` is a copy of this package with one line changed, for a
worker that runs other code at the same version.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tls_certs import TlsFiles

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
DASK = str(Path(sys.executable).parent / "dask")
TESTS_DIR = str(Path(__file__).parent)
# Before the tests directory: its pbg_core/, tasks/, ... (test packages without __init__.py) would
# otherwise shadow the project's packages as namespace packages on the workers and the scheduler.
REPO_DIR = str(Path(__file__).parent.parent)


def spawn_child() -> int:
    """Start and join a spawned child process (as the HOGWILD pool does); its exit code. Runs on a worker."""
    child = multiprocessing.get_context("spawn").Process(target=os.getpid)
    child.start()
    child.join()
    return int(child.exitcode or 0)


class DaskProcesses:
    """A scheduler plus workers under ``directory`` (logs ``scheduler.log``, ``worker-<i>.log``)."""

    def __init__(self, directory: Path, tls: TlsFiles | None = None) -> None:
        self.directory = directory
        self.scheduler_file = directory / "scheduler.json"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.tls = tls

    @property
    def address(self) -> str:
        """The scheduler's ``tcp://127.0.0.1:port``."""
        return str(json.loads(self.scheduler_file.read_text())["address"])

    def _address_written(self) -> bool:
        """Whether the scheduler file holds its address yet: dask creates the file, then writes it,
        so a file that exists may still be empty (CI once read it in between)."""
        try:
            return bool(self.address)
        except (OSError, ValueError, KeyError):  # JSONDecodeError is a ValueError
            return False

    def start_scheduler(self) -> str:
        """Start ``dask scheduler`` on a free port of 127.0.0.1; its address once it listens."""
        argv = [DASK, "scheduler", "--host", HOST, "--port", "0", "--no-dashboard"]
        if self.tls is not None:
            argv += ["--protocol", "tls", *self.tls.dask_args()]
        self._spawn([*argv, "--scheduler-file", str(self.scheduler_file)], "scheduler.log", {})
        self._wait(self._address_written, "the scheduler file's address")
        return self.address

    def start_worker(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start one ``dask worker`` (one process, one thread) with extra environment ``env``."""
        argv = [DASK, "worker", "--scheduler-file", str(self.scheduler_file), "--host", HOST]
        argv += ["--nworkers", "1", "--nthreads", "1", "--no-dashboard"]
        if self.tls is not None:
            argv += self.tls.dask_args()
        return self._spawn(argv, f"worker-{len(self.processes)}.log", env or {})

    def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL what is left after 10 s."""
        for proc in self.processes:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()

    def _spawn(self, argv: list[str], log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        own = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []  # the test's first (e.g. another version)
        paths = [*own, REPO_DIR, TESTS_DIR, *filter(None, [os.environ.get("PYTHONPATH")])]
        full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(paths)}
        with (self.directory / log).open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full, start_new_session=True)
        self.processes.append(proc)
        return proc

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if any(proc.poll() is not None for proc in self.processes):
                raise RuntimeError(f"a Dask process exited before {what} appeared: see {self.directory}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} after {START_TIMEOUT_S} s: see {self.directory}")
            time.sleep(0.1)


def modified_sources(directory: Path) -> Path:
    """A copy of this package's sources under ``directory`` with one line of the engine changed;
    the directory to put first on a worker's ``PYTHONPATH`` (its installed version stays the same)."""
    for package in ("pbg_core", "storage", "tasks", "flows"):
        shutil.copytree(Path(REPO_DIR) / package, directory / package, ignore=shutil.ignore_patterns("__pycache__"))
    machine = directory / "pbg_core" / "distributed" / "machine.py"
    source = machine.read_text()
    changed = source.replace("logger = logging.getLogger(__name__)", "logger = logging.getLogger('modified')", 1)
    assert changed != source, "the line to change is gone: pick another"
    machine.write_text(changed)
    return directory


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
