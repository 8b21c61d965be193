"""pbg_core.session.parts: session settings over the topology, metadata, splitting work evenly."""

from __future__ import annotations

import json

import torch

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
