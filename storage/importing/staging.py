"""Atomic output directories: write into hidden staging directories, then move into place.

Each output directory gets a hidden ``.pbg-import-<token>-<n>`` staging directory inside
it (created, with any missing parents). :meth:`Staging.move_into_place` moves the staged files
into their final directories in staging order (an append first moves each file it replaces into
``.pbg-import-<token>-replaced``); the caller records the import (its manifest), then
:meth:`Staging.finish` removes the staging and backup directories. :meth:`Staging.rollback`
removes every file this run staged or already moved, puts the files it replaced back, and
removes the output directories it created. A failure during the moves of a plain import can
therefore also remove files an older run had left at the same names: the output is then absent
rather than a mix of two runs. A journal (:mod:`storage.importing.journal`) lists all of this
for :mod:`storage.importing.leftovers`, which handles what a ``kill -9`` leaves.

A Ctrl-C or SIGTERM must not cause that: :class:`StopSignalHold` holds both signals while the
moves run and delivers one that came once the caller is past its rollback, so an interrupted
import leaves either the previous output or the new one, whole.
"""

from __future__ import annotations

import posixpath
import signal
import threading
import uuid
from types import FrameType, TracebackType
from typing import Any

from storage import layout
from storage.fs import changes, reads, urls
from storage.importing.journal import COMMITTING, STAGING, Journal, absolute, backup_dir
from storage.pause_points import pause_point


class Staging:
    """Hidden staging directories inside the output directories; commit moves files into place.

    Works on local disk (moves are renames) and object stores (moves are server-side copies
    followed by deletes; each object still appears whole).

    Args:
        storage_options: Filesystem keyword arguments.
        keep_replaced: Move a file already at a final name aside into a hidden backup directory
            first (an append: :meth:`rollback` can put it back).
        token: The import's token (default: a fresh one).
        journal_dir: Keep a journal (:mod:`storage.importing.journal`) in this directory (the
            entity_path), so that a later import can undo or finish what a killed one left.
    """

    def __init__(
        self,
        storage_options: Any = None,
        keep_replaced: bool = False,
        token: str | None = None,
        journal_dir: str | None = None,
    ) -> None:
        self.storage_options = storage_options
        self.keep_replaced = keep_replaced
        self.token = token or uuid.uuid4().hex[:12]
        self.staged: list[tuple[str, str]] = []  # (staging url, final url)
        self.created_dirs: list[str] = []  # directories we made (urls)
        self.moved: list[str] = []  # final urls of files moved into place
        self.replaced: list[tuple[str, str]] = []  # keep_replaced: (backup url, final url)
        self.journal_dir = journal_dir
        self.journal = Journal(self.token, keep_replaced) if journal_dir is not None else None

    def stage(self, final_url: str) -> str:
        """A fresh staging directory inside ``final_url`` (created, like ``final_url``; journaled first)."""
        missing = final_url
        while _has_parent(missing) and not reads.exists(missing, self.storage_options):
            self.created_dirs.append(missing)
            missing = _parent(missing)
        staging_url = urls.join_url(final_url, layout.import_staging_dir(self.token, len(self.staged)))
        self.staged.append((staging_url, final_url))
        self._journal(STAGING)
        changes.makedirs(staging_url, self.storage_options)
        return staging_url

    def commit(self) -> None:
        """:meth:`move_into_place`, then :meth:`finish`."""
        self.move_into_place()
        self.finish()

    def move_into_place(self) -> None:
        """Move every staged file into its final directory, in staging order.

        With ``keep_replaced`` a file already at a final name is first moved aside into a hidden
        backup directory, which :meth:`rollback` moves back and :meth:`finish` deletes.
        """
        pause_point("import-staged")
        so = self.storage_options
        files = {s: reads.listdir(s, so) for s, _ in self.staged}
        existed: dict[str, list[str]] = {}
        if self.keep_replaced:  # what each move replaces, known before the first one
            existed = {
                s: [n for n in names if reads.exists(urls.join_url(f, n), so)]
                for (s, f), names in zip(self.staged, files.values(), strict=True)
            }
        self._journal(COMMITTING, files=files, existed=existed)
        for staging_url, final_url in self.staged:
            for name in files[staging_url]:
                target = urls.join_url(final_url, name)
                if name in existed.get(staging_url, ()):
                    backup = urls.join_url(backup_dir(final_url, self.token), name)
                    changes.move(target, backup, self.storage_options)
                    self.replaced.append((backup, target))
                changes.move(urls.join_url(staging_url, name), target, self.storage_options)
                self.moved.append(target)
                pause_point("import-move")

    def finish(self) -> None:
        """Remove the (now empty) staging directories, the backups and the journal: the commit is done."""
        for staging_url, _ in self.staged:
            changes.remove_tree(staging_url, self.storage_options)
        # Only directories that got a backup: a plain import makes no extra request per directory.
        for backup in {posixpath.dirname(backup) for backup, _ in self.replaced}:
            changes.remove_tree(backup, self.storage_options)
        if self.journal is not None and self.journal_dir is not None:
            self.journal.remove(self.journal_dir, self.storage_options)

    def rollback(self) -> None:
        """Remove every staged or moved file, and output directories this import created."""
        for staging_url, _ in self.staged:
            changes.remove_tree(staging_url, self.storage_options)
        for target in self.moved:
            changes.remove(target, storage_options=self.storage_options)
        for backup, target in reversed(self.replaced):  # the files this import replaced, back in place
            changes.move(backup, target, self.storage_options)
        for backup in {posixpath.dirname(backup) for backup, _ in self.replaced}:
            changes.remove_empty_dir(backup, self.storage_options)
        if self.journal is not None and self.journal_dir is not None:
            self.journal.remove(self.journal_dir, self.storage_options)
        # Children before parents: a child's URL is longer than its parent's.
        for url in sorted(self.created_dirs, key=len, reverse=True):
            changes.remove_empty_dir(url, self.storage_options)

    def _journal(
        self, phase: str, files: dict[str, list[str]] | None = None, existed: dict[str, list[str]] | None = None
    ) -> None:
        """Record what is staged (absolute URLs) before it is created or moved."""
        if self.journal is None or self.journal_dir is None:
            return
        so = self.storage_options
        self.journal.phase = phase
        self.journal.staged = [(absolute(s, so), absolute(f, so)) for s, f in self.staged]
        self.journal.created = [absolute(c, so) for c in self.created_dirs]
        self.journal.files = {absolute(s, so): names for s, names in (files or {}).items()}
        self.journal.existed = {absolute(s, so): names for s, names in (existed or {}).items()}
        self.journal.save(self.journal_dir, so)


def _parent(url: str) -> str:
    """``url`` without its last component (``s3://b/x/y`` -> ``s3://b/x``)."""
    return posixpath.dirname(url.rstrip("/"))


def _has_parent(url: str) -> bool:
    """False at a root: ``/``, ``s3://bucket`` (never created or removed by an import)."""
    scheme, sep, rest = url.rpartition("://")
    rest = rest.strip("/")
    if sep and scheme != "file":
        return "/" in rest  # below the bucket
    return bool(rest)


class StopSignalHold:
    """Holds SIGINT and SIGTERM from :meth:`hold` until the block ends, then delivers the first one held.

    Use as ``with StopSignalHold() as hold: try: ...; hold.hold(); staging.commit() except
    BaseException: staging.rollback(); raise``: a signal that comes during the commit is
    delivered (to the handler that was in place) only after the block, so it can neither
    cut the moves short nor trigger the rollback of a complete output. Outside the main
    thread (where handlers cannot be set) it holds nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self.held: int | None = None

    def hold(self) -> None:
        """Start holding (idempotent)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self.held is None:
            self.held = signum

    def __enter__(self) -> StopSignalHold:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self.held is not None:
            signal.raise_signal(self.held)  # runs the restored handler now, as if it had just come
