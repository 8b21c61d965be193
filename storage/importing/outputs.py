"""Pass 2's outputs: bucket files per edge path and the entity files, staged, moved into place, counted back.

In order, each step able to fail with everything before it undone:

1. the bucket sizes of every input (a cheap read of its spill); an import whose every edge is
   skipped stops here, before anything is written;
2. the free space of the output filesystems (:mod:`storage.importing.space`);
3. the bucket files of each edge path (the inputs sharing one, under ``--force``, in input
   order) and the entity files, into hidden staging directories, journaled
   (:mod:`storage.importing.staging`, :mod:`storage.importing.journal`);
4. the commit: ``before_commit`` (the caller forgets the previous import), every file moved
   into place, the edges each edge path's bucket files hold read back and checked against what
   was written, and ``record`` (the caller writes the manifest: the commit point);
5. the staging and backup directories and the journal removed.

A failure before ``record`` returns removes every staged and moved file and puts back what an
append replaced; a stop signal during steps 4-5 is delivered once they are done.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from storage.entities import EntityStore
from storage.errors import BadDataError, StorageError
from storage.importing.count import ImportPlan, NameCounter
from storage.importing.edge_paths import edges_on_disk, input_groups
from storage.importing.entity_files import write_entity_files
from storage.importing.partition import Assignment
from storage.importing.report import ImportReport, PhaseProgress
from storage.importing.space import bucket_bytes, check_output_space, human, named_when_full, names_bytes
from storage.importing.spill import Spill
from storage.importing.staging import Staging, StopSignalHold
from storage.importing.write import ChunkMapper, EdgeTarget, bucket_sizes, write_buckets
from storage.pause_points import pause_point

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Ids:
    """What pass 2 needs of the ids pass 1 assigned."""

    relations: Assignment | None  # dynamic mode only: the relation names' shuffle
    relation_names: list[str]  # in id order
    entities: dict[str, Assignment]  # per entity type
    entity_min_count: int  # for the message when every edge was skipped


@dataclasses.dataclass(frozen=True)
class Commit:
    """How the caller takes part in the commit (see the module docstring).

    Attributes:
        token: The import's token (its staging directories and journal; the manifest records it).
        append: Files already at a final name are moved aside first, and put back on failure.
        before_commit: Called once everything is staged, right before the first file moves.
        record: Called with the report once every file is in place and counted: the commit point.
    """

    token: str
    append: bool = False
    before_commit: Callable[[], None] | None = None
    record: Callable[[ImportReport], None] | None = None


def nothing_imported(report: ImportReport, relation_names: Sequence[str], entity_min_count: int) -> str:
    """Why an import whose every edge was skipped wrote nothing: one line, every reason counted."""
    why = {
        "unknown_relation": "relation name not in the config"
        + (
            f" (seen: {', '.join(f'{n!r} ({c:,})' for n, c in report.unknown_relations.items())}; the config "
            f"has {', '.join(map(repr, relation_names))})"
            if report.unknown_relations
            else ""
        ),
        "unknown_entity": f"entity seen fewer than entity_min_count={entity_min_count} times",
        "blank_line": "blank line",
        "malformed_line": "malformed line" + (f" (first: {report.bad_lines[0]})" if report.bad_lines else ""),
    }
    groups = "; ".join(f"{count:,} skipped: {why[reason]}" for reason, count in report.skipped.items() if count)
    return (
        f"read {report.edges_read:,} edges and every one was skipped ({groups or 'no edges'}); "
        "nothing was written (the output of an earlier import, if any, is kept)"
    )


def write_and_commit(
    config: Any,
    inputs: Sequence[str],
    plan: ImportPlan,
    spills: list[Spill],
    counter: NameCounter,
    ids: Ids,
    report: ImportReport,
    writing: PhaseProgress,
    weighted: bool,
    chunk_edges: int,
    commit: Commit,
) -> None:
    """Pass 2, steps 1-5 of the module docstring."""
    so = plan.storage_options
    mapper = ChunkMapper(plan, ids.entities, ids.relations)
    groups = _sized_groups(config, inputs, spills, mapper, ids, report, chunk_edges)
    edge_bytes = [bucket_bytes(group_sizes.tolist(), weighted) for _, _, group_sizes in groups]
    entity_bytes = 2 * 4096 + sum(  # the relation names files, and each entity type's files
        names_bytes(counter.entities[name].names(), assignment.num_partitions)
        for name, assignment in ids.entities.items()
    )
    check_output_space(
        [*((g[0], b) for g, b in zip(groups, edge_bytes, strict=True)), (config.entity_path, entity_bytes)], so
    )
    pause_point("import-space-checked")
    staging = Staging(so, keep_replaced=commit.append, token=commit.token, journal_dir=config.entity_path)
    with StopSignalHold() as hold:  # Ctrl-C during the moves: delivered once they are done
        try:
            for (path, members, group_sizes), needed in zip(groups, edge_bytes, strict=True):
                with named_when_full(path, human(needed), so):
                    target = EdgeTarget(staging.stage(path), so)
                    chosen = [spills[i] for i in members]
                    write_buckets(chosen, mapper, target, group_sizes, weighted, writing.advance, chunk_edges)
                logger.info("imported %d edges into %s", int(group_sizes.sum()), path)
            with named_when_full(config.entity_path, human(entity_bytes), so):
                entity_store = EntityStore(staging.stage(config.entity_path), so)
                write_entity_files(entity_store, counter, ids.entities, ids.relation_names, plan.dynamic)
            if commit.before_commit is not None:
                commit.before_commit()
            hold.hold()
            staging.move_into_place()
            report.edges_on_disk = _counted_back(groups, so)
            if commit.record is not None:
                commit.record(report)
        except BaseException:
            staging.rollback()
            raise
        pause_point("import-recorded")
        try:
            staging.finish()
        except StorageError as exc:  # the import is complete: the next one removes what is left
            logger.warning("could not remove the import's staging directories (the next import will): %s", exc)


def _sized_groups(
    config: Any,
    inputs: Sequence[str],
    spills: list[Spill],
    mapper: ChunkMapper,
    ids: Ids,
    report: ImportReport,
    chunk_edges: int,
) -> list[tuple[str, list[int], np.ndarray]]:
    """Step 1: every input's bucket sizes (and skips, into ``report``); per distinct edge path, its
    inputs and their summed sizes.

    Raises:
        BadDataError: every edge was skipped (nothing is written).
    """
    sizes = []
    for spill in spills:
        input_sizes, unknown_relation, unknown_entity = bucket_sizes(spill, mapper, chunk_edges)
        report.skipped["unknown_relation"] += unknown_relation
        report.skipped["unknown_entity"] += unknown_entity
        report.edges_written.append(int(input_sizes.sum()))
        sizes.append(input_sizes)
    if not sum(report.edges_written):
        raise BadDataError(", ".join(inputs), nothing_imported(report, ids.relation_names, ids.entity_min_count))
    return [
        (path, members, np.sum([sizes[i] for i in members], axis=0))
        for path, members in input_groups(config.edge_paths, mapper.plan.storage_options)
    ]


def _counted_back(groups: list[tuple[str, list[int], np.ndarray]], so: Any) -> dict[str, int]:
    """What each edge path's bucket files hold now, checked against what was written into them.

    Raises:
        StorageError: an edge path holds another number of edges than was written (the import is undone).
    """
    counts = {}
    for path, _, group_sizes in groups:
        found, written = edges_on_disk(path, so), int(group_sizes.sum())
        if found != written:
            raise StorageError(
                path,
                f"its bucket files hold {found:,} edges after the import moved them in, but {written:,} were written; "
                "the import was undone (is another program writing this directory?)",
            )
        counts[path] = found
    return counts
