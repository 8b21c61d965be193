"""PBG file compatibility both ways, checked against PyPI torchbiggraph 1.0.0 itself.

The planted graph (tests/conftest.py: 200 nodes, 1,600 train and 400 test edges) in 2
partitions (a 2x2 bucket grid), relation ``linked`` with a ``diagonal`` operator and global
embeddings, so model files carry real parameters. PBG runs as console scripts in
subprocesses; our side runs the ``pbg`` / ``pbg-eval`` flows in process (what ``pbg
train`` / ``pbg eval`` call) and ``pbg import`` / ``pbg export`` as the CLI.

Evaluations use ``all_negs`` (every entity of the partition is a negative), so ranks are
deterministic on both sides and must agree exactly (up to PBG's ``%.6g`` printing). The one
metric that cannot agree exactly is ``auc``: PBG estimates it from ``batch_size`` random
(positive, negative) pairs per batch with an unseeded ``torch.randint``; see AUC_TOLERANCE.

Copying a checkpoint directory first wherever a test trains on it keeps the fixtures
read-only for the other tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from pbg_compat import VENV_ENV, PbgTools, parse_pbg_stats, read_tsv_rows, write_pbg_config

from pbg_core.training.optimizers import state_from_bytes
from storage.checkpoints import CheckpointStore
from storage.config_loader import load_config

pytestmark = pytest.mark.compat

PBG_CLI = str(Path(sys.executable).with_name("pbg"))
RANK_METRICS = ("pos_rank", "mrr", "r1", "r10", "r50")
PBG_EPOCHS = 2
# AUC: PBG samples batch_size (pos, neg) pairs per batch and side with an unseeded RNG, ~800
# Bernoulli draws over the 400 test edges: standard error ~0.013 at AUC ~0.93 per tool, so
# the difference of two estimates stays within 0.08 (> 4 sigma); a broken load is far off.
AUC_TOLERANCE = 0.08
# PBG prints metrics with "%.6g".
PRINT_REL = 1e-5


def base_config(entity_path: Path, edge_paths: list[Path], checkpoint: Path) -> dict[str, Any]:
    """The shared PBG config (only keys PBG 1.0.0 knows; our ``seed`` goes through -p)."""
    return {
        "entity_path": str(entity_path),
        "edge_paths": [str(p) for p in edge_paths],
        "checkpoint_path": str(checkpoint),
        "entities": {"node": {"num_partitions": 2}},
        "relations": [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal", "all_negs": True}],
        "dimension": 16,
        "global_emb": True,
        "comparator": "dot",
        "loss_fn": "softmax",
        "lr": 0.1,
        "num_epochs": PBG_EPOCHS,
        "batch_size": 100,
        "num_batch_negs": 20,
        "num_uniform_negs": 0,
        "eval_fraction": 0.0,
        "workers": 1,
    }


class Workspace:
    """One module-wide directory: config file, PBG-imported data, checkpoints."""

    def __init__(self, root: Path, graph_root: Path, our_entity_path: Path) -> None:
        self.root = root
        self.train_tsv = graph_root / "train.tsv"
        self.test_tsv = graph_root / "test.tsv"
        self.pbg_data = root / "pbg_data"
        # The planted graph imported by *our* importer (tests/conftest.py graph_2x2).
        self.our_data = our_entity_path
        config = base_config(self.pbg_data, [self.pbg_data / "train", self.pbg_data / "test"], root / "unused")
        self.config = write_pbg_config(root / "compat_config.py", config)

    def overrides(self, data: Path, split: str, checkpoint: Path, **extra: Any) -> list[str]:
        """``-p`` overrides selecting entity dir, one edge path and a checkpoint (same on both tools)."""
        pairs = {"entity_path": data, "edge_paths": data / split, "checkpoint_path": checkpoint, **extra}
        return [f"{key}={value}" for key, value in pairs.items()]

    def pbg(
        self, tools: PbgTools, tool: str, overrides: list[str], *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a PBG tool on the config with ``overrides``."""
        return tools.run(
            tool, str(self.config), *[a for o in overrides for a in ("-p", o)], *args, cwd=self.root, check=check
        )

    def our_train(self, overrides: list[str]) -> dict[str, Any]:
        """Our ``pbg`` flow (as ``pbg train CONFIG -p ... -p seed=0``)."""
        from flows.train import pbg

        return pbg(config=load_config(str(self.config), [*overrides, "seed=0"]))

    def our_eval(self, overrides: list[str]) -> dict[str, float]:
        """Our ``pbg-eval`` flow (as ``pbg eval CONFIG -p ... -p seed=0``)."""
        from flows.evaluate import pbg_eval

        return pbg_eval(config=load_config(str(self.config), [*overrides, "seed=0"]))

    def our_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The ``pbg`` console script (import/export: no flow, no Prefect server)."""
        done = subprocess.run([PBG_CLI, *args], cwd=self.root, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"pbg {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done


@pytest.fixture(scope="module")
def ws(pbg_tools: PbgTools, prefect_api: None, graph_2x2: Any, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The workspace, with the planted graph imported by PBG's ``torchbiggraph_import_from_tsv``."""
    ws = Workspace(tmp_path_factory.mktemp("compat"), graph_2x2.root, Path(graph_2x2.entity_path))
    pbg_tools.run(
        "import_from_tsv",
        "--lhs-col",
        "0",
        "--rel-col",
        "1",
        "--rhs-col",
        "2",
        str(ws.config),
        str(ws.train_tsv),
        str(ws.test_tsv),
        cwd=ws.root,
    )
    return ws


@pytest.fixture(scope="module")
def pbg_checkpoint(ws: Workspace, pbg_tools: PbgTools) -> Path:
    """A checkpoint written by ``torchbiggraph_train`` (PBG_EPOCHS epochs on the PBG import)."""
    checkpoint = ws.root / "pbg_ckpt"
    ws.pbg(pbg_tools, "train", ws.overrides(ws.pbg_data, "train", checkpoint))
    assert CheckpointStore(str(checkpoint)).read_version() == PBG_EPOCHS
    return checkpoint


@pytest.fixture(scope="module")
def ours_on_pbg_import(ws: Workspace) -> tuple[Path, dict[str, Any]]:
    """Our training on PBG's edge and entity files: (checkpoint, flow result)."""
    checkpoint = ws.root / "ours_on_pbg_import"
    return checkpoint, ws.our_train(ws.overrides(ws.pbg_data, "train", checkpoint))


@pytest.fixture(scope="module")
def ours_on_our_import(ws: Workspace) -> Path:
    """Our training on our own import (which writes dynamic_rel_names.json, needed by PBG's export)."""
    checkpoint = ws.root / "ours_on_our_import"
    ws.our_train(ws.overrides(ws.our_data, "train_partitioned", checkpoint))
    return checkpoint


def assert_same_metrics(ours: dict[str, float], pbg: dict[str, float]) -> None:
    """Rank metrics equal (to PBG's printed precision), same edge count, AUC within its sampling noise."""
    assert int(ours["count"]) == int(pbg["count"]), (ours, pbg)
    for name in RANK_METRICS:
        assert ours[name] == pytest.approx(pbg[name], rel=PRINT_REL, abs=1e-9), (name, ours, pbg)
    assert abs(ours["auc"] - pbg["auc"]) <= AUC_TOLERANCE, (ours, pbg)


def embeddings_of(checkpoint: Path, version: int) -> list[tuple[torch.Tensor, dict[str, Any]]]:
    """(embeddings, optimizer state dict) of both partitions of ``node`` at ``version``."""
    store = CheckpointStore(str(checkpoint))
    out = []
    for part in (0, 1):
        embeddings, optim = store.load_embeddings("node", part, version)
        assert optim is not None, f"{checkpoint} v{version} partition {part} has no optimizer state"
        out.append((embeddings, state_from_bytes(optim)))
    return out


# -- 1. PBG's importer -> our training ---------------------------------------------------------


def test_pbg_import_trains_and_evaluates_with_us(
    ws: Workspace, ours_on_pbg_import: tuple[Path, dict[str, Any]]
) -> None:
    checkpoint, result = ours_on_pbg_import
    assert result["version"] == PBG_EPOCHS
    for iteration in result["iterations"]:
        buckets = {tuple(b["bucket"]) for b in iteration["buckets"]}
        assert buckets == {(0, 0), (0, 1), (1, 0), (1, 1)}
        # Every edge PBG imported was trained on, once per epoch.
        assert sum(b["train"]["count"] for b in iteration["buckets"]) == 1600
    metrics = ws.our_eval(ws.overrides(ws.pbg_data, "test", checkpoint))
    assert metrics["count"] == 400
    # Random ranking among ~100 entities per partition gives MRR ~0.05; the clusters are learnt.
    assert metrics["mrr"] > 0.15, metrics


# -- 2. PBG's checkpoint -> us -----------------------------------------------------------------


def test_pbg_checkpoint_as_init_path(ws: Workspace, pbg_checkpoint: Path) -> None:
    """lr=0: the run cannot move the embeddings, so what it writes is exactly what it started from."""
    checkpoint = ws.root / "init_from_pbg"
    overrides = ws.overrides(ws.pbg_data, "train", checkpoint, init_path=pbg_checkpoint, num_epochs=1, lr=0)
    assert ws.our_train(overrides)["version"] == 1
    for (ours, _), (theirs, _) in zip(
        embeddings_of(checkpoint, 1), embeddings_of(pbg_checkpoint, PBG_EPOCHS), strict=True
    ):
        assert torch.equal(ours, theirs)
    our_model, _ = CheckpointStore(str(checkpoint)).load_model(1)
    pbg_model, _ = CheckpointStore(str(pbg_checkpoint)).load_model(PBG_EPOCHS)
    assert set(our_model) == set(pbg_model) == {"rhs_operators.0.diagonal", "global_embs.emb_node"}
    for key, value in pbg_model.items():
        assert torch.equal(our_model[key], value), key


def test_resume_from_pbg_checkpoint(ws: Workspace, pbg_checkpoint: Path) -> None:
    """Our run in PBG's checkpoint dir continues from PBG's version (epochs 0..1 done, epoch 2 left)."""
    checkpoint = ws.root / "resume_pbg"
    shutil.copytree(pbg_checkpoint, checkpoint)
    overrides = ws.overrides(ws.pbg_data, "train", checkpoint, num_epochs=PBG_EPOCHS + 1, lr=0)
    result = ws.our_train(overrides)
    assert result["version"] == PBG_EPOCHS + 1
    assert [it["version"] for it in result["iterations"]] == [PBG_EPOCHS + 1]  # one pass only
    assert {row["epoch_idx"] for row in result["iterations"][0]["rows"]} == {PBG_EPOCHS}
    store = CheckpointStore(str(checkpoint))
    assert store.read_version() == PBG_EPOCHS + 1
    resumed, started = embeddings_of(checkpoint, PBG_EPOCHS + 1), embeddings_of(pbg_checkpoint, PBG_EPOCHS)
    for (ours, our_optim), (theirs, pbg_optim) in zip(resumed, started, strict=True):
        assert torch.equal(ours, theirs)  # lr=0: started from PBG's embeddings
        # Adagrad sums only grow: PBG's accumulators were loaded and added to, not reset.
        our_sum, pbg_sum = our_optim["state"][0]["sum"], pbg_optim["state"][0]["sum"]
        assert bool((our_sum >= pbg_sum).all()) and bool((our_sum > pbg_sum).any())
    _, our_model_optim = store.load_model(PBG_EPOCHS + 1)
    _, pbg_model_optim = CheckpointStore(str(pbg_checkpoint)).load_model(PBG_EPOCHS)
    ours_state, pbg_state = state_from_bytes(our_model_optim)["state"], state_from_bytes(pbg_model_optim)["state"]
    assert len(ours_state) == len(pbg_state) == 2
    for i in pbg_state:
        assert bool((ours_state[i]["sum"] >= pbg_state[i]["sum"]).all())


def test_our_eval_of_pbg_checkpoint_matches_torchbiggraph_eval(
    ws: Workspace, pbg_tools: PbgTools, pbg_checkpoint: Path
) -> None:
    overrides = ws.overrides(ws.pbg_data, "test", pbg_checkpoint)
    pbg_metrics = parse_pbg_stats(ws.pbg(pbg_tools, "eval", overrides).stdout)
    assert_same_metrics(ws.our_eval(overrides), pbg_metrics)


# -- 3. our checkpoint -> PBG ------------------------------------------------------------------


def test_torchbiggraph_eval_of_our_checkpoint_matches_ours(
    ws: Workspace, pbg_tools: PbgTools, ours_on_pbg_import: tuple[Path, dict[str, Any]], ours_on_our_import: Path
) -> None:
    cases = [(ws.pbg_data, "test", ours_on_pbg_import[0]), (ws.our_data, "test_partitioned", ours_on_our_import)]
    for data, split, checkpoint in cases:
        overrides = ws.overrides(data, split, checkpoint)
        pbg_metrics = parse_pbg_stats(ws.pbg(pbg_tools, "eval", overrides).stdout)
        assert_same_metrics(ws.our_eval(overrides), pbg_metrics)


def test_torchbiggraph_export_of_our_checkpoint_matches_pbg_export(
    ws: Workspace, pbg_tools: PbgTools, ours_on_our_import: Path
) -> None:
    overrides = ws.overrides(ws.our_data, "train_partitioned", ours_on_our_import)
    theirs = (ws.root / "pbg_entities.tsv", ws.root / "pbg_relations.tsv")
    ours = (ws.root / "our_entities.tsv", ws.root / "our_relations.tsv")
    ws.pbg(
        pbg_tools,
        "export_to_tsv",
        overrides,
        "--entities-output",
        str(theirs[0]),
        "--relation-types-output",
        str(theirs[1]),
    )
    ws.our_cli(
        "export",
        str(ws.config),
        *[a for o in overrides for a in ("-p", o)],
        "--entities-output",
        str(ours[0]),
        "--relation-types-output",
        str(ours[1]),
    )
    pbg_entities, our_entities = read_tsv_rows(theirs[0], 1), read_tsv_rows(ours[0], 1)
    assert len(pbg_entities) == 200 and list(our_entities) == list(pbg_entities)
    for name, values in pbg_entities.items():
        assert len(values) == 16
        assert our_entities[name] == pytest.approx(values, abs=1e-9), name
    pbg_relations, our_relations = read_tsv_rows(theirs[1], 5), read_tsv_rows(ours[1], 5)
    assert list(pbg_relations) == [("linked", "rhs", "diagonal", "diagonal", "16")]
    assert list(our_relations) == list(pbg_relations)
    for key, values in pbg_relations.items():
        assert our_relations[key] == pytest.approx(values, abs=1e-9), key


def test_torchbiggraph_train_resumes_from_our_checkpoint(
    ws: Workspace, pbg_tools: PbgTools, ours_on_our_import: Path
) -> None:
    checkpoint = ws.root / "pbg_resumes_ours"
    shutil.copytree(ours_on_our_import, checkpoint)
    overrides = ws.overrides(ws.our_data, "train_partitioned", checkpoint, num_epochs=PBG_EPOCHS + 1)
    done = ws.pbg(pbg_tools, "train", overrides, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert CheckpointStore(str(checkpoint)).read_version() == PBG_EPOCHS + 1


# -- the default run without PBG -----------------------------------------------------------------


def test_skips_cleanly_without_pbg_venv(tmp_path: Path) -> None:
    """With the venv path pointing at a missing dir, every PBG test skips (a fresh clone's run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env[VENV_ENV] = str(tmp_path / "missing-venv")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            __file__,
            "-k",
            "not test_skips_cleanly_without_pbg_venv",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "7 skipped" in done.stdout and "passed" not in done.stdout and "failed" not in done.stdout, done.stdout
    assert "torchbiggraph==1.0.0 not found" in done.stdout
