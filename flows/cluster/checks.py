"""Checks of a Dask cluster before distributed training: reachable, big enough, fit to train.

A distributed run trains its buckets on the workers of an existing Dask cluster
(``dask_address``). Before any training, :func:`check_cluster` makes sure, each failure one
:class:`ClusterError` line naming the address or worker and what to do:

- the address is ``tcp://host:port`` or ``tls://host:port`` (checked before anything connects),
  and a scheduler answers there within ``timeout`` seconds (never a hang), through Dask's own
  TLS settings for ``tls://`` (:mod:`flows.cluster.security`);
- at least ``machines`` workers joined it within ``timeout``;
- the scheduler and every worker run this package's code, and every worker may start the
  HOGWILD trainer processes (:mod:`tasks.worker_checks`; a worker joining later is checked
  before its first bucket, :mod:`tasks.cluster_members`).

Without a ``dask_address``, :func:`local_cluster` starts the cluster on this machine: a
``distributed.LocalCluster`` of ``machines`` worker processes (the embedded default for tests
and demos).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dask
from distributed import Client, LocalCluster
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.comm.core import connect as connect_comm

from flows.cluster.security import client_security, describe_tls_failure, not_tls_failure, tls_connection_args
from pbg_core.config.cluster_rules import address_problem
from pbg_core.errors import ClusterError
from tasks.worker_checks import describe, scheduler_problem, worker_problems


@dataclass(frozen=True)
class ClusterInfo:
    """What the checks found: the scheduler's address and the workers' addresses, sorted."""

    address: str
    workers: tuple[str, ...]


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
        return Client(address, timeout=timeout, set_as_default=False, security=client_security())
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"dask_address {address}: the Dask scheduler stopped answering ({type(exc).__name__}: {exc})"
        ) from None


def probe_scheduler(address: str, timeout: float) -> None:
    """Check that a Dask scheduler answers at ``address``, without a ``Client``.

    The address's form first (nothing connects to an ``http://`` or scheme-less address), then a
    TCP connection, then Dask's ``identity`` handshake on a connection of its own, with Dask's
    TLS settings for ``tls://``: a Client that never connected still tries to close its
    connection when collected, which prints a traceback at exit (after a 10 s wait) once the
    error was reported; and a port where something else listens (an HTTP server, a proxy) makes
    Dask read the first bytes of its answer as a message length, which fails as an allocation
    of exabytes.

    Raises:
        ClusterError: the address is malformed or of another scheme, no TLS certificate is
            configured for a ``tls://`` one, nothing answered there within ``timeout`` seconds,
            the TLS handshake failed, or what answered is not a Dask scheduler.
    """
    wrong = address_problem(address)
    if wrong:
        raise ClusterError(wrong)
    scheme, location = parse_address(address)
    host, port = parse_host_port(location)
    connection_args = tls_connection_args(address)  # before connecting: a missing certificate is no network fault
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(
            f"dask_address {address}: no Dask scheduler answered ({type(exc).__name__}: {exc}; waited up to "
            f"{timeout:g} s); start one with `dask scheduler`, or check the address and the network"
        ) from None
    try:
        identity = asyncio.run(asyncio.wait_for(_identity(address, timeout, connection_args), timeout))
    except TimeoutError:
        identity = f"no answer to Dask's handshake within {timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - whatever answered, it does not speak Dask's protocol
        tls_failure = describe_tls_failure(address, exc) if scheme == "tls" else None
        if tls_failure is None and scheme == "tls" and _plain_scheduler_at(location, timeout):
            # A scheduler without TLS may close on the ClientHello before answering it: no ssl
            # error to read then, so ask it as tcp:// (the plain handshake says what it is).
            tls_failure = not_tls_failure(address)
        if tls_failure:
            raise ClusterError(tls_failure) from None
        identity = "its answer is not Dask's protocol"
    if not isinstance(identity, dict) or identity.get("type") != "Scheduler":
        found = identity if isinstance(identity, str) else "it is not a scheduler"
        hint = "" if scheme == "tls" else "; a scheduler started with --protocol tls needs a tls:// address"
        raise ClusterError(
            f"dask_address {address}: something answered but not a Dask scheduler ({found}); check the "
            f"address and port (a scheduler listens on 8786 unless started with --port){hint}"
        )


def _plain_scheduler_at(location: str, timeout: float) -> bool:
    """Whether a Dask scheduler without TLS answers at ``host:port``."""
    try:
        identity = asyncio.run(asyncio.wait_for(_identity(f"tcp://{location}", timeout, {}), timeout))
    except Exception:  # noqa: BLE001 - nothing that speaks plain Dask there
        return False
    return isinstance(identity, dict) and identity.get("type") == "Scheduler"


async def _identity(address: str, timeout: float, connection_args: dict[str, Any]) -> object:
    """The scheduler's answer to Dask's ``identity`` message, on a connection of its own."""
    comm = await connect_comm(address, timeout=timeout, **connection_args)
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
        wrong = scheduler_problem(client)
        if wrong:
            raise ClusterError(f"the Dask scheduler at {address} {wrong}")
        unfit = worker_problems(client, workers)
        if unfit:
            raise ClusterError(f"dask_address {address}: {describe(unfit)}")
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
