"""Files a retraining run received, known by their place under the inbox and their content.

A retraining run (:mod:`storage.retraining.arrivals`) imports the files of its inbox (``retrain.incoming.inputs``)
that were not received before. "Before" has to survive the project directory moving, the inbox
being copied to another disk or prefix, and old run directories being pruned, so a received file
is recorded as a :class:`ReceivedFile`: its :class:`~storage.fs.identity.FileIdentity` under the
inbox root (:func:`inbox_root`: relative place, size, and MD5 locally or the ETag on S3), the
import generation it went to and when, and (local files) its modification time, which lets a
later run skip hashing a file whose place, size and time are unchanged.

A file found in the inbox is judged against what was received (:func:`judge`), in this order:

1. same place and content: already received, skipped;
2. same content at another place (a copy, or a file moved within the inbox): a duplicate, skipped;
3. same place, other content (a producer rewrote ``in/day3.tsv``, or writes every day's edges to
   one fixed name): changed since it was received, imported as new data;
4. no identity at its place, but a record from before identities (:class:`OldPath`: the import
   manifest's ``inputs``, paths as spelled then) whose path ends with its place: received, skipped;
5. otherwise new.

Records from before identities are read by :func:`old_records`: a path that still names a file is
identified now and counts as received with the content it has; a path that names nothing any more
(the project moved) becomes an :class:`OldPath`, matched by place alone (rule 4), and where the
import recorded the input's identity (``input_files``) by its content too (rule 2). An old record is
never a reason to import a file again.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fsspec.core import split_protocol

from storage.fs import globs, reads, urls
from storage.fs.identity import FileIdentity, identify, relative_place
from storage.fs.urls import StorageOptions
from storage.retraining.generations import Generation
from storage.retraining.run_dirs import list_run_dirs, run_dir_url
from storage.retraining.state import read_state

logger = logging.getLogger(__name__)

Kind = Literal["new", "received", "duplicate", "changed", "old path"]


@dataclass(frozen=True)
class ReceivedFile:
    """A file received by a retraining run: its identity, its generation, when, and its mtime."""

    identity: FileIdentity
    generation: int | None  # None: arrived in this run's batch, not imported yet
    received_at: str | None = None
    mtime: float | None = None  # local files: lets a later run trust an unchanged (place, size, mtime)

    def to_json(self) -> dict[str, Any]:
        """``{"relative", "size", "digest", "generation", "received_at", "mtime"}``."""
        return {**self.identity.to_json(), "generation": self.generation, "received_at": self.received_at} | (
            {"mtime": self.mtime} if self.mtime is not None else {}
        )

    @classmethod
    def from_json(cls, data: Any) -> ReceivedFile | None:
        """The record ``data`` holds, or None when it is not one."""
        identity = FileIdentity.from_json(data)
        if identity is None or not isinstance(data.get("generation"), int):
            return None
        mtime = data.get("mtime")
        when = data.get("received_at")
        return cls(
            identity,
            int(data["generation"]),
            str(when) if when is not None else None,
            float(mtime) if isinstance(mtime, int | float) else None,
        )


@dataclass(frozen=True)
class OldPath:
    """A received file known only by the path an import recorded before identities, which names nothing now."""

    path: str
    generation: int
    received_at: str | None = None

    def names(self, relative: str) -> bool:
        """Whether this path ends with the place ``relative`` (scheme and spelling aside)."""
        path = posixpath.normpath(str(split_protocol(self.path)[1]))
        return path == relative or path.endswith("/" + relative)


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` made of a file: its kind and the record that decided it."""

    kind: Kind
    earlier: ReceivedFile | OldPath | None = None

    @property
    def is_new(self) -> bool:
        """Whether the file is imported (new, or changed since it was received)."""
        return self.kind in ("new", "changed")

    def describe(self, identity: FileIdentity) -> str:
        """One log line about the file (``identity``) and why it is imported or skipped."""
        earlier = self.earlier
        if earlier is None:
            when = ""
        elif earlier.generation is None:
            when = "among the files of this run"
        else:
            when = f"received on {earlier.received_at or 'an earlier run'} as generation {earlier.generation}"
        if self.kind == "received":
            return f"{identity.relative}: already {when}: skipped"
        if self.kind == "duplicate":
            assert isinstance(earlier, ReceivedFile)
            return f"{identity.relative} holds the same bytes as {earlier.identity.relative}, {when}: skipped as a duplicate"
        if self.kind == "changed":
            return f"{identity.relative} changed since it was {when}: importing it as new data"
        if self.kind == "old path":
            assert isinstance(earlier, OldPath)
            return (
                f"{identity.relative}: {earlier.path} was {when} (recorded by path, which names nothing now): skipped"
            )
        return f"{identity.relative}: new"


def inbox_root(inputs: str) -> str:
    """The directory identities are relative to: ``inputs`` itself, or the part of a glob before its
    pattern (:func:`storage.fs.globs.glob_root`)."""
    return globs.glob_root(inputs)


def judge(identity: FileIdentity, received: Sequence[ReceivedFile], old: Sequence[OldPath] = ()) -> Verdict:
    """Whether ``identity`` was received before, and which record says so (rules in the module docstring)."""
    same_file = [r for r in received if r.identity.same_file(identity)]
    if same_file:
        return Verdict("received", same_file[-1])
    same_content = [r for r in received if r.identity.same_content(identity)]
    if same_content:
        return Verdict("duplicate", same_content[-1])
    same_place = [r for r in received if r.identity.relative == identity.relative]
    if same_place:
        return Verdict("changed", same_place[-1])
    named = [o for o in old if o.names(identity.relative)]
    if named:
        return Verdict("old path", named[-1])
    return Verdict("new")


def identify_arrival(
    url: str, root: str, received: Iterable[ReceivedFile], storage_options: StorageOptions = None
) -> tuple[FileIdentity, float | None]:
    """The identity of the file at ``url`` under ``root``, and its mtime (local files; else None).

    A local file whose place, size and mtime equal a record's is taken to hold that record's
    content without being read again (what ``rsync`` trusts too); any difference reads and hashes it.
    """
    filesystem, path = urls.resolve(url, storage_options)
    if not urls.is_local(filesystem):
        return identify(url, root, storage_options), None
    with urls.translate_errors(url):
        info = filesystem.info(path)
    size, mtime = int(info.get("size") or 0), info.get("mtime")
    mtime = float(mtime) if isinstance(mtime, int | float) else None
    relative = relative_place(url, root, storage_options)
    for record in received:
        same = record.identity.relative == relative and record.identity.size == size
        if same and mtime is not None and record.mtime == mtime:
            return record.identity, mtime
    return identify(url, root, storage_options), mtime


def old_records(
    history: Sequence[Generation],
    root: str,
    received: Sequence[ReceivedFile],
    storage_options: StorageOptions = None,
) -> tuple[list[ReceivedFile], list[OldPath]]:
    """The received files an import manifest's generations name by path (``inputs``) and no record in
    ``received`` covers (same generation and place).

    A path that names a file is identified now (content as it is now); one that names nothing
    becomes an :class:`OldPath`.
    """
    covered = {(r.generation, r.identity.relative) for r in received}
    found: list[ReceivedFile] = []
    gone: list[OldPath] = []
    for entry in history:
        generation, when = entry.number, entry.imported_at
        for index, url in enumerate(entry.inputs):
            if not url or (generation, relative_place(url, root, storage_options)) in covered:
                continue
            if reads.exists(url, storage_options) and not reads.isdir(url, storage_options):
                identity, mtime = identify_arrival(url, root, [*received, *found], storage_options)
                found.append(ReceivedFile(identity, generation, when, mtime))
                continue
            gone.append(OldPath(url, generation, when))
            recorded = entry.input_identity(index)  # the import's own identity of it, where it recorded one
            if recorded is not None:
                # Its content, so that the file is known wherever it is now (rule 2); its place stays the
                # old path as spelled, which no relative place equals: by place it is judged by rule 4.
                found.append(ReceivedFile(FileIdentity(url, recorded.size, recorded.digest), generation, when))
    return found, gone


@dataclass(frozen=True)
class RunRecords:
    """What the run directories under a root recorded: the files received and the holdouts split."""

    received: list[ReceivedFile]
    holdouts: dict[str, str]  # holdout directory base name -> the run whose retrain.json lists it


def recorded_in_runs(root: str, storage_options: StorageOptions = None) -> RunRecords:
    """Every run directory's ``retrain.json`` under ``root``, together (oldest run first).

    Raises:
        BadDataError: a ``retrain.json`` is broken (named): it may hold the only record of a file.
    """
    received: list[ReceivedFile] = []
    holdouts: dict[str, str] = {}
    for name in list_run_dirs(root, storage_options):
        state = read_state(run_dir_url(root, name), storage_options)
        if state is None:
            continue
        received += [r for r in map(ReceivedFile.from_json, state.received_files) if r is not None]
        for path in state.holdouts:
            holdouts.setdefault(path.rstrip("/").rpartition("/")[2], name)
    return RunRecords(merge(received), holdouts)


def merge(*groups: Iterable[ReceivedFile]) -> list[ReceivedFile]:
    """Every record once (by identity and generation), in the order first seen."""
    seen: dict[tuple[FileIdentity, int | None], ReceivedFile] = {}
    for group in groups:
        for record in group:
            seen.setdefault((record.identity, record.generation), record)
    return list(seen.values())


__all__ = [
    "OldPath",
    "ReceivedFile",
    "RunRecords",
    "Verdict",
    "identify_arrival",
    "inbox_root",
    "judge",
    "merge",
    "old_records",
    "recorded_in_runs",
]
