"""Open every store a training run needs from the config's URLs."""

from __future__ import annotations

from dataclasses import dataclass

from storage.checkpoints import CheckpointStore
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.stats_log import StatsLog


@dataclass(frozen=True)
class RunStores:
    """The stores of one run: entities, edges per edge path, checkpoint, init, stats."""

    entities: EntityStore
    edges: list[EdgeStore]
    checkpoint: CheckpointStore
    init: CheckpointStore | None
    stats: StatsLog


def open_run_stores(config: object) -> RunStores:
    """Open the stores named by a ConfigSchema (entity_path, edge_paths, checkpoint_path, init_path)."""
    options = getattr(config, "storage_options", None)
    init_path = getattr(config, "init_path", None)
    return RunStores(
        entities=EntityStore(config.entity_path, options),  # type: ignore[attr-defined]
        edges=[EdgeStore(path, options) for path in config.edge_paths],  # type: ignore[attr-defined]
        checkpoint=CheckpointStore(config.checkpoint_path, options),  # type: ignore[attr-defined]
        init=CheckpointStore(init_path, options) if init_path else None,
        stats=StatsLog(config.checkpoint_path, options),  # type: ignore[attr-defined]
    )
