"""The import engine: edge lists -> PBG entity files and bucketed edge files, in two passes.

1. **Count** (:mod:`storage.importing.count`): every input is parsed once (pyarrow, see
   :mod:`storage.edge_lists`), names are mapped to ids and counted, and each edge's ids are
   spilled to a local temporary directory. Nothing is written to the outputs before every
   input has been read, so a malformed line fails the import before any output exists.
2. **Assign** (:mod:`storage.importing.partition`): rare names dropped, seeded shuffle,
   exact-integer partition ranges.
3. **Write** (:mod:`storage.importing.write`): the spill is mapped chunk by chunk into the
   bucket files, under hidden staging directories (:mod:`storage.importing.staging`) moved into place
   at the end (edge files first, entity files last); any failure removes what was created.

Memory holds the name indexes (about 80 bytes per distinct name: hash table slots, hashes,
counts, the names), three parse blocks and two spill chunks: it does not grow with the number
of edges. Both cores work throughout: pass 1 parses the next block (pyarrow, both cores) in
a background thread while this one is mapped, and hashes and probes lhs and rhs in two
threads; pass 2 maps and sorts the next chunk while h5py writes this one. The inputs'
fingerprint (:mod:`storage.importing.manifest`) is hashed alongside pass 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from pbg_core.errors import ConfigError, UsageError
from storage import layout
from storage.edge_lists.parse import RawBatch, ReadSpec, is_parquet
from storage.edge_lists.read import edge_batches
from storage.errors import DataNotFound, OutputNotWritable
from storage.fs import reads, urls
from storage.importing import write as write_pass
from storage.importing.append import Existing, seed_counter
from storage.importing.count import ImportPlan, NameCounter
from storage.importing.leftovers import claim_spill
from storage.importing.outputs import Commit, Ids, write_and_commit
from storage.importing.partition import Assignment, assign, extend
from storage.importing.report import MAX_NAMES_SHOWN, ImportReport, PhaseProgress, ProgressFn
from storage.importing.space import NoSpaceForImport, free_space, human, is_disk_full
from storage.importing.spill import Spill
from storage.local_dirs import creatable_problem

logger = logging.getLogger(__name__)


def make_plan(config: Any, inputs: Sequence[str], spec: ReadSpec) -> ImportPlan:
    """Check the arguments against the config and derive the plan (no I/O but exists and a write probe).

    Raises:
        UsageError: input count, column, delimiter or a missing rel column in dynamic mode.
        ConfigError: dynamic mode without exactly one relation, unknown entity types.
        DataNotFound: an input does not exist.
        OutputNotWritable: a local output directory (entity_path, an edge path) cannot be created.
    """
    check_input_count(config, inputs)
    columns = spec.columns
    for name, col in zip(columns._fields, columns, strict=True):
        if isinstance(col, int) and col < 0:
            raise UsageError(f"{name}_col must be a 0-based column index >= 0, got {col}")
        if isinstance(col, str) and not all(is_parquet(url) for url in inputs):
            raise UsageError(
                f"{name}_col={col!r} is a column name: names need Parquet inputs (.parquet/.pq), "
                f"got {list(inputs)}; use 0-based indices for text files"
            )
    if spec.delimiter == "" or (spec.delimiter is not None and spec.delimiter.strip("\r\n") != spec.delimiter):
        raise UsageError(
            f"delimiter must be None (tab or space, detected) or a string without newlines, got {spec.delimiter!r}"
        )
    dynamic = bool(config.dynamic_relations)
    if dynamic and len(config.relations) != 1:
        raise ConfigError([f"relations: dynamic_relations needs exactly 1 relation, got {len(config.relations)}"])
    if dynamic and columns.rel is None:
        raise UsageError(
            "rel_col (--rel-col) is required with dynamic_relations=True: relation names "
            "come from the data; give the 0-based column of the relation name"
        )
    sides = [(rel.lhs, rel.rhs) for rel in config.relations]
    unknown = sorted({t for pair in sides for t in pair} - set(config.entities))
    if unknown:
        raise ConfigError([f"relations: entity types {unknown} are not in entities {sorted(config.entities)}"])
    options = config.storage_options_for_fs()  # the real credentials
    for url in inputs:
        if not reads.exists(url, options):
            raise DataNotFound(url, "input edge list does not exist")
        if reads.isdir(url, options):
            raise DataNotFound(
                url, "input edge list is a directory, expected a file (delimited text, .gz, .bz2 or .parquet/.pq)"
            )
    check_outputs(config)
    parts = {name: entity.num_partitions for name, entity in config.entities.items()}
    return ImportPlan(
        dynamic=dynamic,
        relation_ids={rel.name: i for i, rel in enumerate(config.relations)},
        sides=sides,
        num_partitions=parts,
        nparts_lhs=max(parts[lhs] for lhs, _ in sides),
        nparts_rhs=max(parts[rhs] for _, rhs in sides),
        storage_options=options,
    )


def check_input_count(config: Any, inputs: Sequence[str]) -> None:
    """One input per edge path.

    Raises:
        UsageError: naming both lists.
    """
    if len(inputs) != len(config.edge_paths):
        raise UsageError(
            f"got {len(inputs)} input(s) {list(inputs)} but config.edge_paths has "
            f"{len(config.edge_paths)} {list(config.edge_paths)}: input i is imported into edge path i"
        )


def check_outputs(config: Any) -> None:
    """Fail before reading any input when a local output directory (entity_path, an edge path) cannot be created.

    Raises:
        OutputNotWritable: naming the directory, the config field and why.
    """
    options = config.storage_options_for_fs()
    for field, url in [("entity_path", config.entity_path), *(("edge_paths", p) for p in config.edge_paths)]:
        filesystem, path = urls.resolve(url, options)
        problem = creatable_problem(path) if urls.is_local(filesystem) else None
        if problem is not None:
            raise OutputNotWritable(url, f"cannot create the {field} directory: {problem}")


def _consume(
    batches: Iterator[RawBatch],
    counter: NameCounter,
    spill: Spill,
    url: str,
    report: ImportReport,
    progress: PhaseProgress,
) -> None:
    for batch in batches:
        spill.append(counter.consume(batch, url))
        report.edges_read += len(batch) + len(batch.bad)
        report.skipped["blank_line"] += batch.blank
        report.add_bad_lines([f"{url}: {line}" for line in batch.bad])
        progress.advance(batch.lines)


def count_input(
    url: str, spill: Spill, counter: NameCounter, spec: ReadSpec, report: ImportReport, progress: PhaseProgress
) -> None:
    """Pass 1 over one input: count its names and spill its edges (the reader: :mod:`storage.edge_lists.read`)."""
    snapshot = counter.snapshot()
    before = (report.edges_read, dict(report.skipped), list(report.bad_lines), progress.done_count)

    def restart() -> None:  # the file is read again from its start: forget what it gave so far
        counter.restore(snapshot)
        spill.reset()
        report.edges_read, report.skipped, report.bad_lines, progress.done_count = before

    batches = edge_batches(url, spec, counter.plan.storage_options, restart)
    _consume(batches, counter, spill, url, report, progress)


def _report_shared_names(counter: NameCounter, report: ImportReport) -> None:
    """Count names that occur under more than one entity type (see ``ImportReport.shared_names``)."""
    types = sorted(counter.entities)
    for i, first in enumerate(types):
        for second in types[i + 1 :]:
            count, examples = counter.entities[first].shared_with(counter.entities[second])
            if count:
                report.shared_names[f"{first}/{second}"] = count
                report.shared_examples[f"{first}/{second}"] = examples


def run_import(
    config: Any,
    inputs: Sequence[str],
    spec: ReadSpec,
    *,
    relation_type_min_count: int = 1,
    entity_min_count: int = 1,
    seed: int | None = None,
    progress: ProgressFn | None = None,
    spill_dir: str | None = None,
    chunk_edges: int | None = None,
    commit: Commit | None = None,
    existing: Existing | None = None,
    plan: ImportPlan | None = None,
) -> ImportReport:
    """Import ``inputs`` into ``config.entity_path`` and ``config.edge_paths`` (see the module docstring).

    Long because its docstring documents eleven options; the body is the two passes' calls.

    Args:
        config: The training config (``ConfigSchema``).
        inputs: One edge list per edge path (text, ``.gz``/``.bz2``, or Parquet).
        spec: Columns, delimiter, bad-line policy, batch size.
        relation_type_min_count: Dynamic mode: drop relation names seen fewer times.
        entity_min_count: Drop entities seen fewer times (per type, over all inputs).
        seed: Seed of the shuffles; None draws fresh entropy.
        progress: ``progress(phase, done)`` after every batch/chunk of ``"counting"``, then ``"writing"``.
        spill_dir: Parent of the temporary spill directory (default: the system temp dir).
        chunk_edges: Spill edges mapped at a time in pass 2
            (default :data:`storage.importing.write.CHUNK_EDGES`).
        commit: The caller's part in the commit (:class:`storage.importing.outputs.Commit`: the
            import's token, what to do before the first file moves and once all are in place);
            default: a fresh token, nothing else.
        existing: Append to this import (:mod:`storage.importing.append`): its names keep their
            places, new names are added at the partitions' ends; None imports anew.
        plan: :func:`make_plan`'s result, when the caller already checked the arguments with it.

    Returns:
        The :class:`ImportReport`.

    Raises:
        BadDataError: every edge read was skipped (nothing is written, earlier outputs stay).
        NoSpaceForImport: a disk filled, or would (nothing is written, earlier outputs stay).
    """
    started = time.monotonic()
    chunk_edges = chunk_edges or write_pass.CHUNK_EDGES
    plan = plan or make_plan(config, inputs, spec)
    report = ImportReport()
    weighted = spec.columns.weight is not None
    commit = dataclasses.replace(commit or Commit(uuid.uuid4().hex[:12]), append=existing is not None)
    with (
        tempfile.TemporaryDirectory(prefix=layout.IMPORT_SPILL_PREFIX, dir=spill_dir) as tmp,
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="pbg-import") as threads,
    ):
        claim_spill(tmp)  # a later import removes it if this process dies without cleaning up
        counter = NameCounter(plan, threads)
        if existing is not None:
            seed_counter(counter, existing, plan.dynamic)
        counting = PhaseProgress(progress, "counting")
        spills: list[Spill] = []
        for i, url in enumerate(inputs):
            spills.append(Spill(os.path.join(tmp, f"input{i}"), weighted))
            with spill_space(tmp, url, spills):
                count_input(url, spills[-1], counter, spec, report, counting)
        counting.finish()
        ids = _assign_ids(config, plan, counter, report, (relation_type_min_count, entity_min_count), seed, existing)
        writing = PhaseProgress(progress, "writing")
        write_and_commit(config, inputs, plan, spills, counter, ids, report, writing, weighted, chunk_edges, commit)
        writing.finish()
    report.seconds = time.monotonic() - started
    logger.info("import done: %s", report)
    return report


@contextlib.contextmanager
def spill_space(directory: str, url: str, spills: list[Spill]) -> Iterator[None]:
    """A full disk while pass 1 spills ``url`` into ``directory``, as :class:`NoSpaceForImport` naming both."""
    try:
        yield
    except OSError as exc:
        # numpy's tofile reports a short write without an errno ("N requested and M written").
        if not (is_disk_full(exc) or (exc.errno is None and " requested and " in str(exc))):
            raise
        written = sum(entry.stat().st_size for spill in spills for entry in os.scandir(spill.directory))
        found = free_space(directory)
        free = human(found[1]) if found else "no space"
        raise NoSpaceForImport(
            directory,
            f"disk full while pass 1 spilled {url} here (12-16 bytes per edge): it needed more than the "
            f"{human(written)} written, {free} free; nothing was written to the outputs (an earlier import "
            "there is intact): point TMPDIR to a directory on a larger disk",
        ) from None


def _assign_ids(
    config: Any,
    plan: ImportPlan,
    counter: NameCounter,
    report: ImportReport,
    min_counts: tuple[int, int],
    seed: int | None,
    existing: Existing | None,
) -> Ids:
    """Pass 2's ids: rare names dropped, one seeded shuffle (relations first, then entity types); the counts go to ``report``.

    ``min_counts``: (relation_type_min_count, entity_min_count). With ``existing`` (an append) the
    names already imported keep their places and only the new ones are dropped or shuffled.
    """
    relation_type_min_count, entity_min_count = min_counts
    rng = np.random.default_rng(seed)

    def ids_of(counts: np.ndarray, min_count: int, num_partitions: int, old_sizes: list[int] | None) -> Assignment:
        if old_sizes is None:
            return assign(counts, min_count, num_partitions, rng)
        return extend(old_sizes, counts, min_count, rng)

    old_relations = None if existing is None else [len(existing.relation_names)]
    relations = ids_of(counter.relations.counts, relation_type_min_count, 1, old_relations) if plan.dynamic else None
    if relations is not None:
        relation_names = counter.relations.names().take(pa.array(relations.order, type=pa.int64())).to_pylist()
    else:
        relation_names = [rel.name for rel in config.relations]
    entities = {
        name: ids_of(
            counter.entities[name].counts,
            entity_min_count,
            plan.num_partitions[name],
            None if existing is None else existing.sizes(name),
        )
        for name in plan.entity_types
    }
    report.entity_counts = {name: len(a.order) for name, a in entities.items()}
    if existing is not None:
        report.new_entities = {name: len(a.order) - sum(existing.sizes(name)) for name, a in entities.items()}
    _report_shared_names(counter, report)
    report.unknown_relations = dict(counter.unknown_relations.most_common(MAX_NAMES_SHOWN))
    report.relation_count = len(relation_names)
    return Ids(relations, relation_names, entities, entity_min_count)
