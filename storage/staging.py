"""Atomic output directories: write into hidden staging directories, then move into place.

Each output directory gets a hidden ``.pbg-import-<token>-<n>`` staging directory inside
it (created, with any missing parents). :meth:`Staging.commit` moves the staged files into
their final directories in staging order; :meth:`Staging.rollback` removes every file this
run staged or already moved, and the output directories it created. A failure during the
moves can therefore also remove files an older run had left at the same names: the output
is then absent rather than a mix of two runs.
"""

from __future__ import annotations

import posixpath
import uuid
from typing import Any

from storage import fs


class Staging:
    """Hidden staging directories inside the output directories; commit moves files into place.

    Works on local disk (moves are renames) and object stores (moves are server-side copies
    followed by deletes; each object still appears whole).
    """

    def __init__(self, storage_options: Any = None) -> None:
        self.storage_options = storage_options
        self.token = uuid.uuid4().hex[:12]
        self.staged: list[tuple[str, str]] = []  # (staging url, final url)
        self.created_dirs: list[str] = []  # directories we made (urls)
        self.moved: list[str] = []  # final urls of files moved into place

    def stage(self, final_url: str) -> str:
        """A fresh staging directory inside ``final_url`` (created, like ``final_url``)."""
        missing = final_url
        while _has_parent(missing) and not fs.exists(missing, self.storage_options):
            self.created_dirs.append(missing)
            missing = _parent(missing)
        staging_url = fs.join_url(final_url, f".pbg-import-{self.token}-{len(self.staged)}")
        fs.makedirs(staging_url, self.storage_options)
        self.staged.append((staging_url, final_url))
        return staging_url

    def commit(self) -> None:
        """Move every staged file into its final directory, in staging order."""
        for staging_url, final_url in self.staged:
            for name in fs.listdir(staging_url, self.storage_options):
                target = fs.join_url(final_url, name)
                fs.move(fs.join_url(staging_url, name), target, self.storage_options)
                self.moved.append(target)
            fs.remove_tree(staging_url, self.storage_options)

    def rollback(self) -> None:
        """Remove every staged or moved file, and output directories this import created."""
        for staging_url, _ in self.staged:
            fs.remove_tree(staging_url, self.storage_options)
        for target in self.moved:
            fs.remove(target, storage_options=self.storage_options)
        # Children before parents: a child's URL is longer than its parent's.
        for url in sorted(self.created_dirs, key=len, reverse=True):
            fs.remove_empty_dir(url, self.storage_options)


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
