"""Progress of a remote checkpoint staged locally and uploaded in the background (real S3 server)."""

from __future__ import annotations

from pathlib import Path

import torch

from pbg_core.ports import CheckpointMetadata, CompleteVersion, PassProgress
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.fs import reads
from storage.progress import CheckpointProgress
from storage.run_stores import RunStores
from storage.staged_progress import StagedProgress, stage_dir_for

META = CheckpointMetadata(config_json="{}")


def record(done: int, where: int) -> PassProgress:
    return PassProgress(
        version=2,
        iteration_index=1,
        order=[Bucket(0, 0), Bucket(0, 1), Bucket(1, 1)],
        done=done,
        partitions={("node", 0): where},
        model=where,
        rows=[{"index": 3 + done}],
    )


def save_area(staged: StagedProgress, position: int, value: float) -> None:
    area = staged.area(2, position)
    area.save_embeddings("node", 0, 2, torch.full((4, 3), value), b"opt", META)
    area.save_model(2, {"w": torch.ones(2)}, {"w": "w"}, None, META)


def test_records_and_areas_reach_s3_in_the_background(s3_bucket: str, tmp_path: Path) -> None:
    remote = CheckpointProgress(CheckpointStore(f"s3://{s3_bucket}/ckpt"))
    staged = StagedProgress(remote, str(tmp_path / "stage"))
    for position in (0, 1):
        save_area(staged, position, float(position))
        staged.write(record(position + 1, position))
        staged.prune(2, {position})
    staged.wait()
    assert remote.read(2) == record(2, 1)
    assert reads.listdir(f"s3://{s3_bucket}/ckpt/progress") == ["v2-b1", "v2.json"]  # b0 pruned remotely too
    loaded, optim = remote.area(2, 1).load_embeddings("node", 0, 2)
    assert torch.equal(loaded, torch.full((4, 3), 1.0)) and optim == b"opt"
    staged.promote(2, 1, "node", 0)
    assert remote.checkpoint.has_embeddings("node", 0, 2)
    staged.clear(CompleteVersion(f"s3://{s3_bucket}/ckpt", 2))
    assert not reads.exists(f"s3://{s3_bucket}/ckpt/progress") and not (tmp_path / "stage" / "progress").exists()
    staged.close()


def test_a_record_staged_before_a_crash_is_uploaded_by_the_next_start(s3_bucket: str, tmp_path: Path) -> None:
    remote = CheckpointProgress(CheckpointStore(f"s3://{s3_bucket}/ckpt"))
    first = StagedProgress(remote, str(tmp_path / "stage"))
    save_area(first, 0, 5.0)
    first.write(record(1, 0))
    first.wait()
    # The process dies right after recording bucket 2 locally, before any upload of it.
    save_area(first, 1, 7.0)
    first.local.write(record(2, 1))
    first.close()
    assert remote.read(2) == record(1, 0)

    restarted = StagedProgress(remote, str(tmp_path / "stage"))
    assert restarted.read(2) == record(2, 1)  # the local record is ahead: uploaded, then used
    assert remote.read(2) == record(2, 1)
    loaded, _ = remote.area(2, 1).load_embeddings("node", 0, 2)
    assert torch.equal(loaded, torch.full((4, 3), 7.0))
    restarted.close()


def test_without_the_staging_directory_the_remote_record_is_used(s3_bucket: str, tmp_path: Path) -> None:
    remote = CheckpointProgress(CheckpointStore(f"s3://{s3_bucket}/ckpt"))
    staged = StagedProgress(remote, str(tmp_path / "a"))
    save_area(staged, 0, 1.0)
    staged.write(record(1, 0))
    staged.close()
    elsewhere = StagedProgress(remote, str(tmp_path / "b"))  # another machine: empty stage
    assert elsewhere.read(2) == record(1, 0)
    loaded, _ = elsewhere.area(2, 0).load_embeddings("node", 0, 2)  # read from S3
    assert torch.equal(loaded, torch.full((4, 3), 1.0))
    elsewhere.close()


def test_run_stores_stage_only_remote_checkpoints(s3_bucket: str, tmp_path: Path) -> None:
    def stores(url: str) -> RunStores:
        return RunStores(entities=None, edges=[], checkpoint=CheckpointStore(url), init=None, stats=None)

    assert isinstance(stores(str(tmp_path)).progress, CheckpointProgress)
    remote = stores(f"s3://{s3_bucket}/ckpt").progress
    assert isinstance(remote, StagedProgress)
    assert stage_dir_for(f"s3://{s3_bucket}/ckpt") != stage_dir_for(f"s3://{s3_bucket}/other")
    remote.close()
