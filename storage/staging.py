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
    """Hidden staging directories inside the output directories; commit moves files into place."""

    def __init__(self, storage_options: Any = None) -> None:
        self.storage_options = storage_options
        self.token = uuid.uuid4().hex[:12]
        self.staged: list[tuple[str, str]] = []  # (staging url, final url)
        self.created_dirs: list[tuple[Any, str]] = []  # (filesystem, path) of directories we made
        self.moved: list[tuple[Any, str]] = []  # (filesystem, final path)

    def stage(self, final_url: str) -> str:
        """A fresh staging directory inside ``final_url`` (created, like ``final_url``)."""
        filesystem, final_path = fs.resolve(final_url, self.storage_options)
        missing = final_path
        while missing and missing != "/" and not filesystem.exists(missing):
            self.created_dirs.append((filesystem, missing))
            missing = posixpath.dirname(missing)
        staging_url = fs.join_url(final_url, f".pbg-import-{self.token}-{len(self.staged)}")
        fs.makedirs(staging_url, self.storage_options)
        self.staged.append((staging_url, final_url))
        return staging_url

    def commit(self) -> None:
        """Move every staged file into its final directory, in staging order."""
        for staging_url, final_url in self.staged:
            filesystem, staging_path = fs.resolve(staging_url, self.storage_options)
            final_path = fs.resolve(final_url, self.storage_options)[1]
            for entry in sorted(filesystem.ls(staging_path, detail=False)):
                target = posixpath.join(final_path, posixpath.basename(entry.rstrip("/")))
                filesystem.mv(entry, target)
                self.moved.append((filesystem, target))
            filesystem.rm(staging_path, recursive=True)

    def rollback(self) -> None:
        """Remove every staged or moved file, and output directories this import created."""
        for staging_url, _ in self.staged:
            filesystem, staging_path = fs.resolve(staging_url, self.storage_options)
            if filesystem.exists(staging_path):
                filesystem.rm(staging_path, recursive=True)
        for filesystem, target in self.moved:
            if filesystem.exists(target):
                filesystem.rm(target)
        # Children before parents: a child's path is longer than its parent's.
        for filesystem, path in sorted(self.created_dirs, key=lambda item: len(item[1]), reverse=True):
            if filesystem.exists(path) and not filesystem.ls(path, detail=False):
                filesystem.rmdir(path)
