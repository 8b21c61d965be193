"""Real sessions over the planted test graph, for the tests of pbg_core.session."""

from __future__ import annotations

from typing import Any

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.session.build import build_session
from pbg_core.session.engine import TrainingSession
from pbg_core.session.iterations import Iteration, build_iterations
from storage.run_stores import open_run_stores


def open_session(raw: dict[str, Any], resident_partitions: int | None = None) -> tuple[ConfigSchema, TrainingSession]:
    """The parsed config and a session on its stores (one worker: this process, no child)."""
    if resident_partitions is not None:
        raw = {**raw, "resident_partitions": resident_partitions}
    config = parse_config(raw)
    return config, build_session(config, open_run_stores(config))


def first_iteration(config: ConfigSchema) -> Iteration:
    """Iteration 0 of ``config``'s run (epoch 1, its first edge path, one chunk)."""
    return build_iterations(config.num_epochs, config.edge_paths, 1)[0]


def train_bucket(session: TrainingSession, bucket: Any) -> dict[str, Any]:
    """Swap, load, evaluate, train and finish ``bucket``, as the flow's tasks do; finish's result."""
    session.swap_partitions(bucket)
    session.load_edges(bucket)
    session.evaluate("before")
    session.train()
    session.evaluate("after")
    return session.finish_bucket()
