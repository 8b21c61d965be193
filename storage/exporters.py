"""TSV exporter: a committed checkpoint -> PBG's entity and relation-parameter TSV files.

Behaviour of PBG's ``export_to_tsv`` (reference 1.19):

- **Outputs** must not exist: an existing file is an error naming it, checked for both
  outputs before either is created. Both are written under temporary names and published
  (rename on local disk, one upload each on S3) only when both are complete; if the export
  fails half way, nothing (or nothing left over) is visible.
- **Entities file**: one line per entity, for every entity type (config order) and
  partition: ``name\\tv1\\t...\\tvD`` with ``%.9f`` values. When ``config.global_emb`` is
  set and the model holds ``global_embs.emb_{type}``, it is added to every vector (float32).
  Embeddings are read one partition at a time and formatted in row blocks.
- **Relations file**: ``rel_name\\tside\\toperator\\tparam_name\\tshape\\tvalues...`` where
  shape is ``x``-joined (``200x200``) and values are the parameter flattened row-major
  (PBG cannot export 2-D parameters at all). Standard mode writes the ``rhs`` operator of
  each config relation, checking the names against ``dynamic_rel_names.json`` when that file
  exists; dynamic mode writes ``lhs`` then ``rhs`` rows, one per relation named in
  ``dynamic_rel_names.json``, taking row ``r`` of every ``[num_relations, ...]`` parameter.
  Parameters come in the operator's declaration order (PBG iterates ``named_parameters()``);
  operators without parameters write no row.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import torch

from pbg_core.operators import DYNAMIC_OPERATORS, OPERATORS
from pbg_core.types import ModuleStateDict
from storage import fs
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound, OutputExistsError

logger = logging.getLogger(__name__)

ROW_BLOCK = 4096  # rows formatted and written per write() call


@dataclass(frozen=True)
class ExportReport:
    """What one export wrote.

    Attributes:
        version: The checkpoint version exported.
        entities_written: Lines of the entities file.
        relation_rows_written: Lines of the relation types file.
    """

    version: int
    entities_written: int
    relation_rows_written: int


def write_rows(out: TextIO, keys: Sequence[str], values: torch.Tensor) -> int:
    """Write ``key\\tv1\\t...\\tvD`` lines with ``%.9f`` values, one per row of ``values``.

    Args:
        out: Text output.
        keys: One prefix per row (already tab-joined if it has several fields).
        values: ``[len(keys), D]`` tensor; formatted as float32 values widened to double,
            exactly like PBG formats a float32 tensor element.

    Returns:
        The number of lines written.
    """
    if values.shape[0] != len(keys):
        raise ValueError(f"got {len(keys)} keys for {values.shape[0]} rows of values")
    row_format = "\t".join(["%.9f"] * values.shape[1])
    for start in range(0, len(keys), ROW_BLOCK):
        # One C-level % per row (like numpy.savetxt) instead of one per value.
        rows = values[start : start + ROW_BLOCK].tolist()
        block_keys = keys[start : start + ROW_BLOCK]
        out.write("".join(f"{key}\t{row_format % tuple(row)}\n" for key, row in zip(block_keys, rows)))
    return len(keys)


def _write_entities(
    out: TextIO,
    config: Any,
    entity_store: EntityStore,
    checkpoints: CheckpointStore,
    version: int,
    state_dict: ModuleStateDict,
) -> int:
    written = 0
    for entity, schema in config.entities.items():
        global_emb = state_dict.get(f"global_embs.emb_{entity}") if config.global_emb else None
        for part in range(schema.num_partitions):
            names = entity_store.load_names(entity, part)
            embeddings, _ = checkpoints.load_embeddings(entity, part, version)
            if embeddings.dim() != 2 or embeddings.shape[0] != len(names):
                raise BadDataError(
                    config.checkpoint_path,
                    f"embeddings of {entity!r} partition {part} (v{version}) have shape "
                    f"{tuple(embeddings.shape)}, expected ({len(names)}, D) to match "
                    f"entity_names_{entity}_{part}.json",
                )
            if global_emb is not None:
                embeddings = embeddings + global_emb
            written += write_rows(out, names, embeddings)
            logger.info("exported %d embeddings of %s partition %d", len(names), entity, part)
    return written


def _declared_order(operator: str, dynamic: bool) -> list[str]:
    """Parameter names in the order the operator module declares them (PBG's export order)."""
    registry = DYNAMIC_OPERATORS if dynamic else OPERATORS
    if operator not in registry:
        return []
    # dim 2 / one relation: the smallest valid shapes (complex_diagonal needs an even dim).
    module = registry.get(operator)(2, 1) if dynamic else registry.get(operator)(2)
    return [name for name, _ in module.named_parameters()]


def operator_params(
    state_dict: ModuleStateDict, side: str, index: int, operator: str, dynamic: bool
) -> list[tuple[str, torch.Tensor]]:
    """(param name, tensor) of ``{side}_operators.{index}.*``.

    Ordered like the operator's ``named_parameters()`` (as PBG exports them); parameters
    the operator does not declare follow in state-dict order.
    """
    prefix = f"{side}_operators.{index}."
    params = {key[len(prefix) :]: value for key, value in state_dict.items() if key.startswith(prefix)}
    declared = [name for name in _declared_order(operator, dynamic) if name in params]
    return [(name, params[name]) for name in declared + [n for n in params if n not in declared]]


def _shape(tensor: torch.Tensor) -> str:
    return "x".join(str(d) for d in tensor.shape)


def _stored_relation_names(entity_store: EntityStore) -> list[str] | None:
    try:
        return entity_store.load_dynamic_relation_names()
    except DataNotFound:
        return None


def _write_standard_relations(out: TextIO, config: Any, entity_store: EntityStore, state_dict: ModuleStateDict) -> int:
    config_names = [rel.name for rel in config.relations]
    stored = _stored_relation_names(entity_store)
    if stored is not None and stored != config_names:
        raise BadDataError(
            config.entity_path,
            f"dynamic_rel_names.json lists relations {stored}, expected the config's {config_names}",
        )
    written = 0
    for index, rel in enumerate(config.relations):
        for param_name, param in operator_params(state_dict, "rhs", index, rel.operator, dynamic=False):
            key = "\t".join((rel.name, "rhs", rel.operator, param_name, _shape(param)))
            written += write_rows(out, [key], param.detach().reshape(1, -1))
    return written


def _write_dynamic_relations(out: TextIO, config: Any, entity_store: EntityStore, state_dict: ModuleStateDict) -> int:
    names = entity_store.load_dynamic_relation_names()
    operator = config.relations[0].operator
    written = 0
    for side in ("lhs", "rhs"):
        for param_name, param in operator_params(state_dict, side, 0, operator, dynamic=True):
            if param.dim() == 0 or param.shape[0] != len(names):
                raise BadDataError(
                    config.checkpoint_path,
                    f"{side}_operators.0.{param_name} has shape {tuple(param.shape)}, expected "
                    f"({len(names)}, ...): one row per relation of dynamic_rel_names.json",
                )
            shape = _shape(param[0])
            keys = ["\t".join((name, side, operator, param_name, shape)) for name in names]
            written += write_rows(out, keys, param.detach().reshape(len(names), -1))
    return written


@contextlib.contextmanager
def _exclusive_outputs(urls: Sequence[str], storage_options: Any) -> Iterator[list[TextIO]]:
    """Write every output under a temporary name; publish them all only if the block succeeds.

    Outputs that exist are refused up front. Each output is written locally (next to it on
    local disk, in a temporary file for a remote store) and becomes visible in one rename or
    one upload when the block exits cleanly, so a reader never sees a half-written export.
    If the block or a publication fails, every output published so far is removed.
    """
    existing = [url for url in urls if fs.exists(url, storage_options)]
    if existing:
        raise OutputExistsError(existing[0], f"refusing to overwrite export output(s) {', '.join(existing)}")
    try:
        with contextlib.ExitStack() as stack:
            files = []
            for url in urls:
                local = stack.enter_context(fs.local_write(url, storage_options))
                files.append(stack.enter_context(open(local, "w", encoding="utf-8")))
            yield files
    except BaseException:
        # None of the outputs existed above: whatever is there now is ours.
        for url in urls:
            fs.remove(url, missing_ok=True, storage_options=storage_options)
        raise


def _resolve_version(checkpoints: CheckpointStore, url: str, version: int | None) -> int:
    if version is None:
        version = checkpoints.read_version()
        if version == 0:
            raise DataNotFound(url, "no committed checkpoint to export (checkpoint_version.txt missing or 0)")
    elif version < 1:
        raise ValueError(f"version must be a checkpoint version >= 1 (or None for the latest), got {version}")
    return version


def export_tsv(
    config: Any,
    entities_output: str,
    relation_types_output: str,
    version: int | None = None,
) -> ExportReport:
    """Export the embeddings and relation parameters of a checkpoint as TSV (PBG's layout).

    Args:
        config: The training config (``ConfigSchema``); reads entity_path, checkpoint_path,
            entities, relations, dynamic_relations and global_emb.
        entities_output: File or URL of the entities TSV; must not exist.
        relation_types_output: File or URL of the relation parameters TSV; must not exist.
        version: Checkpoint version; None exports the latest committed one.

    Returns:
        An :class:`ExportReport`.

    Raises:
        FileExistsError: An output already exists (nothing is written).
        DataNotFound: No committed checkpoint, or a names/embeddings/model file is missing.
        BadDataError: Names and embeddings disagree, or relation names do not match.
    """
    options = config.storage_options_for_fs()  # type: ignore[attr-defined]  # the real credentials
    checkpoints = CheckpointStore(config.checkpoint_path, options)
    entity_store = EntityStore(config.entity_path, options)
    version = _resolve_version(checkpoints, config.checkpoint_path, version)
    state_dict: ModuleStateDict = checkpoints.load_model(version)[0] if checkpoints.has_model(version) else {}
    write_relations = _write_dynamic_relations if config.dynamic_relations else _write_standard_relations
    with _exclusive_outputs([entities_output, relation_types_output], options) as (entities_file, relations_file):
        entities_written = _write_entities(entities_file, config, entity_store, checkpoints, version, state_dict)
        relation_rows = write_relations(relations_file, config, entity_store, state_dict)
    logger.info("exported checkpoint v%d: %d entities, %d relation rows", version, entities_written, relation_rows)
    return ExportReport(version, entities_written, relation_rows)

