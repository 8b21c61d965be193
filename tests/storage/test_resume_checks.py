"""Checks of the checkpoints a run starts from (``storage.resume_checks``), through ``plan_training``.

Checkpoints are real directories: a model file written by :class:`CheckpointStore` with the
``config/json`` attribute of the config it was "trained" with, as training writes it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from disk_state import changes, tree_state
from fsspec.core import url_to_fs

from pbg_core.config import config_to_json, parse_config
from pbg_core.edgelist import EdgeList
from pbg_core.errors import ShapeError
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.parts import config_json_text
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.edges import EdgeStore
from storage.errors import BadDataError, DataNotFound
from storage.resume_checks import check_fits, check_not_a_file, shape_differences
from tasks.plan import check_inputs, plan_training
from tasks.runs import open_run

META = CheckpointMetadata(config_json="{}")


def commit_trained(url: str, raw_config: dict[str, Any], version: int = 1) -> CheckpointStore:
    """``url`` at ``version``, its model file recording ``raw_config`` (as training writes it)."""
    store = CheckpointStore(url)
    text = config_json_text(config_to_json(parse_config(raw_config)))
    state = {"rhs_operators.0.diagonal": torch.ones(4)}
    store.save_model(
        version,
        state,
        {"rhs_operators.0.diagonal": "relations/0/operator/rhs/diagonal"},
        None,
        CheckpointMetadata(config_json=text, iteration={"num_edge_chunks": 1, "num_edge_paths": 1}),
    )
    node = parse_config(raw_config).entities["node"]  # every partition, as a complete version holds them
    for part in range(node.num_partitions):
        store.save_embeddings("node", part, version, torch.zeros(200 // node.num_partitions, 16), None, META)
    store.write_version(version)
    return store


def with_operator(config: dict[str, Any], operator: str) -> dict[str, Any]:
    return {**config, "relations": [{**config["relations"][0], "operator": operator}]}


def test_missing_init_path_is_an_error_naming_it(make_config: Any, tmp_path: Path) -> None:
    config = make_config(init_path=str(tmp_path / "no-such-checkpoint"))
    with pytest.raises(DataNotFound, match=r"no-such-checkpoint: init_path does not exist; expected a checkpoint"):
        plan_training.fn(open_run(parse_config(config)))


def test_init_path_without_checkpoint_files_is_an_error(make_config: Any, tmp_path: Path) -> None:
    (tmp_path / "not-a-checkpoint").mkdir()
    (tmp_path / "not-a-checkpoint" / "notes.txt").write_text("hello")
    config = make_config(init_path=str(tmp_path / "not-a-checkpoint"))
    with pytest.raises(
        DataNotFound, match=r"init_path holds no checkpoint of version 0 .*found no checkpoint files"
    ) as info:
        plan_training.fn(open_run(parse_config(config)))
    assert str(info.value).count("checkpoint_version.txt") == 1


def test_resume_with_another_operator_is_refused_before_training(make_config: Any) -> None:
    """diagonal -> translation: parameters of other names, which loading used to skip silently."""
    config = make_config(num_epochs=2)
    commit_trained(config["checkpoint_path"], with_operator(config, "diagonal"))
    with pytest.raises(ShapeError) as raised:
        plan_training.fn(open_run(parse_config(with_operator(config, "translation"))))
    assert str(raised.value).startswith(
        f"checkpoint_path {config['checkpoint_path']} version 1 was trained with "
        'relations[0].operator "diagonal" (this config: "translation")'
    )
    assert "\n" not in str(raised.value)
    assert CheckpointStore(config["checkpoint_path"]).read_version() == 1


def test_init_path_of_another_operator_is_refused(make_config: Any, tmp_path: Path) -> None:
    config = make_config(num_epochs=1)
    commit_trained(str(tmp_path / "old"), with_operator(config, "diagonal"), version=3)
    raw = {**with_operator(config, "linear"), "init_path": str(tmp_path / "old")}
    with pytest.raises(
        ShapeError,
        match=r"init_path .*old version 3 was trained with relations\[0\].operator "
        r'"diagonal" \(this config: "linear"\).*use an init_path',
    ):
        plan_training.fn(open_run(parse_config(raw)))


def test_changed_loss_fn_warns_with_old_and_new_value(make_config: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(
        num_epochs=2,
        loss_fn="softmax",
        relations=[{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal"}],
    )
    commit_trained(config["checkpoint_path"], config)
    with caplog.at_level(logging.WARNING, logger="tasks"):
        plan = plan_training.fn(open_run(parse_config({**config, "loss_fn": "ranking"})))
    assert plan.committed_version == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if 'loss_fn="softmax", this config has loss_fn="ranking"' in w] == [
        f'checkpoint_path {config["checkpoint_path"]} version 1 was trained with loss_fn="softmax", this config '
        'has loss_fn="ranking": continuing with loss_fn="ranking"'
    ], warnings


def test_every_run_is_warned_about_its_changed_loss_fn(make_config: Any, caplog: pytest.LogCaptureFixture) -> None:
    # One process may run the flow many times (`pbg serve`): each run plans once and says it once.
    config = make_config(num_epochs=2, loss_fn="softmax")
    commit_trained(config["checkpoint_path"], config)
    with caplog.at_level(logging.WARNING, logger="tasks"):
        for _ in range(2):
            plan_training.fn(open_run(parse_config({**config, "loss_fn": "ranking"})))
    warned = [r for r in caplog.records if 'this config has loss_fn="ranking"' in r.getMessage()]
    assert len(warned) == 2


def test_unchanged_config_neither_warns_nor_refuses(make_config: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(num_epochs=2)
    store = commit_trained(config["checkpoint_path"], config)
    with caplog.at_level(logging.WARNING):
        check_fits(
            store,
            1,
            parse_config({**config, "lr": 0.5, "num_epochs": 9}),
            logging.getLogger("tasks"),
            "checkpoint_path",
        )
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_shape_differences_name_every_shape_defining_field() -> None:
    stored = {
        "dimension": 8,
        "global_emb": False,
        "dynamic_relations": False,
        "entities": {"a": {"num_partitions": 1, "dimension": None, "featurized": False}},
        "relations": [{"name": "r", "lhs": "a", "rhs": "a", "operator": "DIAGONAL"}],
    }
    same = json.loads(json.dumps(stored))
    same["relations"][0]["operator"] = "diagonal"  # PBG matches choices in any case
    assert shape_differences(stored, same) == []
    changed = {
        "dimension": 16,
        "global_emb": True,
        "dynamic_relations": False,
        "entities": {"a": {"num_partitions": 2, "dimension": None, "featurized": False}},
        "relations": [
            {"name": "r", "lhs": "a", "rhs": "a", "operator": "linear"},
            {"name": "s", "lhs": "a", "rhs": "a", "operator": "none"},
        ],
    }
    assert shape_differences(stored, changed) == [
        "dimension 8 (this config: 16)",
        "global_emb false (this config: true)",
        "entities.a.num_partitions 1 (this config: 2)",
        "number of relations 1 (this config: 2)",
        'relations[0].operator "diagonal" (this config: "linear")',
    ]


def test_edge_path_whose_buckets_are_all_empty_fails_before_training(make_config: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty_edges"
    EdgeStore(str(empty)).save(Bucket(0, 0), EdgeList.from_tensors(*(torch.zeros(0, dtype=torch.long),) * 3))
    config = make_config()
    config["edge_paths"] = [config["edge_paths"][0], str(empty)]
    with pytest.raises(BadDataError, match=rf"{empty}: all 1 bucket file\(s\) have 0 edges in edge path\(s\) {empty}"):
        plan_training.fn(open_run(parse_config(config)))
    assert not Path(config["checkpoint_path"]).exists()


def test_edge_path_that_is_a_file_is_named_as_such(make_config: Any, tmp_path: Path) -> None:
    (tmp_path / "edges.tsv").write_text("a\tlinked\tb\n")
    config = make_config(edge_paths=[str(tmp_path / "edges.tsv")])
    with pytest.raises(BadDataError, match=r"edges.tsv: edge path is a file, expected a directory of edges_"):
        plan_training.fn(open_run(parse_config(config)))


def test_evaluating_a_checkpoint_of_another_operator_is_refused(make_config: Any) -> None:
    """Its operator parameters would not be loaded (other names): the metrics would be wrong."""
    from tasks.evaluate import open_eval_session

    config = make_config()
    commit_trained(config["checkpoint_path"], with_operator(config, "translation"))
    with pytest.raises(
        ShapeError,
        match=r"evaluated checkpoint .* version 1 was trained with relations\[0\]"
        r'.operator "translation" \(this config: "none"\).*evaluate with the config',
    ):
        open_eval_session.fn(open_run(parse_config(config)))


def test_an_init_path_of_pbg_v0_files_is_checked_too(make_config: Any, tmp_path: Path) -> None:
    """PBG reads an init_path without checkpoint_version.txt as version 0 (``model.v0.h5``)."""
    config = make_config()
    store = commit_trained(str(tmp_path / "v0"), with_operator(config, "linear"), version=0)
    (tmp_path / "v0" / "checkpoint_version.txt").unlink()
    assert store.read_version() == 0
    with pytest.raises(ShapeError, match=r'init_path .*v0 version 0 was trained with relations\[0\].operator "linear"'):
        plan_training.fn(open_run(parse_config({**config, "init_path": str(tmp_path / "v0")})))


@pytest.mark.parametrize("field", ["init_path", "checkpoint_path", "entity_path"])
def test_a_file_where_a_directory_is_expected_is_named_by_the_run(make_config: Any, tmp_path: Path, field: str) -> None:
    """The flow's own check (deployed runs and remote stores skip ``pbg train``'s pre-check)."""
    (tmp_path / "notes.txt").write_text("not a directory\n")
    run = open_run(parse_config({**make_config(), field: str(tmp_path / "notes.txt")}))
    before = tree_state(tmp_path)
    with pytest.raises(BadDataError, match=rf"^{tmp_path / 'notes.txt'}: {field} is a file, expected "):
        check_inputs.fn(run)
    assert changes(before, tree_state(tmp_path)) == []


def test_an_object_where_a_directory_is_expected_is_named_on_s3(s3_bucket: str) -> None:
    s3 = url_to_fs(f"s3://{s3_bucket}", use_listings_cache=False)[0]  # planted outside the code under test
    s3.pipe_file(f"{s3_bucket}/runs/init", b"an object, not a prefix")
    s3.pipe_file(f"{s3_bucket}/runs/ckpt/checkpoint_version.txt", b"1\n")
    check_not_a_file(f"s3://{s3_bucket}/runs/ckpt", None, "checkpoint_path")  # a prefix: a directory
    check_not_a_file(f"s3://{s3_bucket}/runs/new", None, "checkpoint_path")  # nothing there yet: created later
    with pytest.raises(BadDataError) as raised:
        check_not_a_file(f"s3://{s3_bucket}/runs/init", None, "init_path")
    assert str(raised.value) == (
        f"s3://{s3_bucket}/runs/init: init_path is a file, expected a checkpoint directory (checkpoint_version.txt, "
        "model.v<N>.h5, embeddings_<type>_<part>.v<N>.h5)"
    )
