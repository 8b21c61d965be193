"""Open every store a training run needs from the config's URLs.

Every store gets the same filesystem options: the config's real (unmasked) fsspec
keyword arguments from :meth:`ConfigSchema.storage_options_for_fs`, the one place a
config hands credentials to storage. Stores keep them for their own calls only; they
never appear in a store's ``repr``, a log line or an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pbg_core.ports import NamesDigests
from pbg_core.types import PartitionKey
from storage.checkpoint_names import current_digests
from storage.checkpoints import CheckpointStore
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.fs import urls
from storage.host_memory import memory_available
from storage.new_rows import NewRowsFile
from storage.progress import CheckpointProgress
from storage.remap.start import InitByName, StartDir, init_rows
from storage.staged_progress import StagedProgress, stage_dir_for
from storage.stats_log import StatsLog

if TYPE_CHECKING:
    from pbg_core.config import ConfigSchema
    from pbg_core.session.memory_plan import Available


@dataclass(frozen=True)
class RunStores:
    """The stores of one run: entities, edges per edge path, checkpoint, init, stats, new rows; and the memory available."""

    entities: EntityStore
    edges: list[EdgeStore]
    checkpoint: CheckpointStore
    init: CheckpointStore | None
    stats: StatsLog
    new_rows: NewRowsFile | None = None  # prepared starts of rows init_path lacks (neighbor means)
    staged: bool = True  # remote progress staged locally (one machine); False: written through (a cluster)

    def names_now(self, keys: Iterable[PartitionKey], dynamic: bool) -> NamesDigests:
        """The digests of the names files the run reads (the record on every checkpoint file it writes)."""
        return current_digests(self.entities, keys, dynamic)

    def init_rows(
        self, names: NamesDigests, keys: Iterable[PartitionKey], dynamic: bool
    ) -> CheckpointStore | InitByName | None:
        """Where a session reads ``init_path``'s rows: ``init_path`` itself, or, where its names moved
        since, its rows remapped by name into the checkpoint's ``init_by_name/`` (storage.remap).

        Raises:
            NamesChangedError: the names moved and no start was prepared for them (``pbg train`` does it first).
        """
        if self.init is None:
            return None
        return init_rows(
            self.init, StartDir(self.checkpoint.url, self.checkpoint.storage_options), names, list(keys), dynamic
        )

    def memory_available(self) -> Available | None:
        """Memory this process may use (its cgroup's headroom or MemAvailable; see storage.host_memory)."""
        return memory_available()

    @property
    def progress(self) -> CheckpointProgress | StagedProgress:
        """A new handle on the checkpoint's bucket-level progress area (storage.progress);
        remote checkpoints stage it locally and upload in the background (storage.staged_progress),
        unless several machines share it (``staged=False``: each save is on the checkpoint's storage
        when it returns, where every machine can read it)."""
        remote = CheckpointProgress(self.checkpoint)
        if not self.staged or urls.is_local(urls.resolve(self.checkpoint.url, self.checkpoint.storage_options)[0]):
            return remote
        return StagedProgress(remote, stage_dir_for(self.checkpoint.url))


def open_run_stores(config: ConfigSchema, staged: bool = True) -> RunStores:
    """Open the stores named by ``config`` (entity_path, edge_paths, checkpoint_path, init_path).

    Credentials come from ``config.storage_options`` when set there, else from the
    environment (``AWS_*`` variables), never from a checkpoint's saved config.json.
    """
    options: dict[str, Any] = config.storage_options_for_fs()
    return RunStores(
        entities=EntityStore(config.entity_path, options),
        edges=[EdgeStore(path, options) for path in config.edge_paths],
        checkpoint=CheckpointStore(config.checkpoint_path, options),
        init=CheckpointStore(config.init_path, options) if config.init_path else None,
        stats=StatsLog(config.checkpoint_path, options),
        new_rows=NewRowsFile(config.checkpoint_path, options) if config.init_path else None,
        staged=staged,
    )
