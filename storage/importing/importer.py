"""``pbg import``: edge lists -> PBG entity files and bucketed edge files (PBG's ``import_from_tsv``).

The public entry point, :func:`import_edges`, keeps PBG's options (one
:class:`~storage.importing.options.ImportOptions`) and the contract of the first importer; the
work is done by the streaming engine of :mod:`storage.importing.run`.
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
- **One writer.** The import holds ``entity_path``'s import lease from start to end
  (:mod:`storage.entity_lease`): a second import, or one while a training run (eval, export) reads
  ``entity_path``, is refused before anything is written, naming the holder. Under the lease it
  first undoes or finishes what killed imports left (:mod:`storage.importing.leftovers`).
- **Edges never lost.** Two inputs never share an edge path and an append never writes over an
  earlier generation's edge path, unless ``force`` (:mod:`storage.importing.edge_paths`); the
  report counts the edges the bucket files hold once in place.
- **Disk space** is checked before the outputs are written, and a full disk is named
  (:mod:`storage.importing.space`).

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
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from storage.edge_lists.parse import Columns, ReadSpec
from storage.entity_lease import command_label, importing
from storage.importing.append import read_existing
from storage.importing.count import ImportPlan
from storage.importing.edge_paths import Replacement, check_edge_paths, mark_replaced
from storage.importing.leftovers import recover
from storage.importing.manifest import (
    generation_history,
    import_record,
    read_manifest,
    remove_manifest,
    write_manifest,
)
from storage.importing.options import ImportOptions
from storage.importing.outputs import Commit
from storage.importing.partition import EntityIndex
from storage.importing.previous import (
    Fingerprint,
    outputs_complete,
    refuse_replacing_appends,
    repeated,
    this_fingerprint,
    unchanged_report,
)
from storage.importing.report import ImportReport, ProgressFn
from storage.importing.run import make_plan, run_import
from storage.lease import LeaseKeeper
from storage.pause_points import pause_point

__all__ = ["EntityIndex", "ImportOptions", "ImportReport", "ProgressFn", "import_edges"]

logger = logging.getLogger(__name__)


def import_edges(
    config: Any,
    inputs: list[str],
    options: ImportOptions,
    *,
    seed: int | None = None,
    progress: ProgressFn | None = None,
    holder: str | None = None,
) -> ImportReport:
    """Import edge lists into ``config.entity_path`` and ``config.edge_paths`` (PBG layout).

    Args:
        config: The training config (``ConfigSchema``); reads entity_path, edge_paths,
            entities, relations, dynamic_relations and storage options.
        inputs: Edge-list files or URLs; input i is written to ``config.edge_paths[i]``.
        options: The columns, delimiter, min counts and policies (:class:`ImportOptions` details each).
        seed: Seed of the shuffles; None draws fresh entropy.
        progress: Called as ``progress(phase, done)`` after each batch of the
            ``"counting"`` phase (lines read) and of the ``"writing"`` phase (edges mapped).
        holder: This import's name in its lease, shown to whoever it keeps out (default: the command line).

    Returns:
        An :class:`ImportReport`.

    Raises:
        UsageError: Bad arguments (input count, column index, delimiter, missing rel_col).
        ConfigError: Dynamic mode without exactly one relation, or unknown entity types.
        DataNotFound: An input does not exist.
        BadDataError: A malformed line, an empty input, or every edge skipped (raised before
            anything is written).
        OutputExistsError: A plain import (no ``append``, no ``force``) over an import grown by appends;
            two inputs with one edge path, or an append onto an edge path holding edges (no ``force``).
        LeaseHeldError: Another import writes ``entity_path``, or a training run reads it (nothing written).
        NoSpaceForImport: The outputs do not fit on their disk (checked first), or a disk filled.
    """
    recorded: dict[str, Any] = {  # what the manifest records and compares (storage.importing.previous)
        "columns": [options.lhs_col, options.rhs_col, options.rel_col, options.weight_col],
        "delimiter": options.delimiter,
        "skip_bad_lines": options.skip_bad_lines,
        "unknown_relations": options.unknown_relations,
        "relation_type_min_count": options.relation_type_min_count,
        "entity_min_count": options.entity_min_count,
        "seed": seed,
    }
    if options.append:  # a separate key: an append never matches a plain import of the same files
        recorded["append"] = True
    job = _Job(config, list(inputs), _read_spec(config, recorded), recorded, progress, options.force)
    # Every argument, input and output check before the lease (created inside entity_path): a
    # mistake is named at once, not hidden behind "another import holds entity_path".
    job.plan = make_plan(config, job.inputs, job.spec)  # checked once: the import uses it
    so = config.storage_options_for_fs()
    with importing(config.entity_path, holder or command_label(), so) as keeper:  # refused here if busy
        recover(config.entity_path, list(config.edge_paths), so)  # what killed imports left
        pause_point("import-lease-held")
        job.keeper = keeper
        return job.append() if options.append else job.plain()


def _read_spec(config: Any, options: dict[str, Any]) -> ReadSpec:
    """How to read the inputs: the columns, delimiter, bad-line policy and (``unknown_relations="error"``
    with a relation column, standard relations only) the relation names a line may name."""
    lhs_col, rhs_col, rel_col, weight_col = options["columns"]
    strict = options["unknown_relations"] == "error" and rel_col is not None and not config.dynamic_relations
    relations = frozenset(r.name for r in config.relations) if strict else None
    columns = Columns(lhs_col, rhs_col, rel_col, weight_col)
    return ReadSpec(columns, options["delimiter"], options["skip_bad_lines"], relations)


@dataclasses.dataclass
class _Job:
    """One import under its lease: a plain import or an append, and how it is recorded."""

    config: Any
    inputs: list[str]
    spec: ReadSpec
    options: dict[str, Any]
    progress: ProgressFn | None
    force: bool
    keeper: LeaseKeeper | None = None
    plan: ImportPlan | None = None
    token: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def so(self) -> Any:
        return self.config.storage_options_for_fs()

    def plain(self) -> ImportReport:
        """A plain import, or nothing if the inputs and options match the last import's."""
        config = self.config
        check_edge_paths(config, self.inputs, [], append=False, force=self.force)
        previous = None if self.force else read_manifest(config.entity_path, self.so)
        refuse_replacing_appends(config, previous)
        if previous is not None and not outputs_complete(config):
            previous = None
        this = None
        if previous is not None:  # only a previous import can make this one unnecessary: compare first
            this = this_fingerprint(config, self.inputs, self.options)
            if repeated([previous], this, config, self.inputs, self.options) is not None:
                unchanged = unchanged_report(previous)
                logger.info("%s", unchanged)
                return unchanged
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pbg-import-fingerprint") as hasher:
            # Hashed while pass 1 parses the inputs (hashlib releases the GIL).
            later = hasher.submit(this_fingerprint, config, self.inputs, self.options) if this is None else None

            def record(report: ImportReport) -> None:
                done = this if later is None else later.result()
                if done is not None:  # None: unreadable inputs, which the import would have failed on
                    write_manifest(config.entity_path, self._record(report, done), self.so)

            # The manifest goes only now, when the first file is about to replace the last import's
            # output: an interrupted commit must not leave a manifest that matches, but an import
            # that fails before (a bad line, every edge skipped) leaves that output and its manifest.
            forget = partial(remove_manifest, config.entity_path, self.so)
            return self._run(before_commit=forget, record=record)

    def append(self) -> ImportReport:
        """An appending import, or nothing if the same append is already recorded among the generations.

        The existing import is read (and refused if it does not fit the config) before any input.
        """
        config = self.config
        existing = read_existing(config)
        history = generation_history(read_manifest(config.entity_path, self.so))
        this = this_fingerprint(config, self.inputs, self.options)
        done = repeated(history, this, config, self.inputs, self.options)
        if done is not None and not self.force and outputs_complete(config):
            unchanged = unchanged_report(done)
            logger.info("append already imported as generation %s: %s", done.get("generation"), unchanged)
            return unchanged
        replaced = check_edge_paths(config, self.inputs, history, append=True, force=self.force)
        generation = len(history)

        def record(report: ImportReport) -> None:
            report.generation = generation
            report.replaced = [_replacement(r) for r in replaced]
            mark_replaced(history, replaced, generation, self.so)
            entry = {"generation": generation, "append": True, **self._record(report, this)}
            if replaced:
                entry["replaces"] = [dataclasses.asdict(r) for r in replaced]
            write_manifest(config.entity_path, entry, self.so, generations=[*history, entry])

        return self._run(before_commit=None, record=record, existing=existing)

    def _run(
        self, before_commit: Callable[[], None] | None, record: Callable[[ImportReport], None], **extra: Any
    ) -> ImportReport:
        """:func:`run_import` with the import's options, committed as :class:`Commit` says."""

        def before() -> None:
            if self.keeper is not None:
                self.keeper.check()  # a lease lost (this process stalled past its expiry): nothing moves
            if before_commit is not None:
                before_commit()

        return run_import(
            self.config,
            self.inputs,
            self.spec,
            relation_type_min_count=self.options["relation_type_min_count"],
            entity_min_count=self.options["entity_min_count"],
            seed=self.options["seed"],
            progress=self.progress,
            commit=Commit(self.token, before_commit=before, record=record),
            plan=self.plan,
            **extra,
        )

    def _record(self, report: ImportReport, this: Fingerprint | None) -> dict[str, Any]:
        """The manifest record of this import (where it read and wrote, by stable identity)."""
        return import_record(
            self.config.entity_path,
            self.inputs,
            None if this is None else this.files,
            self.config.edge_paths,
            self.so,
            fingerprint=None if this is None else this.value,
            import_token=self.token,
            report=dataclasses.asdict(report),
        )


def _replacement(replaced: Replacement) -> str:
    by = "an import no generation records" if replaced.generation is None else f"generation {replaced.generation}"
    return f"{replaced.edge_path} ({replaced.edges:,} edges of {by})"
