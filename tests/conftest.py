"""Shared fixtures of the orchestration tests: a planted-structure graph and config factories.

The graph: ``NUM_ENTITIES`` nodes in ``NUM_CLUSTERS`` equal clusters; every edge joins two
nodes of the same cluster (relation ``linked``). A model that learns the clusters ranks a
true neighbour among the ~``CLUSTER_SIZE`` members of its cluster, far above the random
baseline over all nodes, so MRR measurably rises with training.

Edge data is imported once per session (seeded) with :func:`storage.importing.importer.import_edges`,
in an unpartitioned and a 2-partition flavour; every test gets its own checkpoint dir.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from s3_proxy import s3_proxy  # noqa: F401  (fault-injecting proxy in front of s3_server)
from s3_server import s3_bucket, s3_server, store_root  # noqa: F401  (fixtures for every test)

from pbg_core.config import parse_config
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions

# The temporary API servers of prefect_test_harness inherit this environment and print to the
# test's output: without it their telemetry service fails every session ("database is locked"
# on the new database, "Failed to send telemetry" without network). `pbg` sets it the same way.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (long end-to-end checks) run only with ``PBG_SLOW_TESTS=1``: ``make test``
    stays under 15 minutes, ``make test-long`` (CI runs both) runs them with ``-m slow``."""
    if os.environ.get("PBG_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run by `make test-long` (PBG_SLOW_TESTS=1)")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (``make test`` runs ``-n 2 --dist loadfile``), with tests/deployments/ as one file.

    Each test file goes whole to one worker, so its module-scoped fixtures (a trained model, a Prefect
    server) are built once, not once per worker; the files of tests/deployments/ go together to one
    worker: they share one local Prefect stack and its deployed runs (session fixtures of
    tests/deployments/conftest.py), which each worker would otherwise bring up again. (Not
    ``--dist loadgroup``: with pytest 9.2 its ``xdist_group`` marks are silently ignored.)
    Other ``--dist`` modes keep xdist's own scheduler.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class DeploymentsAsOneFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/deployments/"):
                return "tests/deployments/"
            return super()._split_scope(nodeid)

    return DeploymentsAsOneFile(config, log)


NUM_ENTITIES = 200
NUM_CLUSTERS = 10
CLUSTER_SIZE = NUM_ENTITIES // NUM_CLUSTERS
TRAIN_EDGES_PER_NODE = 8
TEST_EDGES_PER_NODE = 2
GRAPH_SEED = 1234


def planted_edges(rng: random.Random, edges_per_node: int) -> list[tuple[str, str, str]]:
    """(lhs, rel, rhs) triples: every node links to random members of its own cluster."""
    triples = []
    for node in range(NUM_ENTITIES):
        cluster = node // CLUSTER_SIZE
        members = [m for m in range(cluster * CLUSTER_SIZE, (cluster + 1) * CLUSTER_SIZE) if m != node]
        for other in rng.sample(members, edges_per_node):
            triples.append((f"n{node}", "linked", f"n{other}"))
    return triples


def write_tsv(path: Path, triples: list[tuple[str, str, str]]) -> Path:
    """One ``lhs<TAB>rel<TAB>rhs`` line per triple."""
    path.write_text("".join(f"{lhs}\t{rel}\t{rhs}\n" for lhs, rel, rhs in triples))
    return path


@dataclass(frozen=True)
class GraphData:
    """Imported edge data of the planted graph (entity dir, train and test edge paths)."""

    root: Path
    entity_path: str
    train_path: str
    test_path: str
    num_partitions: int
    num_train_edges: int
    num_test_edges: int


def base_config(data: GraphData, checkpoint_path: str | Path, **overrides: Any) -> dict[str, Any]:
    """A small, fast, seeded config dict (PBG schema) training ``data``'s train path."""
    config: dict[str, Any] = {
        "entity_path": data.entity_path,
        "edge_paths": [data.train_path],
        "checkpoint_path": str(checkpoint_path),
        "entities": {"node": {"num_partitions": data.num_partitions}},
        "relations": [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": 16,
        "comparator": "dot",
        "loss_fn": "softmax",
        "lr": 0.1,
        "num_epochs": 3,
        "batch_size": 100,
        "num_batch_negs": 20,
        "num_uniform_negs": 20,
        "eval_fraction": 0.1,
        "eval_num_batch_negs": 50,
        "eval_num_uniform_negs": 50,
        "workers": 1,
        "hogwild_delay": 0.0,
        "seed": 0,
    }
    config.update(overrides)
    return config


def _import_graph(root: Path, num_partitions: int) -> GraphData:
    rng = random.Random(GRAPH_SEED)
    train = planted_edges(rng, TRAIN_EDGES_PER_NODE)
    test = planted_edges(rng, TEST_EDGES_PER_NODE)
    train_tsv = write_tsv(root / "train.tsv", train)
    test_tsv = write_tsv(root / "test.tsv", test)
    data = GraphData(
        root=root,
        entity_path=str(root / "data"),
        train_path=str(root / "data" / "train_partitioned"),
        test_path=str(root / "data" / "test_partitioned"),
        num_partitions=num_partitions,
        num_train_edges=len(train),
        num_test_edges=len(test),
    )
    raw = base_config(data, root / "unused-checkpoint", edge_paths=[data.train_path, data.test_path])
    import_edges(
        parse_config(raw), [str(train_tsv), str(test_tsv)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0
    )
    return data


@pytest.fixture(scope="session")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphData:
    """The planted graph imported unpartitioned (1 partition, one bucket)."""
    return _import_graph(tmp_path_factory.mktemp("graph1"), num_partitions=1)


@pytest.fixture(scope="session")
def graph_2x2(tmp_path_factory: pytest.TempPathFactory) -> GraphData:
    """The planted graph imported with 2 partitions (a 2x2 bucket grid)."""
    return _import_graph(tmp_path_factory.mktemp("graph2"), num_partitions=2)


@pytest.fixture(scope="session")
def graph_4x4(tmp_path_factory: pytest.TempPathFactory) -> GraphData:
    """The planted graph imported with 4 partitions (a 4x4 bucket grid)."""
    return _import_graph(tmp_path_factory.mktemp("graph4"), num_partitions=4)


ConfigFactory = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def config_for() -> Callable[..., dict[str, Any]]:
    """:func:`base_config` for session- and module-scoped fixtures: ``config_for(data, ckpt, **overrides)``."""
    return base_config


@pytest.fixture
def make_config(graph: GraphData, tmp_path: Path) -> ConfigFactory:
    """``make_config(name="ckpt", data=graph, **overrides)``: config dict with its own checkpoint dir."""

    def factory(name: str = "ckpt", data: GraphData | None = None, **overrides: Any) -> dict[str, Any]:
        return base_config(data or graph, tmp_path / name, **overrides)

    return factory


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[dict[str, Any], str], Path]:
    """``write_config(config_dict, name)``: the dict as a JSON config file in tmp_path."""

    def writer(config: dict[str, Any], name: str = "config.json") -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(config, indent=2))
        return path

    return writer


def read_h5_datasets(path: Path) -> dict[str, Any]:
    """Every dataset of an HDF5 file by name (numpy arrays; opaque bytes as numpy void)."""
    import h5py
    import numpy as np

    out: dict[str, Any] = {}

    def collect(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            out[name] = np.array(obj[()])

    with h5py.File(path, "r") as hf:
        hf.visititems(collect)
    return out


@pytest.fixture(scope="session")
def h5_datasets() -> Callable[[Path], dict[str, Any]]:
    """:func:`read_h5_datasets` as a fixture (test modules cannot import conftest)."""
    return read_h5_datasets


def train_buckets_of(handle: str, iteration: Any) -> list[Any]:
    """Run every bucket step of ``iteration`` through the task bodies (``.fn()``, no Prefect run)."""
    from tasks.buckets import (
        evaluate_bucket,
        finish_bucket,
        load_edges,
        schedule_buckets,
        swap_partitions,
        train_bucket,
    )

    buckets = schedule_buckets.fn(handle, iteration)
    for bucket in buckets:
        swap_partitions.fn(handle, bucket)
        load_edges.fn(handle, bucket)
        evaluate_bucket.fn(handle, "before")
        train_bucket.fn(handle)
        evaluate_bucket.fn(handle, "after")
        finish_bucket.fn(handle)
    return buckets


@pytest.fixture(scope="session")
def train_buckets() -> Callable[[str, Any], list[Any]]:
    """:func:`train_buckets_of` as a fixture: ``train_buckets(handle, iteration) -> buckets``."""
    return train_buckets_of


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``small_disk(size, inodes=None)``: a real filesystem of ``size`` bytes (a tmpfs mounted under
    ``tmp_path``), holding at most ``inodes`` files and directories (its root included) when given.

    Mounting needs root (CAP_SYS_ADMIN): the test is skipped where it is not permitted. Every
    mount is unmounted at the end of the test.
    """
    mounted: list[Path] = []

    def mount(size: int, inodes: int | None = None) -> Path:
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a small tmpfs needs root and mount(8)")
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes is not None else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)
