"""Relation parameters of a checkpoint as PBG's ``relation_types`` TSV (docs/formats.md, "Exports").

Line layout: ``rel_name\\tside\\toperator\\tparam_name\\tshape\\tvalues...`` where shape is
``x``-joined (``200x200``) and values are the parameter flattened row-major (PBG cannot
export 2-D parameters at all), formatted ``%.9f``.

- **Standard mode** writes the ``rhs`` operator of each config relation, checking the names
  against ``dynamic_rel_names.json`` when that file exists.
- **Dynamic mode** writes ``lhs`` then ``rhs`` rows, one per relation type its parameters belong
  to (the model file's names record, :mod:`storage.reader_names`; else ``dynamic_rel_names.json``),
  taking row ``r`` of every ``[num_relations, ...]`` parameter.

Parameters come in the operator's declaration order (PBG iterates ``named_parameters()``);
operators without parameters write no row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

import torch

from pbg_core.model.operators import DYNAMIC_OPERATORS, OPERATORS
from pbg_core.types import ModuleStateDict
from storage.errors import BadDataError
from storage.exporting.text import VALUE_TEXT_BYTES, format_rows

ROW_KEY_BYTES = 128  # a row's name, side, operator, parameter name and shape: generous


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
    out.write(format_rows(keys, values.detach().cpu().numpy()).decode("utf-8"))
    return len(keys)


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


def write_standard_relations(out: TextIO, config: Any, stored: list[str] | None, state_dict: ModuleStateDict) -> int:
    """Rows of the ``rhs`` operator parameters of every config relation; returns the row count.

    ``stored``: the entity files' ``dynamic_rel_names.json`` (None: none), checked against the config.
    """
    config_names = [rel.name for rel in config.relations]
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


def write_dynamic_relations(out: TextIO, config: Any, names: list[str], state_dict: ModuleStateDict) -> int:
    """Rows of the ``lhs`` and ``rhs`` parameters of every relation type; returns the row count.

    ``names``: the relation types the parameters' rows belong to, by index.
    """
    operator = config.relations[0].operator
    written = 0
    for side in ("lhs", "rhs"):
        for param_name, param in operator_params(state_dict, side, 0, operator, dynamic=True):
            if param.dim() == 0 or param.shape[0] != len(names):
                raise BadDataError(
                    config.checkpoint_path,
                    f"{side}_operators.0.{param_name} has shape {tuple(param.shape)}, expected "
                    f"({len(names)}, ...): one row per relation type of its names",
                )
            shape = _shape(param[0])
            keys = ["\t".join((name, side, operator, param_name, shape)) for name in names]
            written += write_rows(out, keys, param.detach().reshape(len(names), -1))
    return written


def write_relations(out: TextIO, config: Any, names: list[str] | None, state_dict: ModuleStateDict) -> int:
    """The relations file of ``config``'s mode; returns the row count.

    ``names``: dynamic mode, the relation types the parameters' rows belong to; standard mode,
    the entity files' ``dynamic_rel_names.json`` if there is one (checked against the config).
    """
    if config.dynamic_relations:
        if names is None:
            raise ValueError("dynamic relations need the relation type names")
        return write_dynamic_relations(out, config, names, state_dict)
    return write_standard_relations(out, config, names, state_dict)


def estimated_bytes(config: Any, state_dict: ModuleStateDict) -> int:
    """About the bytes :func:`write_relations` writes: every operator parameter's values as text, and a key per row.

    Standard mode writes each relation's ``rhs`` parameters in one row; dynamic mode writes the
    ``lhs`` and ``rhs`` parameters, one row per relation (the parameters' first dimension).
    """
    total = 0
    for key, value in state_dict.items():
        side = key.split("_operators.", 1)[0]
        if side not in ("lhs", "rhs") or (side == "lhs" and not config.dynamic_relations):
            continue
        rows = value.shape[0] if config.dynamic_relations and value.dim() > 0 else 1
        total += value.numel() * VALUE_TEXT_BYTES + rows * (ROW_KEY_BYTES + 1)
    return total
