"""Whether a Dask worker (or the scheduler) may take part in this run: same code, able to train.

Checked on every worker before it gets a bucket, at the start of a run
(:func:`flows.cluster.checks.check_cluster`) and for a worker that joins during it
(:mod:`tasks.cluster_members`), in this order, each a round trip that runs a function there:

1. **The package version** (:func:`importlib.metadata.version`, standard library: it reaches
   a worker that lacks this package).
2. **The sources**: :func:`source_digest`, a hash of every ``.py`` file of the four packages.
   The version stays the same from commit to commit; a worker running other code would train
   buckets this run cannot trust, or write files it cannot read.
3. **Child processes**: the HOGWILD trainers are child processes, and a daemonic process (Dask's
   worker under a nanny, by default) cannot have children.
4. **Credentials**, when the run does not send the config's (:mod:`tasks.cluster_members`):
   the worker resolves the same ones by itself (:mod:`storage.credentials`).

The scheduler gets the first two: it unpickles every bucket's arguments, this package's types.
Each failed check is one reason, phrased to follow the worker's name (:func:`describe`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import multiprocessing
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from distributed import Client

PACKAGE = "pbg-flow"
SOURCE_PACKAGES = ("pbg_core", "storage", "tasks", "flows")
DAEMON_FIX = (
    "start the workers with DASK_DISTRIBUTED__WORKER__DAEMON=False in their environment "
    "(or distributed.worker.daemon: false in their Dask config)"
)
CODE_FIX = "install the same code on every machine"


def package_version() -> str:
    """This package's installed version."""
    return importlib.metadata.version(PACKAGE)


@functools.cache
def source_digest() -> str:
    """A short hash of this process's sources: every ``.py`` of the four packages, path and content.

    Computed once per process (about 10 ms for the 1 MB of sources). A package found nowhere
    counts as missing (its name is hashed, so it differs from any installed copy).
    """
    digest = hashlib.sha256()
    for name in SOURCE_PACKAGES:
        root = _package_dir(name)
        if root is None:
            digest.update(f"{name}: missing\0".encode())
            continue
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def can_start_processes() -> bool:
    """Whether the calling process may start child processes (it is not daemonic); runs on a worker."""
    return not multiprocessing.current_process().daemon


def worker_problems(
    client: Client, workers: Iterable[str], credentials: Callable[[Client, list[str]], dict[str, str]] | None = None
) -> dict[str, str]:
    """Worker -> why it may not train this run, for each unfit one of ``workers`` (the module's checks).

    Args:
        client: A client of the run's scheduler.
        workers: The workers to check.
        credentials: The credentials check (:mod:`tasks.cluster_members`), when the run needs one.
    """
    checks: list[Callable[[Client, list[str]], dict[str, str]]] = [_versions, _sources, _processes]
    if credentials is not None:
        checks.append(credentials)
    problems: dict[str, str] = {}
    left = sorted(workers)
    for check in checks:  # each on the workers that passed the ones before (the module's order)
        if not left:
            break
        problems.update(check(client, left))
        left = [worker for worker in left if worker not in problems]
    return problems


def scheduler_problem(client: Client) -> str | None:
    """Why the scheduler cannot serve this run (another version or other sources), or None."""
    expected = package_version()
    found = _on_scheduler(client, importlib.metadata.version, PACKAGE)
    if found != expected:
        return _version_reason(found, expected)
    ours = source_digest()
    found = _on_scheduler(client, source_digest)
    return _sources_reason(found, ours) if found != ours else None


def _on_scheduler(client: Client, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` run on the scheduler, or the exception it raised there."""
    try:
        return client.run_on_scheduler(function, *args)
    except Exception as exc:  # noqa: BLE001 - reported as what the scheduler has
        return exc


def describe(problems: Mapping[str, str], who: str = "Dask worker") -> str:
    """The problems as one line: workers with the same reason named together."""
    grouped: dict[str, list[str]] = {}
    for worker, reason in sorted(problems.items()):
        grouped.setdefault(reason, []).append(worker)
    return "; ".join(
        f"{who} {names[0]} {reason}" if len(names) == 1 else f"{who}s {', '.join(names)}: each {reason}"
        for reason, names in grouped.items()
    )


def _versions(client: Client, workers: list[str]) -> dict[str, str]:
    expected = package_version()
    found = client.run(importlib.metadata.version, PACKAGE, workers=workers, on_error="return")
    return {worker: _version_reason(value, expected) for worker, value in found.items() if value != expected}


def _sources(client: Client, workers: list[str]) -> dict[str, str]:
    ours = source_digest()
    found = client.run(source_digest, workers=workers, on_error="return")
    return {worker: _sources_reason(value, ours) for worker, value in found.items() if value != ours}


def _processes(client: Client, workers: list[str]) -> dict[str, str]:
    found = client.run(can_start_processes, workers=workers, on_error="return")
    return {worker: _process_reason(value) for worker, value in found.items() if value is not True}


def _version_reason(found: object, expected: str) -> str:
    if isinstance(found, importlib.metadata.PackageNotFoundError):
        return f"has no {PACKAGE} installed; install {PACKAGE}=={expected} on the scheduler and every worker"
    if isinstance(found, BaseException):
        return f"cannot tell its {PACKAGE} version ({type(found).__name__}: {found}); {CODE_FIX}"
    return f"runs {PACKAGE} {found}, this process {expected}; install {PACKAGE}=={expected} on the scheduler and every worker"


def _sources_reason(found: object, ours: str) -> str:
    if isinstance(found, BaseException):
        return f"cannot load this {PACKAGE}'s code ({type(found).__name__}: {found}); {CODE_FIX}"
    return f"runs {PACKAGE} sources {found}, this process {ours}: {CODE_FIX}"


def _process_reason(found: object) -> str:
    if isinstance(found, BaseException):
        return f"cannot run this {PACKAGE}'s checks ({type(found).__name__}: {found}); {CODE_FIX}"
    return f"cannot start the HOGWILD trainer processes (a daemonic worker process cannot have children); {DAEMON_FIX}"


def _package_dir(name: str) -> Path | None:
    """Where package ``name``'s modules come from in this process: the directory of its ``__init__.py``.

    Found as ``{name}.__init__``, not as ``name``: a directory of that name ahead on ``sys.path``
    makes ``name`` a namespace package without files while its modules still load from the
    installed package (a ``dask worker``'s local directory is ``sys.path[0]`` and holds its spill
    directory ``storage/``; under an editable install every worker looked modified).
    """
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(f"{name}.__init__")
        except (ModuleNotFoundError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
    return Path(origin).parent if origin else None
