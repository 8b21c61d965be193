"""Which entity names a checkpoint's rows belong to: the names record (docs/formats.md, "Names record").

Row ``i`` of ``embeddings_{type}_{part}.v{v}.h5`` is the entity at offset ``i`` of
``entity_names_{type}_{part}.json`` as that file was when the row was trained. A plain re-import
reshuffles those files, so the row alone does not say whose it is. Therefore:

- every embeddings file a run writes carries the root attribute ``names/digest``: the digest of
  the names file its rows follow; the model file carries the digest of ``dynamic_rel_names.json``
  in dynamic mode (its relation parameters are indexed by it);
- the names themselves are kept once per checkpoint directory, as ``names/{digest}.json`` (a
  verbatim copy of the names file), copied when a run starts and only when missing: a 10M-name
  graph does not write its names again every iteration. An ``epoch_{N}/`` snapshot gets its own
  copies, so it is a checkpoint directory of its own.

A digest is the names file's content identity (:mod:`storage.fs.identity`): the MD5 of its bytes
on local disk (what S3 reports as the ETag of a single-part upload), an object's ETag on an object
store. Checking a record against the entity files therefore reads the local files or makes one
HEAD request per file on S3, and reads one attribute per checkpoint file (a few KiB, through
range reads on S3), never a names list. Equal digests mean the same names in the same places;
different digests may still be the same list (uploaded in parts, say), which :mod:`storage.remap`
finds out by reading both.

A file without the attribute (PBG's, or written before the record existed) has no record: its
rows are used by position, as PBG does.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import h5py
import numpy as np

from pbg_core.errors import PbgError
from pbg_core.ports import NamesDigests
from pbg_core.types import PartitionKey
from storage import hdf5, layout
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound
from storage.fs import changes, identity, reads, urls
from storage.fs.urls import StorageOptions

DIGEST_ATTR = "names/digest"
_SAFE_DIGEST = re.compile(r"^[0-9A-Za-z-]{1,128}$")
_RANGE_BLOCK = 64 << 10  # bytes per range request when reading an attribute of a remote file


class NamesChangedError(PbgError):
    """The names a checkpoint's rows belong to are not the ones the entity files list now."""


def write_digest(hf: h5py.File, digest: str | None) -> None:
    """Record on a checkpoint file which names list its rows follow (nothing when unknown)."""
    if digest is not None:
        hf.attrs[DIGEST_ATTR] = digest


def file_digest(url: str, storage_options: StorageOptions = None) -> str | None:
    """The digest of the names file at ``url`` (see the module docstring); None if it does not exist."""
    try:
        found = identity.identify(url, None, storage_options).digest
    except DataNotFound:
        return None
    if not found:
        return None  # a store that reports no ETag: nothing to record
    # A content-addressed file name must be safe on every store: an odd ETag becomes its own hash.
    return found if _SAFE_DIGEST.match(found) else hashlib.sha256(found.encode()).hexdigest()


def current_digests(entities: EntityStore, keys: Iterable[PartitionKey], dynamic: bool) -> NamesDigests:
    """The digests of the names files ``entities`` holds now, for ``keys`` (and the relations, if ``dynamic``)."""
    found = {}
    for entity, part in keys:
        digest = file_digest(names_url(entities, entity, part), entities.storage_options)
        if digest is not None:
            found[(entity, part)] = digest
    relations = None
    if dynamic:
        relations = file_digest(urls.join_url(entities.url, layout.DYNAMIC_REL_NAMES_FILE), entities.storage_options)
    return NamesDigests(entities=found, relations=relations)


def names_url(entities: EntityStore, entity: str, part: int) -> str:
    """URL of the names file of (entity, part) in ``entities``."""
    return urls.join_url(entities.url, layout.entity_names_file(entity, part))


def recorded_digests(
    checkpoint_url: str,
    version: int,
    keys: Iterable[PartitionKey],
    dynamic: bool,
    storage_options: StorageOptions = None,
) -> NamesDigests:
    """What ``version`` of the checkpoint records: the digests on its files (those without one left out)."""
    found = {}
    for entity, part in keys:
        digest = read_digest(
            urls.join_url(checkpoint_url, layout.embeddings_file(entity, part, version)), storage_options
        )
        if digest is not None:
            found[(entity, part)] = digest
    relations = None
    if dynamic:
        relations = read_digest(urls.join_url(checkpoint_url, layout.model_file(version)), storage_options)
    return NamesDigests(entities=found, relations=relations)


def read_digest(url: str, storage_options: StorageOptions = None) -> str | None:
    """The ``names/digest`` attribute of the checkpoint file at ``url``; None if it has none or is missing."""
    try:
        with _open_attrs(url, storage_options) as hf:
            value = hf.attrs.get(DIGEST_ATTR)
    except DataNotFound:
        return None
    if value is None:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def _open_attrs(url: str, storage_options: StorageOptions) -> Iterator[h5py.File]:
    """``url`` opened read-only for its attributes: locally as a file, remotely through range reads
    (the file's first KiBs, not the whole file as :func:`storage.hdf5.open_read` would download)."""
    filesystem, path = urls.resolve(url, storage_options)
    with urls.translate_errors(url):
        if urls.is_local(filesystem):
            handle = None
            target: object = path
            if not filesystem.exists(path):
                raise DataNotFound(url, "no such checkpoint file")
        else:
            handle = filesystem.open(path, "rb", block_size=_RANGE_BLOCK, cache_type="readahead")
            target = handle
        # A remote file is read through fsspec's thread while h5py holds its lock: no collection then.
        paused = hdf5.collection_paused() if handle is not None else contextlib.nullcontext()
        try:
            with paused:
                try:
                    hf = h5py.File(target, "r")
                except OSError as err:
                    raise BadDataError(url, f"not a readable HDF5 file ({err})") from None
                with hf:
                    yield hf
        finally:
            if handle is not None:
                handle.close()


class NamesArchive:
    """``names/{digest}.json`` of a checkpoint directory: each names list its versions' rows follow, once."""

    def __init__(self, checkpoint_url: str, storage_options: StorageOptions = None) -> None:
        self.url = urls.join_url(checkpoint_url, layout.NAMES_DIR)
        self.storage_options = storage_options

    def __repr__(self) -> str:
        return f"NamesArchive({self.url!r})"

    def file_url(self, digest: str) -> str:
        """Where the names of ``digest`` are kept."""
        return urls.join_url(self.url, layout.names_file(digest))

    def digests(self) -> set[str]:
        """The digests whose names are kept here."""
        names = reads.listdir(self.url, self.storage_options)
        return {digest for digest in map(layout.parse_names_file, names) if digest is not None}

    def keep(self, sources: Mapping[str, str], verify: bool = True) -> int:
        """Copy in the names files of ``sources`` (digest -> names file URL) not kept yet; returns how many.

        ``verify``: the sources are the names files the digests were taken of (not another
        archive's copies, whose digest may be an object store's multi-part ETag).

        Raises:
            NamesChangedError: a copy from and to local disk does not have its digest (the names
                file was replaced while it was copied); nothing half-copied is left.
        """
        kept = self.digests()
        copied = 0
        for digest, source in sorted(sources.items()):
            if digest in kept:
                continue
            target = self.file_url(digest)
            changes.copy(source, target, self.storage_options)
            if verify and _both_local(source, target, self.storage_options) and file_digest(target) != digest:
                changes.remove(target, storage_options=self.storage_options)
                raise NamesChangedError(f"{source} changed while it was copied to {target}; is an import running?")
            copied += 1
        return copied

    def load(self, digest: str) -> list[str]:
        """The names kept for ``digest``, by offset.

        Raises:
            DataNotFound: they are not kept here (the directory was copied without its ``names/``).
        """
        return EntityStore(self.url, self.storage_options).read_names_file(layout.names_file(digest))

    def remove_except(self, keep: set[str]) -> list[str]:
        """Delete the names of every digest not in ``keep``; returns those removed."""
        stale = sorted(self.digests() - keep)
        for digest in stale:
            changes.remove(self.file_url(digest), storage_options=self.storage_options)
        return stale


def _both_local(source: str, target: str, storage_options: StorageOptions) -> bool:
    """Whether both files are on local disk, where a digest is the MD5 of the bytes on both sides
    (an object store's ETag of a multi-part upload is not)."""
    return all(urls.is_local(urls.resolve(url, storage_options)[0]) for url in (source, target))


def copy_archive(source_checkpoint: str, target_checkpoint: str, storage_options: StorageOptions = None) -> None:
    """Give ``target_checkpoint`` (a snapshot) every names list ``source_checkpoint`` keeps."""
    source = NamesArchive(source_checkpoint, storage_options)
    target = NamesArchive(target_checkpoint, storage_options)
    target.keep({d: source.file_url(d) for d in source.digests()}, verify=False)


@dataclass(frozen=True)
class NamesCheck:
    """How a checkpoint's names record compares with the entity files now.

    Attributes:
        changed: Entity types some of whose partitions follow another names list.
        relations_changed: Dynamic relations follow another ``dynamic_rel_names.json``.
        unchecked: What cannot be compared (no record, or no names file now): used by position.
    """

    changed: tuple[str, ...] = ()
    relations_changed: bool = False
    unchecked: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        """Nothing that could be compared differs."""
        return not self.changed and not self.relations_changed


def compare(recorded: NamesDigests, current: NamesDigests, keys: Iterable[PartitionKey], dynamic: bool) -> NamesCheck:
    """Compare a record with the digests of the entity files, per entity type (a type is compared
    only when every one of its partitions has a digest on both sides)."""
    by_type: dict[str, list[PartitionKey]] = {}
    for key in keys:
        by_type.setdefault(key[0], []).append(key)
    changed, unchecked = [], []
    for entity, parts in sorted(by_type.items()):
        if any(key not in recorded.entities or key not in current.entities for key in parts):
            unchecked.append(f"entity type {entity!r}")
        elif any(recorded.entities[key] != current.entities[key] for key in parts):
            changed.append(entity)
    relations_changed = False
    if dynamic:
        if recorded.relations is None or current.relations is None:
            unchecked.append("the relation types")
        else:
            relations_changed = recorded.relations != current.relations
    return NamesCheck(tuple(changed), relations_changed, tuple(unchecked))


__all__ = [
    "DIGEST_ATTR",
    "NamesArchive",
    "NamesChangedError",
    "NamesCheck",
    "compare",
    "copy_archive",
    "current_digests",
    "file_digest",
    "names_url",
    "read_digest",
    "recorded_digests",
    "write_digest",
]
