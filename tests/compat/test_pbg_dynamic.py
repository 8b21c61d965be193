"""PBG compatibility of dynamic relations and edge weights, against PyPI torchbiggraph 1.0.0.

One weighted TSV with 7 relation names (columns lhs, rel, rhs, weight) is imported under the
same ``dynamic_relations`` config by PBG's ``torchbiggraph_import_from_tsv`` (1.0.0 has no
weights: no ``--weight-col``, and its training reads no weight dataset) and by our
``pbg import --weight-col 3``. Checked:

- both imports hold the same (lhs, relation, rhs) multiset once ids are read back as names,
  the same relation names and count, and ours carries every edge's weight;
- our training runs on PBG's dynamic import;
- ``torchbiggraph_train`` runs on our weighted dynamic import (it skips the weights).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pbg_compat import PbgTools, write_pbg_config

from pbg_core.types import Bucket
from storage.config_loader import load_config
from storage.edges import EdgeStore
from storage.entities import EntityStore

pytestmark = pytest.mark.compat

PBG_CLI = str(Path(sys.executable).with_name("pbg"))
RELATIONS = [f"rel_{i}" for i in range(7)]


def write_weighted_tsv(path: Path, edges: int = 3000, nodes: int = 150, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lhs, rhs = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
    rel = rng.integers(0, len(RELATIONS), edges)
    weight = rng.integers(1, 40, edges) / 8  # exact in float32: both tools must store the same value
    path.write_text(
        "".join(f"u{a}\t{RELATIONS[r]}\tu{b}\t{w}\n" for a, r, b, w in zip(lhs, rel, rhs, weight, strict=True))
    )
    return path


def config_for(root: Path) -> dict[str, Any]:
    return {
        "entity_path": str(root / "data"),
        "edge_paths": [str(root / "data" / "edges")],
        "checkpoint_path": str(root / "ckpt"),
        "entities": {"user": {"num_partitions": 2}},
        "relations": [{"name": "all", "lhs": "user", "rhs": "user", "operator": "diagonal"}],
        "dynamic_relations": True,
        "global_emb": False,  # PBG forbids global embeddings with dynamic relations, and so do we
        "dimension": 8,
        "num_epochs": 1,
        "batch_size": 200,
        "num_batch_negs": 20,
        "num_uniform_negs": 20,
        "eval_fraction": 0.0,  # every edge is trained on: the count below is exact
        "workers": 1,
    }


def named_edges(root: Path) -> Counter[tuple[str, str, str, float | None]]:
    """The imported graph read back as (lhs name, relation name, rhs name, weight or None)."""
    entities = EntityStore(str(root / "data"))
    names = [entities.load_names("user", part) for part in (0, 1)]
    relations = entities.load_dynamic_relation_names()
    store = EdgeStore(str(root / "data" / "edges"))
    out: Counter[tuple[str, str, str, float | None]] = Counter()
    for lp in (0, 1):
        for rp in (0, 1):
            edges = store.load(Bucket(lp, rp))
            weights = [None] * len(edges) if edges.weight is None else edges.weight.tolist()
            for a, r, b, w in zip(
                edges.lhs.tensor.tolist(), edges.rel.tolist(), edges.rhs.tensor.tolist(), weights, strict=True
            ):
                out[(names[lp][a], relations[r], names[rp][b], w)] += 1
    return out


@pytest.fixture(scope="module")
def imports(pbg_tools: PbgTools, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(PBG's import root, our import root, the TSV)."""
    base = tmp_path_factory.mktemp("dynamic")
    tsv = write_weighted_tsv(base / "weighted.tsv")
    roots = []
    for side in ("pbg", "ours"):
        root = base / side
        root.mkdir()
        config = write_pbg_config(root / "config.py", config_for(root))
        columns = ["--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2"]
        if side == "pbg":
            pbg_tools.run("import_from_tsv", *columns, str(config), str(tsv), cwd=root)
        else:
            done = subprocess.run(
                [PBG_CLI, "import", str(config), str(tsv), *columns, "--weight-col", "3", "-p", "seed=0"],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        roots.append(root)
    return roots[0], roots[1], tsv


def test_both_importers_hold_the_same_dynamic_graph_and_ours_the_weights(imports: tuple[Path, Path, Path]) -> None:
    pbg_root, our_root, tsv = imports
    weighted: Counter[tuple[str, str, str, float | None]] = Counter()
    unweighted: Counter[tuple[str, str, str, float | None]] = Counter()
    for line in tsv.read_text().splitlines():
        a, r, b, w = line.split("\t")
        weighted[(a, r, b, float(w))] += 1
        unweighted[(a, r, b, None)] += 1
    assert named_edges(pbg_root) == unweighted
    assert named_edges(our_root) == weighted
    for root in (pbg_root, our_root):
        entities = EntityStore(str(root / "data"))
        assert entities.load_dynamic_relation_count() == len(RELATIONS)
        assert sorted(entities.load_dynamic_relation_names()) == RELATIONS


def test_we_train_on_pbg_dynamic_import(imports: tuple[Path, Path, Path], prefect_api: None) -> None:
    from flows.train import pbg

    pbg_root, _, _ = imports
    result = pbg(config=load_config(str(pbg_root / "config.py"), ["seed=0"]))
    assert result["version"] == 1
    (iteration,) = result["iterations"]
    assert sum(b["train"]["count"] for b in iteration["buckets"]) == 3000


def test_torchbiggraph_trains_on_our_weighted_dynamic_import(
    imports: tuple[Path, Path, Path], pbg_tools: PbgTools
) -> None:
    _, our_root, _ = imports
    pbg_tools.run("train", str(our_root / "config.py"), "-p", f"checkpoint_path={our_root / 'pbg_ckpt'}", cwd=our_root)
    assert (our_root / "pbg_ckpt" / "checkpoint_version.txt").read_text().strip() == "1"
