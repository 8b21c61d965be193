"""Exporters: a committed checkpoint -> TSV (PBG's layout), NPY + names JSON, or HDF5 files.

Two entry points:

- :func:`export_tsv` behaves like PBG's ``export_to_tsv`` (docs/formats.md, "Exports"): one entities
  file (``name\\tv1\\t...\\tvD``, ``%.9f``; every entity type in config order, every
  partition) and one relation-parameters file (see :mod:`storage.exporting.relations`).
- :func:`export_embeddings` writes one set of files per entity type into an output
  directory, in a registered format (:mod:`storage.exporting.sinks`: ``tsv``, ``npy``,
  ``h5``), plus ``relation_types.tsv``.

Shared rules:

- **Outputs** must not exist: every existing one is named in the error, checked before
  anything is created. All are written under temporary names and published (rename on
  local disk, one upload each on S3) only when all are complete; if the export fails half
  way, nothing (or nothing left over) is visible.
- **Streaming**: embeddings are read one partition at a time (the text is formatted in row
  blocks by :mod:`storage.exporting.text`, on both cores).
- **global_emb**: when ``config.global_emb`` is set and the model holds
  ``global_embs.emb_{type}``, it is added to every vector (float32), as PBG does.
- **Featurized** entity types are refused: their checkpoint rows are feature embeddings,
  not one vector per entity name.
- **A reader of entity_path** (:mod:`storage.entity_lease`): an export refuses to start while an
  import writes the names, and no import starts while it reads them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from pbg_core.errors import UnknownNameError
from pbg_core.types import ModuleStateDict
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.entity_lease import reads_entity_path
from storage.errors import BadDataError, DataNotFound, OutputExistsError
from storage.exporting.relations import operator_params, write_relations, write_rows
from storage.exporting.sinks import EXPORT_FORMATS, EmbeddingSink
from storage.exporting.text import write_blocks
from storage.fs import atomic, changes, reads, urls

__all__ = ["ExportReport", "export_embeddings", "export_tsv", "operator_params", "write_rows"]

logger = logging.getLogger(__name__)

RELATION_TYPES_FILE = "relation_types.tsv"
ExportFormatName = Literal["tsv", "npy", "h5"]


@dataclass(frozen=True)
class ExportReport:
    """What one export wrote.

    Attributes:
        version: The checkpoint version exported.
        entities_written: Entity rows written (lines of the entities file for TSV).
        relation_rows_written: Lines of the relation types file.
        entity_counts: Rows written per entity type.
        outputs: URLs of the files written.
    """

    version: int
    entities_written: int
    relation_rows_written: int
    entity_counts: Mapping[str, int] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()


class _Checkpoint:
    """The stores and model state of one committed checkpoint version."""

    def __init__(self, config: Any, version: int | None) -> None:
        self.config = config
        self.options = config.storage_options_for_fs()  # the real credentials
        self.checkpoints = CheckpointStore(config.checkpoint_path, self.options)
        self.entity_store = EntityStore(config.entity_path, self.options)
        self.version = _resolve_version(self.checkpoints, config.checkpoint_path, version)
        has_model = self.checkpoints.has_model(self.version)
        self.state_dict: ModuleStateDict = self.checkpoints.load_model(self.version)[0] if has_model else {}

    def shape(self, entity: str) -> tuple[int, int]:
        """(rows over all partitions, dim) of ``entity``'s stored embeddings."""
        shapes = [
            self.checkpoints.embeddings_shape(entity, part, self.version)
            for part in range(self.config.entities[entity].num_partitions)
        ]
        dims = {dim for _, dim in shapes}
        if len(dims) > 1:
            raise BadDataError(
                self.config.checkpoint_path,
                f"embeddings of {entity!r} (v{self.version}) have different dimensions across partitions: {shapes}",
            )
        return sum(rows for rows, _ in shapes), dims.pop() if dims else self.config.entity_dimension(entity)

    def partitions(self, entity: str) -> Iterator[tuple[list[str], np.ndarray]]:
        """(names, float32 [len(names), dim] embeddings incl. global_emb) per partition, in order."""
        global_emb = self.state_dict.get(f"global_embs.emb_{entity}") if self.config.global_emb else None
        for part in range(self.config.entities[entity].num_partitions):
            names = self.entity_store.load_names(entity, part)
            embeddings, _ = self.checkpoints.load_embeddings(entity, part, self.version)
            if embeddings.dim() != 2 or embeddings.shape[0] != len(names):
                raise BadDataError(
                    self.config.checkpoint_path,
                    f"embeddings of {entity!r} partition {part} (v{self.version}) have shape "
                    f"{tuple(embeddings.shape)}, expected ({len(names)}, D) to match "
                    f"entity_names_{entity}_{part}.json",
                )
            if global_emb is not None:
                embeddings += global_emb.to(embeddings.dtype)  # in place: float32 like PBG's `+=`
            logger.info("exporting %d embeddings of %s partition %d", len(names), entity, part)
            yield names, embeddings.numpy()


@contextlib.contextmanager
def _exclusive_outputs(output_urls: Sequence[str], storage_options: Any) -> Iterator[list[str]]:
    """Local paths to write every output to; all are published only if the block succeeds.

    Outputs that exist are refused up front. Each output is written locally (next to it on
    local disk, in a temporary file for a remote store) and becomes visible in one rename or
    one upload when the block exits cleanly, so a reader never sees a half-written export.
    If the block or a publication fails, every output published so far is removed.
    """
    existing = [url for url in output_urls if reads.exists(url, storage_options)]
    if existing:
        raise OutputExistsError(existing[0], f"refusing to overwrite export output(s) {', '.join(existing)}")
    parents = sorted({url.rstrip("/").rpartition("/")[0] for url in output_urls if "/" in url.rstrip("/")})
    created = [parent for parent in parents if not reads.exists(parent, storage_options)]
    try:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(atomic.local_write(url, storage_options)) for url in output_urls]
    except BaseException:
        # None of the outputs existed above: whatever is there now is ours, and so are the
        # directories that did not exist (a failed export leaves no empty output folder).
        for url in output_urls:
            changes.remove(url, missing_ok=True, storage_options=storage_options)
        for parent in created:
            changes.remove_empty_dir(parent, storage_options)
        raise


def _resolve_version(checkpoints: CheckpointStore, url: str, version: int | None) -> int:
    """``version``, or the latest committed one for None, after checking its files are there.

    Raises:
        DataNotFound: nothing committed, or no files of ``version`` (the versions present are named).
    """
    committed = checkpoints.read_version()
    if version is None:
        if committed == 0:
            raise DataNotFound(url, "no committed checkpoint to export (checkpoint_version.txt missing or 0)")
        return committed
    present = [v for v in checkpoints.list_versions() if v <= committed]
    if version not in present:
        raise DataNotFound(
            url,
            f"no checkpoint version {version} to export; versions present: "
            f"{', '.join(map(str, present)) or 'none'} (latest committed: {committed})",
        )
    return version


def _select_entity_types(config: Any, entity_types: Sequence[str] | None) -> list[str]:
    """The requested entity types (default: all, config order) after checking they can be exported.

    Raises:
        UnknownNameError: an entity type not in the config, none at all, or a featurized one.
    """
    known = list(config.entities)
    selected = known if entity_types is None else list(dict.fromkeys(entity_types))
    unknown = [name for name in selected if name not in config.entities]
    if unknown or not selected:
        raise UnknownNameError(f"entity types to export must be some of {known}, got {list(entity_types or [])}")
    featurized = [name for name in selected if config.entities[name].featurized]
    if featurized:
        others = [name for name in known if not config.entities[name].featurized]
        raise UnknownNameError(
            f"cannot export featurized entity type(s) {featurized}: their embeddings are per feature, not "
            f"per entity; export the others by naming them (non-featurized: {others})"
        )
    return selected


@reads_entity_path  # no import rewrites the names while they are exported
def export_tsv(
    config: Any,
    entities_output: str,
    relation_types_output: str,
    version: int | None = None,
) -> ExportReport:
    """Export the embeddings and relation parameters of a checkpoint as TSV (PBG's layout).

    Args:
        config: The training config (``ConfigSchema``); reads entity_path, checkpoint_path,
            entities, relations, dynamic_relations and global_emb.
        entities_output: File or URL of the entities TSV; must not exist.
        relation_types_output: File or URL of the relation parameters TSV; must not exist.
        version: Checkpoint version; None exports the latest committed one.

    Returns:
        An :class:`ExportReport`.

    Raises:
        FileExistsError: An output already exists (nothing is written).
        DataNotFound: No committed checkpoint, no files of ``version``, or a names/embeddings/model
            file is missing.
        AccessDenied: An output cannot be written (permissions).
        BadDataError: Names and embeddings disagree, or relation names do not match.
        UnknownNameError: The config has a featurized entity type.
    """
    entity_types = _select_entity_types(config, None)
    ckpt = _Checkpoint(config, version)
    counts: dict[str, int] = {}
    outputs = (entities_output, relation_types_output)
    with _exclusive_outputs(outputs, ckpt.options) as (entities_path, relations_path):
        with open(entities_path, "wb") as entities_file:
            for entity in entity_types:
                counts[entity] = sum(write_blocks(entities_file, *part) for part in ckpt.partitions(entity))
        with open(relations_path, "w", encoding="utf-8") as relations_file:
            relation_rows = write_relations(relations_file, config, ckpt.entity_store, ckpt.state_dict)
    written = sum(counts.values())
    logger.info("exported checkpoint v%d: %d entities, %d relation rows", ckpt.version, written, relation_rows)
    return ExportReport(ckpt.version, written, relation_rows, counts, outputs)


@reads_entity_path
def export_embeddings(
    config: Any,
    output: str,
    format: ExportFormatName,  # noqa: A002  # the CLI's --format
    entity_types: list[str] | None = None,
    version: int | None = None,
) -> ExportReport:
    """Export a checkpoint's embeddings per entity type, and its relation parameters as TSV.

    Files in ``output`` (a directory path or URL, created if needed): per entity type
    ``<type>.tsv`` (``tsv``), ``<type>.npy`` + ``<type>.names.json`` (``npy``) or
    ``<type>.h5`` (``h5``), see :mod:`storage.exporting.sinks`; and ``relation_types.tsv``.

    Args:
        config: The training config (``ConfigSchema``).
        output: Output directory; none of the files above may exist in it.
        format: ``"tsv"``, ``"npy"`` or ``"h5"``.
        entity_types: Entity types to export; None exports all (config order).
        version: Checkpoint version; None exports the latest committed one.

    Returns:
        An :class:`ExportReport` (``outputs`` lists the URLs written).

    Raises:
        UnknownNameError: ``format`` is not a registered format; an unknown or featurized
            entity type, or an empty ``entity_types``.
        ValueError: Entity type names that give clashing output files.
        FileExistsError: Some outputs already exist (all are named; nothing is written).
        DataNotFound: No committed checkpoint, no files of ``version``, or a names/embeddings/model
            file is missing.
        AccessDenied: The output directory cannot be created or written (permissions).
        BadDataError: Names and embeddings disagree, or relation names do not match.
    """
    export_format = EXPORT_FORMATS.get(format)
    selected = _select_entity_types(config, entity_types)
    ckpt = _Checkpoint(config, version)
    per_entity = {e: [urls.join_url(output, f"{e}{suffix}") for suffix in export_format.suffixes] for e in selected}
    relations_url = urls.join_url(output, RELATION_TYPES_FILE)
    outputs = tuple(url for entity_urls in per_entity.values() for url in entity_urls) + (relations_url,)
    if len(set(outputs)) != len(outputs):
        raise ValueError(f"entity type names give clashing output files {list(outputs)}; rename the entity type")
    counts: dict[str, int] = {}
    with _exclusive_outputs(outputs, ckpt.options) as local_paths:
        paths = iter(local_paths)
        for entity, entity_urls in per_entity.items():
            count, dim = ckpt.shape(entity)
            sink = export_format.open([next(paths) for _ in entity_urls], count, dim)
            counts[entity] = _fill(sink, ckpt.partitions(entity))
        with open(next(paths), "w", encoding="utf-8") as relations_file:
            relation_rows = write_relations(relations_file, config, ckpt.entity_store, ckpt.state_dict)
    logger.info("exported checkpoint v%d as %s into %s: %s", ckpt.version, format, output, counts)
    return ExportReport(ckpt.version, sum(counts.values()), relation_rows, counts, outputs)


def _fill(sink: EmbeddingSink, partitions: Iterator[tuple[list[str], np.ndarray]]) -> int:
    """Write every partition into ``sink`` and close it (also on failure); the rows written."""
    rows = 0
    with contextlib.closing(sink):
        for names, embeddings in partitions:
            sink.write(names, embeddings)
            rows += len(names)
    return rows
