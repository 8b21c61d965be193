"""bench/lj_setup.py: PBG's LiveJournal config with the benchmark's changes, and the disk check."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import lj_graph
import lj_setup

from pbg_core.config.validation import parse_config


def test_config_is_pbgs_livejournal_model_at_8_partitions(tmp_path: Path) -> None:
    path = tmp_path / "config.py"
    lj_setup.write_config(path, lj_setup.config_dict(["edges/train"], 0.0, 2.0, 2))
    namespace: dict = {}
    exec(path.read_text(), namespace)  # the file both tools load
    config = namespace["get_torchbiggraph_config"]()
    assert config["entities"] == {"user_id": {"num_partitions": 8}}
    assert config["relations"] == [{"name": "follow", "lhs": "user_id", "rhs": "user_id", "operator": "none"}]
    expected = {"dimension": 1024, "lr": 0.001, "comparator": "cos", "loss_fn": "ranking", "batch_size": 1000}
    assert {k: config[k] for k in expected} == expected
    assert (config["num_batch_negs"], config["num_uniform_negs"], config["bucket_order"]) == (50, 50, "inside_out")
    assert (config["eval_fraction"], config["num_epochs"], config["hogwild_delay"]) == (0.0, 1, 2.0)
    assert parse_config(config).dimension == 1024  # our loader accepts every key


def test_full_size_needs_about_49_gb() -> None:
    params = lj_graph.scaled(1.0, 0)
    needed = lj_setup.bytes_needed(params.nodes, params.edges, have_graph=False, have_import=False)
    assert needed["checkpoint_two_versions"] == 2 * 4_847_571 * 1025 * 4
    assert 48e9 < sum(needed.values()) < 50e9
    cached = lj_setup.bytes_needed(params.nodes, params.edges, have_graph=True, have_import=True)
    assert cached["tsv"] == cached["imported_edges"] == 0


def test_short_disk_is_refused_naming_bytes_needed_and_free(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    assert lj_setup.check_free_space(tmp_path, {"checkpoint_two_versions": 1}) is None
    refusal = lj_setup.check_free_space(tmp_path, {"tsv": free, "checkpoint_two_versions": free})
    assert refusal is not None and "\n" not in refusal
    # The free figure moves while other processes write: only its shape is checked.
    assert f"{2 * free / 1e9:.1f} GB needed (tsv {free / 1e9:.1f} GB," in refusal
    assert re.search(r"\), [0-9.]+ GB free$", refusal)
