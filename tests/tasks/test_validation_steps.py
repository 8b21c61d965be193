"""tasks.validation_steps: when a validation is due, the reconciliation of best.json by remove-leftovers
(a run killed between its commit and record-best), and the early-stopping decision of a rerun."""

from __future__ import annotations

from typing import Any

import torch

from pbg_core.config import parse_config
from pbg_core.evaluation.early_stopping import ValidationRow
from pbg_core.ports import CheckpointMetadata, VersionLayout
from pbg_core.session.iterations import build_iterations
from storage.best_version import read_best, write_best
from storage.checkpoints import CheckpointStore
from storage.validation_log import ValidationLog
from tasks.checkpoint import remove_leftovers
from tasks.runs import open_run
from tasks.validation_steps import is_due, stopped_reason, validation_setup

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]


def validated(make_config: Any, graph: Any, **fields: Any) -> Any:
    return parse_config(make_config(relations=ALL_NEGS, validation={"edge_path": graph.test_path}, **fields))


def test_due_after_every_nth_epochs_last_iteration() -> None:
    config_validation = parse_config(
        {
            "entities": {"n": {"num_partitions": 1}},
            "relations": [{"name": "r", "lhs": "n", "rhs": "n", "all_negs": True}],
            "dimension": 4,
            "entity_path": "e",
            "edge_paths": ["a", "b"],
            "checkpoint_path": "c",
            "validation": {"edge_path": "v", "every_epochs": 2},
        }
    ).validation
    iterations = build_iterations(4, ["a", "b"], 2)  # 4 iterations per epoch
    assert [it.version for it in iterations if is_due(config_validation, it)] == [8, 16]
    assert not any(is_due(None, it) for it in iterations)


def test_remove_leftovers_moves_best_json_before_removing(make_config: Any, graph: Any) -> None:
    """Killed after committing v3, whose rows say v2 is best, before best.json (still v1) moved:
    the rerun's remove-leftovers points best.json at v2 first, then removes v1 only."""
    config = validated(make_config, graph)
    store = CheckpointStore(config.checkpoint_path)
    for version in (1, 2, 3):
        store.save_embeddings("node", 0, version, torch.zeros(200, 16), None, CheckpointMetadata(config_json="{}"))
        store.save_model(version, {}, {}, None, CheckpointMetadata(config_json="{}"))
    setup = validation_setup(config)
    rows = [ValidationRow(v, v, mrr, 0.0, 1.0, 50, False, 0.1, setup) for v, mrr in ((1, 0.2), (2, 0.9), (3, 0.5))]
    log = ValidationLog(config.checkpoint_path)
    for row in rows:
        log.write(row)
    store.write_version(1)
    write_best(store.check_complete(1, VersionLayout({("node", 0): (200, 16)})), None, 1, rows[0], "mrr")
    store.write_version(3)
    assert remove_leftovers.fn(open_run(config), 3, 1) == [1]
    best = read_best(config.checkpoint_path)
    assert best is not None and best.row == rows[1]
    assert store.list_versions() == [2, 3]


def test_a_rerun_stops_where_the_rows_say_and_goes_on_with_more_patience(make_config: Any, graph: Any) -> None:
    config = validated(make_config, graph, early_stopping={"patience": 2})
    setup = validation_setup(config)
    log = ValidationLog(config.checkpoint_path)
    for version, mrr in ((1, 0.5), (2, 0.4), (3, 0.45)):
        log.write(ValidationRow(version, version, mrr, 0.0, 1.0, 50, False, 0.1, setup))
    assert stopped_reason(config, 3) is not None
    assert stopped_reason(config, 2) is None  # v3's row is of a version never committed: ignored
    more = parse_config(
        make_config(relations=ALL_NEGS, validation={"edge_path": graph.test_path}, early_stopping={"patience": 3})
    )
    assert stopped_reason(more, 3) is None
    assert stopped_reason(validated(make_config, graph), 3) is None  # no early_stopping
    other = validated(make_config, graph, early_stopping={"patience": 2}, seed=7)  # another sample seed: other rows
    assert stopped_reason(other, 3) is None


def test_a_small_full_ranking_runs_in_this_process_alone(make_config: Any, graph: Any, monkeypatch: Any) -> None:
    """Spawning workers costs seconds, ranking 50 edges against 200 nodes milliseconds: one worker.
    Above the bound the config's workers rank, as `pbg eval` (a full ranking's result is the same)."""
    from tasks import validation_steps
    from tasks.runs import close_run, get_run

    config = validated(make_config, graph, workers=2)
    run = open_run(config)
    try:
        stores = get_run(run).stores
        assert validation_steps._full_ranking_config(config, stores).workers == 1
        monkeypatch.setattr(validation_steps, "ONE_WORKER_MULTIPLY_ADDS", 1.0)
        assert validation_steps._full_ranking_config(config, stores).workers == 2
    finally:
        close_run(run)
