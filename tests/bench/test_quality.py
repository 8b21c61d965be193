"""bench.quality: the commands it runs (default and sweep), its options, and its table."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import quality
from bench.lib.report import format_table
from bench.lib.tools import RESULTS_DIR

DEFAULT_TRAIN = [
    "pbg",
    "train",
    str(quality.CONFIG),
    *("-p", "edge_paths=edges/train", "-p", "seed=1", "-p", "checkpoint_path=checkpoints/seed1"),
]
DEFAULT_EVAL = [
    "pbg",
    "eval",
    str(quality.CONFIG),
    *("-p", "edge_paths=edges/test", "-p", "relations.0.all_negs=true", "-p", "num_uniform_negs=0"),
    *("-p", "checkpoint_path=checkpoints/seed1", "--filtered"),
    *("--filter-path", "edges/train", "--filter-path", "edges/valid", "--filter-path", "edges/test", "--json"),
]


def test_the_default_commands_are_unchanged() -> None:
    assert quality.train_argv("pbg", 1, None) == DEFAULT_TRAIN
    assert quality.train_argv("pbg", 1, 7) == [*DEFAULT_TRAIN, "-p", "num_epochs=7"]
    assert quality.eval_argv("pbg", 1) == DEFAULT_EVAL
    assert quality.import_argv("pbg", Path("d"))[:3] == ["pbg", "import", str(quality.CONFIG)]


def test_overrides_reach_train_and_eval_before_the_bench_own_settings() -> None:
    config = Path("examples/kg/umls.py")
    overrides = ("num_uniform_negs=500", "lr=0.2")
    train = quality.train_argv("pbg", 0, None, config, overrides, "sweep")
    assert train[2] == str(config)
    values = train[4::2]
    assert values == [*overrides, "edge_paths=edges/train", "seed=0", "checkpoint_path=checkpoints/sweep/seed0"]
    evaluation = quality.eval_argv("pbg", 0, config, overrides, "test", "sweep")
    values = evaluation[4 : evaluation.index("--filtered") : 2]
    # The ranking's own num_uniform_negs=0 comes last, so it wins over the swept 500.
    assert values.index("num_uniform_negs=500") < values.index("num_uniform_negs=0")
    assert "checkpoint_path=checkpoints/sweep/seed0" in values


def test_the_valid_split_is_filtered_by_train_and_valid_only() -> None:
    argv = quality.eval_argv("pbg", 0, split="valid")
    assert "edge_paths=edges/valid" in argv
    filters = [argv[i + 1] for i, a in enumerate(argv) if a == "--filter-path"]
    assert filters == ["edges/train", "edges/valid"]


def test_options_parse_and_bad_ones_are_refused() -> None:
    args = quality.parse_args(["--config", "x.py", "-p", "lr=0.2", "-p", "dimension=100", "--split", "valid"])
    assert args.config == Path("x.py")
    assert (args.overrides, args.split, args.results) == (["lr=0.2", "dimension=100"], "valid", "quality")
    for bad in (["--split", "train"], ["--results", "../x"], ["--results", ""]):
        with pytest.raises(SystemExit):
            quality.parse_args(bad)


def test_a_bad_override_names_itself(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        quality.parse_args(["-p", "lr"])
    assert "-p takes FIELD=VALUE, got ['lr']" in capsys.readouterr().err


def test_dry_run_prints_the_sweep_commands_and_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    results = RESULTS_DIR / "dry_sweep.json"
    code = quality.main(["--sets", "umls", "--seeds", "3", "--dry-run", "-p", "lr=0.2", "--results", "dry_sweep"])
    out = capsys.readouterr().out
    assert code == 0
    assert "-p lr=0.2 -p edge_paths=edges/train -p seed=3 -p checkpoint_path=checkpoints/dry_sweep/seed3" in out
    assert not results.exists()


def test_the_table_shows_mean_train_and_eval_seconds() -> None:
    runs = [
        {"seed": 0, "status": "ok", "train": {"wall_s": 10.0}, "eval": {"wall_s": 4.0}},
        {"seed": 1, "status": "ok", "train": {"wall_s": 12.0}, "eval": {"wall_s": 6.0}},
        {"seed": 2, "status": "failed", "train": {"status": "failed"}},
    ]
    times = quality.wall_seconds(runs)
    assert times == {"train_s": 11.0, "eval_s": 5.0}
    metrics = [{"mrr": 0.9, "r1": 0.8, "r10": 1.0, "r50": 1.0, "pos_rank": 1.2, "auc": 0.99}] * 2
    record = {"status": "ok", **quality.aggregate(metrics, quality.REFERENCES["umls"]), **times}
    rows = quality.table_rows({"umls": record})
    assert rows[0][-2:] == [11.0, 5.0]
    assert rows[0][5] == "PASS"
    assert "train s" in format_table(quality.TABLE_HEADERS, rows)
