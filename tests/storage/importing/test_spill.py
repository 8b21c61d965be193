"""storage.importing.spill: edges spilled to local files come back in order, in chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from storage.importing.spill import Spill, SpillChunk


def _chunk(start: int, count: int, weighted: bool) -> SpillChunk:
    ids = np.arange(start, start + count, dtype=np.int64)
    weight = (ids * 0.5).astype(np.float64) if weighted else None
    return SpillChunk(lhs=ids, rhs=ids + 100, rel=ids % 3, weight=weight)


def _joined(spill: Spill, chunk_edges: int) -> tuple[list[int], list[SpillChunk]]:
    chunks = list(spill.chunks(chunk_edges))
    return [len(c) for c in chunks], chunks


def test_appended_chunks_come_back_in_order_rechunked(tmp_path: Path) -> None:
    spill = Spill(str(tmp_path / "spill"), weighted=True)
    spill.append(_chunk(0, 5, True))
    spill.append(_chunk(5, 6, True))
    sizes, chunks = _joined(spill, 4)
    assert spill.num_edges == 11 and sizes == [4, 4, 3]
    lhs = np.concatenate([c.lhs for c in chunks])
    assert lhs.tolist() == list(range(11))
    assert np.concatenate([c.rhs for c in chunks]).tolist() == list(range(100, 111))
    assert np.concatenate([c.rel for c in chunks]).tolist() == [i % 3 for i in range(11)]
    weights = np.concatenate([c.weight for c in chunks if c.weight is not None])
    assert weights.dtype == np.float32 and weights.tolist() == [i * 0.5 for i in range(11)]


def test_unweighted_spill_keeps_no_weight_file(tmp_path: Path) -> None:
    spill = Spill(str(tmp_path / "spill"), weighted=False)
    spill.append(_chunk(0, 3, False))
    _, chunks = _joined(spill, 10)
    assert chunks[0].weight is None
    assert sorted(p.name for p in (tmp_path / "spill").iterdir()) == ["lhs.bin", "rel.bin", "rhs.bin"]


def test_reset_starts_over_and_an_empty_spill_yields_nothing(tmp_path: Path) -> None:
    spill = Spill(str(tmp_path / "spill"), weighted=False)
    assert list(spill.chunks(4)) == []
    spill.append(_chunk(0, 3, False))
    spill.reset()
    assert spill.num_edges == 0 and list((tmp_path / "spill").iterdir()) == []
    spill.append(_chunk(7, 2, False))
    (only,) = spill.chunks(4)
    assert only.lhs.tolist() == [7, 8]
