"""The ``pbg-eval`` flow: rank the config's edge paths against the latest checkpoint."""

from __future__ import annotations

from prefect import flow

from flows.interrupts import cancel_on_interrupt
from pbg_core.config import ConfigSchema
from tasks.evaluate import evaluate_edge_path, open_eval_session
from tasks.runs import opened_run
from tasks.sessions import close_training_session


@flow(name="pbg-eval")
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/interrupts.py)
def pbg_eval(config: ConfigSchema, filter_paths: list[str] | None = None) -> dict[str, float]:
    """Evaluate every edge path of ``config``; metrics averaged over all edges.

    Args:
        config: The config whose checkpoint and edge paths are evaluated (PBG: the
            config's own negatives, not the eval_* overrides used during training).
        filter_paths: For filtered metrics, edge paths whose edges are known true
            and removed from the negatives (needs all_negs); None for raw metrics.
    """
    with opened_run(config) as run:  # the run's stores, opened once
        handle = open_eval_session(run, filtered=filter_paths is not None)
        try:
            parts = [evaluate_edge_path(handle, path, filter_paths) for path in config.edge_paths]
        finally:
            close_training_session(handle)
    count = sum(part["count"] for part in parts)
    names = dict.fromkeys(name for part in parts for name in part["sums"])
    metrics = {name: sum(p["sums"].get(name, 0.0) for p in parts) / max(count, 1) for name in names}
    return {**metrics, "count": count}
