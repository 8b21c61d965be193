"""storage.importing.progress: line estimates from file sizes, and the two-phase fraction."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.importing.progress import ImportProgress, estimate_lines


def test_estimate_from_sizes_and_the_first_head(tmp_path: Path) -> None:
    a = tmp_path / "a.tsv"
    b = tmp_path / "b.tsv"
    a.write_text("x\tr\ty\n" * 1000)  # 6 bytes per line
    b.write_text("x\tr\ty\n" * 500)
    assert estimate_lines([str(a), str(b)]) == 1500


def test_no_estimate_for_compressed_parquet_or_missing(tmp_path: Path) -> None:
    assert estimate_lines([str(tmp_path / "a.tsv.gz")]) is None
    assert estimate_lines([str(tmp_path / "a.parquet")]) is None
    assert estimate_lines([str(tmp_path / "missing.tsv")]) is None
    assert estimate_lines([]) is None


def test_counting_fills_the_first_half_and_writing_the_second() -> None:
    seen: list[tuple[float, str]] = []
    progress = ImportProgress(1000, lambda f, text: seen.append((f, text)), every_s=0.0)
    progress("counting", 500)
    progress("counting", 1000)
    progress("writing", 250)
    progress("writing", 1000)
    assert [round(f, 3) for f, _ in seen] == [0.25, 0.5, 0.625, 1.0]
    assert seen[2][1].startswith("writing: 250 of ~1,000 edges")


def test_without_an_estimate_counting_stays_at_zero() -> None:
    seen: list[float] = []
    progress = ImportProgress(None, lambda f, text: seen.append(f), every_s=0.0)
    progress("counting", 10)
    progress("writing", 5)
    assert seen == [0.0, pytest.approx(0.75)]


def test_reports_are_throttled_but_each_phase_starts_with_one() -> None:
    seen: list[str] = []
    progress = ImportProgress(100, lambda f, text: seen.append(text.split(":")[0]), every_s=3600.0)
    for count in range(1, 50):
        progress("counting", count)
    progress("writing", 1)
    progress("writing", 2)
    assert seen == ["counting", "writing"]
