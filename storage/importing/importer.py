"""``pbg import``: edge lists -> PBG entity files and bucketed edge files (PBG's ``import_from_tsv``).

The public entry point, :func:`import_edges`, keeps PBG's options and the contract of the
first importer; the work is done by the streaming engine of :mod:`storage.importing.run`.
Behaviour (docs/formats.md, "Imports"; PBG's importer is ``torchbiggraph_import_from_tsv``),
with PBG's weak points fixed (docs/differences-from-pbg.md):

- **Validate first.** Every input is read completely before anything is written; a malformed
  line (too few columns, an empty name, a non-numeric or non-finite weight, bytes that are not
  UTF-8) or an empty file raises :class:`BadDataError` naming ``file: line N`` and what was
  expected, unless ``skip_bad_lines`` (then it is skipped, counted and listed in the report).
  Blank lines are skipped and counted (PBG crashes on them).
- **Inputs.** Delimited text (plain, ``.gz``, ``.bz2``; ``delimiter=None`` detects tab or
  space per file) or Parquet (``.parquet``/``.pq``; columns by name or index).
- **Seeded.** Relation names (dynamic mode) and entity names are shuffled with one numpy
  ``Generator`` built from ``seed``: relations first, then entity types in sorted order. The
  shuffled lists start in first-seen order (line by line, lhs before rhs).
- **Partitions.** Exact integer ranges (:mod:`storage.importing.partition`), where PBG's floats
  can round the wrong way.
- **Streaming.** Memory holds the name indexes plus fixed-size buffers, never the edge list.
- **Complete grid.** Every ``edges_{l}_{r}.h5`` of every edge path exists, even if empty.
- **Atomic output** (:mod:`storage.importing.staging`): hidden staging directories, moved into
  place at the end; on any failure every file this import created is removed, and a failure before
  the moves (a bad line, every edge skipped) leaves the previous import's output and its
  manifest as they were, so the next re-import can still skip unchanged work. A failure in the
  final moves can also remove files an older import left at the same names: the output is
  then absent rather than a mix of two imports.
- **Weights** are float32 (PBG truncated them to int64).

An edge whose relation is unknown (non-dynamic: not a config relation name; dynamic: filtered
out by ``relation_type_min_count``) or whose entity was filtered out is skipped and counted.
An import whose every edge was skipped writes nothing and raises :class:`BadDataError` saying
how many edges were read and why each group was skipped.
Entities are counted over *all* inputs (PBG): in dynamic mode also on edges whose relation is
later filtered out. Every entity type of the config gets count/name files (count 0 if unused).
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pbg_core.errors import UsageError
from pbg_core.session.partitions import PartitionTopology
from storage.entities import EntityStore
from storage.errors import OutputExistsError, StorageError
from storage.fs import reads
from storage.importing.append import read_existing
from storage.importing.manifest import (
    fingerprint,
    generation_history,
    now_utc,
    read_manifest,
    remove_manifest,
    write_manifest,
)
from storage.importing.parse import Column, Columns, ReadSpec
from storage.importing.partition import EntityIndex
from storage.importing.report import ImportReport, ProgressFn
from storage.importing.run import check_outputs, run_import
from storage.importing.write import EdgeTarget

__all__ = ["EntityIndex", "ImportReport", "ProgressFn", "import_edges"]

logger = logging.getLogger(__name__)


def import_edges(
    config: Any,
    inputs: list[str],
    *,
    lhs_col: Column,
    rhs_col: Column,
    rel_col: Column | None = None,
    weight_col: Column | None = None,
    relation_type_min_count: int = 1,
    entity_min_count: int = 1,
    delimiter: str | None = None,
    seed: int | None = None,
    progress: ProgressFn | None = None,
    skip_bad_lines: bool = False,
    force: bool = False,
    unknown_relations: str = "skip",
    append: bool = False,
) -> ImportReport:
    """Import edge lists into ``config.entity_path`` and ``config.edge_paths`` (PBG layout).

    Long because its signature and docstring document the fifteen options of ``pbg import``;
    the body is short (option checks, the unchanged-import shortcut, then :func:`_run_and_hash`).

    Args:
        config: The training config (``ConfigSchema``); reads entity_path, edge_paths,
            entities, relations, dynamic_relations and storage options.
        inputs: Edge-list files or URLs; input i is written to ``config.edge_paths[i]``.
        lhs_col: Column of the source entity name: 0-based index, or a name (Parquet only).
        rhs_col: Column of the target entity name.
        rel_col: Column of the relation name; None means relation 0 (not allowed in
            dynamic mode).
        weight_col: Column of a float edge weight; None writes no weights.
        relation_type_min_count: Dynamic mode: drop relation names seen fewer times.
        entity_min_count: Drop entities seen fewer times (per type, over all inputs).
        delimiter: Column separator of text inputs; None: tab if a file's first non-blank
            line has one, else a space.
        seed: Seed of the shuffles; None draws fresh entropy.
        progress: Called as ``progress(phase, done)`` after each batch of the
            ``"counting"`` phase (lines read) and of the ``"writing"`` phase (edges mapped).
        skip_bad_lines: Skip malformed lines (counted in ``skipped["malformed_line"]``, the
            first ones listed with their line numbers) instead of failing.
        unknown_relations: ``"skip"`` (PBG's behaviour): an edge whose relation name is not
            in the config is skipped and counted, and the report lists the most frequent such
            names. ``"error"``: such a line is malformed (an error naming file, line and the
            expected names, or with ``skip_bad_lines`` a counted, listed skip). Only
            meaningful with ``rel_col`` and standard relations (in dynamic mode every name
            is a relation).
        append: Add to the import already in ``config.entity_path`` (:mod:`storage.importing.append`):
            names imported before keep their (partition, offset), new ones are appended, the
            inputs go to ``config.edge_paths``; the same append twice does nothing the second time.
        force: Import even when the inputs' content and the options match the last import
            (:mod:`storage.importing.manifest`); otherwise that case writes nothing and returns
            the last report with ``unchanged_since`` set.

    Returns:
        An :class:`ImportReport`.

    Raises:
        UsageError: Bad arguments (input count, column index, delimiter, missing rel_col).
        ConfigError: Dynamic mode without exactly one relation, or unknown entity types.
        DataNotFound: An input does not exist.
        BadDataError: A malformed line, an empty input, or every edge skipped (raised before
            anything is written).
        OutputExistsError: A plain import (no ``append``, no ``force``) over an import grown by appends.
    """
    if unknown_relations not in UNKNOWN_RELATION_POLICIES:
        raise UsageError(
            f"unknown_relations must be one of {list(UNKNOWN_RELATION_POLICIES)}, got {unknown_relations!r}"
        )
    options = {
        "columns": [lhs_col, rhs_col, rel_col, weight_col],
        "delimiter": delimiter,
        "skip_bad_lines": skip_bad_lines,
        "unknown_relations": unknown_relations,
        "relation_type_min_count": relation_type_min_count,
        "entity_min_count": entity_min_count,
        "seed": seed,
    }
    if append:  # a separate key: an append never matches a plain import of the same files
        options["append"] = True
    spec = _read_spec(config, options)
    check_outputs(config)  # before the manifest is looked for inside them
    if append:
        return _append(config, inputs, spec, options, progress, force)
    previous = None if force else read_manifest(config.entity_path, config.storage_options_for_fs())
    _refuse_replacing_appends(config, previous)
    if previous is not None and not _outputs_complete(config):
        previous = None
    print_: str | None = None  # None: unreadable inputs (the import itself then says why)
    if previous is not None:  # only a previous import can make this one unnecessary: compare fingerprints first
        print_ = _fingerprint(config, inputs, options)
        if print_ is not None and previous.get("fingerprint") == print_:
            unchanged = _unchanged_report(previous)
            logger.info("%s", unchanged)
            return unchanged
    report, hashed = _run_and_hash(config, inputs, spec, options, progress, hash_inputs=previous is None)
    if previous is None:
        print_ = hashed
    if print_ is not None:
        where = {"inputs": list(inputs), "edge_paths": list(config.edge_paths)}
        write_manifest(config.entity_path, print_, dataclasses.asdict(report), config.storage_options_for_fs(), where)
    return report


def _read_spec(config: Any, options: dict[str, Any]) -> ReadSpec:
    """How to read the inputs: the columns, delimiter, bad-line policy and (``unknown_relations="error"``
    with a relation column, standard relations only) the relation names a line may name."""
    lhs_col, rhs_col, rel_col, weight_col = options["columns"]
    strict = options["unknown_relations"] == "error" and rel_col is not None and not config.dynamic_relations
    relations = frozenset(r.name for r in config.relations) if strict else None
    columns = Columns(lhs_col, rhs_col, rel_col, weight_col)
    return ReadSpec(columns, options["delimiter"], options["skip_bad_lines"], relations)


def _run_and_hash(
    config: Any,
    inputs: list[str],
    spec: ReadSpec,
    options: dict[str, Any],
    progress: ProgressFn | None,
    *,
    hash_inputs: bool,
) -> tuple[ImportReport, str | None]:
    """Run the import; with ``hash_inputs``, hash the inputs while pass 1 parses them (hashlib releases
    the GIL). The report, and the fingerprint (None if not asked for or the inputs were unreadable)."""
    so = config.storage_options_for_fs()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pbg-import-fingerprint") as hasher:
        later: Future[str | None] | None = None
        if hash_inputs:
            later = hasher.submit(_fingerprint, config, inputs, options)
        report = _run(
            config,
            inputs,
            spec,
            options,
            progress,
            # Only now, when the first file is about to replace the last import's output: an
            # interrupted commit must not leave a manifest that matches, but an import that
            # fails before (a bad line, every edge skipped) leaves that output and its manifest.
            before_commit=lambda: remove_manifest(config.entity_path, so),
        )
    return report, None if later is None else later.result()


def _run(
    config: Any, inputs: list[str], spec: ReadSpec, options: dict[str, Any], progress: ProgressFn | None, **extra: Any
) -> ImportReport:
    """:func:`run_import` with the import's options (``extra``: its keyword arguments beyond them)."""
    return run_import(
        config,
        inputs,
        spec,
        relation_type_min_count=options["relation_type_min_count"],
        entity_min_count=options["entity_min_count"],
        seed=options["seed"],
        progress=progress,
        **extra,
    )


def _refuse_replacing_appends(config: Any, previous: dict[str, Any] | None) -> None:
    """A plain import over an import that appends have grown would give every name a new place.

    Raises:
        OutputExistsError: ``previous`` records appends (``force`` skips this check: it reads no manifest).
    """
    appends = [g for g in (previous or {}).get("generations") or [] if g.get("append")]
    if appends:
        raise OutputExistsError(
            config.entity_path,
            f"holds an import grown by {len(appends)} append(s) ({_generations(appends)}); a plain import "
            "would replace it and move every entity, so models trained on it would no longer fit. "
            "Use --append to add edges, another entity_path for a new import, or --force to replace it",
        )


def _generations(entries: list[dict[str, Any]]) -> str:
    numbers = [int(g.get("generation", 0)) for g in entries]
    return f"generation {numbers[0]}" if len(numbers) == 1 else f"generations {min(numbers)}-{max(numbers)}"


def _append(
    config: Any, inputs: list[str], spec: ReadSpec, options: dict[str, Any], progress: ProgressFn | None, force: bool
) -> ImportReport:
    """An appending import, or nothing if the same append is already recorded among the manifest's generations.

    The existing import is read (and refused if it does not fit the config) before any input.
    """
    so = config.storage_options_for_fs()
    existing = read_existing(config)
    generations = generation_history(read_manifest(config.entity_path, so))
    print_ = _fingerprint(config, inputs, options)
    done = [g for g in generations if print_ is not None and g.get("fingerprint") == print_]
    if done and not force and _outputs_complete(config):
        unchanged = _unchanged_report(done[-1])
        logger.info("append already imported as generation %s: %s", done[-1].get("generation"), unchanged)
        return unchanged
    report = _run(config, inputs, spec, options, progress, existing=existing)
    report.generation = len(generations)
    report_dict = dataclasses.asdict(report)
    entry: dict[str, Any] = {
        "generation": len(generations),
        "append": True,
        "fingerprint": print_,
        "imported_at": now_utc(),
        "inputs": list(inputs),
        "edge_paths": list(config.edge_paths),
        "report": report_dict,
    }
    write_manifest(config.entity_path, print_, report_dict, so, generations=[*generations, entry])
    return report


def _fingerprint(config: Any, inputs: list[str], options: dict[str, Any]) -> str | None:
    """The import's fingerprint; None when the inputs cannot be read (the import then says why)."""
    try:
        shaping = {
            "edge_paths": list(config.edge_paths),
            "dynamic_relations": config.dynamic_relations,
            "entities": {name: e.num_partitions for name, e in config.entities.items()},
            "relations": [[r.name, r.lhs, r.rhs] for r in config.relations],
        }
        return fingerprint(inputs, {**options, **shaping}, config.storage_options_for_fs())
    except (StorageError, OSError):
        return None


def _unchanged_report(previous: dict[str, Any]) -> ImportReport:
    """The report of the last import (its manifest ``previous``), marked as unchanged since then."""
    report = ImportReport(**{k: v for k, v in previous["report"].items() if k in _REPORT_FIELDS})
    report.unchanged_since = previous.get("imported_at", "an earlier run")
    return report


UNKNOWN_RELATION_POLICIES = ("skip", "error")
_REPORT_FIELDS = {f.name for f in dataclasses.fields(ImportReport)}


def _outputs_complete(config: Any) -> bool:
    """Every entity count file and every bucket file of every edge path is there."""
    so = config.storage_options_for_fs()
    entities = EntityStore(config.entity_path, so)
    if not all(
        entities.has_count(name, part) for name, e in config.entities.items() for part in range(e.num_partitions)
    ):
        return False
    topology = PartitionTopology.build(
        {name: e.num_partitions for name, e in config.entities.items()},
        [(r.lhs, r.rhs) for r in config.relations],
    )
    return all(
        reads.exists(EdgeTarget(path, so).bucket_url(bucket), so)
        for path in config.edge_paths
        for bucket in topology.buckets()
    )
