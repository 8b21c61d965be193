"""A seeded random graph as a ``pbg import`` input: edges between uniformly drawn nodes, and its config.

Large enough (hundreds of thousands of edges) for an import, export or eval to take long enough
that a signal lands in the middle of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def random_edges(path: Path, num_edges: int, num_nodes: int, seed: int = 0) -> Path:
    """``n<a> TAB n<b>`` lines of uniformly random node pairs (seeded)."""
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, num_nodes, size=(num_edges, 2))
    path.write_text("".join(f"n{a}\tn{b}\n" for a, b in pairs.tolist()))
    return path


def random_graph_config(root: Path, dimension: int) -> Path:
    """config.json for :func:`random_edges` under ``root`` (relative paths)."""
    config = {
        "entity_path": "data",
        "edge_paths": ["data/edges"],
        "checkpoint_path": "model",
        "entities": {"node": {"num_partitions": 2}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": dimension,
        "num_epochs": 1,
        "workers": 1,
        "eval_fraction": 0.0,
        "seed": 0,
    }
    path = root / "config.json"
    path.write_text(json.dumps(config))
    return path
