"""storage.trained.model: Model.load from every source and version, its answers by name, and every refusal.

Models are committed versions of a really imported graph (tests/storage/trained/small_models.py).
Every refusal, and every successful call too (the model is read-only), leaves the files
byte-identical. One case runs on the moto S3 server.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from disk_state import changes, tree_state
from numpy_scores import NumpyModel
from run_trees import run_name
from small_models import DISEASES, DRUGS, committed, graph_edges, imported, raw_config
from store_io import StorePath

from pbg_core.config import parse_config
from pbg_core.errors import ShapeError, UnknownNameError, UsageError
from pbg_core.ports import CheckpointMetadata
from pbg_core.types import Side
from storage.checkpoint_names import NamesChangedError
from storage.checkpoint_reader import CheckpointReader
from storage.checkpoints import CheckpointStore
from storage.errors import DataNotFound
from storage.retraining.latest import write_latest
from storage.retraining.run_dirs import RunDir
from storage.trained import Model
from storage.trained.model import Answer
from storage.trained.name_index import UnknownEntityError

HEADS = ["aspirin", "insulin", "drug3", "drug17"]
TAILS = ["diabetes", "asthma", "disease5", "disease20"]


@pytest.fixture
def two_versions(tmp_path: Path) -> dict[str, Any]:
    """The graph imported, versions 1 and 2 committed (2 is the latest); the config dict."""
    raw = raw_config(tmp_path)
    config = parse_config(raw)
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config, version=1, seed=1)
    committed(config, version=2, seed=2)
    return raw


def tops(model: Model) -> list[list[Answer]]:
    """Top lists of a few queries of every relation, both directions."""
    return [
        model.predict(head="aspirin", relation="treats", k=4),
        model.predict(tail="diabetes", relation="treats", k=4),
        model.predict(head="insulin", relation="interacts", k=3),
        model.predict(tail="metformin", relation="treated_by", k=3),
    ]


def test_a_config_dict_a_config_file_and_the_checkpoint_directory_load_the_same_model(
    two_versions: dict[str, Any], tmp_path: Path
) -> None:
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(two_versions))
    before = tree_state(tmp_path)
    by_dict, by_file = Model.load(two_versions), Model.load(str(config_file))
    by_directory = Model.load(two_versions["checkpoint_path"])
    assert by_dict.version == by_file.version == by_directory.version == 2
    assert tops(by_dict) == tops(by_file) == tops(by_directory)
    assert by_dict.relations == ["treats", "interacts", "treated_by"]
    assert sorted(by_dict.entity_types) == ["disease", "drug"]
    first = tops(by_dict)[0]
    assert [answer.rank for answer in first] == [1, 2, 3, 4] and first[0].score >= first[-1].score
    assert {answer.entity for answer in first} <= set(DISEASES)
    moved = tmp_path / "elsewhere"
    shutil.copytree(two_versions["checkpoint_path"], moved)
    copy = Model.load(str(moved))  # its own config.json names the old place: the directory given wins
    assert copy.config.checkpoint_path == str(moved) and tops(copy) == tops(by_dict)
    shutil.rmtree(moved)
    assert changes(before, tree_state(tmp_path)) == []  # read-only


def test_an_older_version_is_loaded_when_asked_for(two_versions: dict[str, Any]) -> None:
    older = Model.load(two_versions, version=1)
    assert older.version == 1 and Model.load(two_versions["checkpoint_path"], version=1).version == 1
    assert tops(older) != tops(Model.load(two_versions))
    reader = CheckpointReader(parse_config(two_versions), 1, ["drug"], "to read")
    exported = list(reader.partitions("drug"))
    mine = list(older.embeddings("drug"))
    assert [names for names, _ in mine] == [names for names, _ in exported]  # as pbg export writes them
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(mine, exported, strict=True))
    assert sorted(name for names, _ in mine for name in names) == sorted(DRUGS)
    with pytest.raises(
        UnknownNameError, match=r"entity type 'drugs' \(closest: 'drug'\) is not one of \['drug', 'disease'\]$"
    ):
        older.embeddings("drugs")


def test_a_retraining_root_loads_its_promoted_run(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run = root / run_name(3)
    raw = raw_config(tmp_path, checkpoint_path=str(run))
    imported(parse_config(raw), tmp_path / "edges.tsv", graph_edges())
    committed(parse_config(raw), version=4)
    write_latest(str(root), RunDir(run_name(3), str(run), 4))
    before = tree_state(tmp_path)
    by_root = Model.load(str(root))
    by_config = Model.load({**raw, "checkpoint_path": str(root)})  # a retraining config names the root
    assert by_root.version == by_config.version == 4
    assert by_root.config.checkpoint_path == by_config.config.checkpoint_path == str(run)
    assert tops(by_root) == tops(by_config) == tops(Model.load(raw))
    assert changes(before, tree_state(tmp_path)) == []


def test_score_is_evaluations_positive_score(two_versions: dict[str, Any]) -> None:
    model = Model.load(two_versions)
    table = model.score(HEADS, "treats", TAILS)
    assert table.column_names == ["head", "relation", "tail", "score"]
    reference = NumpyModel(parse_config(two_versions))
    expected = [reference.scores(Side.RHS, 0, head, tail)[1] for head, tail in zip(HEADS, TAILS, strict=True)]
    assert np.allclose(table.column("score").to_numpy(), expected, rtol=1e-5, atol=1e-5)
    ranked = model.predict(heads=HEADS, relations="treats", answers=TAILS, k=1)
    assert ranked.column("answer_score").to_pylist() == table.column("score").to_pylist()  # the same bits
    mixed = model.score(["aspirin", "insulin"], ["treats", "interacts"], ["asthma", "aspirin"])
    assert mixed.column("relation").to_pylist() == ["treats", "interacts"]


def test_dynamic_relations_score_both_ways_and_are_named_by_the_record(tmp_path: Path) -> None:
    raw = raw_config(
        tmp_path,
        relations=[{"name": "template", "lhs": "drug", "rhs": "disease", "operator": "complex_diagonal"}],
        dynamic_relations=True,
        global_emb=False,
    )
    edges = [(drug, ("treats", "causes")[i % 2], DISEASES[i % len(DISEASES)]) for i, drug in enumerate(DRUGS * 2)]
    imported(parse_config(raw), tmp_path / "edges.tsv", edges)
    committed(parse_config(raw))
    model = Model.load(raw)
    assert model.relations == ["treats", "causes"] or model.relations == ["causes", "treats"]
    table = model.score(HEADS, ["treats", "causes", "treats", "causes"], TAILS)
    assert table.column_names == ["head", "relation", "tail", "score", "reverse_score"]
    relations = table.column("relation").to_pylist()
    heads = model.predict(tails=TAILS, relations=relations, answers=HEADS, k=2)  # ranks heads: the forward score
    tails = model.predict(heads=HEADS, relations=relations, answers=TAILS, k=2)  # ranks tails: the reverse one
    first = np.unique(heads.column("query").to_numpy(), return_index=True)[1]
    assert heads.column("answer_score").to_numpy()[first].tolist() == table.column("score").to_pylist()
    assert tails.column("answer_score").to_numpy()[first].tolist() == table.column("reverse_score").to_pylist()
    assert table.column("score").to_pylist() != table.column("reverse_score").to_pylist()


def test_a_filtered_prediction_leaves_the_known_edges_out(two_versions: dict[str, Any], tmp_path: Path) -> None:
    model = Model.load(two_versions)
    known = {tail for head, relation, tail in graph_edges() if head == "aspirin" and relation == "treats"}
    before = tree_state(tmp_path)
    everything = model.predict(head="aspirin", relation="treats", k=len(DISEASES))
    filtered = model.predict(head="aspirin", relation="treats", k=len(DISEASES), filtered=True)
    assert changes(before, tree_state(tmp_path)) == []  # the reader file of entity_path is gone again
    assert known and [a.entity for a in filtered] == [a.entity for a in everything if a.entity not in known]
    assert [a.rank for a in filtered] == list(range(1, len(DISEASES) - len(known) + 1))
    table = model.predict(heads=["aspirin"], relations="treats", k=len(DISEASES), filtered=True)
    assert table.column("tail").to_pylist() == [a.entity for a in filtered]


def bad_calls() -> list[tuple[str, dict[str, Any], type[Exception], str]]:
    """(id, predict's keyword arguments, error, the message's pattern)."""
    return [
        ("unknown", {"head": "asprin", "relation": "treats"}, UnknownEntityError,
         "unknown head 'asprin' of type 'drug' (closest: 'aspirin')"),
        ("case", {"tail": "penicillin", "relation": "treated_by"}, UnknownEntityError,
         "unknown tail 'penicillin' of type 'drug' (closest: 'Penicillin')"),
        ("wrong type", {"head": "diabetes", "relation": "treats"}, UnknownEntityError,
         "'diabetes' is of type 'disease'; relation 'treats' takes a 'drug' as head"),
        ("relation", {"head": "aspirin", "relation": "treatz"}, UnknownEntityError,
         "unknown relation 'treatz' (closest: 'treats', 'treated_by'); known: treats, interacts, treated_by"),
        ("many", {"heads": ["aspirin", "nobody", "asthma", "x"], "relations": "treats"}, UnknownEntityError,
         "heads[1]: unknown head 'nobody' of type 'drug' (no close name among its 30 names); 2 more not usable: "
         "'asthma' (heads[2]), 'x' (heads[3])"),
        ("k=0", {"head": "aspirin", "relation": "treats", "k": 0}, UsageError,
         "k=0 is not allowed; give a whole number >= 1"),
        ("k<0", {"tails": ["asthma"], "relations": "treats", "k": -3}, UsageError,
         "k=-3 is not allowed; give a whole number >= 1"),
        ("k too big", {"head": "aspirin", "relation": "treats", "k": 27}, UsageError,
         "k=27: entity type 'disease' has 26 entities; give 1..26"),
        ("two forms", {"head": "aspirin", "tails": ["asthma"], "relation": "treats"}, UsageError,
         "predict takes exactly one of head=, tail=, heads=, tails=; got ['head', 'tails']"),
        ("filter paths", {"head": "aspirin", "relation": "treats", "filter_paths": ["x"]}, UsageError,
         "filter_paths= is given without filtered=True; pass both, or neither"),
        ("lengths", {"heads": ["aspirin", "insulin"], "relations": ["treats"]}, UsageError,
         "relations has 1 entries, heads has 2; give one per query"),
    ]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "message"), [c[1:] for c in bad_calls()], ids=[c[0] for c in bad_calls()])
def test_bad_input_is_one_line_and_changes_nothing(
    two_versions: dict[str, Any], tmp_path: Path, call: dict[str, Any], error: type[Exception], message: str
) -> None:
    model = Model.load(two_versions)
    before = tree_state(tmp_path)
    with pytest.raises(error) as caught:
        model.predict(**call)
    assert str(caught.value) == message
    assert changes(before, tree_state(tmp_path)) == []


def test_a_version_that_does_not_exist_names_those_present(two_versions: dict[str, Any], tmp_path: Path) -> None:
    before = tree_state(tmp_path)
    for source in (two_versions, two_versions["checkpoint_path"]):
        with pytest.raises(DataNotFound) as caught:
            Model.load(source, version=7)
        assert str(caught.value).endswith(
            "ckpt: no checkpoint version 7 to load; versions present: 1, 2 (latest committed: 2)"
        )
    assert changes(before, tree_state(tmp_path)) == []


def test_a_checkpoint_whose_shapes_differ_from_the_config_is_refused(
    two_versions: dict[str, Any], tmp_path: Path
) -> None:
    before = tree_state(tmp_path)
    with pytest.raises(ShapeError, match=re.escape("dimension 6 (this config: 8)") + ".*load it with the config"):
        Model.load(two_versions, overrides=["dimension=8"])
    with pytest.raises(ShapeError, match=re.escape('relations[1].operator "translation" (this config: "linear")')):
        Model.load(two_versions["checkpoint_path"], overrides=["relations.1.operator=linear"])
    assert changes(before, tree_state(tmp_path)) == []


def test_without_a_recorded_config_the_parameters_and_rows_name_what_differs(tmp_path: Path) -> None:
    """PBG's checkpoints may record no config: the stored parameters, then each partition's rows, are checked."""
    raw = raw_config(tmp_path)
    imported(parse_config(raw), tmp_path / "edges.tsv", graph_edges())
    committed(parse_config(raw), record=False)
    (tmp_path / "ckpt" / "config.json").unlink()
    before = tree_state(tmp_path)
    with pytest.raises(ShapeError, match=r"rhs_operators.0.linear_transformation: stored shape \(6, 6\), model shape"):
        Model.load({**raw, "dimension": 8})
    assert changes(before, tree_state(tmp_path)) == []
    store = CheckpointStore(raw["checkpoint_path"])
    rows = store.load_embeddings("disease", 1, 1)[0]
    store.save_embeddings("disease", 1, 1, rows[:-1], None, CheckpointMetadata(""))
    before = tree_state(tmp_path)
    model = Model.load(raw)
    with pytest.raises(
        ShapeError, match=r"embeddings_disease_1.v1.h5: stored embeddings have shape \(12, 6\), expected"
    ):
        model.predict(head="aspirin", relation="treats")
    assert changes(before, tree_state(tmp_path)) == []


def test_names_moved_since_are_refused_for_a_filtered_prediction_only(
    two_versions: dict[str, Any], tmp_path: Path
) -> None:
    """The model names its rows by the checkpoint's record: after a re-import, answers by name are the
    same; only filtering, which reads the new import's edge ids, is refused."""
    model = Model.load(two_versions)
    answers = tops(model)
    imported(parse_config(two_versions), tmp_path / "edges.tsv", graph_edges(), seed=5)  # reshuffled
    before = tree_state(tmp_path)
    again = Model.load(two_versions)
    assert tops(again) == answers
    with pytest.raises(NamesChangedError, match="a filtered prediction would rank each moved row"):
        again.predict(head="aspirin", relation="treats", filtered=True)
    assert changes(before, tree_state(tmp_path)) == []


def test_on_s3(s3_bucket: str, tmp_path: Path) -> None:
    root = StorePath(f"s3://{s3_bucket}/root")
    raw = raw_config(root)
    config = parse_config(raw)
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config)
    before = tree_state(str(root))
    model = Model.load(str(root / "ckpt"))
    assert model.version == 1 and model.config.checkpoint_path == str(root / "ckpt")
    filtered = model.predict(heads=HEADS, relations="treats", answers=TAILS, k=3, filtered=True)
    assert filtered.num_rows == 3 * len(HEADS)
    assert (
        model.score(HEADS, "treats", TAILS).column("score").to_pylist()
        == (filtered.column("answer_score").to_pylist()[::3])
    )
    assert changes(before, tree_state(str(root))) == []


def test_no_queries_give_empty_tables(two_versions: dict[str, Any]) -> None:
    model = Model.load(two_versions)
    table = model.predict(tails=[], relations=[], answers=[], k=3)
    assert table.num_rows == 0 and table.column_names[:6] == ["query", "head", "relation", "tail", "rank", "score"]
    assert "answer_rank" in table.column_names
    scored = model.score([], "treats", [])
    assert scored.num_rows == 0 and scored.schema.field("head").type == "string"
