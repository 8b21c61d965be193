"""The same checkpoint gets the same metrics from ``pbg eval`` and ``torchbiggraph_eval``, for every
operator and comparator, with and without ``max_norm``.

One tiny graph (60 nodes, 1 partition) has six relations, one per operator (none, translation,
diagonal, linear, affine, complex_diagonal), and a test edge path per relation, so PBG prints one
``Stats for edge path i / 6`` line per operator. Per comparator (dot, cos, l2, squared_l2) our
``pbg`` flow trains one checkpoint for one epoch; then both tools evaluate its six test paths with
``all_negs`` (ranks do not depend on how edges are batched), once as trained and once with
``max_norm`` at the median row norm, so about half the rows (candidates included) are renormed.

Per edge path ours is what the ``pbg-eval`` flow runs (its task bodies, as the flow only returns
the mean over all paths); the flow itself is checked on all six paths against PBG's overall line.
Rank metrics (``pos_rank``, ``mrr``, ``r1``, ``r10``, ``r50``) and the count must agree to PBG's
printed precision; PBG's ``auc`` is drawn with an unseeded ``torch.randint`` (40 pairs per batch
and side here), so it is only held within its sampling noise.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pbg_compat import PbgTools, parse_pbg_stats, write_pbg_config

from storage.checkpoints import CheckpointStore
from storage.config_loader import load_config
from tasks.runs import open_run

pytestmark = pytest.mark.compat

PBG_CLI = str(Path(sys.executable).with_name("pbg"))
OPERATORS = ("none", "translation", "diagonal", "linear", "affine", "complex_diagonal")
COMPARATORS = ("dot", "cos", "l2", "squared_l2")
RANK_METRICS = ("pos_rank", "mrr", "r1", "r10", "r50")
NODES, TEST_EDGES = 60, 40
PRINT_REL = 1e-5  # PBG prints "%.6g"
# 40 edges, 2 x 40 Bernoulli draws per tool: standard error of a difference up to ~0.08.
AUC_TOLERANCE = 0.3
_PATH_STATS = re.compile(r"Stats for edge path (\d+) / \d+: (.*)$", re.MULTILINE)
_METRIC = re.compile(r"(\w+):\s+([-+0-9.eE]+|nan|inf)")


def write_graph(root: Path) -> list[Path]:
    """train.tsv (every relation) and one test TSV per operator's relation."""
    rng = random.Random(7)

    def triples(rel: str, count: int) -> str:
        return "".join(f"n{rng.randrange(NODES)}\t{rel}\tn{rng.randrange(NODES)}\n" for _ in range(count))

    files = [root / "train.tsv"]
    files[0].write_text("".join(triples(f"r_{op}", 150) for op in OPERATORS))
    for op in OPERATORS:
        files.append(root / f"test_{op}.tsv")
        files[-1].write_text(triples(f"r_{op}", TEST_EDGES))
    return files


def config_dict(root: Path, comparator: str) -> dict[str, Any]:
    data = root / "data"
    return {
        "entity_path": str(data),
        "edge_paths": [str(data / "train"), *(str(data / f"test_{op}") for op in OPERATORS)],
        "checkpoint_path": str(root / f"ckpt_{comparator}"),
        "entities": {"node": {"num_partitions": 1}},
        "relations": [
            {"name": f"r_{op}", "lhs": "node", "rhs": "node", "operator": op, "all_negs": True} for op in OPERATORS
        ],
        "dimension": 8,
        "global_emb": True,
        "comparator": comparator,
        "loss_fn": "softmax",
        "lr": 0.1,
        "num_epochs": 1,
        "batch_size": 50,
        "num_batch_negs": 10,
        "num_uniform_negs": 0,
        "eval_fraction": 0.0,
        "workers": 1,
    }


def parse_edge_path_stats(output: str) -> dict[int, dict[str, float]]:
    """PBG's per-edge-path means: {edge path index (0-based): metrics}."""
    found = {int(i) - 1: {k: float(v) for k, v in _METRIC.findall(line)} for i, line in _PATH_STATS.findall(output)}
    assert found, f"no 'Stats for edge path' line in PBG's output:\n{output[-3000:]}"
    return found


@pytest.fixture(scope="module")
def workspace(pbg_tools: PbgTools, prefect_api: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The graph imported by ``pbg import`` (one config per comparator, same data)."""
    root = tmp_path_factory.mktemp("eval_matrix")
    files = write_graph(root)
    config = write_pbg_config(root / "matrix_dot.py", config_dict(root, "dot"))
    done = subprocess.run(
        [
            PBG_CLI,
            "import",
            str(config),
            *map(str, files),
            "--lhs-col",
            "0",
            "--rel-col",
            "1",
            "--rhs-col",
            "2",
            "-p",
            "seed=0",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def median_row_norm(checkpoint: str) -> float:
    embeddings, _ = CheckpointStore(checkpoint).load_embeddings("node", 0, 1)
    return float(embeddings.norm(dim=1).median())


def our_eval_per_path(config_file: Path, edge_paths: list[str], extra: list[str]) -> list[dict[str, float]]:
    """Per edge path, what ``pbg eval`` computes: the ``pbg-eval`` flow's three task bodies (the
    flow itself only returns the mean over all paths)."""
    from tasks.evaluate import evaluate_edge_path, open_eval_session
    from tasks.sessions import close_training_session

    config = load_config(str(config_file), [f"edge_paths={','.join(edge_paths)}", *extra])
    handle = open_eval_session.fn(open_run(config))
    try:
        parts = [evaluate_edge_path.fn(handle, path, None) for path in edge_paths]
    finally:
        close_training_session.fn(handle)
    return [{"count": p["count"], **{k: v / p["count"] for k, v in p["sums"].items()}} for p in parts]


def assert_same(ours: dict[str, float], theirs: dict[str, float], label: Any) -> None:
    assert int(ours["count"]) == int(theirs["count"]), label
    for name in RANK_METRICS:
        assert ours[name] == pytest.approx(theirs[name], rel=PRINT_REL, abs=1e-9), (name, label, ours, theirs)
    assert abs(ours["auc"] - theirs["auc"]) <= AUC_TOLERANCE, (label, ours, theirs)


@pytest.mark.parametrize("comparator", COMPARATORS)
def test_pbg_eval_and_torchbiggraph_eval_agree_per_operator(
    comparator: str, workspace: Path, pbg_tools: PbgTools
) -> None:
    from flows.evaluate import pbg_eval
    from flows.train import pbg

    cfg = config_dict(workspace, comparator)
    config_file = write_pbg_config(workspace / f"matrix_{comparator}.py", cfg)
    assert pbg(config=load_config(str(config_file), [f"edge_paths={cfg['edge_paths'][0]}", "seed=0"]))["version"] == 1
    test_paths = cfg["edge_paths"][1:]
    for extra in ([], [f"max_norm={median_row_norm(cfg['checkpoint_path'])}"]):
        overrides = [f"edge_paths={','.join(test_paths)}", *extra]
        done = pbg_tools.run("eval", str(config_file), *[a for o in overrides for a in ("-p", o)], cwd=workspace)
        output = done.stdout + done.stderr
        theirs = parse_edge_path_stats(output)
        for index, ours in enumerate(our_eval_per_path(config_file, test_paths, [*extra, "seed=0"])):
            assert ours["count"] == TEST_EDGES
            assert_same(ours, theirs[index], (comparator, OPERATORS[index], extra))
        # The flow itself, over all six paths, against PBG's overall "Stats:" line.
        assert_same(
            pbg_eval(config=load_config(str(config_file), [*overrides, "seed=0"])),
            parse_pbg_stats(output),
            (comparator, "all", extra),
        )
