"""Tests for storage.layout: PBG file names and their parsers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pbg_core.types import Bucket
from storage import layout


def test_names_match_pbg() -> None:
    assert layout.edge_file(0, 3) == "edges_0_3.h5"
    assert layout.embeddings_file("user", 2, 7) == "embeddings_user_2.v7.h5"
    assert layout.model_file(7) == "model.v7.h5"
    assert layout.entity_count_file("user", 0) == "entity_count_user_0.txt"
    assert layout.entity_names_file("user", 0) == "entity_names_user_0.json"
    assert layout.snapshot_dir(5) == "epoch_5"
    assert layout.VERSION_FILE == "checkpoint_version.txt"
    assert layout.CONFIG_FILE == "config.json"
    assert layout.STATS_FILE == "training_stats.json"
    assert layout.DYNAMIC_REL_COUNT_FILE == "dynamic_rel_count.txt"
    assert layout.DYNAMIC_REL_NAMES_FILE == "dynamic_rel_names.json"


def test_tmp_file_inserts_before_extension() -> None:
    assert layout.tmp_file("edges_0_1.h5") == "edges_0_1.tmp.h5"
    assert layout.tmp_file("model.v3.h5") == "model.v3.tmp.h5"
    assert layout.tmp_file("checkpoint_version.txt") == "checkpoint_version.tmp.txt"
    assert layout.tmp_file("noext") == "noext.tmp"


def test_parse_edge_file() -> None:
    assert layout.parse_edge_file("edges_12_3.h5") == Bucket(12, 3)
    for name in ("edges_0_1.tmp.h5", "edges_a_1.h5", "edges_0_1.h5.bak", "xedges_0_1.h5"):
        assert layout.parse_edge_file(name) is None


def test_parse_embeddings_file_with_underscores_and_dots_in_type() -> None:
    assert layout.parse_embeddings_file("embeddings_user_item_3.v10.h5") == ("user_item", 3, 10)
    assert layout.parse_embeddings_file("embeddings_a.b_0.v1.h5") == ("a.b", 0, 1)
    assert layout.parse_embeddings_file("embeddings_user_3.v10.tmp.h5") is None


def test_parse_checkpoint_and_snapshot_names() -> None:
    assert layout.parse_checkpoint_file("model.v4.h5") == 4
    assert layout.parse_checkpoint_file("embeddings_e_0.v4.h5") == 4
    assert layout.parse_checkpoint_file("model.v4.tmp.h5") is None
    assert layout.parse_checkpoint_file("config.json") is None
    assert layout.parse_snapshot_dir("epoch_10") == 10
    assert layout.parse_snapshot_dir("epoch_x") is None


def test_names_round_trip_through_parsers() -> None:
    for entity, part, version in [("e", 0, 0), ("with_under", 11, 123)]:
        name = layout.embeddings_file(entity, part, version)
        assert layout.parse_embeddings_file(name) == (entity, part, version)
    assert layout.parse_model_file(layout.model_file(9)) == 9
    assert layout.parse_edge_file(layout.edge_file(4, 2)) == Bucket(4, 2)


def test_run_dir_name_is_the_utc_start_and_the_id_prefix() -> None:
    start = datetime(2026, 3, 1, 12, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    assert layout.run_dir_name("0B9E1C2D-77aa-4bb0-8ccc-0123456789ab", start) == "run-20260301T103005Z-0b9e1c2d"
    with pytest.raises(ValueError, match="naive"):
        layout.run_dir_name("0b9e1c2d", datetime(2026, 3, 1))
    with pytest.raises(ValueError, match="8 hex digits.*'run-xyz'"):
        layout.run_dir_name("run-xyz", start)
    assert layout.is_run_dir_name("run-20260301T103005Z-0b9e1c2d") and not layout.is_run_dir_name("run-xyz")


def test_retraining_names() -> None:
    assert (layout.LATEST_FILE, layout.RETRAIN_STATE_FILE, layout.SPLIT_FILE) == (
        "latest.json",
        "retrain.json",
        "split.json",
    )
    assert layout.generation_edge_dir(3, "day1") == "gen0003-day1_partitioned"
    assert layout.GENERATION_DIR_RE.match(layout.generation_edge_dir(12345, "x")) is not None
    assert layout.holdout_dir("gen0003-day1_partitioned") == "gen0003-day1_holdout"
    assert layout.holdout_dir("edges") == "edges_holdout"
