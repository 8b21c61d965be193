"""storage.stats_report: bucket table rows, summary markdown (metric names, best and last epoch), names.

Every expected number is computed by hand from the rows below.
"""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path
from typing import Any

import pytest

from pbg_core.config import parse_config
from storage.stats_report import (
    TABLE_COLUMNS,
    checkpoint_basename,
    checkpoint_urls,
    iteration_table,
    summary_markdown,
    version_progress,
)

SECRET = "hunter2-very-secret-value"
ACCESS_KEY = "AKIAEXAMPLEKEY0000"


def bucket_row(
    lhs: int,
    rhs: int,
    index: int,
    count: int,
    loss: float,
    *,
    epoch: int = 0,
    path: int = 0,
    timing: dict[str, float] | None = None,
    io: dict[str, float] | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A stats row shaped like the engine's (``finish_bucket(...)["row"]``)."""
    row: dict[str, Any] = {
        "lhs_partition": lhs,
        "rhs_partition": rhs,
        "index": index,
        "stats": {"count": count, "metrics": {"loss": loss, "reg": 0.0}},
        "epoch_idx": epoch,
        "edge_path_idx": path,
        "edge_chunk_idx": 0,
        "timing": timing or {},
        "io": io or {},
    }
    if before is not None:
        row["eval_stats_before"] = before
    if after is not None:
        row["eval_stats_after"] = after
    return row


def eval_stats(count: int, mrr: float, r10: float) -> dict[str, Any]:
    return {"count": count, "metrics": {"loss": 1.0, "pos_rank": 3.0, "mrr": mrr, "r1": 0.1, "r10": r10}}


FULL = bucket_row(
    0,
    1,
    7,
    1000,
    0.123456,
    timing={"load_edges": 0.5, "eval_before": 0.25, "train": 2.0, "eval_after": 0.25, "save": 1.0},
    io={"bytes_read": 3_000_000, "bytes_written": 1_500_000, "seconds": 0.75},
    before=eval_stats(50, 0.25, 0.5),
    after=eval_stats(50, 0.123456, 0.6),
)


def test_table_row_with_every_value() -> None:
    (row,) = iteration_table([FULL])
    assert list(row) == list(TABLE_COLUMNS)
    assert row == {
        "bucket": "(0, 1)",
        "loss": 0.1235,  # 4 significant digits
        "in-training MRR before": 0.25,
        "in-training MRR after": 0.1235,
        "in-training Hits@10 before": 0.5,
        "in-training Hits@10 after": 0.6,
        "edges_per_s": 500.0,  # 1000 edges / 2.0 s of training
        "io_mb": 4.5,  # (3e6 + 1.5e6) bytes / 1e6
        "io_s": 0.75,
        "seconds": 4.0,  # 0.5 + 0.25 + 2.0 + 0.25 + 1.0
    }


def test_table_row_missing_values_are_none() -> None:
    sparse = bucket_row(1, 0, 8, 200, math.nan, timing={"load_edges": 0.125}, io={"bytes_read": 2_000_000})
    (row,) = iteration_table([sparse])
    assert row["bucket"] == "(1, 0)"
    assert row["loss"] is None  # NaN is not shown as a number
    for name in (*TABLE_COLUMNS[2:6], "edges_per_s", "io_s"):
        assert row[name] is None, name
    assert row["io_mb"] == 2.0  # only bytes_read recorded
    assert row["seconds"] == 0.125


def test_table_skips_none_and_summary_rows_and_keeps_order() -> None:
    summary = {"index": 7, "epoch_idx": 0, "eval_stats_chunk_avg": eval_stats(50, 0.3, 0.7)}
    second = bucket_row(1, 1, 8, 10, 2.0, timing={"train": 0.5})
    rows = iteration_table([FULL, None, summary, second])
    assert [r["bucket"] for r in rows] == ["(0, 1)", "(1, 1)"]
    assert rows[1]["edges_per_s"] == 20.0
    assert rows[1]["io_mb"] is None


def test_zero_training_time_gives_no_rate() -> None:
    (row,) = iteration_table([bucket_row(0, 0, 0, 10, 1.0, timing={"train": 0.0})])
    assert row["edges_per_s"] is None


def curve_rows() -> list[dict[str, Any]]:
    """Epoch 0 over two edge paths, epoch 1 with one bucket, a summary row, out of order."""
    return [
        bucket_row(0, 0, 2, 400, 0.5, epoch=1, timing={"train": 0.5}, after=eval_stats(40, 0.9, 1.0)),
        bucket_row(0, 0, 0, 100, 2.0, epoch=0, path=0, timing={"train": 1.0}, after=eval_stats(10, 0.2, 0.5)),
        bucket_row(0, 0, 1, 300, 1.0, epoch=0, path=1, timing={"train": 1.0}, after=eval_stats(30, 0.6, 1.0)),
        {"index": 1, "epoch_idx": 0, "edge_path_idx": 1, "eval_stats_chunk_avg": eval_stats(40, 0.0, 0.0)},
    ]


def config_with_secret(checkpoint: str, **extra: Any) -> Any:
    return parse_config(
        extra
        | {
            "entity_path": "/data/entities",
            "edge_paths": ["/data/edges"],
            "checkpoint_path": checkpoint,
            "entities": {"node": {"num_partitions": 2}, "tag": {"num_partitions": 1}},
            "relations": [
                {"name": "linked", "lhs": "node", "rhs": "node", "operator": "translation"},
                {"name": "tagged", "lhs": "node", "rhs": "tag", "operator": "diagonal"},
            ],
            "dimension": 16,
            "comparator": "dot",
            "loss_fn": "softmax",
            "lr": 0.05,
            "num_epochs": 2,
            "workers": 3,
            "bucket_order": "affinity",
            "storage_options": {"key": ACCESS_KEY, "secret": SECRET, "client_kwargs": {"aws_session_token": SECRET}},
        }
    )


def test_summary_markdown_content(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "My Model_v2")
    text = summary_markdown(config_with_secret(checkpoint), 2, 2, curve_rows())
    assert "# PBG training: My Model_v2" in text
    assert "- version **2** (2 of 2 iteration(s) done)" in text
    assert f"- `{checkpoint}`" in text
    assert f"- `{Path(checkpoint).as_uri()}`" in text
    assert f"{Path(checkpoint).as_uri()}/model.v2.h5" in text
    assert "`node` (2 partition(s)), `tag` (1 partition(s))" in text
    assert "`linked` (node → node, translation), `tagged` (node → tag, diagonal)" in text
    assert "dimension 16 · comparator `dot` · loss_fn `softmax` · lr 0.05" in text
    assert "num_epochs 2 · workers 3 · bucket_order `affinity`" in text
    # Epoch 2 (index 1) is both the best (MRR 0.9 > 0.5) and the last: one row.
    assert "| last (epoch 2) | 0.5 | 0.9 | 1 | 800 | 1 |" in text and "best (epoch" not in text
    assert "| epoch | mean loss | in-training MRR (sampled) | in-training Hits@10 | train edges/s |" in text
    assert "in-training MRR (sampled): the 5% of each bucket held out of training" in text
    assert "against 1,000 batch + 1,000 uniform sampled negatives, raw (not filtered)" in text
    assert "| 1 | 1.25 | 0.5 |" in text and "| 2 | 0.5 | 0.9 |" in text  # every epoch, folded
    assert "<details><summary>every epoch (2)</summary>" in text
    assert "best epoch 2: in-training MRR (sampled) 0.900; last epoch 2: 0.900 while the loss fell 1.25 → 0.5." in text


def test_the_summary_shows_the_best_epoch_beside_the_last(tmp_path: Path) -> None:
    # MRR peaks at epoch 2 of 3 and falls by a third: both rows, the best first, and the hint.
    rows = [
        bucket_row(0, 0, e, 100, loss, epoch=e, timing={"train": 1.0}, after=eval_stats(10, mrr, 0.5))
        for e, loss, mrr in ((0, 2.0, 0.3), (1, 1.0, 0.6), (2, 0.5, 0.4))
    ]
    text = summary_markdown(config_with_secret(str(tmp_path / "ckpt")), 3, 3, rows)
    best, last = text.index("| best (epoch 2) | 1 | 0.6 |"), text.index("| last (epoch 3) | 0.5 | 0.4 |")
    assert best < last
    assert "The best epoch is the one of the highest in-training MRR (sampled)." in text
    assert "last epoch 3: 0.400 (33% below the best) while the loss fell 2 → 0.5." in text
    assert "`early_stopping` keeps the best version" in text
    image = re.search(r"!\[learning curve: [^\]]+\]\((data:image/svg\+xml;base64,[A-Za-z0-9+/=]+)\)", text)
    assert image is not None
    svg = base64.b64decode(image.group(1).removeprefix("data:image/svg+xml;base64,")).decode()
    assert "best: epoch 2, 0.600" in svg and "last: epoch 3, 0.400" in svg
    assert "▁" not in text and "█" not in text  # no sparklines any more


def test_a_checkpoint_past_the_configs_schedule_is_not_version_5_of_3(tmp_path: Path) -> None:
    # Trained with 5 iterations, then run again with a config of 3: versions count iterations, not epochs.
    text = summary_markdown(config_with_secret(str(tmp_path / "ckpt")), 5, 3, curve_rows())
    assert "- version **5** (past this config's 3 iteration(s): nothing left to train)" in text
    assert " of 3" not in text
    assert version_progress(5, 3) == "version 5 (past this config's 3 iteration(s): nothing left to train)"
    assert version_progress(3, 3) == "version 3 (3 of 3 iteration(s) done)"
    assert version_progress(0, 4) == "version 0 (0 of 4 iteration(s) done)"


def test_summary_markdown_never_shows_storage_option_values(tmp_path: Path) -> None:
    text = summary_markdown(config_with_secret(str(tmp_path / "ckpt")), 2, 2, curve_rows())
    assert SECRET not in text and ACCESS_KEY not in text
    assert "storage_options: set (values not shown)" in text


def test_summary_markdown_without_rows() -> None:
    text = summary_markdown(config_with_secret("s3://bucket/runs/ckpt/"), 0, 4, [])
    assert "No training stats recorded yet." in text and "No epochs recorded yet." in text
    assert "data:image" not in text
    assert "- `s3://bucket/runs/ckpt/`" in text and "model file" not in text  # nothing committed


@pytest.mark.parametrize(
    ("path", "expected"),
    [("s3://b/runs/ckpt/", "ckpt"), ("/tmp/x/My Model_v2", "My Model_v2"), ("file:///a/b", "b"), ("rel", "rel")],
)
def test_checkpoint_basename(path: str, expected: str) -> None:
    assert checkpoint_basename(path) == expected


def test_checkpoint_urls() -> None:
    assert checkpoint_urls("/tmp/ckpt") == ["/tmp/ckpt", "file:///tmp/ckpt"]
    assert checkpoint_urls("file:///tmp/ckpt") == ["/tmp/ckpt", "file:///tmp/ckpt"]
    assert checkpoint_urls("file:///tmp/My%20ckpt") == ["/tmp/My ckpt", "file:///tmp/My%20ckpt"]
    assert checkpoint_urls("s3://bucket/ckpt") == ["s3://bucket/ckpt"]


def test_the_validation_table_marks_the_best_version() -> None:
    from pbg_core.evaluation.early_stopping import ValidationRow
    from storage.stats_report import validation_table

    rows = [ValidationRow(v, v, mrr, 0.5, 0.9, 10, v == 2, 0.1, "s") for v, mrr in ((1, 0.123456), (2, 0.5))]
    assert validation_table(rows, 2) == [
        {"epoch": 1, "version": 1, "mrr": 0.1235, "r1": 0.5, "r10": 0.9, "count": 10, "sampled": "no", "best": ""},
        {"epoch": 2, "version": 2, "mrr": 0.5, "r1": 0.5, "r10": 0.9, "count": 10, "sampled": "yes", "best": "✓"},
    ]


def test_the_summary_shows_the_validation_line(tmp_path: Path) -> None:
    line = "best version v2 (epoch 2, mrr 0.5000), kept as best.json. Early stopping: mrr did not improve."
    config = config_with_secret(str(tmp_path / "ckpt"), validation={"edge_path": "/data/valid"})
    text = summary_markdown(config, 2, 2, curve_rows(), validation=line)
    assert f"## Validation\n\n{line}" in text
    assert "validation MRR: every edge of `/data/valid` (never trained) ranked against every entity, filtered" in text
    assert "## Validation" not in summary_markdown(config_with_secret(str(tmp_path / "ckpt")), 2, 2, curve_rows())


def test_extra_sections_come_after_the_checkpoint_as_given(tmp_path: Path) -> None:
    text = summary_markdown(
        config_with_secret(str(tmp_path / "ckpt")), 2, 2, curve_rows(), ["## Quality gate\n\nwords"]
    )
    assert text.index("## Checkpoint") < text.index("## Quality gate\n\nwords") < text.index("## Metrics")
