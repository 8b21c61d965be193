"""Dynamic relations' operator parameters moved by relation name.

In dynamic mode every model parameter is a relation operator's, with one row per relation type
(index = position in ``dynamic_rel_names.json``), and a plain re-import reshuffles those names
too. A relation type present on both sides keeps its trained row (and its Adagrad sums, which
have the parameter's shape); a new one starts as a fresh model's row (its operator's identity:
ones, zeros or an identity matrix), with zero sums; a relation type no longer imported is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from pbg_core.training.optimizers import state_from_bytes, state_to_bytes


def move_relations(
    state_dict: Mapping[str, torch.Tensor],
    optim: bytes | None,
    index: np.ndarray,
    fresh: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], bytes | None]:
    """The model (and its optimizer state) with one row per relation type now.

    Args:
        state_dict: The trained model's parameters (private keys), one row per old relation type.
        optim: Its serialized Adagrad state (one ``sum`` per parameter, in parameter order), or None.
        index: Per relation type now, its old index, or -1 for a new one.
        fresh: A fresh model's parameters for the relation types now (their order is the parameters').

    Returns:
        (parameters, optimizer state) with ``len(index)`` rows each.
    """
    kept = torch.from_numpy(np.flatnonzero(index >= 0))
    was = torch.from_numpy(index[index >= 0])
    old_count = _old_count(state_dict, fresh, len(index))
    moved = {}
    for key, start in fresh.items():
        old = state_dict.get(key)
        moved[key] = _moved(old, start.clone(), kept, was, old_count) if old is not None else start.clone()
    if optim is None:
        return moved, None
    state = state_from_bytes(optim)
    for entry in state.get("state", {}).values():
        saved = entry.get("sum")
        if isinstance(saved, torch.Tensor) and saved.dim() >= 1 and saved.shape[0] == old_count:
            entry["sum"] = _moved(saved, torch.zeros(len(index), *saved.shape[1:]), kept, was, old_count)
    return moved, state_to_bytes(state)


def _old_count(state_dict: Mapping[str, torch.Tensor], fresh: Mapping[str, torch.Tensor], new_count: int) -> int:
    """Relation types the trained model has rows for (the leading size of its parameters)."""
    sizes = {int(value.shape[0]) for key, value in state_dict.items() if key in fresh and value.dim() >= 1}
    return sizes.pop() if len(sizes) == 1 else new_count


def _moved(old: torch.Tensor, out: torch.Tensor, kept: torch.Tensor, was: torch.Tensor, old_count: int) -> torch.Tensor:
    """``out`` with the rows ``kept`` taken from ``old``'s rows ``was`` (when the shapes allow it)."""
    if old.dim() >= 1 and old.shape[0] == old_count and old.shape[1:] == out.shape[1:]:
        out[kept] = old[was].to(out.dtype)
    return out


__all__ = ["move_relations"]
