"""storage.remap.rows: one entity type's rows moved by name, each old partition read once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from store_io import StorePath

from pbg_core.ports import CheckpointMetadata, NamesDigests
from pbg_core.training.optimizers import RowAdagrad, state_from_bytes, state_to_bytes
from storage.checkpoints import CheckpointStore
from storage.remap.matching import match, name_table
from storage.remap.rows import Target, move_rows

OLD = [["a", "b", "c"], ["d", "e"]]
NEW = [["e", "x", "a"], ["c", "d", "y", "z"]]
META = CheckpointMetadata(config_json="{}", names=NamesDigests(entities={("user", 0): "n0", ("user", 1): "n1"}))


class CountingReads:
    """A real checkpoint store whose embedding reads are counted."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def load_embeddings(self, entity: str, part: int, version: int, out: Any = None) -> Any:
        self.reads.append(part)
        return self.store.load_embeddings(entity, part, version, out)


def trained(root: StorePath) -> tuple[CheckpointStore, dict[str, tuple[list[float], float]]]:
    """``OLD`` trained: each name's row is (its index, its index + 0.5) and its Adagrad sum 10 * index."""
    store = CheckpointStore(str(root / "init"))
    rows: dict[str, tuple[list[float], float]] = {}
    index = 0
    for part, names in enumerate(OLD):
        vectors, sums = torch.zeros(len(names), 2), torch.zeros(len(names))
        for offset, name in enumerate(names):
            vectors[offset] = torch.tensor([index, index + 0.5])
            sums[offset] = 10.0 * index
            rows[name] = (vectors[offset].tolist(), float(sums[offset]))
            index += 1
        store.save_embeddings("user", part, 3, vectors, state_to_bytes(RowAdagrad.state_dict(sums)), META)
    return store, rows


def test_kept_entities_start_from_their_trained_rows_and_sums_wherever_they_are(
    root: StorePath, tmp_path: Path
) -> None:
    init, rows = trained(root)
    source = CountingReads(init)
    out = CheckpointStore(str(root / "start"))
    moves, _ = match(name_table(lambda p: OLD[p], 2), name_table(lambda p: NEW[p], 2))

    def start(part: int, embeddings: torch.Tensor) -> None:
        embeddings.fill_(-1.0 - part)  # recognisable fresh starts

    target = Target(out, 3, (3, 4), 2, start, 0.1, META)
    fresh = move_rows("user", moves, source, 3, target, str(tmp_path / "spill"))
    assert sorted(source.reads) == [0, 1]  # each old partition read once
    assert fresh[0].tolist() == [1] and fresh[1].tolist() == [2, 3]  # x; y, z
    for part, names in enumerate(NEW):
        embeddings, optim = out.load_embeddings("user", part, 3)
        sums = torch.zeros(len(names))
        assert optim is not None and RowAdagrad.load_state_dict(state_from_bytes(optim), sums)
        for offset, name in enumerate(names):
            if name in rows:
                assert embeddings[offset].tolist() == rows[name][0] and float(sums[offset]) == rows[name][1]
            else:
                assert embeddings[offset].tolist() == [-1.0 - part] * 2 and float(sums[offset]) == 0.0
    assert list((tmp_path / "spill").iterdir()) == []  # every piece scattered and deleted


def test_pieces_left_by_an_interrupted_attempt_are_never_used(root: StorePath, tmp_path: Path) -> None:
    init, _ = trained(root)
    spill = tmp_path / "spill"
    spill.mkdir()
    np.savez(
        spill / "to0-from9.npz",
        offsets=np.array([1]),
        rows=np.full((1, 2), 99.0, np.float32),
        sums=np.ones(1, np.float32),
    )
    out = CheckpointStore(str(root / "start"))
    moves, _ = match(name_table(lambda p: OLD[p], 2), name_table(lambda p: NEW[p], 2))
    target = Target(out, 3, (3, 4), 2, lambda part, e: e.zero_(), 0.1, META)
    move_rows("user", moves, init, 3, target, str(spill))
    assert out.load_embeddings("user", 0, 3)[0][1].tolist() == [0.0, 0.0]  # x: fresh, not the stale piece
