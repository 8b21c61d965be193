"""storage.retraining.report: a retraining run's summary sections and its history line, in words."""

from __future__ import annotations

from typing import Any

from pbg_core.config import parse_config
from storage.retraining.report import data_section, gate_section, history_line, new_data, retrain_sections, skipped_line
from storage.retraining.state import RetrainState

RUN = "run-20261205T030000Z-7d3e91aa"


def config(*edge_paths: str) -> Any:
    return parse_config(
        {
            "entity_path": "/root/data",
            "edge_paths": list(edge_paths) or ["/root/data/train_partitioned"],
            "checkpoint_path": f"/root/{RUN}",
            "entities": {"n": {"num_partitions": 1}},
            "relations": [{"name": "r", "lhs": "n", "rhs": "n"}],
            "dimension": 4,
        }
    )


def received(relative: str, generation: int) -> dict[str, Any]:
    return {"relative": relative, "size": 10, "digest": "d", "generation": generation, "received_at": "t"}


def judged(gate: str = "passed", **extra: Any) -> RetrainState:
    fields: dict[str, Any] = {
        "generation": 2,
        "new_generations": [2],
        "holdouts": ["/root/data/gen0002-day2_holdout"],
        "baseline": {"mrr": 0.53, "r10": 0.9, "count": 63},
        "trained": {"mrr": 0.531, "r10": 0.91, "count": 63},
        "gate": gate,
        "reason": "MRR 0.5310 on 63 holdout edges of the new data, previous run 0.5300; within max_mrr_drop 0.0500",
        "received_files": [received("day1.tsv", 1), received("day2.tsv", 2)],
    }
    return RetrainState(**(fields | extra))


def test_new_data_in_words_never_a_list() -> None:
    assert new_data(judged()) == "generation 2 (`day2.tsv`); 63 edges held out for the gate in `gen0002-day2_holdout`"
    two = judged(
        new_generations=[3, 2],
        holdouts=["/h/gen0002-day2_holdout", "/h/gen0003-day3_holdout"],
        received_files=[received("day2.tsv", 2), received("day3.tsv", 3)],
    )
    assert new_data(two) == (
        "generations 2 and 3 (`day2.tsv` and `day3.tsv`); 63 edges held out for the gate in "
        "`gen0002-day2_holdout` and `gen0003-day3_holdout`"
    )
    assert new_data(None) == new_data(judged(new_generations=[])) == "none (the run trained what its config names)"
    assert "[" not in data_section(judged(), config())


def test_trained_on_names_the_runs_edge_paths() -> None:
    section = data_section(
        judged(), config("/d/train_partitioned", "/d/gen0001-day1_partitioned", "/d/gen0002-day2_partitioned/")
    )
    assert "- Trained on: `train_partitioned`, `gen0001-day1_partitioned` and `gen0002-day2_partitioned`" in section


def test_the_gate_section_names_the_holdout_mrr_and_defines_it() -> None:
    text = gate_section(judged("failed", reason="MRR 0.1255 ...: below retrain.min_mrr 0.2000"), config())
    assert "**FAILED**: not promoted. MRR 0.1255 ...: below retrain.min_mrr 0.2000" in text
    assert "| model | holdout MRR (gate, raw) | Hits@10 | edges |" in text
    assert "| previous run (grown) | 0.53 | 0.9 | 63 |" in text and "| this run | 0.531 | 0.91 | 63 |" in text
    assert "holdout MRR (gate, raw): the new data's held-out edges, never trained" in text and "not filtered" in text


def test_sections_skip_a_gate_not_judged_yet() -> None:
    assert [s.splitlines()[0] for s in retrain_sections(judged(), config())] == [
        "## Quality gate",
        "## Retraining data",
    ]
    assert [s.splitlines()[0] for s in retrain_sections(judged("pending"), config())] == ["## Retraining data"]
    assert [s.splitlines()[0] for s in retrain_sections(None, config())] == ["## Retraining data"]


def test_history_lines() -> None:
    assert history_line(RUN, judged()) == (
        f"2026-12-05 03:00 UTC: promoted {RUN} (generation 2); holdout MRR 0.5310, previous 0.5300"
    )
    first = judged(baseline=None)
    assert history_line(RUN, first).endswith("holdout MRR 0.5310, previous none (first run)")
    failed = judged("failed", reason="MRR 0.1255 on 56 holdout edges: below retrain.min_mrr 0.2000")
    assert history_line(RUN, failed) == (
        f"2026-12-05 03:00 UTC: not promoted {RUN} (generation 2): MRR 0.1255 on 56 holdout edges: "
        "below retrain.min_mrr 0.2000"
    )
    assert history_line(RUN, None) == f"2026-12-05 03:00 UTC: promoted {RUN}; no quality gate measured"
    assert history_line("elsewhere", None).startswith("unknown date: promoted elsewhere")


def test_a_night_with_nothing_new_says_so_and_what_latest_still_names() -> None:
    run_dir = "run-20261205T030000Z-7d3e91aa"
    line = skipped_line(run_dir, "/data/umls/runs/run-20261204T030000Z-0badcafe", failed=False)
    assert (
        line == "2026-12-05 03:00 UTC: nothing new, not trained; latest.json still names run-20261204T030000Z-0badcafe"
    )
    failed = skipped_line(run_dir, None, failed=True)
    assert failed == (
        "2026-12-05 03:00 UTC: nothing new, run failed (retrain.on_no_new_data: fail); no model promoted yet"
    )
