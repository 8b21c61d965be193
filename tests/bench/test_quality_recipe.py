"""bench.quality_recipe: the commands of a dry run, and the tables and verdicts of a recorded result
file (PyKEEN's side is not run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import quality_recipe
from bench.quality import CONFIG, DATA_DIR


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recipe and tuned configs looked up under tmp_path; scratch and PyKEEN's venv there too."""
    monkeypatch.setattr(quality_recipe, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(quality_recipe, "BENCH_DIR", tmp_path / "bench")
    monkeypatch.setattr(quality_recipe, "WORK", tmp_path / "work")
    monkeypatch.setattr(quality_recipe, "PYKEEN_VENV", tmp_path / "pykeen-venv")
    return tmp_path


def dry_run_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert quality_recipe.main(["--dry-run", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_dry_run_prints_every_command_and_writes_nothing(elsewhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (elsewhere / "examples" / "kg").mkdir(parents=True)
    recipe = elsewhere / "examples" / "kg" / "umls.py"
    # A recipe with a validation section: its evaluation ranks the best version, the defaults' the last.
    recipe.write_text(
        "def get_torchbiggraph_config():\n    return {'entity_path': 'entities', 'checkpoint_path': 'checkpoints', "
        "'edge_paths': ['edges/train', 'edges/valid', 'edges/test'], 'entities': {'all': {'num_partitions': 1}}, 'dimension': 10, "
        "'relations': [{'name': 'r', 'lhs': 'all', 'rhs': 'all'}], 'validation': {'edge_path': 'edges/valid'}}\n"
    )
    lines = dry_run_lines(capsys, "--sets", "umls", "--seeds", "0,2")
    commands = [line.strip()[2:] for line in lines if line.strip().startswith("$ ")]
    python, script, data = elsewhere / "pykeen-venv" / "bin" / "python", quality_recipe.PYKEEN_SCRIPT, DATA_DIR / "umls"
    splits = f"{data}/train.txt {data}/valid.txt {data}/test.txt --lhs-col 0 --rel-col 1 --rhs-col 2"
    filters = "--filtered --filter-path edges/train --filter-path edges/valid --filter-path edges/test --json"
    pbg = commands[1].split()[0]
    want = [f"{python} {script} umls {data} --check-only"]
    for config in (CONFIG, recipe):
        want.append(f"{pbg} import {config} {splits}")
        for seed in (0, 2):
            want.append(
                f"{pbg} train {config} -p edge_paths=edges/train -p seed={seed} -p checkpoint_path=checkpoints/seed{seed}"
            )
            version = " --version best" if config == recipe else ""
            want.append(
                f"{pbg} eval {config} -p edge_paths=edges/test -p relations.0.all_negs=true -p num_uniform_negs=0 "
                f"-p checkpoint_path=checkpoints/seed{seed} {filters}{version}"
            )
    want += [f"{python} {script} umls {data} --seed {seed}" for seed in (0, 2)]
    assert commands == want
    assert any(line.startswith("ours, tuned") and "skipped: no bench/configs/tuned_umls.json" in line for line in lines)
    assert sorted(path.name for path in elsewhere.iterdir()) == ["examples"]


def test_a_missing_recipe_is_a_skipped_row_and_epochs_reach_every_train(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = dry_run_lines(capsys, "--sets", "nations", "--seeds", "1", "--epochs", "7")
    assert any(line.startswith("ours, recipe") and "skipped: no examples/kg/nations.py" in line for line in lines)
    trains = [line for line in lines if "$ " in line and " train " in line]
    assert len(trains) == 1 and trains[0].endswith("-p num_epochs=7")


def test_large_dry_run_trains_defaults_and_recipe_on_the_planted_graph(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = dry_run_lines(capsys, "--large", "--seeds", "0")
    imports = [line for line in lines if "$ " in line and " import " in line]
    assert len(imports) == 1 and f"{elsewhere}/work/planted/data/train.txt" in imports[0]
    assert any(line.startswith("ours, recipe") and "skipped: no examples/kg/planted.py" in line for line in lines)
    assert not (elsewhere / "work").exists()


def seed_record(seed: int, mrr: float, whole_s: float) -> dict[str, object]:
    metrics = {"mrr": mrr, "r1": mrr - 0.1, "r10": 0.99, "train_s": whole_s / 2, "whole_s": whole_s}
    return {"seed": seed, "status": "ok", "metrics": metrics}


def recorded(recipe_mrr: float, recipe_s: float) -> dict[str, object]:
    """A result file as the bench writes it, its aggregates made by the bench's own summarize."""
    rows = {
        "defaults": quality_recipe.summarize([seed_record(s, 0.81 + 0.01 * s, 20.0) for s in range(3)]),
        "recipe": quality_recipe.summarize([seed_record(s, recipe_mrr + 0.002 * (s - 1), recipe_s) for s in range(3)]),
        "tuned": {"status": "skipped: no bench/configs/tuned_umls.json"},
    }
    pykeen = quality_recipe.summarize([seed_record(s, 0.938, 200.0) for s in range(3)])
    return {"sets": {"umls": {"target": 0.94, "rows": rows, "pykeen": pykeen}}}


def report_lines(tmp_path: Path, payload: dict[str, object], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    path = tmp_path / "quality_recipe.json"
    path.write_text(json.dumps(payload))
    assert quality_recipe.main(["--report", str(path)]) == 0
    return {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines() if "  " in line}


def test_a_recorded_run_prints_its_table_with_verdicts_and_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = recorded(recipe_mrr=0.945, recipe_s=40.0)
    lines = report_lines(tmp_path, payload, capsys)
    assert lines["ours, PBG defaults"].rstrip().endswith("FAIL: MRR 0.820 < 0.94")
    assert "0.820 ± 0.010" in lines["ours, PBG defaults"]
    assert lines["ours, recipe"].rstrip().endswith("PASS")
    assert "0.945 ± 0.002" in lines["ours, recipe"]
    assert lines["ours, tuned"].rstrip().endswith("skipped: no bench/configs/tuned_umls.json")
    assert lines["PyKEEN"].rstrip().endswith("reference")
    assert lines["published: PyTorch-BigGraph, kg_complex.py setup"].rstrip().endswith("data/kg/README.md")
    assert "TimDettmers/ConvE" in lines["published: ConvE (its own UMLS split)"]
    assert quality_recipe.passed(payload)


def test_a_recipe_slower_than_pykeen_fails_even_at_its_mrr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payload = recorded(recipe_mrr=0.95, recipe_s=250.0)
    lines = report_lines(tmp_path, payload, capsys)
    assert lines["ours, recipe"].rstrip().endswith("FAIL: 250.0 s >= PyKEEN's 200.0 s")
    assert not quality_recipe.passed(payload)


def test_without_pykeen_the_time_half_of_the_verdict_is_not_claimed() -> None:
    row = quality_recipe.summarize([seed_record(0, 0.95, 10.0)])
    skipped = {"status": "skipped: no PyKEEN virtualenv at /x"}
    assert quality_recipe.verdict("umls", row, skipped) == "MRR PASS, time n/a (no PyKEEN row)"


def test_large_reports_the_recipes_gap_over_the_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = {
        "defaults": quality_recipe.summarize([seed_record(0, 0.20, 100.0)]),
        "recipe": quality_recipe.summarize([seed_record(0, 0.30, 120.0)]),
    }
    large = {"graph": {"entities": 40_000, "train_edges": 400_000}, "rows": rows}
    payload = {"large": {**large, "gap": quality_recipe.large_gap(large)}}
    path = tmp_path / "large.json"
    path.write_text(json.dumps(payload))
    assert quality_recipe.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "planted (40,000 entities, 400,000 train edges)" in out
    assert "recipe - defaults: MRR +0.100 (1.50x)" in out
    assert quality_recipe.passed(payload)


def test_an_unknown_set_is_refused_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        quality_recipe.parse_args(["--sets", "umls,fb15k"])
    assert "--sets: unknown set(s) ['fb15k']; known: ['kinships', 'nations', 'umls']" in capsys.readouterr().err


def test_a_row_with_a_failed_seed_gets_no_verdict() -> None:
    failed = {"seed": 2, "status": "failed", "train": {"status": "failed"}}
    row = quality_recipe.summarize([seed_record(0, 0.95, 10.0), seed_record(1, 0.95, 10.0), failed])
    pykeen = quality_recipe.summarize([seed_record(0, 0.938, 200.0)])
    assert row["status"] == "failed" and row["mean"]["mrr"] == pytest.approx(0.95)
    assert quality_recipe.verdict("umls", row, pykeen) == "failed: 2 of 3 seeds finished"
