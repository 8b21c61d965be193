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

import asyncio
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
from distributed.comm.core import connect as connect_comm

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
    bound to 127.0.0.1, no dashboard, no worker profiler, workers allowed to start processes. Closed on exit,
    workers included.
    """
    # For good, not for the block: a nanny reads it again when it restarts a worker it lost.
    # Without the statistical profiler (a stack sample every 10 ms on each worker's event loop):
    # buckets trained 5% faster with it off (2 machines on 2 cores, docs/distributed.md).
    dask.config.set({"distributed.worker.daemon": False, "distributed.worker.profile.enabled": False})
    cluster = LocalCluster(
        n_workers=machines,
        threads_per_worker=1,
        processes=True,
        memory_limit=0,  # each machine plans its own memory; Dask would pause or kill it at its share
        host="127.0.0.1",
        dashboard_address=None,
        # The scheduler's HTTP server (health, metrics) starts anyway: a free loopback port,
        # not 8787 (taken by another cluster, Dask warns and moves), and no dashboard.
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.ERROR,
    )
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


def connect(address: str, timeout: float) -> Client:
    """A client of the scheduler at ``address``, once :func:`probe_scheduler` found one there.

    Raises:
        ClusterError: see :func:`probe_scheduler`; or the scheduler stopped answering since.
    """
    probe_scheduler(address, timeout)
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"dask_address {address}: the Dask scheduler stopped answering ({type(exc).__name__}: {exc})"
        ) from None


def probe_scheduler(address: str, timeout: float) -> None:
    """Check that a Dask scheduler answers at ``address``, without a ``Client``.

    A TCP connection, then Dask's ``identity`` handshake on a connection of its own: a Client
    that never connected still tries to close its connection when collected, which prints a
    traceback at exit (after a 10 s wait) once the error was reported; and a port where
    something else listens (an HTTP server, a proxy) makes Dask read the first bytes of its
    answer as a message length, which fails as an allocation of exabytes.

    Raises:
        ClusterError: the address is malformed, nothing answered there within ``timeout``
            seconds, or what answered is not a Dask scheduler.
    """
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as exc:
        raise ClusterError(f"dask_address {address!r}: {exc}; expected tcp://host:port") from None
    try:
        if scheme in ("tcp", "tls"):
            socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(
            f"dask_address {address}: no Dask scheduler answered ({type(exc).__name__}: {exc}; waited up to "
            f"{timeout:g} s); start one with `dask scheduler`, or check the address and the network"
        ) from None
    try:
        identity = asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout))  # the comm's own handshake too
    except TimeoutError:
        identity = f"no answer to Dask's handshake within {timeout:g} s"
    except Exception:  # noqa: BLE001 - whatever answered, it does not speak Dask's protocol
        identity = "its answer is not Dask's protocol"
    if not isinstance(identity, dict) or identity.get("type") != "Scheduler":
        found = identity if isinstance(identity, str) else "it is not a scheduler"
        raise ClusterError(
            f"dask_address {address}: something answered but not a Dask scheduler ({found}); check the "
            "address and port (a scheduler listens on 8786 unless started with --port)"
        )


async def _identity(address: str, timeout: float) -> object:
    """The scheduler's answer to Dask's ``identity`` message, on a connection of its own."""
    comm = await connect_comm(address, timeout=timeout)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await asyncio.wait_for(comm.read(), timeout)
    finally:
        comm.abort()


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
