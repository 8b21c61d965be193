"""What ``pbg train`` and ``pbg eval`` check before any server or worker starts.

The config is parsed and validated, and the run's local inputs are looked for, before the
command starts its embedded Prefect server or forks a HOGWILD worker: a typo in the config
or a forgotten ``pbg import`` then fails in well under a second, not after the server's
start-up (4-12 s) or the flow's first task (~17 s). Every URL the command will use (the config
file's, the config's paths, the command's inputs and outputs) must have a filesystem that loads
here (:func:`check_urls`: ``hdfs://`` without Hadoop's native client, ``gs://`` without gcsfs, an
unknown scheme fail in one line naming the field); ``pbg import``, ``pbg export`` and ``pbg serve``
load their config through :func:`load_config_checked` for that. ``pbg train`` also checks here that the
partitions fit in the memory available (:mod:`pbg_core.session.memory_plan`) and that a local
checkpoint's disk has room for the next version (:func:`check_resources`). Only local paths are looked at: a
remote store is checked by the flow's first task, which has the retries and the
reachability probe that a network deserves. It imports nothing it can avoid (no fsspec,
torch or Prefect): whatever it imports delays the server's start.

The flow's ``check-inputs`` task (:func:`tasks.plan.check_inputs`) looks at the edge
directories and bucket files again, on purpose: it is the only check of a deployed run, of a
remote store, and of files removed while the server started. That overlap costs about 0.06 ms
on a local 1x1 graph; skipping it after this module ran would need the flow to know how it was
started, and would turn a file deleted meanwhile into a failure in the middle of loading.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from flows.cli.retrain_configs import check_concrete_paths
from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.errors import ConfigError
from pbg_core.session.iterations import compute_num_edge_chunks
from pbg_core.session.memory_plan import plan_memory, run_sizes
from pbg_core.session.partitions import PartitionTopology
from storage import layout
from storage.config_loader import load_config, local_path
from storage.disk_space import (
    BLOCK,
    attrs_bytes,
    blocks,
    check_disk_space,
    file_bytes_on_disk,
    hdf5_file_bytes,
    model_datasets,
    rewrite_bytes,
)
from storage.errors import BadDataError, DataNotFound, OutputNotWritable
from storage.host_memory import memory_available
from storage.local_dirs import creatable_problem

STATS_ROW_BYTES = 2048  # a training_stats.json row, at most (measured: about 1 KB)


class CheckpointNotWritable(OutputNotWritable):
    """The checkpoint directory cannot be created or written (a file, a read-only place)."""


# The config's paths (a training run uses them all; pbg import and export some, see flows.cli.commands).
PATH_FIELDS = ("entity_path", "edge_paths", "checkpoint_path", "init_path")
EVAL_FIELDS = ("entity_path", "edge_paths", "checkpoint_path")


def load_checked_config(
    path: str, overrides: Sequence[str], training: bool, filter_paths: Sequence[str] = ()
) -> ConfigSchema:
    """The validated config, once its URLs are known usable here and its local inputs to exist.

    Args:
        path: The config file (see :func:`storage.config_loader.load_config`).
        overrides: ``-p key=value`` overrides.
        training: ``pbg train`` (the checkpoint directory must be writable) or ``pbg eval``.
        filter_paths: More edge paths that must exist (``pbg eval --filter-path``).

    Raises:
        ConfigError: invalid config, no edge path, or a retraining config's glob edge path or
            run root (:func:`flows.cli.retrain_configs.check_concrete_paths`).
        FilesystemUnavailable: a URL whose scheme cannot be used here (see :func:`check_urls`).
        DataNotFound: an edge path (or filter path), a bucket file, an entity count file or
            ``init_path`` is missing.
        CheckpointNotWritable: ``training`` and the checkpoint directory cannot be written.
        DataNotFound: not ``training`` and the checkpoint directory holds no committed version.
    """
    fields = PATH_FIELDS if training else EVAL_FIELDS
    config = load_config_checked(path, overrides, [("--filter-path", p) for p in filter_paths], fields)
    check_concrete_paths(config, "train" if training else "eval", path)  # not a retraining config's pattern or root
    check_local_inputs(config, training, filter_paths)
    return config


def load_config_checked(
    path: str,
    overrides: Sequence[str],
    more_urls: Iterable[tuple[str, str]] = (),
    fields: Sequence[str] = PATH_FIELDS,
) -> ConfigSchema:
    """The validated config, once every URL the command uses has a filesystem that loads here.

    Args:
        path: The config file (see :func:`storage.config_loader.load_config`).
        overrides: ``-p key=value`` overrides.
        more_urls: (field, URL) pairs of the command's own inputs and outputs (``input 2``, ``--output``).
        fields: The config's path fields the command reads or writes (see :func:`config_urls`).

    Raises:
        FilesystemUnavailable: see :func:`check_urls`.
    """
    check_urls([("the config", path)])
    config = load_config(path, list(overrides))
    check_urls([*config_urls(config, fields), *more_urls])
    return config


def config_urls(config: ConfigSchema, fields: Sequence[str] = PATH_FIELDS) -> list[tuple[str, str]]:
    """(field, URL) of the paths ``config`` names in ``fields`` (of :data:`PATH_FIELDS`), each edge path on its own."""
    named: list[tuple[str, str]] = []
    for field in fields:
        value = getattr(config, field)
        if isinstance(value, list):
            named += [(f"{field}[{index}]", path) for index, path in enumerate(value)]
        elif value:
            named.append((field, value))
    return named


def check_urls(named_urls: Iterable[tuple[str, str]]) -> None:
    """Raise :class:`~storage.errors.FilesystemUnavailable` on the first URL whose scheme cannot be used here.

    Local paths are passed over without importing fsspec (see the module docstring); for the
    others see :func:`storage.fs.urls.check_filesystems` (the message names the field, the
    scheme and the package or native library that is missing).
    """
    remote = [(field, url) for field, url in named_urls if local_path(url) is None]
    if remote:
        from storage.fs.urls import check_filesystems

        check_filesystems(remote)


def check_local_inputs(config: ConfigSchema, training: bool, filter_paths: Sequence[str] = ()) -> None:
    """Raise on the first missing local input of ``config`` (see :func:`load_checked_config`)."""
    if not config.edge_paths:
        raise ConfigError(
            ["edge_paths: [] is empty; give at least one directory of edge files (written by `pbg import`)"]
        )
    topology = PartitionTopology.build(
        {name: entity.num_partitions for name, entity in config.entities.items()},
        [(relation.lhs, relation.rhs) for relation in config.relations],
        featurized=[name for name, entity in config.entities.items() if entity.featurized],
    )
    named = [(p, "edge_paths") for p in config.edge_paths] + [(p, "--filter-path") for p in filter_paths]
    for edge_path, field in named:
        local = local_path(edge_path)
        if local is not None:
            _check_edge_dir(edge_path, local, topology, field)
    entity_dir = local_path(config.entity_path)
    if entity_dir is not None:
        _check_entity_dir(config.entity_path, entity_dir, topology)
    init_dir = local_path(config.init_path) if config.init_path else None
    if init_dir is not None and os.path.isfile(init_dir):
        raise BadDataError(str(config.init_path), layout.file_not_directory("init_path"))
    if init_dir is not None and not os.path.isdir(init_dir):
        raise DataNotFound(
            str(config.init_path),
            "init_path does not exist; give the checkpoint directory of a previous run, or unset init_path",
        )
    checkpoint_dir = local_path(config.checkpoint_path)
    if checkpoint_dir is not None and os.path.isfile(checkpoint_dir):
        raise BadDataError(config.checkpoint_path, layout.file_not_directory("checkpoint_path"))
    if checkpoint_dir is not None and training:
        _check_writable(config.checkpoint_path, checkpoint_dir)
    elif checkpoint_dir is not None and not os.path.isfile(os.path.join(checkpoint_dir, layout.VERSION_FILE)):
        raise DataNotFound(config.checkpoint_path, "no committed checkpoint to evaluate (train first)")
    if checkpoint_dir is not None:
        check_committed_files(config, topology, checkpoint_dir, entity_dir)
    if training and entity_dir is not None:
        check_resources(config, topology, entity_dir, checkpoint_dir)


def check_committed_files(
    config: ConfigSchema, topology: PartitionTopology, checkpoint_dir: str, entity_dir: str | None
) -> None:
    """Refuse a local checkpoint whose ``checkpoint_version.txt`` names a version whose files are not all there.

    Only names are looked at (no file opened, nothing imported); the flow's plan checks each file's
    content again. When a file is missing, the storage check runs for its one-line message (naming
    the newest complete version, and that nothing was removed).

    Raises:
        IncompleteVersionError: see :func:`storage.version_check.check_complete`.
    """
    committed = _read_int(os.path.join(checkpoint_dir, layout.VERSION_FILE)) or 0
    if committed == 0 or not os.path.isdir(checkpoint_dir):
        return
    present = set(os.listdir(checkpoint_dir))
    keys = _keys(topology)
    wanted = [layout.embeddings_file(entity, part, committed) for entity, part in keys] + [layout.model_file(committed)]
    if all(name in present for name in wanted):
        return
    # Only now: these import h5py and torch, which would delay every other start.
    from pbg_core.ports import VersionLayout
    from storage.version_check import check_complete

    counts = {
        key: _read_int(os.path.join(entity_dir, layout.entity_count_file(*key))) if entity_dir else None for key in keys
    }
    shapes = {key: None if count is None else (count, config.entity_dimension(key[0])) for key, count in counts.items()}
    check_complete(config.checkpoint_path, config.storage_options_for_fs(), committed, VersionLayout(shapes))


def check_resources(
    config: ConfigSchema, topology: PartitionTopology, entity_dir: str, checkpoint_dir: str | None
) -> None:
    """Refuse a training run whose partitions cannot fit in memory, or whose next version cannot fit on disk.

    Memory: :func:`~pbg_core.session.memory_plan.plan_memory` on the local entity counts, with the
    largest bucket's edges estimated from its file's size (24 bytes an edge at least: ids are
    int64; the session's own plan reads the exact counts). Disk (a local checkpoint_path only):
    :func:`next_version_bytes`.

    Raises:
        MemoryPlanError: see :func:`~pbg_core.session.memory_plan.plan_memory`.
        NoSpaceForCheckpoint: the checkpoint's disk has less free space than that.
    """
    counts = {key: _read_int(os.path.join(entity_dir, layout.entity_count_file(*key))) for key in _keys(topology)}
    if any(count is None for count in counts.values()):
        return  # unreadable: the run's first task names the file
    num_dynamic = _read_int(os.path.join(entity_dir, layout.DYNAMIC_REL_COUNT_FILE)) if config.dynamic_relations else 0
    chunk = _estimated_chunk(config, topology)
    sizes = run_sizes(config, topology, {k: v or 0 for k, v in counts.items()}, num_dynamic or 0, chunk)
    available = memory_available()
    if available is not None:
        # A distributed run's coordinator here holds one bucket's slots; each machine plans its own.
        plan_memory(sizes, available, 2 if config.num_machines > 1 else config.resident_partitions)
    if checkpoint_dir is None:
        return
    committed = _read_int(os.path.join(checkpoint_dir, layout.VERSION_FILE)) or 0
    what = f"checkpoint version {committed + 1} and its bucket progress"
    needed = next_version_bytes(
        config, topology, {k: v or 0 for k, v in counts.items()}, sizes.model_bytes, checkpoint_dir
    )
    check_disk_space(config.checkpoint_path, needed, committed, what)


def next_version_bytes(
    config: ConfigSchema,
    topology: PartitionTopology,
    counts: dict[tuple[str, int], int],
    model: int,
    checkpoint_dir: str,
) -> int:
    """Disk blocks the next version takes with its bucket progress, at most (an upper bound, see
    :func:`storage.disk_space.hdf5_file_bytes`).

    Every partition's file and the model file; the progress area's worst case with a save point
    at every bucket, one more copy of each (less what ``progress/`` holds already); the stats
    file and a progress record rewritten with a pass's rows; ``config.json`` and the lease. A
    pass whose save points are further apart may hold more copies between them: the bucket
    steps check again before each save (:mod:`storage.disk_checks`).
    """
    attrs = attrs_bytes(json.dumps(config_to_json(config), sort_keys=True))
    files = [hdf5_file_bytes(n * (config.entity_dimension(entity) + 1) * 4, attrs) for (entity, _), n in counts.items()]
    version = sum(files) + hdf5_file_bytes(model, attrs, model_datasets(config) + 1)
    progress = _tree_bytes(os.path.join(checkpoint_dir, layout.PROGRESS_DIR))
    rows = (len(topology.buckets()) + 1) * STATS_ROW_BYTES
    stats = rewrite_bytes(os.path.join(checkpoint_dir, layout.STATS_FILE), rows)
    record = rows + 32 * len(counts) + 4096  # the pass's rows and where each partition is
    small = 2 * blocks(record) + blocks(2 * attrs) + BLOCK  # the record (old and new), config.json, lease
    return version + max(0, version - progress) + stats + small


def _keys(topology: PartitionTopology) -> list[tuple[str, int]]:
    return [(entity, part) for entity, count in topology.num_partitions.items() for part in range(count)]


def _read_int(path: str) -> int | None:
    """The integer a count or version file holds; None when missing or not one integer."""
    try:
        with open(path, encoding="utf-8") as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return None


def _estimated_chunk(config: ConfigSchema, topology: PartitionTopology) -> int:
    """Edges of a chunk of the largest local bucket, from file sizes (an upper bound: 24 bytes per edge)."""
    sizes = []
    for edge_path in config.edge_paths:
        local = local_path(edge_path)
        if local is None:
            continue
        sizes.append(
            [_file_size(os.path.join(local, layout.edge_file(b.lhs, b.rhs))) // 24 for b in topology.buckets()]
        )
    chunks = compute_num_edge_chunks(config.num_edge_chunks, [s[0] for s in sizes if s], config.max_edges_per_chunk)
    return -(-max((n for s in sizes for n in s), default=0) // chunks)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _tree_bytes(path: str) -> int:
    """Disk blocks of the files under ``path`` (0 when absent)."""
    return sum(file_bytes_on_disk(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def _check_edge_dir(edge_path: str, local: str, topology: PartitionTopology, field: str) -> None:
    if not os.path.exists(local):
        raise DataNotFound(edge_path, f"edge path does not exist; run `pbg import` first ({field})")
    if not os.path.isdir(local):
        raise DataNotFound(
            edge_path, "edge path is a file, not a directory of edges_<lhs>_<rhs>.h5 files (written by `pbg import`)"
        )
    missing = [
        name
        for name in (layout.edge_file(b.lhs, b.rhs) for b in topology.buckets())
        if not os.path.isfile(os.path.join(local, name))
    ]
    if missing:
        raise DataNotFound(
            edge_path,
            f"{len(missing)} edge bucket file(s) missing (expected a "
            f"{topology.nparts_lhs}x{topology.nparts_rhs} grid; run `pbg import` first): " + ", ".join(missing[:5]),
        )


def _check_entity_dir(entity_path: str, local: str, topology: PartitionTopology) -> None:
    if os.path.isfile(local):
        raise BadDataError(entity_path, layout.file_not_directory("entity_path"))
    if not os.path.isdir(local):
        raise DataNotFound(entity_path, "entity_path is not a directory; run `pbg import` first")
    missing = [
        name
        for entity, count in topology.num_partitions.items()
        for part in range(count)
        if not os.path.isfile(os.path.join(local, name := layout.entity_count_file(entity, part)))
    ]
    if missing:
        raise DataNotFound(
            entity_path,
            f"{len(missing)} entity count file(s) missing; run `pbg import` first: " + ", ".join(missing[:5]),
        )


def _check_writable(checkpoint_path: str, local: str) -> None:
    problem = creatable_problem(local)
    if problem is not None:
        raise CheckpointNotWritable(
            checkpoint_path,
            f"cannot create the checkpoint directory: {problem}; give a checkpoint_path you may write to",
        )
