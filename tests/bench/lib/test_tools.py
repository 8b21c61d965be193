"""bench.lib.tools: the metrics of ``pbg eval --json``, read from its last stdout line."""

from __future__ import annotations

import pytest

from bench.lib.tools import eval_metrics


def test_the_last_non_empty_line_is_the_metrics_object() -> None:
    assert eval_metrics('progress\n{"mrr": 0.5, "r10": 0.9}\n\n') == {"mrr": 0.5, "r10": 0.9}


@pytest.mark.parametrize(
    ("stdout", "message"),
    [("", "printed nothing"), ("done\n", "not JSON: done"), ("[1, 2]\n", "not a JSON object")],
)
def test_anything_else_is_refused_naming_the_line(stdout: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        eval_metrics(stdout)
