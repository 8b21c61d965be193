"""storage.trained.queries: queries grouped by relation, every bad name of a call in one line, predict's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from small_models import raw_config

from pbg_core.config import parse_config
from pbg_core.errors import UsageError
from pbg_core.types import Side
from storage.remap.matching import name_table
from storage.trained.name_index import NameIndex, UnknownEntityError
from storage.trained.queries import Queries, prediction_table
from storage.trained.targets import Ranked

NAMES = {"drug": [["aspirin", "insulin"], ["ibuprofen"]], "disease": [["asthma"], ["diabetes", "migraine"]]}


def names_of(config: Any) -> NameIndex:
    relations = [relation.name for relation in config.relations]
    return NameIndex(
        {
            entity: (lambda parts=parts: name_table(lambda part: parts[part], len(parts)))
            for entity, parts in NAMES.items()
        },
        relations,
    )


def test_queries_are_grouped_by_relation_in_order_of_first_appearance(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    queries = Queries(config, names_of(config), ["treated_by", "treats", "treated_by", "interacts"], "relations")
    assert [(g.rel, g.lhs, g.rhs, g.positions.tolist()) for g in queries.groups] == [
        (2, "disease", "drug", [0, 2]),
        (0, "drug", "disease", [1]),
        (1, "drug", "drug", [3]),
    ]
    groups = queries.targets(Side.RHS, ["asthma", "aspirin", "migraine", "ibuprofen"], None, "heads")
    assert [(g.target, g.counts, g.anchors.part.tolist(), g.anchors.offset.tolist()) for g in groups] == [
        ("drug", (2, 1), [0, 1], [0, 1]),
        ("disease", (1, 2), [0], [0]),
        ("drug", (2, 1), [1], [0]),
    ]
    dynamic = parse_config(
        raw_config(
            tmp_path,
            dynamic_relations=True,
            relations=[{"name": "t", "lhs": "drug", "rhs": "disease"}],
            global_emb=False,
        )
    )
    one = Queries(dynamic, NameIndex({}, ["treats", "causes"]), ["causes", "treats", "causes"], "relations")
    assert len(one.groups) == 1 and one.groups[0].rel.tolist() == [1, 0, 1]


def test_every_bad_name_of_a_call_is_reported_the_first_by_position_in_full(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    queries = Queries(config, names_of(config), ["treats", "treated_by", "treats", "treated_by"], "relations")
    with pytest.raises(UnknownEntityError) as caught:
        queries.targets(Side.RHS, ["aspirin", "asthma", "nobody", "aspirin"], ["asthma", "insullin", "x", "y"], "heads")
    assert str(caught.value) == (
        "answers[1]: unknown tail 'insullin' of type 'drug' (closest: 'insulin'); 4 more not usable: "
        "'nobody' (heads[2]), 'x' (answers[2]), 'aspirin' (heads[3]), ..."
    )


def test_a_featurized_entity_type_cannot_be_looked_up(tmp_path: Path) -> None:
    raw = raw_config(
        tmp_path, entities={"drug": {"num_partitions": 1, "featurized": True}, "disease": {"num_partitions": 2}}
    )
    config = parse_config(raw)
    queries = Queries(config, names_of(config), ["treats"], "")
    with pytest.raises(UsageError, match=r"relation 'treats' takes entity type 'drug' as head, which is featurized"):
        queries.targets(Side.RHS, ["aspirin"], None, "")


def test_the_table_lists_each_querys_top_entities_in_order_and_a_row_of_nulls_when_none_is_left(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    names = names_of(config)
    queries = Queries(config, names, ["treats", "treats"], "")
    groups = queries.targets(Side.RHS, ["aspirin", "insulin"], ["asthma", "migraine"], "heads")
    ranked = Ranked(
        scores=torch.tensor([[2.5, 1.0], [float("-inf"), float("-inf")]]),
        partitions=torch.tensor([[1, 0], [-1, -1]]),
        offsets=torch.tensor([[0, 0], [-1, -1]]),
        answer_score=torch.tensor([1.0, -3.0]),
        answer_rank=torch.tensor([2, 1]),
        answer_partition_rank=torch.tensor([1, 1]),
    )
    table = prediction_table(Side.RHS, names, queries, groups, [ranked], ["aspirin", "insulin"], ["asthma", "migraine"])
    assert table.to_pylist() == [
        {"query": 0, "head": "aspirin", "relation": "treats", "tail": "diabetes", "rank": 1, "score": 2.5,
         "answer": "asthma", "answer_score": 1.0, "answer_rank": 2, "answer_partition_rank": 1},
        {"query": 0, "head": "aspirin", "relation": "treats", "tail": "asthma", "rank": 2, "score": 1.0,
         "answer": "asthma", "answer_score": 1.0, "answer_rank": 2, "answer_partition_rank": 1},
        {"query": 1, "head": "insulin", "relation": "treats", "tail": None, "rank": None, "score": None,
         "answer": "migraine", "answer_score": -3.0, "answer_rank": 1, "answer_partition_rank": 1},
    ]  # fmt: skip
    assert np.dtype(table.schema.field("score").type.to_pandas_dtype()) == np.float32
