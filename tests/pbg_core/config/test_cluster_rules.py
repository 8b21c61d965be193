"""pbg_core.config.cluster_rules: what a distributed config must satisfy, through parse_config."""

from __future__ import annotations

import pytest
from _config_raw import minimal, problems_of

from pbg_core.config import parse_config
from pbg_core.config.cluster_rules import is_local_path

ONE_TYPE = [{"name": "follows", "lhs": "user", "rhs": "user"}]


def partitioned(users: int, items: int = 1, relations: list[dict[str, str]] | None = None, **fields: object) -> dict:
    entities = {"user": {"num_partitions": users}, "item": {"num_partitions": items}}
    return minimal(entities=entities, relations=relations or ONE_TYPE, **fields)


def test_one_machine_needs_nothing_of_this() -> None:
    assert parse_config(partitioned(1)).num_machines == 1


def test_a_cluster_for_one_machine_is_refused_not_ignored() -> None:
    assert problems_of(partitioned(4), ("dask_address=tcp://10.0.0.1:8786",)) == [
        "dask_address 'tcp://10.0.0.1:8786' is set but num_machines is 1, which trains on this machine; set "
        "num_machines to the number of Dask workers to train on (2 or more), or drop dask_address"
    ]


def test_a_type_on_both_sides_trains_half_its_partitions_at_once() -> None:
    assert parse_config(partitioned(4, num_machines=2)).num_machines == 2
    assert problems_of(partitioned(4, num_machines=3)) == [
        "num_machines: 3 is more than the 2 bucket(s) that can train at once with these partitions (user: 4); "
        "set num_partitions >= 6, or num_machines <= 2"
    ]


@pytest.mark.parametrize(
    ("users", "items", "at_once"),
    [(4, 1, 4), (1, 3, 3), (4, 2, 2)],
)
def test_different_types_on_the_two_sides_lock_one_partition_each(users: int, items: int, at_once: int) -> None:
    relations = [{"name": "buys", "lhs": "user", "rhs": "item"}]
    assert parse_config(partitioned(users, items, relations, num_machines=at_once)).num_machines == at_once
    problems = problems_of(partitioned(users, items, relations, num_machines=at_once + 1))
    assert len(problems) == 1 and f"more than the {at_once} bucket(s)" in problems[0]


def test_local_paths_with_a_remote_cluster_are_refused_unless_shared() -> None:
    raw = partitioned(4, num_machines=2, dask_address="tcp://10.0.0.1:8786", edge_paths=["s3://b/edges"])
    assert problems_of(raw) == [
        "dask_address tcp://10.0.0.1:8786: the workers cannot read local paths (entity_path 'data/ents', "
        "checkpoint_path 'model/ckpt') unless every worker mounts them at the same place; use s3:// URLs, or set "
        "shared_paths: true for a shared filesystem (NFS, Lustre, ...)"
    ]
    assert parse_config({**raw, "shared_paths": True}).shared_paths
    remote = {**raw, "entity_path": "s3://b/ents", "checkpoint_path": "s3://b/ckpt"}
    assert parse_config(remote).dask_address == "tcp://10.0.0.1:8786"


def test_a_local_cluster_reads_local_paths() -> None:
    assert parse_config(partitioned(4, num_machines=2)).entity_path == "data/ents"


@pytest.mark.parametrize(
    ("path", "local"),
    [("data/x", True), ("/abs/x", True), ("file:///abs/x", True), ("s3://b/x", False), ("gs://b/x", False)],
)
def test_is_local_path(path: str, local: bool) -> None:
    assert is_local_path(path) is local


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("http://h:8786", "dask_address 'http://h:8786': scheme http:// is not allowed; allowed: tcp:// or tls://"),
        ("h:8786", "dask_address 'h:8786' has no scheme; it must start with tcp:// or tls://"),
        ("inproc://10.0.0.1/123/1", "dask_address 'inproc://10.0.0.1/123/1': scheme inproc:// is not allowed"),
        ("ucx://h:8786", "dask_address 'ucx://h:8786': scheme ucx:// is not allowed; allowed: tcp:// or tls://"),
        ("tcp://h", "dask_address 'tcp://h': expected tcp://host:port"),
        ("tls://h:port", "dask_address 'tls://h:port': expected tls://host:port"),
    ],
)
def test_a_dask_address_is_tcp_or_tls_host_and_port(address: str, problem: str) -> None:
    remote = {"entity_path": "s3://b/ents", "checkpoint_path": "s3://b/ckpt", "edge_paths": ["s3://b/edges"]}
    problems = problems_of(partitioned(4, num_machines=2, **remote), (f"dask_address={address}",))
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_dask_address_of_another_scheme_is_the_one_problem_of_the_address() -> None:
    # Local paths and num_machines 1 would otherwise add lines about a cluster that cannot exist.
    assert len(problems_of(partitioned(4), ("dask_address=http://h:8786",))) == 1
    assert parse_config(partitioned(4, num_machines=2, dask_address="tls://h:8786", shared_paths=True)).dask_address
