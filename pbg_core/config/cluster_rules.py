"""The config rules of a distributed run (``num_machines > 1``), on plain values.

- Partitioned entity types are required (PBG: "cannot run distributed training with a single
  partition"): each machine locks the partitions of the bucket it trains.
- ``num_machines`` may not exceed the buckets that can train at once: with one partitioned
  type on both sides, an off-diagonal bucket holds two of its ``n`` partitions, so ``n // 2``.
- A ``dask_address`` is ``tcp://host:port`` or ``tls://host:port`` (:func:`address_problem`):
  another scheme (``http://``, ``inproc://``, ``ucx://``) or none is refused before anything connects.
- A ``dask_address`` with ``num_machines: 1`` is refused (it would be ignored).
- With a ``dask_address``, the workers run elsewhere: local paths are refused unless
  ``shared_paths`` says every worker mounts them at the same place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Problem = tuple[str, str]  # (the fields involved, space separated; the message line)

# The Dask comm schemes a distributed run connects with: plain TCP, or TCP under TLS (Dask's
# ``distributed.Security`` settings). ``inproc://`` names a scheduler inside one process, and
# ``ucx://``/``ws://`` need transports this package neither installs nor tests.
DASK_SCHEMES = ("tcp", "tls")
ADDRESS_EXAMPLE = "tcp://10.0.0.1:8786; tls:// for a scheduler started with --protocol tls"


def address_problem(address: str) -> str | None:
    """Why ``address`` cannot be a ``dask_address`` (scheme and host:port), or None when it can."""
    scheme, sep, location = address.partition("://")
    allowed = " or ".join(f"{s}://" for s in DASK_SCHEMES)
    if not sep:
        return f"dask_address {address!r} has no scheme; it must start with {allowed} (e.g. {ADDRESS_EXAMPLE})"
    if scheme.lower() not in DASK_SCHEMES:
        return (
            f"dask_address {address!r}: scheme {scheme}:// is not allowed; allowed: {allowed} "
            f"(a Dask scheduler's address, e.g. {ADDRESS_EXAMPLE})"
        )
    host, colon, port = location.rpartition(":")
    if not colon or not host or not port.isdigit() or "/" in location:
        return f"dask_address {address!r}: expected {scheme}://host:port (e.g. {ADDRESS_EXAMPLE})"
    return None


def config_problems(config: Any) -> list[Problem]:
    """:func:`distributed_problems` of a :class:`~pbg_core.config.ConfigSchema` (typed ``Any``: it is
    the layer above)."""
    lhs, rhs = (
        {
            t: config.entities[t].num_partitions
            for t in dict.fromkeys(getattr(r, side) for r in config.relations)
            if t in config.entities and config.entities[t].num_partitions > 1
        }
        for side in ("lhs", "rhs")
    )
    paths = {
        "entity_path": config.entity_path,
        **{f"edge_paths[{i}]": path for i, path in enumerate(config.edge_paths)},
        "checkpoint_path": config.checkpoint_path,
        "init_path": config.init_path or "",
    }
    return distributed_problems(config.num_machines, config.dask_address, config.shared_paths, (lhs, rhs), paths)


def distributed_problems(
    num_machines: int,
    dask_address: str | None,
    shared_paths: bool,
    sides: tuple[Mapping[str, int], Mapping[str, int]],
    paths: Mapping[str, str],
) -> list[Problem]:
    """Every rule a distributed config breaks (with ``num_machines`` 1: only those of a ``dask_address`` set).

    Args:
        num_machines: The config's.
        dask_address: The config's (None: a local cluster).
        shared_paths: The config's: local paths are on a filesystem every worker mounts.
        sides: Partitioned entity types on the lhs and on the rhs side, with their num_partitions.
        paths: Field name -> path or URL (entity_path, edge_paths[i], checkpoint_path, init_path).
    """
    wrong_address = address_problem(dask_address) if dask_address else None
    if wrong_address:
        # The rules below that involve the address would describe a cluster that cannot exist.
        return [("dask_address", wrong_address), *_partition_problems(num_machines, sides)]
    if num_machines <= 1:
        if dask_address:  # a cluster given for a run that would not use it: surely a mistake
            return [
                (
                    "num_machines dask_address",
                    f"dask_address {dask_address!r} is set but num_machines is {num_machines}, which trains on "
                    "this machine; set num_machines to the number of Dask workers to train on (2 or more), "
                    "or drop dask_address",
                )
            ]
        return []
    problems = _partition_problems(num_machines, sides)
    local = [name for name, path in paths.items() if path and is_local_path(path)]
    if dask_address and local and not shared_paths:
        listed = ", ".join(f"{name} {paths[name]!r}" for name in local)
        problems.append(
            (
                "dask_address shared_paths",
                f"dask_address {dask_address}: the workers cannot read local paths ({listed}) unless every "
                "worker mounts them at the same place; use s3:// URLs, or set shared_paths: true for a "
                "shared filesystem (NFS, Lustre, ...)",
            )
        )
    return problems


def _partition_problems(num_machines: int, sides: tuple[Mapping[str, int], Mapping[str, int]]) -> list[Problem]:
    """The partitioning rules of ``num_machines`` machines (none for one machine)."""
    if num_machines <= 1:
        return []
    at_once = _buckets_at_once(*sides)
    if at_once == 0:
        return [
            (
                "num_machines entities",
                f"num_machines: {num_machines} needs partitioned entity types (PBG: cannot run distributed "
                f"training with a single partition); set num_partitions >= {2 * num_machines} for the "
                "entity types of your relations, or num_machines: 1",
            )
        ]
    if num_machines > at_once:
        return [
            (
                "num_machines entities",
                f"num_machines: {num_machines} is more than the {at_once} bucket(s) that can train at once "
                f"with these partitions ({_describe(sides)}); set num_partitions >= {2 * num_machines}, "
                f"or num_machines <= {at_once}",
            )
        ]
    return []


def is_local_path(path: str) -> bool:
    """Whether ``path`` is on this machine's filesystem (no URL scheme, or ``file://``)."""
    return "://" not in path or path.startswith("file://")


def _buckets_at_once(lhs: Mapping[str, int], rhs: Mapping[str, int]) -> int:
    """How many buckets can hold disjoint partitions at once (0: nothing is partitioned)."""
    if not lhs and not rhs:
        return 0
    if set(lhs) & set(rhs):  # one type on both sides: an off-diagonal bucket holds two of its partitions
        return max(lhs.values()) // 2
    if lhs and rhs:
        return min(max(lhs.values()), max(rhs.values()))
    return max({**lhs, **rhs}.values())


def _describe(sides: tuple[Mapping[str, int], Mapping[str, int]]) -> str:
    named = {**sides[0], **sides[1]}
    return ", ".join(f"{name}: {count}" for name, count in sorted(named.items()))


def trial_placement_problem(config: Any, dask_address: str) -> str | None:
    """Why a tuning study of ``config`` (a :class:`~pbg_core.config.ConfigSchema`) cannot place its
    trials on the Dask cluster at ``dask_address``, or None: each trial trains on one worker, and its
    checkpoint, written there, is read by the study's driver; so every path must be a URL, or local
    on a filesystem every machine mounts at the same place (``shared_paths``)."""
    if config.num_machines > 1:
        return (
            f"--dask-address {dask_address}: num_machines is {config.num_machines}, but each trial trains on one "
            "Dask worker; set num_machines: 1 (-p num_machines=1)"
        )
    paths = {
        "checkpoint_path": config.checkpoint_path,
        "entity_path": config.entity_path,
        **{f"edge_paths[{i}]": path for i, path in enumerate(config.edge_paths)},
        "init_path": config.init_path or "",
        "validation.edge_path": config.validation.edge_path if config.validation is not None else "",
    }
    local = [name for name, path in paths.items() if path and is_local_path(path)]
    if not local or config.shared_paths:
        return None
    listed = ", ".join(f"{name} {paths[name]!r}" for name in local)
    return (
        f"--dask-address {dask_address}: each trial writes its checkpoint under checkpoint_path on a Dask worker "
        f"and reads its data there, but these paths are local to this machine ({listed}); use s3:// URLs, or set "
        "shared_paths: true (-p shared_paths=true) if every worker mounts them at the same place (NFS, Lustre, ...)"
    )
