"""Training and evaluation statistics as summable value types.

A :class:`Stats` holds a ``count`` (edges) and *sums* of per-edge metrics, so
stats from workers, batches and buckets add up exactly; :meth:`Stats.average`
divides by the count. The dict form is PBG's ``training_stats.json`` shape:
``{"count": n, "metrics": {name: value}}`` (averaged values).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

TRAIN_METRICS = ("loss", "reg", "violators_lhs", "violators_rhs")
EVAL_METRICS = ("loss", "pos_rank", "mrr", "r1", "r10", "r50", "auc")


@dataclass(frozen=True)
class Stats:
    """Metric sums over ``count`` edges.

    Attributes:
        count: Number of edges these sums cover.
        metrics: Metric name -> sum over the edges (not an average).
    """

    count: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    def __add__(self, other: Stats) -> Stats:
        names = dict.fromkeys([*self.metrics, *other.metrics])
        summed = {k: self.metrics.get(k, 0.0) + other.metrics.get(k, 0.0) for k in names}
        return Stats(count=self.count + other.count, metrics=summed)

    @staticmethod
    def sum(items: Iterable[Stats]) -> Stats:
        """Add up any number of stats (empty input gives an empty Stats)."""
        total = Stats()
        for item in items:
            total = total + item
        return total

    def average(self) -> dict[str, float]:
        """Per-edge means of every metric (0.0 for an empty Stats)."""
        if self.count == 0:
            return {k: 0.0 for k in self.metrics}
        return {k: v / self.count for k, v in self.metrics.items()}

    def to_dict(self) -> dict[str, Any]:
        """PBG's JSON shape: ``{"count": n, "metrics": {name: mean}}``."""
        return {"count": self.count, "metrics": self.average()}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Stats:
        """Inverse of :meth:`to_dict` (means are turned back into sums)."""
        count = int(data["count"])
        return Stats(count=count, metrics={k: float(v) * count for k, v in data["metrics"].items()})

    def format(self) -> str:
        """One-line human summary, e.g. ``count 1000 · loss 0.41 · mrr 0.63``."""
        parts = [f"count {self.count}"]
        parts += [f"{k} {v:.4g}" for k, v in self.average().items()]
        return " · ".join(parts)
