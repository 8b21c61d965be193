"""Who trains a distributed run: the Dask workers admitted to it, and what they are sent.

:class:`Members` follows the cluster while the run trains (:meth:`Members.refresh`, called by
the flow's bucket loop about once a second and between iterations):

- a worker that leaves while it trains nothing is reported in one line; no work is lost with
  it (every bucket it trained was saved and recorded before it counted). A worker that leaves
  mid-bucket is reported by its bucket's task, and the bucket goes to another worker;
- a worker that joins is checked (:func:`tasks.worker_checks.worker_problems`: same package
  version and sources, able to start the trainer processes, credentials) before it gets any
  bucket; an unfit one is refused work, once, in one line that says why.

:func:`machine_config` decides what the workers are sent. The run's config travels with every
bucket, pickled; Dask's scheduler connection carries it, encrypted only under ``tls://``. A
credential in ``storage_options`` (``key``, ``secret``, ``token``) is left out when every
worker resolves the same one from its own environment (:mod:`storage.credentials`); a worker
joining later must then resolve it too. Otherwise, and for any other secret (a
``client_kwargs`` token, another filesystem's key), the config carries it and the run warns
once, plainly, before the first bucket.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from distributed import Client

from pbg_core.config import ConfigSchema
from storage.credentials import credentials_digest, own_credentials_digest
from tasks._policies import run_logger
from tasks.worker_checks import worker_problems

CredentialsCheck = Callable[[Client, list[str]], dict[str, str]]


@dataclass
class Members:
    """The workers of a run: admitted (checked), refused (unfit), lost (left during the run).

    Attributes:
        admitted: Workers that passed the checks and were in the cluster when last asked.
        refused: Worker -> why it gets no bucket (dropped when it leaves: checked again if it returns).
        lost: Workers that left during the run (for messages; one that returns is checked again).
        credentials: The credentials check of a late worker, when the run does not send them.
    """

    admitted: set[str]
    refused: dict[str, str] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    credentials: CredentialsCheck | None = None

    def refresh(self, client: Client, live: set[str] | None, busy: Collection[str]) -> list[str]:
        """The workers that may train now, after noting who left and checking who joined.

        Args:
            client: A client of the run's scheduler.
            live: The scheduler's workers now (None: it cannot be asked; nothing changes, and no
                worker gets a bucket until it answers again).
            busy: Workers training a bucket now (their bucket's task reports their loss).
        """
        if live is None:
            return []
        logger = run_logger()
        for worker in sorted(self.admitted - live - set(busy)):
            self.leave(worker)
            logger.warning(
                "Dask worker %s left the cluster between buckets: no work is lost with it (every bucket it "
                "trained was saved and recorded); the run goes on with %d worker(s)",
                worker,
                len(self.admitted),
            )
        for worker in set(self.refused) - live:
            del self.refused[worker]
        joined = sorted(live - self.admitted - set(self.refused))
        if joined:
            problems = worker_problems(client, joined, self.credentials)
            for worker in joined:
                if worker in problems:
                    self.refused[worker] = problems[worker]
                    logger.warning(
                        "Dask worker %s joined during the run and gets no bucket: it %s", worker, problems[worker]
                    )
                else:
                    self.admitted.add(worker)
                    self.lost.discard(worker)
                    logger.info(
                        "Dask worker %s joined during the run: same code, fit to train; it takes buckets now", worker
                    )
        return sorted(self.admitted & live)

    def leave(self, worker: str) -> None:
        """``worker`` left the cluster: no bucket for it until it joins again (and passes the checks)."""
        self.admitted.discard(worker)
        self.lost.add(worker)


def machine_config(
    config: ConfigSchema, client: Client, workers: list[str], address: str, local: bool
) -> tuple[ConfigSchema, CredentialsCheck | None]:
    """What the workers are sent (``config`` without the credentials they resolve themselves), and
    the check a late worker must then pass (None: the credentials, if any, are sent).

    Warns once when a secret is sent to a cluster of other machines (``local``: this one).
    """
    options = config.storage_options
    if options is None or not options.secret_names():
        return config, None
    key, secret, token = options.credentials()
    check, unsupplied = None, []
    if key and secret:
        salt = os.urandom(16)
        check = _credentials_check(salt, credentials_digest(salt, key, secret, token), options.profile)
        unsupplied = sorted(check(client, workers))
        if unsupplied:
            check = None  # sent: nothing for a late worker to resolve
        else:
            options = options.without_credentials()
            run_logger().info(
                "storage_options credentials (key, secret%s) are not sent to the Dask workers: each resolves "
                "the same ones from its own environment",
                ", token" if token else "",
            )
    sent = options.secret_names()
    if sent and not local:
        _warn_sent(sent, address, unsupplied)
    return config.model_copy(update={"storage_options": options}), check


def _warn_sent(sent: list[str], address: str, unsupplied: list[str]) -> None:
    """The one warning of a run whose workers are sent secrets."""
    how = "encrypted by TLS" if address.lower().startswith("tls://") else "in clear text (only tls:// encrypts it)"
    why = (
        f"Dask worker(s) {', '.join(unsupplied)} do not resolve the same credentials from their own environment"
        if unsupplied
        else "only key, secret and token are looked for in a worker's own environment"
    )
    run_logger().warning(
        "storage_options %s cross the scheduler connection %s to every Dask worker with each bucket, %s (%s); "
        "anyone who reaches the scheduler's port can run code on the workers: prefer the AWS_* variables or a "
        "~/.aws profile on each worker",
        ", ".join(sent),
        address,
        how,
        why,
    )


def _credentials_check(salt: bytes, ours: str | None, profile: str | None) -> CredentialsCheck:
    """Worker -> problem, for each worker that does not resolve the credentials digested as ``ours``."""

    def check(client: Client, workers: list[str]) -> dict[str, str]:
        found = client.run(own_credentials_digest, salt, profile, workers=workers, on_error="return")
        return {
            worker: "does not resolve the credentials of the config's storage_options from its own environment, "
            "and this run does not send them: give it the same AWS_* variables or ~/.aws profile"
            for worker, digest in found.items()
            if digest != ours
        }

    return check
