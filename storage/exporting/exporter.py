"""Exporters: a committed checkpoint -> TSV (PBG's layout), NPY + names JSON, or HDF5 files.

Two entry points:

- :func:`export_tsv` behaves like PBG's ``export_to_tsv`` (docs/formats.md, "Exports"): one entities
  file (``name\\tv1\\t...\\tvD``, ``%.9f``; every entity type in config order, every
  partition) and one relation-parameters file (see :mod:`storage.exporting.relations`).
- :func:`export_embeddings` writes one set of files per entity type into an output
  directory, in a registered format (:mod:`storage.exporting.sinks`: ``tsv``, ``npy``,
  ``h5``), plus ``relation_types.tsv``.

Shared rules:

- **Outputs** (:mod:`storage.outputs`) must be distinct files, none of them an input
  (the caller's config file, a file of checkpoint_path or entity_path), and must not exist:
  every existing one is named in the error. Their sizes are estimated from the checkpoint's
  shapes and the names files' sizes, and the free space of their disks checked. All of this
  happens before anything is created. All are written under temporary names and published
  (rename on local disk, one upload each on S3) only when all are complete; if the export
  fails half way (a disk that fills up anyway is named as such), nothing is left over.
- **The checkpoint** is read by :class:`storage.checkpoint_reader.CheckpointReader` (the latest
  committed version, checked complete, or the version asked for).
- **Names**: each row is labelled with the name its checkpoint file records it belongs to
  (:mod:`storage.reader_names`): the list kept in the checkpoint's ``names/``, so an export after
  a re-import of ``entity_path`` still names every row right; the entity files serve for files
  without a record (PBG's: by position, one warning) and, while their digest is the record's, for
  a checkpoint copied without its ``names/``. Anything else is refused before anything is written.
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
from typing import Any, Literal, TextIO

import numpy as np

from pbg_core.errors import UnknownNameError
from storage import layout, outputs
from storage.best_version import VersionWanted
from storage.checkpoint_reader import CheckpointReader
from storage.entity_lease import reads_entity_path
from storage.exporting.relations import estimated_bytes, operator_params, write_relations, write_rows
from storage.exporting.sinks import EXPORT_FORMATS, EmbeddingSink, EntityShape, ExportFormat, tsv_sizes
from storage.exporting.text import write_blocks
from storage.fs import urls

__all__ = ["ExportReport", "export_embeddings", "export_tsv", "operator_params", "write_rows"]

logger = logging.getLogger(__name__)

ExportFormatName = Literal["tsv", "npy", "h5"]
WHAT = "export"  # the noun of storage.outputs' messages
PURPOSE = "to export"  # the message of a missing version: "no checkpoint version 7 to export"
# The names files are PBG's json.dump(names, f, indent=4): "[\n", then '    "name",\n' per name, "]".
NAMES_FILE_BYTES_PER_NAME = 8


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


def _export_shape(reader: CheckpointReader, entity: str) -> EntityShape:
    """``entity``'s rows and dimension, and its names' bytes estimated from the names files' sizes."""
    rows, dim = reader.shape(entity)
    name_bytes = 0
    for part in range(reader.config.entities[entity].num_partitions):
        url = reader.labels.entities[(entity, part)].url
        filesystem, path = urls.resolve(url, reader.options)
        with urls.translate_errors(url):
            name_bytes += int(filesystem.size(path)) - 2
    return EntityShape(rows, dim, max(0, name_bytes - NAMES_FILE_BYTES_PER_NAME * rows))


def _write_relations(reader: CheckpointReader, out: TextIO) -> int:
    """The relation parameters file; returns its rows (see :mod:`storage.exporting.relations`)."""
    return write_relations(out, reader.config, reader.relation_names(), reader.state_dict)


def _partitions(reader: CheckpointReader, entity: str) -> Iterator[tuple[list[str], np.ndarray]]:
    """:meth:`CheckpointReader.partitions`, each logged as it is exported."""
    for part, (names, embeddings) in enumerate(reader.partitions(entity)):
        logger.info("exporting %d embeddings of %s partition %d", len(names), entity, part)
        yield names, embeddings


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
    version: VersionWanted | None = None,
    reads: Sequence[tuple[str, str]] = (),
    labels: Mapping[str, str] | None = None,
) -> ExportReport:
    """Export the embeddings and relation parameters of a checkpoint as TSV (PBG's layout).

    Args:
        config: The training config (``ConfigSchema``); reads entity_path, checkpoint_path,
            entities, relations, dynamic_relations and global_emb.
        entities_output: File or URL of the entities TSV; must not exist.
        relation_types_output: File or URL of the relation parameters TSV; must not exist.
        version: Checkpoint version; ``"best"``: the one best.json names; None exports the latest committed one.
        reads: (name, URL) of other files the caller read (``("the config", path)``): no output may be one.
        labels: How the user knows the parameters in errors (``{"entities_output": "--entities-output"}``).

    Returns:
        An :class:`ExportReport`.

    Raises:
        OutputsOverlap: The two outputs are one file, or an output is an input (nothing is written).
        FileExistsError: An output already exists (nothing is written).
        NoSpaceForOutput: The outputs' disk has less room than they need, or filled up (nothing is left).
        DataNotFound: No committed checkpoint, no files of ``version``, or a names/embeddings/model
            file is missing.
        NamesChangedError: Rows whose names neither its ``names/`` nor the entity files hold (nothing written).
        AccessDenied: An output cannot be written (permissions).
        BadDataError: Names and embeddings disagree, or relation names do not match.
        UnknownNameError: The config has a featurized entity type.
    """
    named = {"entities_output": entities_output, "relation_types_output": relation_types_output}
    _check_distinct(config, [((labels or {}).get(key, key), url) for key, url in named.items()], reads)
    entity_types = _select_entity_types(config, None)
    reader = CheckpointReader(config, version, entity_types, PURPOSE)
    counts: dict[str, int] = {}
    written_urls = (entities_output, relation_types_output)
    sizes = {
        entities_output: sum(tsv_sizes(_export_shape(reader, entity))[0] for entity in entity_types),
        relation_types_output: estimated_bytes(config, reader.state_dict),
    }
    with outputs.staged_outputs(sizes, reader.options, what=WHAT) as staging:
        with open(staging.path(entities_output), "wb") as entities_file:
            for entity in entity_types:
                counts[entity] = sum(write_blocks(entities_file, *part) for part in _partitions(reader, entity))
        with open(staging.path(relation_types_output), "w", encoding="utf-8") as relations_file:
            relation_rows = _write_relations(reader, relations_file)
    reader.warn_unrecorded()
    written = sum(counts.values())
    logger.info("exported checkpoint v%d: %d entities, %d relation rows", reader.version, written, relation_rows)
    return ExportReport(reader.version, written, relation_rows, counts, written_urls)


@reads_entity_path
def export_embeddings(
    config: Any,
    output: str,
    format: ExportFormatName,  # noqa: A002  # the CLI's --format
    entity_types: list[str] | None = None,
    version: VersionWanted | None = None,
    reads: Sequence[tuple[str, str]] = (),
    labels: Mapping[str, str] | None = None,
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
        version: Checkpoint version; ``"best"``: the one best.json names; None exports the latest committed one.
        reads: (name, URL) of other files the caller read (``("the config", path)``): no output may be one.
        labels: How the user knows the parameters in errors (``{"output": "--output"}``).

    Returns:
        An :class:`ExportReport` (``outputs`` lists the URLs written).

    Raises:
        UnknownNameError: ``format`` is not a registered format; an unknown or featurized entity type, or none.
        ValueError: Entity type names that give clashing output files.
        OutputsOverlap: An output is an input (nothing is written).
        FileExistsError: Some outputs already exist (all are named; nothing is written).
        NoSpaceForOutput: The outputs' disk has less room than they need, or filled up (nothing is left).
        DataNotFound: No committed checkpoint, no files of ``version``, or a names/embeddings/model file.
        NamesChangedError: Rows whose names neither its ``names/`` nor the entity files hold (nothing written).
        AccessDenied: The output directory cannot be created or written (permissions).
        BadDataError: Names and embeddings disagree, or relation names do not match.
    """
    export_format = EXPORT_FORMATS.get(format)
    selected = _select_entity_types(config, entity_types)
    reader = CheckpointReader(config, version, selected, PURPOSE)
    per_entity = {e: [urls.join_url(output, f"{e}{suffix}") for suffix in export_format.suffixes] for e in selected}
    relations_url = urls.join_url(output, layout.RELATION_TYPES_FILE)
    written_urls = tuple(url for entity_urls in per_entity.values() for url in entity_urls) + (relations_url,)
    if len(set(written_urls)) != len(written_urls):
        raise ValueError(f"entity type names give clashing output files {list(written_urls)}; rename the entity type")
    label = (labels or {}).get("output", "output")
    _check_distinct(config, [(f"{label} file {url}", url) for url in written_urls], reads)
    shapes = {entity: _export_shape(reader, entity) for entity in selected}
    sizes = _per_type_sizes(reader, export_format, per_entity, shapes, relations_url)
    counts: dict[str, int] = {}
    with outputs.staged_outputs(sizes, reader.options, what=WHAT) as staging:
        for entity, entity_urls in per_entity.items():
            sink = export_format.open(staging.paths(*entity_urls), shapes[entity].count, shapes[entity].dim)
            counts[entity] = _fill(sink, _partitions(reader, entity))
        with open(staging.path(relations_url), "w", encoding="utf-8") as relations_file:
            relation_rows = _write_relations(reader, relations_file)
    reader.warn_unrecorded()
    logger.info("exported checkpoint v%d as %s into %s: %s", reader.version, format, output, counts)
    return ExportReport(reader.version, sum(counts.values()), relation_rows, counts, written_urls)


def _per_type_sizes(
    reader: CheckpointReader,
    export_format: ExportFormat,
    per_entity: Mapping[str, list[str]],
    shapes: Mapping[str, EntityShape],
    relations_url: str,
) -> dict[str, int]:
    """Output URL -> estimated bytes, for a per-type export (see :mod:`storage.exporting.sinks`)."""
    sizes = {
        url: size
        for entity, entity_urls in per_entity.items()
        for url, size in zip(entity_urls, export_format.sizes(shapes[entity]), strict=True)
    }
    sizes[relations_url] = estimated_bytes(reader.config, reader.state_dict)
    return sizes


def _check_distinct(config: Any, named: Sequence[tuple[str, str]], reads: Sequence[tuple[str, str]]) -> None:
    """See :func:`storage.outputs.check_distinct`; the export reads checkpoint_path and entity_path."""
    input_dirs = [("checkpoint_path", config.checkpoint_path), ("entity_path", config.entity_path)]
    outputs.check_distinct(named, reads, input_dirs, config.storage_options_for_fs(), what=WHAT)


def _fill(sink: EmbeddingSink, partitions: Iterator[tuple[list[str], np.ndarray]]) -> int:
    """Write every partition into ``sink`` and close it (also on failure); the rows written."""
    rows = 0
    with contextlib.closing(sink):
        for names, embeddings in partitions:
            sink.write(names, embeddings)
            rows += len(names)
    return rows
