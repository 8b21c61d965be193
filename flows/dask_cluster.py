"""Checks of a Dask cluster before distributed training: reachable, big enough, fit to train.

A distributed run trains its buckets on the workers of an existing Dask cluster
(``dask_address``). Before any training, :func:`check_cluster` makes sure, each failure one
:class:`ClusterError` line naming the address or worker and what to do:

- the address is well formed and a scheduler answers there within ``timeout`` seconds (never a hang);
- at least ``machines`` workers joined it within ``timeout``;
- the scheduler and every worker have this package installed at this version (a worker running
  other code would write checkpoints this run cannot read; the scheduler unpickles each bucket's
  arguments, which are this package's types);
- every worker may start the HOGWILD trainer processes: Dask's worker processes are daemonic
  by default under a nanny, and a daemonic process cannot have children.

Without a ``dask_address``, :func:`local_cluster` starts the cluster on this machine: a
``distributed.LocalCluster`` of ``machines`` worker processes (the embedded default for tests
and demos).

The version is read on each worker through :func:`importlib.metadata.version` (standard
library, so the call reaches a worker that lacks this package); the process check runs this
module's own function, so it comes only after the version check passed.
"""

from __future__ import annotations

import importlib.metadata
import logging
import multiprocessing
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import dask
from distributed import Client, LocalCluster
from distributed.comm.addressing import parse_address, parse_host_port

from pbg_core.errors import ClusterError

PACKAGE = "pbg-flow"
DAEMON_FIX = (
    "start the workers with DASK_DISTRIBUTED__WORKER__DAEMON=False in their environment "
    "(or distributed.worker.daemon: false in their Dask config)"
)


@dataclass(frozen=True)
class ClusterInfo:
    """What the checks found: the scheduler's address and the workers' addresses, sorted."""

    address: str
    workers: tuple[str, ...]


def package_version() -> str:
    """This package's installed version."""
    return importlib.metadata.version(PACKAGE)


def can_start_processes() -> bool:
    """Whether the calling process may start child processes (it is not daemonic); runs on a worker."""
    return not multiprocessing.current_process().daemon


@contextmanager
def local_cluster(machines: int) -> Iterator[str]:
    """A cluster of ``machines`` worker processes on this machine; yields its scheduler's address.

    One thread per worker (each trains one bucket at a time with its own HOGWILD processes),
    bound to 127.0.0.1, no dashboard, workers allowed to start processes. Closed on exit,
    workers included.
    """
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(
            n_workers=machines,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


def connect(address: str, timeout: float) -> Client:
    """A client of the scheduler at ``address``.

    A TCP connection is tried first: a Client that never connected still tries to close its
    connection when collected, which prints a traceback at exit after the error was reported.

    Raises:
        ClusterError: the address is malformed, or nothing answered there within ``timeout`` seconds.
    """
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as exc:
        raise ClusterError(f"dask_address {address!r}: {exc}; expected tcp://host:port") from None
    try:
        if scheme in ("tcp", "tls"):
            socket.create_connection((host, port), timeout=timeout).close()
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"dask_address {address}: no Dask scheduler answered ({type(exc).__name__}: {exc}; waited up to "
            f"{timeout:g} s); start one with `dask scheduler`, or check the address and the network"
        ) from None


def check_cluster(address: str, machines: int, timeout: float = 30.0) -> ClusterInfo:
    """Run the module's checks against the scheduler at ``address`` for ``machines`` workers.

    Raises:
        ClusterError: the first check that fails, in the module's order.
    """
    client = connect(address, timeout)
    try:
        _wait_for_workers(client, address, machines, timeout)
        workers = tuple(sorted(client.scheduler_info(n_workers=-1)["workers"]))
        _check_versions(client, workers)
        unfit = [w for w, ok in client.run(can_start_processes, workers=list(workers)).items() if not ok]
        if unfit:
            raise ClusterError(
                f"Dask worker(s) {', '.join(sorted(unfit))} at {address} cannot start the HOGWILD trainer "
                f"processes (a daemonic worker process cannot have children); {DAEMON_FIX}"
            )
        return ClusterInfo(address=address, workers=workers)
    finally:
        client.close()


def _wait_for_workers(client: Client, address: str, machines: int, timeout: float) -> None:
    try:
        client.wait_for_workers(machines, timeout=timeout)
    except TimeoutError:
        count = len(client.scheduler_info(n_workers=-1)["workers"])
        raise ClusterError(
            f"dask_address {address}: {count} worker(s) joined within {timeout:g} s, but num_machines is "
            f"{machines}; start more with `dask worker {address}` or lower num_machines"
        ) from None


def _check_versions(client: Client, workers: tuple[str, ...]) -> None:
    expected = package_version()
    found = client.run(importlib.metadata.version, PACKAGE, workers=list(workers), on_error="return")
    # The scheduler unpickles every task's arguments (a bucket's carry this package's types).
    try:
        found["the scheduler"] = client.run_on_scheduler(importlib.metadata.version, PACKAGE)
    except Exception as exc:  # noqa: BLE001 - reported as what the scheduler has
        found["the scheduler"] = exc
    wrong = {w: v for w, v in found.items() if v != expected}
    if wrong:
        listed = "; ".join(f"{w}: {_describe(v)}" for w, v in sorted(wrong.items()))
        raise ClusterError(
            f"the Dask cluster runs another {PACKAGE} than this one ({expected}): {listed}; "
            f"install {PACKAGE}=={expected} on the scheduler and every worker"
        )


def _describe(found: object) -> str:
    if isinstance(found, importlib.metadata.PackageNotFoundError):
        return "not installed"
    if isinstance(found, BaseException):
        return f"{type(found).__name__}: {found}"
    return f"version {found}"
