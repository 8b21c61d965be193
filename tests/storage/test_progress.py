"""The progress area of a checkpoint: records, areas, promotion, pruning, clearing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pbg_core.ports import FINAL, CheckpointMetadata, CompleteVersion, PassProgress
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError
from storage.progress import CheckpointProgress

META = CheckpointMetadata(config_json="{}")


def make(tmp_path: Path) -> tuple[CheckpointStore, CheckpointProgress]:
    store = CheckpointStore(str(tmp_path / "ckpt"))
    return store, CheckpointProgress(store)


def test_record_round_trip(tmp_path: Path) -> None:
    _, progress = make(tmp_path)
    assert progress.read(3) is None
    record = PassProgress(
        version=3,
        iteration_index=7,
        order=[Bucket(1, 0), Bucket(0, 0)],
        done=1,
        partitions={("node", 1): 0, ("user.v2", 0): FINAL},
        model=0,
        rows=[{"index": 14, "stats": {"count": 5}}],
    )
    progress.write(record)
    assert progress.read(3) == record
    assert progress.read(4) is None


@pytest.mark.parametrize(
    "text",
    [
        "{",
        '{"format": 1, "version": 2}',
        '{"format": 9, "version": 3}',
        '{"format": 1, "version": 3, "iteration_index": 0, "order": [[0, 0]], '
        '"done": 5, "partitions": [], "model": null, "rows": []}',
    ],
)
def test_a_bad_record_names_the_file_and_the_way_out(tmp_path: Path, text: str) -> None:
    _, progress = make(tmp_path)
    path = tmp_path / "ckpt" / "progress" / "v3.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(BadDataError, match=r"progress/v3\.json") as err:
        progress.read(3)
    assert "progress record" in str(err.value) or "outside" in str(err.value)


def test_areas_hold_saves_and_promote_links_them_to_the_version(tmp_path: Path) -> None:
    store, progress = make(tmp_path)
    table = torch.arange(6.0).view(3, 2)
    progress.area(2, 1).save_embeddings("node", 0, 2, table, b"state", META)
    progress.area(2, 1).save_model(2, {"x": torch.ones(2)}, {"x": "x"}, None, META)
    assert (tmp_path / "ckpt" / "progress" / "v2-b1" / "embeddings_node_0.v2.h5").exists()
    assert not store.has_embeddings("node", 0, 2)
    progress.promote(2, 1, "node", 0)
    progress.promote(2, 1, None, 0)
    loaded, optim = store.load_embeddings("node", 0, 2)
    assert torch.equal(loaded, table) and optim == b"state"
    assert store.has_model(2)
    # Linked, not copied: a multi-GB partition is not written a second time at the commit.
    saved = tmp_path / "ckpt" / "progress" / "v2-b1" / "embeddings_node_0.v2.h5"
    assert (tmp_path / "ckpt" / "embeddings_node_0.v2.h5").stat().st_ino == saved.stat().st_ino
    assert progress.area(2, FINAL) is store
    progress.promote(2, FINAL, "node", 0)  # already the version's own file: nothing to do


def test_prune_and_clear(tmp_path: Path) -> None:
    _, progress = make(tmp_path)
    for position in (0, 1, 2):
        progress.area(5, position).save_model(5, {"x": torch.ones(1)}, {"x": "x"}, None, META)
    progress.area(4, 0).save_model(4, {"x": torch.ones(1)}, {"x": "x"}, None, META)
    progress.write(PassProgress(version=5, iteration_index=0, order=[Bucket(0, 0)]))
    progress.write(PassProgress(version=4, iteration_index=0, order=[Bucket(0, 0)]))
    root = tmp_path / "ckpt" / "progress"
    progress.prune(5, keep={1})
    assert sorted(p.name for p in root.iterdir()) == ["v4-b0", "v4.json", "v5-b1", "v5.json"]
    committed = CompleteVersion(str(tmp_path / "ckpt"), 4)  # as check_complete gives it
    progress.clear(committed, keep_open=True)
    assert sorted(p.name for p in root.iterdir()) == ["v5-b1", "v5.json"]
    with pytest.raises(ValueError, match="of another directory"):
        progress.clear(CompleteVersion(str(tmp_path / "other"), 4))
    assert sorted(p.name for p in root.iterdir()) == ["v5-b1", "v5.json"]
    progress.clear(committed)
    assert not root.exists()
    progress.clear(committed)  # idempotent
