"""tasks.evaluate: ``pbg eval``'s two tasks, on a trained planted-structure checkpoint."""

from __future__ import annotations

from typing import Any

import pytest

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from storage.errors import DataNotFound
from tasks.checkpoint import switch_version, write_checkpoint
from tasks.evaluate import evaluate_edge_path, open_eval_session
from tasks.plan import plan_training
from tasks.runs import opened_run
from tasks.sessions import close_training_session, open_training_session


def test_filtered_evaluation_needs_all_negatives_and_names_the_field(make_config: Any) -> None:
    wanted = r"relations\.0\.all_negs: false.*set -p relations\.0\.all_negs=true"
    with opened_run(parse_config(make_config())) as run, pytest.raises(ConfigError, match=wanted):
        open_eval_session.fn(run, filtered=True)


def test_a_checkpoint_never_committed_is_refused(make_config: Any) -> None:
    config = parse_config(make_config())
    with opened_run(config) as run, pytest.raises(DataNotFound, match="no committed checkpoint to evaluate"):
        open_eval_session.fn(run)


def evaluated_mrr(run: str, edge_path: str) -> float:
    """Mean MRR of the run's committed checkpoint on ``edge_path``, through the two tasks."""
    evaluation = open_eval_session.fn(run)
    try:
        result = evaluate_edge_path.fn(evaluation, edge_path, None)
    finally:
        close_training_session.fn(evaluation)
    assert result["count"] > 0 and set(result["sums"]) >= {"mrr", "r10", "auc"}
    return float(result["sums"]["mrr"] / result["count"])


def trained_then_evaluated(config: Any, train_buckets: Any) -> float:
    """Train ``config``'s iterations through the tasks, commit each, then evaluate the last version."""
    with opened_run(config) as run:
        handle = open_training_session.fn(run)
        try:
            for iteration in plan_training.fn(run).remaining:
                train_buckets(handle, iteration)
                write_checkpoint.fn(handle, iteration)
                switch_version.fn(handle, iteration)
        finally:
            close_training_session.fn(handle)
        return evaluated_mrr(run, config.edge_paths[0])


def test_evaluation_ranks_with_the_committed_embeddings(make_config: Any, train_buckets: Any) -> None:
    """The same graph and seed, learning rate 0 (the initial embeddings) against the default."""
    untrained = trained_then_evaluated(parse_config(make_config("frozen", lr=0.0)), train_buckets)
    trained = trained_then_evaluated(parse_config(make_config("trained")), train_buckets)
    assert trained > 1.5 * untrained  # measured: 0.086 (about chance) and 0.161
