"""Atomic output directories: write into hidden staging directories, then move into place.

Each output directory gets a hidden ``.pbg-import-<token>-<n>`` staging directory inside
it (created, with any missing parents). :meth:`Staging.commit` moves the staged files into
their final directories in staging order; :meth:`Staging.rollback` removes every file this
run staged or already moved, and the output directories it created. A failure during the
moves can therefore also remove files an older run had left at the same names: the output
is then absent rather than a mix of two runs.

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

from storage.fs import changes, reads, urls


class Staging:
    """Hidden staging directories inside the output directories; commit moves files into place.

    Works on local disk (moves are renames) and object stores (moves are server-side copies
    followed by deletes; each object still appears whole).
    """

    def __init__(self, storage_options: Any = None, keep_replaced: bool = False) -> None:
        self.storage_options = storage_options
        self.keep_replaced = keep_replaced
        self.token = uuid.uuid4().hex[:12]
        self.staged: list[tuple[str, str]] = []  # (staging url, final url)
        self.created_dirs: list[str] = []  # directories we made (urls)
        self.moved: list[str] = []  # final urls of files moved into place
        self.replaced: list[tuple[str, str]] = []  # keep_replaced: (backup url, final url)

    def stage(self, final_url: str) -> str:
        """A fresh staging directory inside ``final_url`` (created, like ``final_url``)."""
        missing = final_url
        while _has_parent(missing) and not reads.exists(missing, self.storage_options):
            self.created_dirs.append(missing)
            missing = _parent(missing)
        staging_url = urls.join_url(final_url, f".pbg-import-{self.token}-{len(self.staged)}")
        changes.makedirs(staging_url, self.storage_options)
        self.staged.append((staging_url, final_url))
        return staging_url

    def commit(self) -> None:
        """Move every staged file into its final directory, in staging order.

        With ``keep_replaced`` a file already at a final name is first moved aside into a hidden
        backup directory, which :meth:`rollback` moves back and a finished commit deletes.
        """
        for staging_url, final_url in self.staged:
            for name in reads.listdir(staging_url, self.storage_options):
                target = urls.join_url(final_url, name)
                if self.keep_replaced and reads.exists(target, self.storage_options):
                    backup = urls.join_url(final_url, f".pbg-import-{self.token}-replaced", name)
                    changes.move(target, backup, self.storage_options)
                    self.replaced.append((backup, target))
                changes.move(urls.join_url(staging_url, name), target, self.storage_options)
                self.moved.append(target)
            changes.remove_tree(staging_url, self.storage_options)
        # Only directories that got a backup: a plain import makes no extra request per directory.
        for backup_dir in {posixpath.dirname(backup) for backup, _ in self.replaced}:
            changes.remove_tree(backup_dir, self.storage_options)

    def rollback(self) -> None:
        """Remove every staged or moved file, and output directories this import created."""
        for staging_url, _ in self.staged:
            changes.remove_tree(staging_url, self.storage_options)
        for target in self.moved:
            changes.remove(target, storage_options=self.storage_options)
        for backup, target in reversed(self.replaced):  # the files this import replaced, back in place
            changes.move(backup, target, self.storage_options)
        # Children before parents: a child's URL is longer than its parent's.
        for url in sorted(self.created_dirs, key=len, reverse=True):
            changes.remove_empty_dir(url, self.storage_options)


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
