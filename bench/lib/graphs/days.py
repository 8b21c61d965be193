"""The simulated days of ``bench.retrain_days``: a planted graph cut in time-like order.

The graph is :mod:`bench.lib.graphs.chung_lu`'s Chung-Lu graph with planted communities (ranking quality means
something on it). A seeded 2% of its edges is the final test split, the same for every regime.
The rest is cut into days:

- ``late_share`` (10%) of the nodes are *late*: each gets an arrival day in 1..``days``;
- an edge touching late nodes belongs to the day its last endpoint arrives;
- day 0 takes ``day0_share`` (70%) of the training edges, each later day ``per_day_share`` (6%):
  the other edges fill the days at random around the late ones.

So day 0 never mentions a late node, and about 10% of the entities first appear later. Files
(``day{d}.tsv``, ``test.tsv``, ``test_new.tsv`` = test edges touching a late node,
``test_last.tsv`` = those touching a node of the last day) hold
``n<lhs>\\tn<rhs>`` lines; ``days.json`` their counts, written last and reused for the same
parameters.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.lib.graphs.chung_lu import GraphParams, edge_keys


@dataclass(frozen=True)
class DayPlan:
    """What determines the day files."""

    nodes: int = 40_000
    edges: int = 800_000
    communities: int = 1000
    mix: float = 0.2
    alpha: float = 0.5
    seed: int = 0
    test_share: float = 0.02
    late_share: float = 0.10
    day0_share: float = 0.70
    per_day_share: float = 0.06
    days: int = 5


def cut_days(plan: DayPlan) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(edge keys per day, test keys, arrival day per node: 0 for the early ones)."""
    params = GraphParams(plan.nodes, plan.edges, plan.seed, plan.alpha, 0.0, plan.communities, plan.mix)
    keys, _ = edge_keys(params)  # shuffled
    rng = np.random.default_rng(plan.seed + 1)
    test_size = round(len(keys) * plan.test_share)
    test, train = keys[:test_size], keys[test_size:]
    arrival = np.zeros(plan.nodes, dtype=np.int64)
    late = rng.choice(plan.nodes, round(plan.nodes * plan.late_share), replace=False)
    arrival[late] = rng.integers(1, plan.days + 1, len(late))
    edge_day = np.maximum(arrival[train // plan.nodes], arrival[train % plan.nodes])
    sizes = [round(len(train) * plan.day0_share)] + [round(len(train) * plan.per_day_share)] * plan.days
    sizes[-1] = len(train) - sum(sizes[:-1])
    free = np.flatnonzero(edge_day == 0)
    rng.shuffle(free)
    days, taken = [], 0
    for day in range(plan.days, 0, -1):  # later days first: the rest of the early edges is day 0
        forced = np.flatnonzero(edge_day == day)
        fill = max(0, sizes[day] - len(forced))
        days.append(np.concatenate([train[forced], train[free[taken : taken + fill]]]))
        taken += fill
    days.append(train[free[taken:]])
    days.reverse()
    return days, test, arrival


def write_keys(path: Path, keys: np.ndarray, nodes: int) -> None:
    """``n<lhs>\\tn<rhs>`` lines (string names: the import shuffles them like any names)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as out:
        for start in range(0, len(keys), 200_000):
            block = keys[start : start + 200_000]
            out.write("".join(f"n{a}\tn{b}\n" for a, b in zip(block // nodes, block % nodes, strict=True)))
    tmp.replace(path)


def ensure_days(plan: DayPlan, directory: Path) -> dict[str, object]:
    """Write the day and test files unless ``days.json`` says they exist for ``plan``; their summary."""
    meta_path = directory / "days.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        files = [f"day{d}.tsv" for d in range(plan.days + 1)] + ["test.tsv", "test_new.tsv", "test_last.tsv"]
        if meta.get("plan") == asdict(plan) and all((directory / name).exists() for name in files):
            return dict(meta)
    directory.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)
    days, test, arrival = cut_days(plan)
    for day, keys in enumerate(days):
        write_keys(directory / f"day{day}.tsv", keys, plan.nodes)
    touches_late = (arrival[test // plan.nodes] > 0) | (arrival[test % plan.nodes] > 0)
    write_keys(directory / "test.tsv", test, plan.nodes)
    write_keys(directory / "test_new.tsv", test[touches_late], plan.nodes)
    touches_last = (arrival[test // plan.nodes] == plan.days) | (arrival[test % plan.nodes] == plan.days)
    write_keys(directory / "test_last.tsv", test[touches_last], plan.nodes)
    seen0 = np.zeros(plan.nodes, dtype=bool)
    seen0[days[0] // plan.nodes] = seen0[days[0] % plan.nodes] = True
    everyone = np.zeros(plan.nodes, dtype=bool)
    for keys in days:
        everyone[keys // plan.nodes] = everyone[keys % plan.nodes] = True
    meta = {
        "plan": asdict(plan),
        "day_edges": [len(keys) for keys in days],
        "test_edges": len(test),
        "test_new_edges": int(touches_late.sum()),
        "test_last_day_edges": int(touches_last.sum()),
        "entities": int(everyone.sum()),
        "entities_after_day0": int((everyone & ~seen0).sum()),
    }
    meta_path.write_text(json.dumps(meta, indent=2))
    return meta
