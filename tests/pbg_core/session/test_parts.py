"""pbg_core.session.parts: session settings over the topology, metadata, splitting work evenly."""

from __future__ import annotations

import json

import pytest
import torch

from pbg_core.config import parse_config
from pbg_core.errors import ShapeError
from pbg_core.session.build import _build_model_state
from pbg_core.session.partitions import PartitionTopology
from pbg_core.session.parts import MetadataSource, SessionSettings, config_json_text, split_evenly
from pbg_core.types import Bucket, Side


def _settings() -> SessionSettings:
    topology = PartitionTopology.build({"doc": 3, "word": 1}, [("doc", "word"), ("doc", "doc")])
    return SessionSettings(topology, "inside_out", 0.0, None)


def test_partition_of_names_each_entity_side_pair_of_the_bucket() -> None:
    settings = _settings()
    assert (settings.nparts_lhs, settings.nparts_rhs) == (3, 3)
    assert settings.partition_of(Bucket(2, 1)) == {
        ("doc", Side.LHS): 2,
        ("doc", Side.RHS): 1,
        ("word", Side.RHS): 0,  # unpartitioned: always partition 0
    }


def test_bucket_listing_follows_the_topology() -> None:
    settings = _settings()
    assert settings.buckets() == [Bucket(lhs, rhs) for lhs in range(3) for rhs in range(3)]
    assert settings.unpartitioned_keys() == [("word", 0)]
    assert sorted(settings.bucket_partitions(Bucket(0, 2))) == [("doc", 0), ("doc", 2)]


def test_split_evenly_covers_every_index_once_in_order_with_near_equal_parts() -> None:
    indices = torch.arange(10)
    parts = split_evenly(indices, 4)
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    assert [p.numel() for p in split_evenly(torch.arange(2), 3)] == [0, 1, 1]  # more parts than rows


def test_config_json_text_is_sorted_json_and_metadata_copies_the_iteration() -> None:
    text = config_json_text({"lr": 0.1, "dimension": 4, "entities": {"b": 1, "a": 2}})
    assert text == '{"dimension": 4, "entities": {"a": 2, "b": 1}, "lr": 0.1}'
    assert json.loads(text)["entities"] == {"a": 2, "b": 1}
    source = MetadataSource(text)
    source.iteration["epoch"] = 1
    meta = source()
    source.iteration["epoch"] = 2
    assert meta.config_json == text and meta.iteration == {"epoch": 1}  # a snapshot, not a view


def test_a_model_from_before_relation_types_were_appended_fills_the_first_rows() -> None:
    raw = {
        "entities": {"e": {"num_partitions": 1}},
        "relations": [{"name": "all", "lhs": "e", "rhs": "e", "operator": "diagonal"}],
        "dynamic_relations": True,
        "global_emb": False,
        "dimension": 4,
        "entity_path": "x",
        "edge_paths": ["y"],
        "checkpoint_path": "z",
    }
    config = parse_config(raw)
    old, new = _build_model_state(config, 2, 0.1, 0), _build_model_state(config, 3, 0.1, 0)
    with torch.no_grad():
        for param in old.model.parameters():
            param.mul_(2.0)  # trained: no longer a fresh model's ones
    stored = {k: v.clone() for k, v in old.model.state_dict().items()}
    fresh = {k: v.clone() for k, v in new.model.state_dict().items()}
    with pytest.raises(ShapeError, match=r"stored shape \(2, 4\), model shape \(3, 4\)"):
        new._load(stored, None, "init_path version 1")
    new._load(stored, None, "init_path version 1", grows=True)
    for key, value in new.model.state_dict().items():
        torch.testing.assert_close(value[:2], stored[key])
        torch.testing.assert_close(value[2:], fresh[key][2:])  # the appended type starts fresh
