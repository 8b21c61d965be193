"""The ``pbg-eval`` flow: rank the config's edge paths against the latest checkpoint (or a chosen version:
a number, or ``"best"``, the version ``best.json`` names).

Sampled evaluation (``sample_edges``, ``candidates``) ranks a seeded uniform sample of the
edges, each side against sampled candidates (:mod:`pbg_core.evaluation.sampling`), for
graphs whose full ranking is out of reach.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow

from flows.prefect_host.interrupts import cancel_on_interrupt
from flows.run_names import run_name
from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from pbg_core.evaluation.sampling import sample_edge_positions
from tasks.evaluate import count_edges, evaluate_edge_path, open_eval_session
from tasks.lease import reading_entities
from tasks.runs import opened_run
from tasks.sessions import close_training_session


@flow(name="pbg-eval", flow_run_name=run_name("eval"))
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg_eval(
    config: ConfigSchema,
    filter_paths: list[str] | None = None,
    sample_edges: int | None = None,
    candidates: int | None = None,
    sample_seed: int | None = None,
    version: int | Literal["best"] | None = None,
) -> dict[str, float]:
    """Evaluate every edge path of ``config``; metrics averaged over all (or the sampled) edges.

    Args:
        config: The config whose checkpoint and edge paths are evaluated (PBG: the
            config's own negatives, not the eval_* overrides used during training).
        filter_paths: For filtered metrics, edge paths whose edges are known true and
            removed from the negatives (needs all_negs, or ``candidates``); None for raw metrics.
        sample_edges: Rank a uniform sample of this many edges (without replacement,
            across every bucket of every edge path); None (or more than there are): all.
        candidates: Rank each side against this many distinct entities drawn uniformly
            from its partition instead of the config's negatives; None: the config's negatives.
        sample_seed: Seed of the edge sample and the candidates; None: the config's seed (0 if unset).
        version: The checkpoint version to rank: a number, or "best" (the version best.json names,
            kept by training with a validation section); None: the committed one.

    Returns:
        The metrics and ``count`` (edges ranked); with sampling also ``total_edges``,
        ``sample_edges``, ``candidates`` and ``sample_seed``.
    """
    check_sample_options(sample_edges, candidates)
    sampling = sample_edges is not None or candidates is not None
    seed = sample_seed if sample_seed is not None else (config.seed if config.seed is not None else 0)
    with opened_run(config) as run, reading_entities(run):  # its stores; no import changes entity_path meanwhile
        filtered = filter_paths is not None
        handle = open_eval_session(run, filtered=filtered, candidates=candidates, seed=seed, version=version)
        try:
            positions: list[list[list[int]] | None] = [None] * len(config.edge_paths)
            total = 0
            if sampling:
                counts = count_edges(handle, list(config.edge_paths))
                total = sum(map(sum, counts))
                if total == 0:
                    raise ConfigError(
                        [f"--sample-edges/--candidates: edge_paths {list(config.edge_paths)} hold no edges"]
                    )
                if sample_edges is not None:
                    positions = _positions_per_path(counts, sample_edges, seed)
            parts = [
                evaluate_edge_path(handle, path, filter_paths, rows)
                for path, rows in zip(config.edge_paths, positions, strict=True)
            ]
        finally:
            close_training_session(handle)
    count = sum(part["count"] for part in parts)
    names = dict.fromkeys(name for part in parts for name in part["sums"])
    metrics = {name: sum(p["sums"].get(name, 0.0) for p in parts) / max(count, 1) for name in names}
    result: dict[str, float] = {**metrics, "count": count}
    if sampling:
        given = {"sample_edges": sample_edges, "candidates": candidates}
        result |= {"total_edges": total, "sample_seed": seed} | {k: v for k, v in given.items() if v is not None}
    return result


def check_sample_options(sample_edges: int | None, candidates: int | None) -> None:
    """Refuse a sample size or candidate count below 1, naming the option."""
    for option, value in (("--sample-edges", sample_edges), ("--candidates", candidates)):
        if value is not None and value < 1:
            raise ConfigError([f"{option} {value} is not allowed; give a whole number >= 1"])


def _positions_per_path(counts: list[list[int]], sample_edges: int, seed: int) -> list[list[list[int]] | None]:
    """The sampled positions, per edge path then per bucket (lists: they are task parameters)."""
    flat = sample_edge_positions([n for per_path in counts for n in per_path], sample_edges, seed)
    per_bucket = [rows.tolist() for rows in flat]
    width = len(counts[0]) if counts else 0
    return [per_bucket[i * width : (i + 1) * width] for i in range(len(counts))]
