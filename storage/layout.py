"""Every file and directory name this project reads or writes, as constants and pure functions.

docs/formats.md describes the files. Nothing else spells a name: a module that needs one takes
it from here (``tests/storage/test_layout.py`` fails on a file name written anywhere else).
This module imports no torch, numpy, fsspec or h5py, so the pre-checks of ``pbg train``
(:mod:`flows.cli.preflight`) use it before anything heavy loads.

Entity directory (``entity_path``)::

    entity_count_{type}_{part}.txt     one integer and a newline
    entity_names_{type}_{part}.json    JSON list of names by offset (indent 4)
    dynamic_rel_count.txt              one integer
    dynamic_rel_names.json             JSON list of relation names by index
    import_manifest.json               what ``pbg import`` wrote here, by stable identity
    import_lease.json                  the lease of the one import writing here
    .pbg-readers/{token}.json          one per run, ``pbg eval`` or ``pbg export`` reading here
    .pbg-import-{token}.json           an import's journal (what to undo or finish if it dies)

Edge directory (one per edge path)::

    edges_{lhs_part}_{rhs_part}.h5     one HDF5 file per bucket

Inside every directory an import writes: ``.pbg-import-{token}-{n}/`` (staging) and
``.pbg-import-{token}-replaced/`` (what an append replaces, until it commits).

Checkpoint directory (``checkpoint_path``)::

    checkpoint_version.txt             last committed version, "{v}\\n"
    config.json                        the parsed config (indent 4)
    embeddings_{type}_{part}.v{v}.h5   embeddings + optimizer state of one partition
    model.v{v}.h5                      operator parameters + optimizer state
    training_stats.json                JSON lines, one per bucket
    validation.json                    one row per validated version (validation section)
    best.json                          the best validated version: kept until a better one
    epoch_{N}/                         snapshot preserved after epoch N
    lease.json                         the lease of the one run writing here
    progress/v{v}.json                 the bucket progress record of the pass writing v
    progress/v{v}-b{k}/                the files saved by bucket position k of that pass
    names/{digest}.json                the entity names the checkpoint's rows follow
    init_by_name/start.json            init_path's rows matched by name: the record
    init_by_name/fresh_rows.h5         ... and the rows no name matched
    init_new_rows.h5                   rows new since init_path's version (grown entities)
    similar_{type}.v{v}.h5             a similarity index built from version v's rows of one
                                       entity type: not part of the version (completeness
                                       checks and snapshots ignore it), removed with it

``pbg export``'s output directory: ``relation_types.tsv`` and, per entity type, ``{type}.tsv``,
``{type}.h5`` or ``{type}.npy`` with ``{type}.names.json``.

Local scratch: ``pbg-import-spill-*/`` (an import's spill, claimed by ``owner.json``), the remap
spill's ``to{new}-from{old}.npz``, a ``pbg-predict`` run's ``predict-{run id}/part-{NNNNN}.parquet``
under ``PBG_CACHE_DIR``, a write probe ``.pbg-write-check-*`` and an atomic local
write's ``.{name}.{token}.tmp`` beside its file; ``pbg-server-startup.lock`` in ``PREFECT_HOME``.

Retraining root (a scheduled retraining's ``checkpoint_path``, :mod:`storage.retraining`)::

    run-{YYYYmmddTHHMMSSZ}-{8 hex}/    one checkpoint directory per flow run (+ retrain.json)
    latest.json                        the promoted run

Imported generations (``retrain.incoming.edges_dir``)::

    gen{NNNN}-{file stem}_partitioned  an edge path of an imported file
    gen{NNNN}-{file stem}_holdout      its held-out edges (+ split.json)

Files being written carry ``.tmp`` before the extension (``edges_0_1.tmp.h5``,
like PBG), so the parsers below never mistake one for a committed file.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from pbg_core.types import Bucket, EntityName, Partition

VERSION_FILE = "checkpoint_version.txt"
CONFIG_FILE = "config.json"
STATS_FILE = "training_stats.json"
DYNAMIC_REL_COUNT_FILE = "dynamic_rel_count.txt"
DYNAMIC_REL_NAMES_FILE = "dynamic_rel_names.json"
CHECKPOINT_FILES = "checkpoint_version.txt, model.v<N>.h5, embeddings_<type>_<part>.v<N>.h5"  # for messages

# Entity directory: what pbg import keeps beside the entity files, and who reads them.
IMPORT_MANIFEST_FILE = "import_manifest.json"
IMPORT_LEASE_FILE = "import_lease.json"
READERS_DIR = ".pbg-readers"
IMPORT_PREFIX = ".pbg-import-"  # an import's journal, staging and backup names start so

# Checkpoint directory: beside the versioned files.
LEASE_FILE = "lease.json"
PROGRESS_DIR = "progress"
NAMES_DIR = "names"
START_BY_NAME_DIR = "init_by_name"
START_RECORD_FILE = "start.json"
FRESH_ROWS_FILE = "fresh_rows.h5"
NEW_ROWS_FILE = "init_new_rows.h5"
VALIDATION_FILE = "validation.json"  # storage.validation_log
BEST_FILE = "best.json"  # storage.best_version: the second pointer

# A tuning study's directory (tasks/tune_study.py, tasks/tune_trials.py; docs/tuning.md).
STUDY_FILE = "study.db"  # Optuna's RDB storage (SQLite)
SPACE_FILE = "space.json"  # the normalized space the study started with
TRIALS_DIR = "trials"  # trials/trial-NNNN/: each trial's checkpoint directory
BEST_CONFIG_FILE = "best_config.json"
BEST_TRIAL_FILE = "best_trial.json"
BEST_DIR = "best"  # best_config.json's checkpoint_path

# pbg export's output directory.
RELATION_TYPES_FILE = "relation_types.tsv"
NPY_NAMES_SUFFIX = ".names.json"  # {type}.npy's names, beside it

# Local scratch and PREFECT_HOME.
IMPORT_SPILL_PREFIX = "pbg-import-spill-"
SPILL_OWNER_FILE = "owner.json"
WRITE_CHECK_PREFIX = ".pbg-write-check-"
SERVER_STARTUP_LOCK_FILE = "pbg-server-startup.lock"

# Retraining (storage.retraining): names under the root, in a run directory, in edges_dir.
LATEST_FILE = "latest.json"  # in the root: the promoted run
RETRAIN_STATE_FILE = "retrain.json"  # in a run directory: what it trained on, how its gate went
SPLIT_FILE = "split.json"  # in a holdout directory, once its split is complete: fraction and seed
HOLDOUT_SUFFIX = "_holdout"
PARTITIONED_SUFFIX = "_partitioned"
RUN_DIR_RE = re.compile(r"^run-(\d{8}T\d{6}Z)-([0-9a-f]{8})$")
RUN_DIR_FORM = "run-YYYYmmddTHHMMSSZ-<8 hex>"
GENERATION_DIR_RE = re.compile(r"^gen\d{4,}-")  # generation_edge_dir's names
_RUN_TIME_FORMAT = "%Y%m%dT%H%M%SZ"

# What each directory of the layout holds: for the message about a path that names a file instead.
_DIRECTORY_HOLDS = {
    "entity_path": "the entity directory `pbg import` writes (entity_count_<type>_<part>.txt, "
    "entity_names_<type>_<part>.json)",
    "checkpoint_path": f"a checkpoint directory ({CHECKPOINT_FILES}), or where to create one",
    "init_path": f"a checkpoint directory ({CHECKPOINT_FILES})",
}

_EDGE_RE = re.compile(r"^edges_(\d+)_(\d+)\.h5$")
# Greedy type group: entity names may themselves contain underscores and dots.
_EMBEDDINGS_RE = re.compile(r"^embeddings_(.+)_(\d+)\.v(\d+)\.h5$")
_MODEL_RE = re.compile(r"^model\.v(\d+)\.h5$")
_SIMILARITY_INDEX_RE = re.compile(r"^similar_(.+)\.v(\d+)\.h5$")
_SNAPSHOT_RE = re.compile(r"^epoch_(\d+)$")
_READER_RE = re.compile(r"^([0-9a-f]{32})\.json$")
_JOURNAL_RE = re.compile(r"^" + re.escape(IMPORT_PREFIX) + r"([0-9a-f]{12})\.json$")
_IMPORT_DIR_RE = re.compile(r"^" + re.escape(IMPORT_PREFIX) + r"([0-9a-f]{12})-(\d+|replaced)$")


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


def similarity_index_file(entity: EntityName, version: int) -> str:
    """``similar_{entity}.v{version}.h5``: the similarity index of ``entity``'s rows at ``version``."""
    return f"similar_{entity}.v{version}.h5"


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


def progress_record_file(version: int) -> str:
    """``v{version}.json``: the progress record of the pass writing ``version`` (in ``progress/``)."""
    return f"v{version}.json"


def progress_area_dir(version: int, position: int) -> str:
    """``v{version}-b{position}``: the files saved by bucket ``position`` of that pass (in ``progress/``)."""
    return f"{progress_area_prefix(version)}{position}"


def progress_area_prefix(version: int) -> str:
    """``v{version}-b``: what every progress area of the pass writing ``version`` starts with."""
    return f"v{version}-b"


def names_file(digest: str) -> str:
    """``{digest}.json``: the entity names of content digest ``digest`` (in ``names/``)."""
    return f"{digest}.json"


def parse_names_file(name: str) -> str | None:
    """The digest of a ``{digest}.json`` name in ``names/``, else None (a ``.tmp`` name included)."""
    if not name.endswith(".json") or ".tmp" in name:
        return None
    return name[: -len(".json")]


def reader_file(token: str) -> str:
    """``.pbg-readers/{token}.json``: reader ``token``'s file, relative to the entity directory."""
    return f"{READERS_DIR}/{token}.json"


def parse_reader_file(name: str) -> str | None:
    """The token of a reader file's name (``{token}.json``, 32 hex digits) in ``.pbg-readers/``, else None."""
    match = _READER_RE.match(name)
    return match.group(1) if match else None


def import_journal_file(token: str) -> str:
    """``.pbg-import-{token}.json``: the journal of import ``token`` (in the entity directory)."""
    return f"{IMPORT_PREFIX}{token}.json"


def parse_import_journal_file(name: str) -> str | None:
    """The token of a ``.pbg-import-{token}.json`` name, else None."""
    match = _JOURNAL_RE.match(name)
    return match.group(1) if match else None


def import_staging_dir(token: str, index: int) -> str:
    """``.pbg-import-{token}-{index}``: import ``token``'s ``index``-th staging directory, inside its output."""
    return f"{IMPORT_PREFIX}{token}-{index}"


def import_backup_dir(token: str) -> str:
    """``.pbg-import-{token}-replaced``: what an append replaces in an output directory, until it commits."""
    return f"{IMPORT_PREFIX}{token}-replaced"


def parse_import_dir(name: str) -> tuple[str, str] | None:
    """(token, ``"<n>"`` or ``"replaced"``) of a staging or backup directory name, else None."""
    match = _IMPORT_DIR_RE.match(name)
    return (match.group(1), match.group(2)) if match else None


def prediction_staging_dir(run_id: str) -> str:
    """``predict-{run id}``: a ``pbg-predict`` flow run's parts, under ``PBG_CACHE_DIR``."""
    return f"predict-{run_id}"


def prediction_part_file(index: int) -> str:
    """``part-{NNNNN}.parquet``: the answers of a ``pbg-predict`` run's ``index``-th query file."""
    return f"part-{index:05d}.parquet"


def remap_spill_file(new: Partition, old: Partition) -> str:
    """``to{new}-from{old}.npz``: the remap spill of the rows going from partition ``old`` to ``new``."""
    return f"to{new}-from{old}.npz"


def atomic_tmp_file(name: str, token: str) -> str:
    """``.{name}.{token}.tmp``: a local atomic write of ``name`` in progress, hidden beside it."""
    return f".{name}.{token}.tmp"


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


def parse_similarity_index_file(name: str) -> tuple[EntityName, int] | None:
    """(entity, version) of a ``similar_{e}.v{v}.h5`` name, else None (a ``.tmp`` name included).

    Not a checkpoint file: :func:`parse_checkpoint_file` returns None for it.
    """
    match = _SIMILARITY_INDEX_RE.match(name)
    return (match.group(1), int(match.group(2))) if match else None


def parse_snapshot_dir(name: str) -> int | None:
    """The epoch of an ``epoch_{N}`` directory name, else None."""
    match = _SNAPSHOT_RE.match(name)
    return int(match.group(1)) if match else None


def run_dir_name(flow_run_id: str, expected_start: datetime) -> str:
    """``run-{YYYYmmddTHHMMSSZ}-{first 8 hex of the flow run id}``: a retraining run's directory.

    Args:
        flow_run_id: The flow run's id (a UUID; dashes are ignored).
        expected_start: The flow run's expected start time, timezone-aware (converted to UTC).

    Raises:
        ValueError: a naive datetime, or an id that does not start with 8 hex digits.
    """
    if expected_start.tzinfo is None or expected_start.utcoffset() is None:
        raise ValueError(f"expected_start must be timezone-aware (e.g. UTC), got naive {expected_start.isoformat()}")
    digits = flow_run_id.replace("-", "").lower()[:8]
    if len(digits) != 8 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"flow_run_id must start with 8 hex digits (a UUID), got {flow_run_id!r}")
    return f"run-{expected_start.astimezone(UTC).strftime(_RUN_TIME_FORMAT)}-{digits}"


def is_run_dir_name(name: str) -> bool:
    """Whether ``name`` has the form of :func:`run_dir_name`."""
    return RUN_DIR_RE.match(name) is not None


def generation_edge_dir(generation: int, stem: str) -> str:
    """``gen{generation:04d}-{stem}_partitioned``: the edge path of an imported file."""
    return f"gen{generation:04d}-{stem}{PARTITIONED_SUFFIX}"


def holdout_dir(edge_dir: str) -> str:
    """The holdout beside an edge path's name: ``x_partitioned`` -> ``x_holdout``, else ``x_holdout``."""
    return edge_dir.removesuffix(PARTITIONED_SUFFIX) + HOLDOUT_SUFFIX
