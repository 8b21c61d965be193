"""storage.importing.report: the import summary users read, bad-line bookkeeping and phase progress.

Named after its package: a test's base name is unique across tests/ (see docs/architecture.md, "Tests").
"""

from __future__ import annotations

from storage.importing.report import MAX_BAD_LINES_KEPT, ImportReport, PhaseProgress


def test_summary_names_counts_rates_skips_entities_and_warnings() -> None:
    report = ImportReport(
        edges_read=1500,
        edges_written=[1000, 400],
        entity_counts={"user": 20, "item": 1234},
        relation_count=2,
        seconds=2.0,
        shared_names={"item/user": 3},
        shared_examples={"item/user": ["17", "18"]},
        unknown_relations={"likes": 90},
    )
    report.skipped["unknown_relation"] = 90
    report.skipped["blank_line"] = 10
    report.add_bad_lines(["e.tsv: line 7: empty name in column 0 (repeated delimiter?)"])
    assert str(report).splitlines() == [
        "imported 1,400 of 1,500 edges in 2.0 s (750 edges/s); per input 1,000, 400; "
        "skipped 90 unknown relation, 10 blank line, 1 malformed line; entities item: 1,234, user: 20; "
        "2 relation type(s)",
        "relation names not in the config (edges skipped): 'likes' (90)",
        "names under several entity types, kept as separate entities of each type (as PBG does): "
        "item/user: 3 (e.g. '17', '18')",
        "malformed lines skipped:",
        "  e.tsv: line 7: empty name in column 0 (repeated delimiter?)",
    ]


def test_an_unchanged_reimport_says_so_and_nothing_else() -> None:
    report = ImportReport(edges_written=[5, 7], unchanged_since="2026-12-01T10:00:00Z")
    assert str(report) == (
        "inputs and options unchanged since the import of 2026-12-01T10:00:00Z: nothing to do "
        "(12 edges in place; --force imports again)"
    )


def test_bad_lines_are_all_counted_but_only_the_first_few_kept() -> None:
    report = ImportReport()
    report.add_bad_lines([f"line {i}" for i in range(MAX_BAD_LINES_KEPT - 1)])
    report.add_bad_lines(["late 1", "late 2", "late 3"])
    assert report.skipped["malformed_line"] == MAX_BAD_LINES_KEPT + 2
    assert len(report.bad_lines) == MAX_BAD_LINES_KEPT and report.bad_lines[-1] == "late 1"
    assert "skipped none" in str(ImportReport(edges_written=[0]))


def test_phase_progress_reports_running_totals_and_the_final_one_once() -> None:
    calls: list[tuple[str, int]] = []
    progress = PhaseProgress(lambda phase, n: calls.append((phase, n)), "writing")
    progress.advance(3)
    progress.advance(0)  # nothing new: no report
    progress.advance(4)
    progress.finish()  # 7 was just reported
    assert calls == [("writing", 3), ("writing", 7)]
    empty = PhaseProgress(lambda phase, n: calls.append((phase, n)), "counting")
    empty.finish()  # a phase with nothing still reports its 0 once
    empty.finish()
    assert calls[-1] == ("counting", 0) and len(calls) == 3
    PhaseProgress(None, "writing").advance(5)  # no callback: nothing to call
