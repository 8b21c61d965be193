"""storage.trained.model: Model.similar by name, against a numpy brute force for every comparator, and its refusals.

The graph of tests/storage/trained/small_models.py (types ``drug`` and ``disease``, two
partitions each), imported once, with ``migraine`` a drug too (an edge ``migraine treats
migraine``): a name of both types. A seeded version per (comparator, bias) is committed beside it.
The brute force ranks the rows ``Model.embeddings`` gives (as ``pbg export`` writes them: the
global embedding added) by the comparator's score, the entity itself left out. Every call, and
every refusal, leaves the files byte-identical.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from disk_state import changes, tree_state
from small_models import committed, graph_edges, imported, raw_config

from pbg_core.config import parse_config
from pbg_core.errors import UnknownNameError, UsageError
from storage.trained import Model
from storage.trained.model import Answer
from storage.trained.name_index import UnknownEntityError
from storage.trained.similar_names import AmbiguousNameError

NAMES = ["aspirin", "diabetes", "drug7", "aspirin", "disease21"]  # both types, a repeat, partitions 0 and 1
K = 6


@pytest.fixture(scope="module")
def entities(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The imported graph (entity files and edges), shared by every model of this module."""
    root = tmp_path_factory.mktemp("graph")
    config = parse_config(raw_config(root))
    imported(config, root / "edges.tsv", [*graph_edges(), ("migraine", "treats", "migraine")])
    return root


def model_of(entities: Path, checkpoint: Path, **overrides: Any) -> Model:
    """A seeded version of the graph's model with ``overrides`` (comparator, bias) in ``checkpoint``."""
    raw = {**raw_config(entities, **overrides), "checkpoint_path": str(checkpoint)}
    committed(parse_config(raw), seed=3)
    return Model.load(raw)


def brute_force(model: Model, entity_type: str, name: str, k: int) -> list[tuple[str, float]]:
    """The ``k`` nearest (name, score) of ``name`` in float64 numpy: score descending, then row order."""
    names = [n for part, _ in model.embeddings(entity_type) for n in part]
    x = np.concatenate([rows for _, rows in model.embeddings(entity_type)]).astype(np.float64)
    bias = x[:, 0].copy() if model.config.bias else np.zeros(len(x))
    if model.config.bias:
        x = x[:, 1:]
    if model.config.comparator == "cos":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    q = names.index(name)
    squared = ((x - x[q]) ** 2).sum(axis=1)
    metric = {"dot": x @ x[q], "cos": x @ x[q], "l2": -np.sqrt(squared), "squared_l2": -squared}
    scores = metric[model.config.comparator] + bias + bias[q]
    ranked = sorted((-scores[i], i) for i in range(len(names)) if i != q)[:k]
    return [(names[i], -s) for s, i in ranked]


@pytest.mark.parametrize(
    ("comparator", "bias"), list(itertools.product(["dot", "cos", "l2", "squared_l2"], [False, True]))
)
def test_similar_equals_a_brute_force_by_name(entities: Path, tmp_path: Path, comparator: str, bias: bool) -> None:
    model = model_of(entities, tmp_path / "ckpt", comparator=comparator, bias=bias)
    before = tree_state(entities), tree_state(tmp_path)
    table = model.similar(NAMES, k=K)
    assert table.column_names == ["query", "entity", "entity_type", "rank", "neighbour", "score"]
    rows = table.to_pylist()
    assert [(r["query"], r["rank"]) for r in rows] == [(q, rank) for q in range(len(NAMES)) for rank in range(1, K + 1)]
    for q, name in enumerate(NAMES):
        mine = [r for r in rows if r["query"] == q]
        entity_type = "drug" if name in ("aspirin", "drug7") else "disease"
        assert {(r["entity"], r["entity_type"]) for r in mine} == {(name, entity_type)}
        want = brute_force(model, entity_type, name, K)
        assert [r["neighbour"] for r in mine] == [n for n, _ in want]
        assert np.allclose([r["score"] for r in mine], [s for _, s in want], rtol=1e-5, atol=1e-5)
    one = model.similar("aspirin", k=3)
    assert one == [Answer(r["rank"], r["neighbour"], r["score"]) for r in rows[:3]]
    if not (bias and comparator in ("l2", "squared_l2")):  # refused then (test_bad_names_k_and_types_...)
        assert model.similar("aspirin", k=3, approximate=True) == one  # a small type: searched exactly anyway
        assert model.similarity_index("drug") is None
    assert (changes(before[0], tree_state(entities)), changes(before[1], tree_state(tmp_path))) == ([], [])


def test_a_name_of_two_types_needs_the_entity_type(entities: Path, tmp_path: Path) -> None:
    model = model_of(entities, tmp_path / "ckpt")
    before = tree_state(entities), tree_state(tmp_path)
    with pytest.raises(AmbiguousNameError) as caught:
        model.similar(["aspirin", "migraine", "asthma", "migraine"])
    assert isinstance(caught.value, UsageError)
    assert str(caught.value) == (
        "names[1]: 'migraine' is an entity of each of the types 'drug', 'disease'; give the one to search "
        "(--entity-type T; entity_type= in Python); 1 more not usable: 'migraine' (names[3])"
    )
    drugs = model.similar("migraine", k=4, entity_type="drug")
    assert [a.entity for a in drugs] == [n for n, _ in brute_force(model, "drug", "migraine", 4)]
    diseases = model.similar(["migraine"], k=4, entity_type="disease")
    assert diseases.column("neighbour").to_pylist() == [n for n, _ in brute_force(model, "disease", "migraine", 4)]
    assert set(diseases.column("entity_type").to_pylist()) == {"disease"}
    assert (changes(before[0], tree_state(entities)), changes(before[1], tree_state(tmp_path))) == ([], [])


def test_bad_names_k_and_types_are_one_line_each(entities: Path, tmp_path: Path) -> None:
    model = model_of(entities, tmp_path / "ckpt", comparator="l2", bias=True)
    before = tree_state(entities), tree_state(tmp_path)
    refusals: list[tuple[Any, type[Exception], str]] = [
        (
            lambda: model.similar(["aspirin", "asprin", "asthma", "zzz"]),
            UnknownEntityError,
            "names[1]: unknown entity 'asprin' of any type ('drug', 'disease') (closest: 'aspirin'); 1 more not "
            "usable: 'zzz' (names[3])",
        ),
        (
            lambda: model.similar("asprin", entity_type="drug"),
            UnknownEntityError,
            "unknown entity 'asprin' of type 'drug' (closest: 'aspirin')",
        ),
        (
            lambda: model.similar("aspirin", entity_type="disease"),
            UnknownEntityError,
            "'aspirin' is of type 'drug'; wanted: a 'disease' as entity",
        ),
        (
            lambda: model.similar("aspirin", entity_type="organ"),
            UnknownNameError,
            "entity type 'organ' is not one of ['drug', 'disease']",
        ),
        (lambda: model.similar("aspirin", k=0), UsageError, "k=0 is not allowed; give a whole number >= 1"),
        (
            lambda: model.similar(["asthma", "aspirin"], k=27),
            UsageError,
            "k=27: entity type 'disease' has 26 entities, so at most 25 neighbours of one (an entity is not its own); "
            "give 1..25",
        ),
        (
            lambda: model.similar("aspirin", approximate=True),
            UsageError,
            "approximate search needs a faiss metric, and comparator 'l2' with bias=true has none (the bias is added "
            "to a distance); search exactly instead (without --approximate)",
        ),
    ]
    for call, kind, message in refusals:
        with pytest.raises(kind) as caught:
            call()
        assert str(caught.value) == message
    assert len(model.similar("aspirin", k=30)) == 30  # every other drug: the count less one
    assert model.similar([]).num_rows == 0
    assert (changes(before[0], tree_state(entities)), changes(before[1], tree_state(tmp_path))) == ([], [])
