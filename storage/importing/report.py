"""What an import reports: counts of edges read, written and skipped (by reason), and progress.

Shared by the import engine's passes (:mod:`storage.importing.run`) and the public entry point
(:mod:`storage.importing.importer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pbg_core.types import EntityName

# progress(phase, lines_done): phase "counting" (lines read, blank ones included), then
# "writing" (edges mapped into buckets); called after every batch and once at the end of a phase.
ProgressFn = Callable[[str, int], None]

SKIP_REASONS = ("unknown_relation", "unknown_entity", "blank_line", "malformed_line")
MAX_BAD_LINES_KEPT = 100  # malformed lines listed in the report (all of them are counted)
MAX_NAMES_SHOWN = 10  # unknown relation names listed in the report (the most frequent)


def _skip_reasons() -> dict[str, int]:
    return dict.fromkeys(SKIP_REASONS, 0)


@dataclass
class ImportReport:
    """What one import did.

    Attributes:
        edges_read: Non-blank lines read, over all inputs (malformed ones included).
        edges_written: Edges written, per input (input i -> edge path i).
        skipped: Lines not written, by reason: ``unknown_relation``, ``unknown_entity``,
            ``blank_line``, ``malformed_line`` (only with ``skip_bad_lines``).
        bad_lines: The first :data:`MAX_BAD_LINES_KEPT` malformed lines skipped, as
            ``"{file}: line {n}: {problem}"``.
        entity_counts: Entities kept per entity type (after ``entity_min_count``).
        relation_count: Relation types (config relations, or dynamic relations kept).
        seconds: Wall time of the whole import.
        shared_names: Names found under several entity types, per pair ``"a/b"``: each type
            keeps its own entity (PBG's rule: types are separate namespaces, e.g. user 17
            and item 17), reported because a shared name can also be a mistake in the data.
        shared_examples: The first few shared names of each pair.
        unknown_relations: The most frequent relation names not in the config (standard mode),
            with their edge counts (all of them are in ``skipped["unknown_relation"]``).
        generation: An append's place in the import's history (the first import is 0); None otherwise.
        new_entities: An append's new names per entity type (included in ``entity_counts``).
        edges_on_disk: Per edge path (as the config names it): the edges its bucket files hold,
            read back once they were in place (equal to what its inputs wrote, or the import fails).
        replaced: Edge paths of earlier generations whose edges this import replaced (``--force``),
            each as ``"<edge path> (<edges> edges of generation <n>)"``.
    """

    edges_read: int = 0
    edges_written: list[int] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=_skip_reasons)
    bad_lines: list[str] = field(default_factory=list)
    entity_counts: dict[EntityName, int] = field(default_factory=dict)
    relation_count: int = 0
    seconds: float = 0.0
    shared_names: dict[str, int] = field(default_factory=dict)
    shared_examples: dict[str, list[str]] = field(default_factory=dict)
    unknown_relations: dict[str, int] = field(default_factory=dict)
    unchanged_since: str | None = None  # set when a re-import found nothing changed (nothing written)
    generation: int | None = None
    new_entities: dict[EntityName, int] = field(default_factory=dict)
    edges_on_disk: dict[str, int] = field(default_factory=dict)
    replaced: list[str] = field(default_factory=list)

    def add_bad_lines(self, lines: list[str]) -> None:
        """Count skipped malformed lines and keep the first few for the report."""
        self.skipped["malformed_line"] += len(lines)
        room = MAX_BAD_LINES_KEPT - len(self.bad_lines)
        if room > 0:
            self.bad_lines.extend(lines[:room])

    def __str__(self) -> str:
        if self.unchanged_since is not None:
            return (
                f"inputs and options unchanged since the import of {self.unchanged_since}: nothing to do "
                f"({sum(self.edges_written):,} edges in place; --force imports again)"
            )
        written = sum(self.edges_on_disk.values()) if self.edges_on_disk else sum(self.edges_written)
        rate = self.edges_read / self.seconds if self.seconds > 0 else 0.0
        skipped = ", ".join(f"{n:,} {reason.replace('_', ' ')}" for reason, n in self.skipped.items() if n)
        entities = ", ".join(f"{name}: {n:,}" for name, n in sorted(self.entity_counts.items()))
        text = (
            f"imported {written:,} of {self.edges_read:,} edges in {self.seconds:.1f} s ({rate:,.0f} edges/s); "
            f"per input {', '.join(f'{n:,}' for n in self.edges_written)}; "
            f"skipped {skipped or 'none'}; entities {entities}; {self.relation_count} relation type(s)"
        )
        if 0 < len(self.edges_on_disk) < len(self.edges_written):  # inputs sharing an edge path (--force)
            paths = ", ".join(f"{path}: {n:,}" for path, n in self.edges_on_disk.items())
            text += f"\nper edge path (several inputs into one, --force): {paths}"
        if self.replaced:
            text += f"\nreplaced, with --force, the edges of earlier generations at: {'; '.join(self.replaced)}"
        if self.generation is not None:
            new = ", ".join(f"{name}: {n:,}" for name, n in sorted(self.new_entities.items()))
            text += f"\nappended as generation {self.generation}; new entities {new or 'none'} (earlier ones kept their places)"
        if self.unknown_relations:
            shown = ", ".join(f"{name!r} ({n:,})" for name, n in self.unknown_relations.items())
            text += f"\nrelation names not in the config (edges skipped): {shown}"
        if self.shared_names:
            pairs = "; ".join(
                f"{pair}: {n:,} (e.g. {', '.join(map(repr, self.shared_examples.get(pair, [])))})"
                for pair, n in self.shared_names.items()
            )
            text += f"\nnames under several entity types, kept as separate entities of each type (as PBG does): {pairs}"
        if self.bad_lines:
            text += "\nmalformed lines skipped:\n  " + "\n  ".join(self.bad_lines)
        return text


class PhaseProgress:
    """Cumulative count of one phase, forwarded to the caller's callback."""

    def __init__(self, callback: ProgressFn | None, phase: str) -> None:
        self.callback = callback
        self.phase = phase
        self.done_count = 0
        self._reported = -1

    def advance(self, count: int) -> None:
        """Add ``count`` and report the running total."""
        self.done_count += count
        if self.callback is not None and count:
            self._reported = self.done_count
            self.callback(self.phase, self.done_count)

    def finish(self) -> None:
        """Report the final total unless it was just reported (also when it is 0)."""
        if self.callback is not None and self._reported != self.done_count:
            self._reported = self.done_count
            self.callback(self.phase, self.done_count)
