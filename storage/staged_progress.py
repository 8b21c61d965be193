"""Bucket progress of a remote checkpoint: staged on local disk, uploaded while training goes on.

Saving a bucket's partitions to S3 synchronously would stall training for every upload
(a 40 MB partition takes about half a second to the local test server). Instead
:class:`StagedProgress` writes each bucket's saves and its progress record to a local
staging directory (durable: fsync + rename) and uploads them in one background thread
while the next bucket trains: the area's files first, then the remote record, then the
remote prune. At most one upload is in flight: recording the next bucket waits for it.

A process killed while an upload is in flight loses nothing that was recorded: the
local record names complete local files, and the next start on this machine uploads
them (:meth:`StagedProgress.read` replays a local record that is ahead of the remote
one) before resuming. On another machine the staging directory is absent and the run
resumes from the remote record (at most one more bucket lost).

Reads of a staged area prefer the local copy (it is the same bytes) and fall back to
the remote one. The staging directory is per checkpoint URL, under the read cache's
directory (``PBG_CACHE_DIR``); the checkpoint lease keeps two runs out of it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from pbg_core.ports import FINAL, CheckpointMetadata, CompleteVersion, PassProgress
from pbg_core.types import EntityName, Partition
from storage import read_cache
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError
from storage.fs import changes, reads
from storage.progress import CheckpointProgress

logger = logging.getLogger(__name__)


def stage_dir_for(checkpoint_url: str) -> str:
    """The local staging directory of a checkpoint URL (under the read cache's directory)."""
    digest = hashlib.sha256(checkpoint_url.encode("utf-8")).hexdigest()[:20]
    return os.path.join(read_cache.cache_dir(), "stage", digest)


class StagedArea:
    """A progress area written locally and read locally first, remotely otherwise (a PartitionStore)."""

    def __init__(self, local: CheckpointStore, remote: CheckpointStore) -> None:
        self.local, self.remote = local, remote

    def _reader(self, present: bool) -> CheckpointStore:
        return self.local if present else self.remote

    def read_version(self) -> int:
        """Areas have no pointer."""
        return 0

    def has_embeddings(self, entity: EntityName, part: Partition, version: int) -> bool:
        """Whether either copy has the partition."""
        return self.local.has_embeddings(entity, part, version) or self.remote.has_embeddings(entity, part, version)

    def load_embeddings(
        self, entity: EntityName, part: Partition, version: int, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, bytes | None]:
        """From the local copy if present, else the remote one."""
        store = self._reader(self.local.has_embeddings(entity, part, version))
        return store.load_embeddings(entity, part, version, out=out)

    def save_embeddings(
        self,
        entity: EntityName,
        part: Partition,
        version: int,
        embeddings: torch.Tensor,
        optim_state: bytes | None,
        metadata: CheckpointMetadata,
    ) -> None:
        """Locally (uploaded with the next record)."""
        self.local.save_embeddings(entity, part, version, embeddings, optim_state, metadata)

    def has_model(self, version: int) -> bool:
        """Whether either copy has the model."""
        return self.local.has_model(version) or self.remote.has_model(version)

    def load_model(self, version: int) -> tuple[dict[str, torch.Tensor], bytes | None]:
        """From the local copy if present, else the remote one."""
        return self._reader(self.local.has_model(version)).load_model(version)

    def save_model(
        self,
        version: int,
        state_dict: Mapping[str, torch.Tensor],
        public_names: Mapping[str, str],
        optim_state: bytes | None,
        metadata: CheckpointMetadata,
    ) -> None:
        """Locally (uploaded with the next record)."""
        self.local.save_model(version, state_dict, public_names, optim_state, metadata)


class StagedProgress:
    """A ``ProgressStore`` for a remote checkpoint that uploads in the background.

    Args:
        remote: The checkpoint's own progress area.
        stage_dir: Local directory for the staged copies (see :func:`stage_dir_for`).
    """

    def __init__(self, remote: CheckpointProgress, stage_dir: str) -> None:
        self.remote = remote
        self.local = CheckpointProgress(CheckpointStore(stage_dir), mirror_of=remote.checkpoint.url)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pbg-upload")
        self._inflight: Future[None] | None = None
        self._pending: PassProgress | None = None  # the record being (or failing to be) uploaded
        self._uploaded: set[tuple[int, int]] = set()  # (version, position) areas fully uploaded

    def area(self, version: int, position: int) -> Any:
        """Local-first area of bucket ``position`` (the checkpoint itself for FINAL)."""
        if position == FINAL:
            return self.remote.checkpoint
        return StagedArea(self.local.area(version, position), self.remote.area(version, position))

    def read(self, version: int) -> PassProgress | None:
        """The newest record of ``version``: a local one ahead of the remote is uploaded first."""
        self.wait()
        remote = self.remote.read(version)
        try:
            local = self.local.read(version)
        except BadDataError as exc:
            logger.warning("ignoring the staged progress record: %s", exc)
            local = None
        if local is not None and (remote is None or local.done > remote.done):
            logger.info(
                "uploading staged progress of version %d (%d buckets) left by an interrupted run", version, local.done
            )
            self._upload(local)
            return local
        return remote

    def write(self, progress: PassProgress) -> None:
        """Record locally (durable), then upload in the background after the previous upload."""
        self.local.write(progress)
        self.wait()
        self._pending = progress
        self._inflight = self._executor.submit(self._upload, progress)

    def wait(self) -> None:
        """Block until no upload is in flight; a failed one is retried here, synchronously."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            try:
                inflight.result()
                self._pending = None
            except Exception as exc:  # noqa: BLE001 - retried below; raised if it fails again
                logger.warning("background upload of bucket progress failed (%s); retrying", exc)
        if self._pending is not None:  # failed in the background, or in an earlier wait
            self._upload(self._pending)
            self._pending = None

    def promote(self, version: int, position: int, entity: EntityName | None, part: Partition) -> None:
        """Copy an uploaded area file to the version's own name (waits for the upload)."""
        self.wait()
        self.remote.promote(version, position, entity, part)

    def prune(self, version: int, keep: set[int]) -> None:
        """Drop local areas not in ``keep`` (the remote ones go after the record is uploaded)."""
        self.local.prune(version, keep)

    def clear(self, committed: CompleteVersion, keep_open: bool = False) -> None:
        """Clear both copies (waits for the upload); see :meth:`CheckpointProgress.clear`."""
        self.wait()
        self.local.clear(committed, keep_open)
        self.remote.clear(committed, keep_open)
        kept = committed.version + 1 if keep_open else None
        self._uploaded = {area for area in self._uploaded if area[0] == kept}

    def close(self) -> None:
        """Finish the upload in flight and stop the thread."""
        try:
            self.wait()
        finally:
            self._executor.shutdown(wait=True)

    def _upload(self, progress: PassProgress) -> None:
        """Upload the areas ``progress`` names, then its record, then prune the remote areas."""
        referenced = {w for w in [*progress.partitions.values(), progress.model] if w is not None and w != FINAL}
        for position in sorted(referenced):
            if (progress.version, position) not in self._uploaded:
                self._upload_area(progress.version, position)
                self._uploaded.add((progress.version, position))
        self.remote.write(progress)
        self.remote.prune(progress.version, referenced)
        self._uploaded = {area for area in self._uploaded if area[0] != progress.version or area[1] in referenced}

    def _upload_area(self, version: int, position: int) -> None:
        local = self.local.area(version, position)
        remote = self.remote.area(version, position)
        for name in reads.listdir(local.url):
            if name.endswith(".h5") and ".tmp." not in name:
                changes.copy(local.file_url(name), remote.file_url(name), remote.storage_options)
