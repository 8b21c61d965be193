"""Who may use an ``entity_path``: one import writes it, and never while a training run reads it.

- An import (``pbg import``, ``--append``, the ``pbg-import`` flow, a retraining run's import)
  holds ``{entity_path}/import_lease.json`` for its whole duration: a :class:`storage.lease.Lease`
  (created exclusively, naming its holder, renewed, expiring, taken over from a dead process).
- A reader (a training run, ``pbg eval``, ``pbg export``) holds its own file
  ``{entity_path}/.pbg-readers/<token>.json``, with the same content and life.

The protocol, race-free on storage where one object's writes and listings are seen in order
(local disk; S3 since its strong consistency): an importer creates its lease, *then* lists the
readers; a reader creates its file, *then* reads the import lease. Of an importer and a reader
starting together, whichever writes second sees the other's file, so at least one of them sees
the other; whoever sees a live other deletes what it created (so the disk is as before) and
raises :class:`storage.lease.LeaseHeldError` naming the other. Reader files of dead processes
(expired, or gone from this host) are deleted by the importer that finds them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shlex
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from storage import layout
from storage.errors import BadDataError
from storage.fs import changes, reads, urls
from storage.lease import Lease, LeaseHeldError, LeaseHolder, LeaseKeeper, kept, read_holder

logger = logging.getLogger(__name__)

_LABEL_WIDTH = 120


def command_label() -> str:
    """This process's command line, as a lease holder's label (``pbg import config.json a.tsv ...``)."""
    program = sys.argv[0].rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else "python"
    text = shlex.join([program, *sys.argv[1:]])
    return text if len(text) <= _LABEL_WIDTH else text[: _LABEL_WIDTH - 3] + "..."


def import_lease(entity_path: str, label: str, storage_options: Any = None) -> Lease:
    """The import lease of ``entity_path`` for a holder named ``label`` (not acquired)."""
    return Lease(
        entity_path,
        label,
        name=layout.IMPORT_LEASE_FILE,
        busy=f"entity_path {entity_path} is being imported into",
        storage_options=storage_options,
    )


def reader_lease(entity_path: str, label: str, storage_options: Any = None) -> Lease:
    """A new reader file of ``entity_path`` for a holder named ``label`` (not acquired)."""
    token = uuid.uuid4().hex
    return Lease(
        entity_path,
        label,
        name=layout.reader_file(token),
        busy=f"entity_path {entity_path} is being read",
        storage_options=storage_options,
        token=token,
        prune_dir=True,
    )


def acquire_import(lease: Lease, entity_path: str) -> None:
    """Take the import lease, then make sure no live reader uses ``entity_path``.

    Raises:
        LeaseHeldError: another import holds the lease, or a training run (eval, export) reads
            ``entity_path``; named in the message. Nothing is left behind.
    """
    lease.acquire()
    try:
        for url, holder in reader_files(entity_path, lease.storage_options):
            if holder is not None and holder.is_live():
                raise LeaseHeldError(
                    entity_path,
                    f"is being read by {holder.describe()}; an import would change the entity files "
                    "under it: wait for it to finish (or delete "
                    f"{url} if that run is known to be dead)",
                )
            stale = holder.describe() if holder is not None else "nobody (not a reader file)"
            logger.warning("removing the reader file %s of %s: expired, or its process is gone", url, stale)
            changes.remove(url, missing_ok=True, storage_options=lease.storage_options)
    except BaseException:
        lease.release()
        raise


def acquire_reader(lease: Lease, entity_path: str) -> bool:
    """Write the reader file, then make sure no live import writes ``entity_path``; whether it is held.

    A reader without write access to ``entity_path`` (a read-only mount, read-only credentials)
    cannot leave a file there: it is warned that an import could change the files under it, checks
    that none is under way now, and holds nothing (False).

    Raises:
        LeaseHeldError: an import holds ``entity_path``'s import lease (named in the message);
            the reader file is deleted again.
    """
    try:
        lease.acquire()
    except OSError as exc:  # AccessDenied (S3, translated) is a PermissionError too
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise
        logger.warning("cannot write a reader file into %s (%s): an import could change it meanwhile", entity_path, exc)
    try:
        writer = read_holder(urls.join_url(entity_path, layout.IMPORT_LEASE_FILE), lease.storage_options)
    except BaseException:
        lease.release()
        raise
    if writer is not None and writer.is_live():
        lease.release()
        raise LeaseHeldError(
            entity_path,
            f"is being imported into by {writer.describe()}; wait for the import to finish before reading it",
        )
    return lease.held


def reader_files(entity_path: str, storage_options: Any = None) -> list[tuple[str, LeaseHolder | None]]:
    """Every reader file of ``entity_path`` with its holder (None: not a lease; files deleted meanwhile are left out)."""
    directory = urls.join_url(entity_path, layout.READERS_DIR)
    found: list[tuple[str, LeaseHolder | None]] = []
    for name in reads.listdir(directory, storage_options):
        if layout.parse_reader_file(name) is None:
            continue  # a renewal's temporary file
        url = urls.join_url(directory, name)
        try:
            holder = read_holder(url, storage_options)  # None: deleted since the listing
        except BadDataError:
            found.append((url, None))  # not a lease: no live reader either
            continue
        if holder is not None:
            found.append((url, holder))
    return found


@contextlib.contextmanager
def importing(entity_path: str, label: str, storage_options: Any = None) -> Iterator[LeaseKeeper]:
    """Hold ``entity_path``'s import lease (see :func:`acquire_import`) while the block runs, renewed."""
    lease = import_lease(entity_path, label, storage_options)
    created = _missing_dirs(entity_path, storage_options)
    try:
        acquire_import(lease, entity_path)
        with kept(lease) as keeper:
            yield keeper
    finally:
        for url in created:  # made for the lease file: an import that wrote nothing leaves no empty directory
            changes.remove_empty_dir(url, storage_options)


def _missing_dirs(url: str, storage_options: Any) -> list[str]:
    """``url`` and its ancestors that do not exist (local disk only), deepest first."""
    filesystem, path = urls.resolve(url, storage_options)
    missing: list[str] = []
    if not urls.is_local(filesystem):
        return missing
    while path not in ("", "/") and not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


@contextlib.contextmanager
def reading(entity_path: str, label: str, storage_options: Any = None) -> Iterator[LeaseKeeper | None]:
    """Hold a reader file of ``entity_path`` (see :func:`acquire_reader`) while the block runs, renewed
    (None: ``entity_path`` is read-only for this reader)."""
    lease = reader_lease(entity_path, label, storage_options)
    created = _missing_dirs(entity_path, storage_options)
    try:
        if not acquire_reader(lease, entity_path):
            yield None
            return
        with kept(lease) as keeper:
            yield keeper
    finally:
        for url in created:  # an entity_path that does not exist is not left behind empty
            changes.remove_empty_dir(url, storage_options)


T = TypeVar("T")
P = ParamSpec("P")


def reads_entity_path(function: Callable[P, T]) -> Callable[P, T]:
    """Run ``function(config, ...)`` as a reader of ``config.entity_path`` (``pbg export``), see :func:`reading`."""

    @functools.wraps(function)
    def as_reader(*args: P.args, **kwargs: P.kwargs) -> T:
        config: Any = args[0] if args else kwargs["config"]
        with reading(config.entity_path, command_label(), config.storage_options_for_fs()):
            return function(*args, **kwargs)

    return as_reader


__all__ = [
    "acquire_import",
    "acquire_reader",
    "command_label",
    "import_lease",
    "importing",
    "reader_files",
    "reader_lease",
    "reading",
    "reads_entity_path",
]
