"""pbg_core.distributed.coordinator and .machine: a distributed pass driven by hand, in one process.

Two real machines (sessions with one HOGWILD worker each) and a coordinator share one
checkpoint on local disk; the test plays the cluster, deciding when each machine finishes, so
interleavings, a lost machine and a resumed pass are exact. The Dask side is tested in
tests/flows and tests/tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.distributed.coordinator import Coordinator
from pbg_core.distributed.machine import Machine
from pbg_core.session.build import build_session
from pbg_core.session.iterations import Iteration, build_iterations
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.progress import CheckpointProgress
from storage.run_stores import open_run_stores

# A relation operator with parameters: every bucket changes the shared parameters.
DIAGONAL = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal"}]


class Cluster:
    """A coordinator and named machines on one config (closed by the fixture)."""

    def __init__(self, raw: dict[str, Any], machines: list[str]) -> None:
        self.config = parse_config(raw)
        self.coordinator = Coordinator(self._session(resident=2), tree_init=True, evaluate=True)
        self.machines = {name: Machine(self._session(resident=2)) for name in machines}

    def _session(self, resident: int) -> Any:
        config = self.config.model_copy(update={"resident_partitions": resident})
        return build_session(config, open_run_stores(config, staged=False), read_ahead=False)

    def iterations(self) -> list[Iteration]:
        return build_iterations(self.config.num_epochs, self.config.edge_paths, 1)

    def commit(self, iteration: Iteration) -> None:
        session = self.coordinator.session
        session.write_checkpoint(iteration)
        session.switch_version(iteration)
        session.remove_old_version(iteration)

    def run_pass(self, iteration: Iteration) -> list[dict[str, Any]]:
        """Every machine takes a bucket when free; the first assigned finishes first."""
        coordinator, rows = self.coordinator, []
        coordinator.start_pass(iteration)
        while coordinator.remaining:
            for name in self.machines:
                if name not in coordinator.running:
                    coordinator.assign(name)
            name = next(iter(coordinator.running))
            outcome = self.machines[name].train(coordinator.running[name])
            rows.append(coordinator.complete(name, outcome))
        return rows

    def close(self) -> None:
        for machine in self.machines.values():
            machine.close()
        self.coordinator.session.close()


@pytest.fixture
def cluster(make_config: Any, graph_4x4: Any) -> Iterator[Cluster]:
    made = Cluster(make_config("ckpt", data=graph_4x4, num_epochs=2, relations=DIAGONAL), ["a", "b"])
    try:
        yield made
    finally:
        made.close()


def embeddings(config: ConfigSchema, version: int) -> dict[int, torch.Tensor]:
    store = CheckpointStore(config.checkpoint_path)
    return {part: store.load_embeddings("node", part, version)[0] for part in range(4)}


def test_two_machines_train_every_bucket_once_and_the_commit_is_an_ordinary_checkpoint(cluster: Cluster) -> None:
    first = cluster.iterations()[0]
    rows = cluster.run_pass(first)
    cluster.commit(first)
    assert sorted((r["lhs_partition"], r["rhs_partition"]) for r in rows) == [
        (l, r) for l in range(4) for r in range(4)
    ]
    assert sorted(r["index"] for r in rows) == list(range(16))
    assert {r["machine"] for r in rows} == {"a", "b"}
    store = CheckpointStore(cluster.config.checkpoint_path)
    assert store.read_version() == 1
    tables = embeddings(cluster.config, 1)
    assert all(t.shape[1] == 16 and torch.isfinite(t).all() for t in tables.values())
    state_dict, _ = store.load_model(1)
    assert state_dict is not None
    assert not (CheckpointProgress(store).read(1))  # cleared by the commit


def test_no_partition_is_held_by_two_machines_and_the_loss_falls(cluster: Cluster) -> None:
    coordinator = cluster.coordinator
    losses = []
    shared_after = []
    for iteration in cluster.iterations():
        coordinator.start_pass(iteration)
        while coordinator.remaining:
            for name in cluster.machines:
                if name not in coordinator.running:
                    coordinator.assign(name)
            held = [
                key
                for a in coordinator.running.values()
                for key in cluster.machines["a"].session.settings.bucket_partitions(a.bucket)
            ]
            assert len(held) == len(set(held))
            name = next(iter(coordinator.running))
            row = coordinator.complete(name, cluster.machines[name].train(coordinator.running[name]))
            losses.append(row["stats"]["metrics"]["loss"])
        cluster.commit(iteration)
        shared_after.append({k: v.clone() for k, v in coordinator.session.model_state.model.state_dict().items()})
    assert sum(losses[16:]) < sum(losses[:16])  # the second epoch learned from the first
    # Every pass changes the shared parameters (the relation operator), the second one too.
    assert shared_after[0] and any(not torch.equal(shared_after[0][k], shared_after[1][k]) for k in shared_after[0])


def test_a_machine_keeps_a_partition_it_saved_last_and_rereads_one_trained_elsewhere(cluster: Cluster) -> None:
    coordinator, a, b = cluster.coordinator, cluster.machines["a"], cluster.machines["b"]
    coordinator.start_pass(cluster.iterations()[0])
    first = coordinator.assign("a")
    assert first is not None
    coordinator.complete("a", a.train(first))
    held = dict(a.session.residency.resident)
    again = coordinator.assign("a")  # the cost rule: a bucket sharing a partition with (0, 0)
    assert again is not None and 0 in (again.bucket.lhs, again.bucket.rhs)
    coordinator.complete("a", a.train(again))
    assert a.session.residency.resident[("node", 0)] is held[("node", 0)]  # kept in its slot, not read again
    other = coordinator.assign("b")  # b trains a partition a holds
    assert other is not None
    shared = set(a.session.settings.bucket_partitions(again.bucket)) & set(
        b.session.settings.bucket_partitions(other.bucket)
    )
    stale = {key: a.stamps[key] for key in shared}
    coordinator.complete("b", b.train(other))
    assert shared  # b took the smallest bucket left, which shares partition 0 with a's
    nxt = coordinator.assign("a")
    assert nxt is not None
    a.train(nxt)  # drops what b trained since: kept only if reloaded (and saved) again
    for key in shared & set(a.session.residency.resident):
        assert a.stamps[key] != stale[key]


def test_a_lost_machine_s_bucket_is_trained_by_another_and_its_area_is_pruned(cluster: Cluster) -> None:
    coordinator, a, b = cluster.coordinator, cluster.machines["a"], cluster.machines["b"]
    iteration = cluster.iterations()[0]
    coordinator.start_pass(iteration)
    lost = coordinator.assign("a")
    assert lost is not None
    a.train(lost)  # trained and saved, but the machine dies before the coordinator hears of it
    assert coordinator.abandon("a") == lost.bucket
    rows = []
    while coordinator.remaining:
        assignment = coordinator.assign("b")
        assert assignment is not None
        rows.append(coordinator.complete("b", b.train(assignment)))
    assert sorted((r["lhs_partition"], r["rhs_partition"]) for r in rows) == [
        (l, r) for l in range(4) for r in range(4)
    ]
    progress_dir = CheckpointProgress(CheckpointStore(cluster.config.checkpoint_path))
    record = progress_dir.read(iteration.version)
    assert record is not None and record.done == 16
    cluster.commit(iteration)
    assert CheckpointStore(cluster.config.checkpoint_path).read_version() == 1


def test_a_new_coordinator_resumes_the_recorded_pass_after_its_done_buckets(
    cluster: Cluster, make_config: Any, graph_4x4: Any
) -> None:
    coordinator, a = cluster.coordinator, cluster.machines["a"]
    iteration = cluster.iterations()[0]
    coordinator.start_pass(iteration)
    done = []
    for _ in range(3):
        assignment = coordinator.assign("a")
        assert assignment is not None
        coordinator.complete("a", a.train(assignment))
        done.append(assignment.bucket)
    shared_before = {k: v.clone() for k, v in coordinator.session.model_state.model.state_dict().items()}
    cluster.close()
    resumed = Cluster(make_config("ckpt", data=graph_4x4, num_epochs=2, relations=DIAGONAL), ["c"])
    try:
        remaining = resumed.coordinator.start_pass(iteration)
        assert sorted(remaining) == sorted(set(Bucket(l, r) for l in range(4) for r in range(4)) - set(done))
        restored = resumed.coordinator.session.model_state.model.state_dict()
        assert all(torch.equal(restored[k], v) for k, v in shared_before.items())
        rows = resumed.run_pass(iteration)
        assert len(rows) == 13
        resumed.commit(iteration)
    finally:
        resumed.close()
