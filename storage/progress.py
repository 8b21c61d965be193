"""Bucket-level progress of the open checkpoint version (docs/checkpoint-protocol.md, "Bucket progress").

While version ``v`` is committed and ``v + 1`` is being trained, every finished bucket
saves the partitions (and model) it changed, so a crash loses at most the bucket in
flight. Those saves never touch a file a reader may rely on:

- ``progress/v{V}-b{k}/``: what the bucket at position ``k`` of the pass saved, in the
  normal checkpoint layout (``embeddings_{type}_{part}.v{V}.h5``, ``model.v{V}.h5``);
  the last bucket of a pass saves straight to the version's own names instead
  (:data:`~pbg_core.ports.FINAL`), which nothing references before the commit.
- ``progress/v{V}.json``: the record (:class:`~pbg_core.ports.PassProgress`): bucket
  order, buckets done, where each partition's latest state is, the done buckets'
  stats rows. It is replaced atomically after the bucket's files are complete, so it
  is the commit point of a bucket; areas it no longer references are then deleted.

When the pass ends, the areas' latest files are copied to the version's own names,
the version pointer is switched, and the whole ``progress/`` area is cleared.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pbg_core.ports import FINAL, CompleteVersion, PassProgress
from pbg_core.types import Bucket, EntityName, Partition
from storage import layout
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, changes, reads, urls

logger = logging.getLogger(__name__)

FORMAT = 1


class CheckpointProgress:
    """The ``progress/`` area of one checkpoint directory (implements ``ProgressStore``).

    Args:
        checkpoint: The checkpoint directory's store.
        mirror_of: For a local staging copy (:mod:`storage.staged_progress`): the URL of the
            checkpoint whose progress it mirrors, which :meth:`clear`'s evidence is about.
    """

    def __init__(self, checkpoint: CheckpointStore, mirror_of: str | None = None) -> None:
        self.checkpoint = checkpoint
        self.owner = mirror_of or checkpoint.url
        self.url = urls.join_url(checkpoint.url, layout.PROGRESS_DIR)
        self.storage_options = checkpoint.storage_options

    def area(self, version: int, position: int) -> CheckpointStore:
        """The store bucket ``position`` saves into (the checkpoint itself for FINAL)."""
        if position == FINAL:
            return self.checkpoint
        return CheckpointStore(
            urls.join_url(self.url, layout.progress_area_dir(version, position)), self.storage_options
        )

    def read(self, version: int) -> PassProgress | None:
        """The progress record of ``version``, or None when there is none.

        Raises:
            BadDataError: the record exists but is not a progress record of ``version``.
        """
        url = urls.join_url(self.url, layout.progress_record_file(version))
        try:
            text = reads.read_text(url, self.storage_options)
        except DataNotFound:
            return None
        return _decode(url, text, version)

    def write(self, progress: PassProgress) -> None:
        """Atomically replace the record of ``progress.version``."""
        url = urls.join_url(self.url, layout.progress_record_file(progress.version))
        atomic.write_text_atomic(url, json.dumps(_encode(progress), indent=1), self.storage_options)

    def promote(self, version: int, position: int, entity: EntityName | None, part: Partition) -> None:
        """Give a file saved in a progress area the version's own name (no-op for FINAL).

        A hard link on local disk (no byte written again: a partition of several GB saved
        when it left memory is not copied at the end of the pass), a server-side copy on S3.
        """
        if position == FINAL:
            return
        name = layout.model_file(version) if entity is None else layout.embeddings_file(entity, part, version)
        source, target = self.area(version, position).file_url(name), self.checkpoint.file_url(name)
        if changes.same_stored_object(source, target, self.storage_options):
            return  # a retried write-checkpoint: this copy was done by an earlier attempt
        changes.share(source, target, self.storage_options)

    def prune(self, version: int, keep: set[int]) -> None:
        """Delete the areas of ``version`` whose bucket position is not in ``keep``."""
        prefix = f"v{version}-b"
        for name in reads.listdir(self.url, self.storage_options):
            if name.startswith(prefix) and name[len(prefix) :].isdigit() and int(name[len(prefix) :]) not in keep:
                changes.remove_tree(urls.join_url(self.url, name), self.storage_options)

    def close(self) -> None:
        """Nothing to finish: every write here is synchronous."""

    def clear(self, committed: CompleteVersion, keep_open: bool = False) -> None:
        """Delete every record and area (idempotent), except those of the open version when ``keep_open``.

        ``committed`` is the committed version, found complete
        (:meth:`~storage.checkpoints.CheckpointStore.check_complete`): while the version the
        pointer names is not complete, the saves of the pass that wrote it may be all that is
        left of it, and are not deleted.
        """
        if committed.url != self.owner:
            raise ValueError(f"{self.url}: the complete version given is of another directory, {committed.url}")
        if not keep_open:
            changes.remove_tree(self.url, self.storage_options)
            return
        keep = (layout.progress_record_file(committed.version + 1), layout.progress_area_prefix(committed.version + 1))
        for name in reads.listdir(self.url, self.storage_options):
            if name != keep[0] and not name.startswith(keep[1]):
                changes.remove_tree(urls.join_url(self.url, name), self.storage_options)


def _encode(progress: PassProgress) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": progress.version,
        "iteration_index": progress.iteration_index,
        "order": [list(bucket) for bucket in progress.order],
        "done": progress.done,
        "partitions": [[entity, part, where] for (entity, part), where in sorted(progress.partitions.items())],
        "model": progress.model,
        "rows": progress.rows,
    }


def _decode(url: str, text: str, version: int) -> PassProgress:
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT or data.get("version") != version:
            raise ValueError(
                f"expected format {FORMAT} and version {version}, "
                f"got format {data.get('format')!r}, version {data.get('version')!r}"
            )
        order = [Bucket(int(lhs), int(rhs)) for lhs, rhs in data["order"]]
        progress = PassProgress(
            version=version,
            iteration_index=int(data["iteration_index"]),
            order=order,
            done=int(data["done"]),
            partitions={(str(e), int(p)): int(where) for e, p, where in data["partitions"]},
            model=None if data["model"] is None else int(data["model"]),
            rows=list(data["rows"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise BadDataError(
            url,
            f"not a progress record of version {version} ({exc}); delete it to "
            f"restart the interrupted pass from the committed version",
        ) from None
    if not 0 <= progress.done <= len(order):
        raise BadDataError(url, f"done={progress.done} is outside [0, {len(order)}] buckets")
    return progress
