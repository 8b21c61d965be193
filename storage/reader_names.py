"""Whose rows a reader of a checkpoint version sees: export's labels and eval's check (docs/formats.md, "Names record").

Row ``i`` of a checkpoint's (type, partition) belongs to the name at offset ``i`` of the names
list its file records (``names/digest``, :mod:`storage.checkpoint_names`), not to whatever
``entity_names_{type}_{part}.json`` lists now: a plain re-import since reshuffles that file.

- **Export** labels each row with the name its record says (:func:`export_labels`): from the
  list kept in the checkpoint's own ``names/{digest}.json``, whatever happened to ``entity_path``
  since. Where the checkpoint lacks that file, the entity files serve only while their digest is
  the record's; otherwise the export is refused, naming the entity type and partition. A file
  without a record (PBG's, older ones) is labelled by position from the entity files, as PBG
  does, with one warning. Dynamic relation types likewise, through the model file's record.
- **Evaluation** (``pbg eval``, the retraining gate's holdout) ranks edges of the current import,
  whose (partition, offset) ids follow the entity files now: :func:`check_positions` refuses a
  version whose record differs for a type it ranks, counting what moved
  (:func:`storage.remap.moved.what_moved`). Equal digests (the usual case) cost one attribute per
  checkpoint file and one digest per names file; names are read only when the digests differ.

- **A resumed first pass** (nothing committed yet, bucket saves under ``progress/``):
  :func:`progress_moved` finds the saves whose names moved since; ``pbg train`` then discards
  that progress (:func:`tasks.by_name.start_by_name`) rather than train them as other entities'.

Export and eval write nothing, and refuse before any row is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pbg_core.ports import NamesDigests, PassProgress
from pbg_core.types import PartitionKey
from storage import layout
from storage.checkpoint_names import (
    NamesArchive,
    NamesChangedError,
    NamesCheck,
    compare,
    current_digests,
    file_digest,
    read_digest,
    recorded_digests,
)
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.fs import urls
from storage.progress import CheckpointProgress
from storage.remap.moved import what_moved


@dataclass(frozen=True)
class NamesFile:
    """A names list a reader labels rows with: ``file`` in the directory ``store``."""

    store: EntityStore
    file: str

    @property
    def url(self) -> str:
        """Where the list is."""
        return urls.join_url(self.store.url, self.file)

    def load(self) -> list[str]:
        """The names, by offset (see :meth:`storage.entities.EntityStore.read_names_file`)."""
        return self.store.read_names_file(self.file)


@dataclass(frozen=True)
class RowLabels:
    """Where an export reads the names of a checkpoint version's rows.

    Attributes:
        entities: (type, partition) -> the names its rows belong to.
        relations: The dynamic relation types' names (None unless dynamic).
        unrecorded: What has no names record ("entity type 'user'", "the relation types"):
            labelled by position with the entity files' names.
    """

    entities: Mapping[PartitionKey, NamesFile]
    relations: NamesFile | None = None
    unrecorded: tuple[str, ...] = ()


def export_labels(
    checkpoint: CheckpointStore, version: int, entities: EntityStore, keys: Sequence[PartitionKey], dynamic: bool
) -> RowLabels:
    """The names each row of ``keys`` (and, if ``dynamic``, each relation type) of ``version`` belongs to.

    Raises:
        NamesChangedError: a record names a list the checkpoint's ``names/`` lacks, and the entity
            files hold another list now (the entity type and partition named; nothing is read).
    """
    archive = NamesArchive(checkpoint.url, checkpoint.storage_options)
    kept = archive.digests()  # one listing, not one request per file
    resolve = _Resolver(checkpoint, version, archive, kept, entities)
    labels = {}
    unrecorded: dict[str, None] = {}
    for entity, part in keys:
        where = layout.embeddings_file(entity, part, version)
        found = resolve(
            where, layout.entity_names_file(entity, part), f"the rows of entity type {entity!r} partition {part}"
        )
        if found is None:
            unrecorded[f"entity type {entity!r}"] = None
            found = NamesFile(entities, layout.entity_names_file(entity, part))
        labels[(entity, part)] = found
    relations = None
    if dynamic:
        relations = resolve(layout.model_file(version), layout.DYNAMIC_REL_NAMES_FILE, "the relation parameters' rows")
        if relations is None:
            unrecorded["the relation types"] = None
            relations = NamesFile(entities, layout.DYNAMIC_REL_NAMES_FILE)
    return RowLabels(labels, relations, tuple(unrecorded))


@dataclass(frozen=True)
class _Resolver:
    """One checkpoint file's recorded names list: from the checkpoint's ``names/``, else the entity files.

    ``kept``: the digests ``archive`` (the checkpoint's ``names/``) holds.
    """

    checkpoint: CheckpointStore
    version: int
    archive: NamesArchive
    kept: set[str]
    entities: EntityStore

    def __call__(self, checkpoint_file: str, names_file: str, what: str) -> NamesFile | None:
        """The list ``checkpoint_file`` records (None: it records none).

        Raises:
            NamesChangedError: see :func:`export_labels`.
        """
        options = self.checkpoint.storage_options
        recorded = read_digest(urls.join_url(self.checkpoint.url, checkpoint_file), options)
        if recorded is None:
            return None
        if recorded in self.kept:
            return NamesFile(EntityStore(self.archive.url, options), layout.names_file(recorded))
        current = NamesFile(self.entities, names_file)
        now = file_digest(current.url, self.entities.storage_options)
        if now == recorded:
            return current  # the checkpoint was copied without its names/, the entity files still match
        state = "does not exist" if now is None else "lists other names now (imported again since?)"
        raise NamesChangedError(
            f"checkpoint_path {self.checkpoint.url} version {self.version}: {what} belong to the "
            f"names with digest {recorded} (recorded on {checkpoint_file}), which {self.archive.file_url(recorded)} "
            f"should hold but is missing, and {current.url} {state}: labelling them by position would name other "
            f"entities, so nothing is read. Copy the checkpoint directory with its {layout.NAMES_DIR}/ directory, "
            "or use the entity_path it was trained on"
        )


def check_positions(
    checkpoint: CheckpointStore,
    version: int,
    entities: EntityStore,
    num_partitions: Mapping[str, int],
    dynamic: bool,
    reader: str,
) -> NamesCheck:
    """Refuse ``version`` when its rows of the entity types in ``num_partitions`` (type -> partitions)
    belong to other names than the entity files list now; returns the comparison (its ``unchecked``
    part, without a record, is used by position: the caller warns).

    ``reader``: what would read the rows by position (``pbg eval``), for the message.

    Raises:
        NamesChangedError: naming each entity type (or the relation types) whose names moved, how
            many moved, are new and are gone, and what to do.
    """
    keys = [(entity, part) for entity, parts in num_partitions.items() for part in range(parts)]
    recorded = recorded_digests(checkpoint.url, version, keys, dynamic, checkpoint.storage_options)
    check = compare(recorded, current_digests(entities, keys, dynamic), keys, dynamic)
    if check.same:
        return check
    archive = NamesArchive(checkpoint.url, checkpoint.storage_options)
    moved = what_moved(archive, recorded, entities, check, num_partitions, skip_same=True)
    if not moved:
        return NamesCheck(unchecked=check.unchecked)  # other digests of the same lists
    raise NamesChangedError(
        f"checkpoint_path {checkpoint.url} version {version} was trained on other names than entity_path "
        f"{entities.url} lists now (imported again since?): {'; '.join(moved)}. {reader} would rank each moved "
        f"row as another entity's: use the entity_path and edge_paths it was trained on, or train a new "
        f"checkpoint_path with init_path={checkpoint.url} (its rows are then matched by name) and use that"
    )


def progress_moved(checkpoint: CheckpointStore, saved: PassProgress, current: NamesDigests) -> list[str]:
    """What of an open version's recorded bucket progress (``saved``, in ``checkpoint``'s ``progress/``)
    follows other names than ``current``: ``entity type 'user' partition 0``, ``the relation types``.

    A resumed pass reads those saves by position, as a resumed version does; files without a
    record (or keys without a names file now) are not counted.
    """
    progress = CheckpointProgress(checkpoint)
    options = checkpoint.storage_options
    moved = []
    for (entity, part), position in sorted(saved.partitions.items()):
        url = progress.area(saved.version, position).file_url(layout.embeddings_file(entity, part, saved.version))
        recorded, now = read_digest(url, options), current.entities.get((entity, part))
        if recorded is not None and now is not None and recorded != now:
            moved.append(f"entity type {entity!r} partition {part}")
    if saved.model is not None and current.relations is not None:
        url = progress.area(saved.version, saved.model).file_url(layout.model_file(saved.version))
        recorded = read_digest(url, options)
        if recorded is not None and recorded != current.relations:
            moved.append("the relation types")
    return moved


__all__ = ["NamesFile", "RowLabels", "check_positions", "export_labels", "progress_moved"]
