"""Every file name of a PBG data layout, as pure functions (docs/formats.md describes the files).

Entity directory (``entity_path``)::

    entity_count_{type}_{part}.txt     one integer and a newline
    entity_names_{type}_{part}.json    JSON list of names by offset (indent 4)
    dynamic_rel_count.txt              one integer
    dynamic_rel_names.json             JSON list of relation names by index

Edge directory (one per edge path)::

    edges_{lhs_part}_{rhs_part}.h5     one HDF5 file per bucket

Checkpoint directory (``checkpoint_path``)::

    checkpoint_version.txt             last committed version, "{v}\\n"
    config.json                        the parsed config (indent 4)
    embeddings_{type}_{part}.v{v}.h5   embeddings + optimizer state of one partition
    model.v{v}.h5                      operator parameters + optimizer state
    training_stats.json                JSON lines, one per bucket
    epoch_{N}/                         snapshot preserved after epoch N

Files being written carry ``.tmp`` before the extension (``edges_0_1.tmp.h5``,
like PBG), so the parsers below never mistake one for a committed file.
"""

from __future__ import annotations

import re

from pbg_core.types import Bucket, EntityName, Partition

VERSION_FILE = "checkpoint_version.txt"
CONFIG_FILE = "config.json"
STATS_FILE = "training_stats.json"
DYNAMIC_REL_COUNT_FILE = "dynamic_rel_count.txt"
DYNAMIC_REL_NAMES_FILE = "dynamic_rel_names.json"

# What each directory of the layout holds: for the message about a path that names a file instead.
_DIRECTORY_HOLDS = {
    "entity_path": "the entity directory `pbg import` writes (entity_count_<type>_<part>.txt, "
    "entity_names_<type>_<part>.json)",
    "checkpoint_path": "a checkpoint directory (checkpoint_version.txt, model.v<N>.h5, "
    "embeddings_<type>_<part>.v<N>.h5), or where to create one",
    "init_path": "a checkpoint directory (checkpoint_version.txt, model.v<N>.h5, embeddings_<type>_<part>.v<N>.h5)",
}

_EDGE_RE = re.compile(r"^edges_(\d+)_(\d+)\.h5$")
# Greedy type group: entity names may themselves contain underscores and dots.
_EMBEDDINGS_RE = re.compile(r"^embeddings_(.+)_(\d+)\.v(\d+)\.h5$")
_MODEL_RE = re.compile(r"^model\.v(\d+)\.h5$")
_SNAPSHOT_RE = re.compile(r"^epoch_(\d+)$")


def entity_count_file(entity: EntityName, part: Partition) -> str:
    """``entity_count_{entity}_{part}.txt``."""
    return f"entity_count_{entity}_{part}.txt"


def entity_names_file(entity: EntityName, part: Partition) -> str:
    """``entity_names_{entity}_{part}.json``."""
    return f"entity_names_{entity}_{part}.json"


def edge_file(lhs: Partition, rhs: Partition) -> str:
    """``edges_{lhs}_{rhs}.h5``: the edges of bucket (lhs, rhs)."""
    return f"edges_{lhs}_{rhs}.h5"


def embeddings_file(entity: EntityName, part: Partition, version: int) -> str:
    """``embeddings_{entity}_{part}.v{version}.h5``."""
    return f"embeddings_{entity}_{part}.v{version}.h5"


def model_file(version: int) -> str:
    """``model.v{version}.h5``."""
    return f"model.v{version}.h5"


def snapshot_dir(epoch: int) -> str:
    """``epoch_{epoch}``: the directory a preserved checkpoint is copied into."""
    return f"epoch_{epoch}"


def tmp_file(name: str) -> str:
    """The in-progress name of ``name``: ``.tmp`` inserted before the extension.

    ``edges_0_1.h5`` -> ``edges_0_1.tmp.h5`` (PBG's name); ``config.json`` -> ``config.tmp.json``.
    """
    stem, dot, ext = name.rpartition(".")
    if not dot:
        return f"{name}.tmp"
    return f"{stem}.tmp.{ext}"


def file_not_directory(field: str) -> str:
    """The problem of a ``field`` path (``entity_path``, ``checkpoint_path`` or ``init_path``) that is a file."""
    return f"{field} is a file, expected {_DIRECTORY_HOLDS[field]}"


def parse_edge_file(name: str) -> Bucket | None:
    """The bucket of an ``edges_{l}_{r}.h5`` name, or None for any other name."""
    match = _EDGE_RE.match(name)
    if match is None:
        return None
    return Bucket(int(match.group(1)), int(match.group(2)))


def parse_embeddings_file(name: str) -> tuple[EntityName, Partition, int] | None:
    """(entity, part, version) of an ``embeddings_{e}_{p}.v{v}.h5`` name, else None."""
    match = _EMBEDDINGS_RE.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3))


def parse_model_file(name: str) -> int | None:
    """The version of a ``model.v{v}.h5`` name, else None."""
    match = _MODEL_RE.match(name)
    return int(match.group(1)) if match else None


def parse_checkpoint_file(name: str) -> int | None:
    """The version of an embeddings or model file name, else None."""
    parsed = parse_embeddings_file(name)
    if parsed is not None:
        return parsed[2]
    return parse_model_file(name)


def parse_snapshot_dir(name: str) -> int | None:
    """The epoch of an ``epoch_{N}`` directory name, else None."""
    match = _SNAPSHOT_RE.match(name)
    return int(match.group(1)) if match else None
