"""What the calls of a :class:`~storage.trained.model.Model` share: a top list's entry, and the checks of their arguments.

Every check runs before anything is read: a bad ``k`` or version, lists of different lengths, a
query form not given exactly once, no relation where the model has several; each one line naming
the argument, the value and what is allowed (:class:`~pbg_core.errors.UsageError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pbg_core.errors import UsageError


@dataclass(frozen=True)
class Answer:
    """One entity of a single query's top list: its place (1 = best), name and score."""

    rank: int
    entity: str
    score: float


def query_form(forms: dict[str, Any], k: int, filtered: bool, filter_paths: Sequence[str] | None) -> str:
    """Which of predict's four query forms is given, after checking its other arguments allow a ranking.

    Raises:
        UsageError: not exactly one form, a bad ``k``, or ``filter_paths`` without ``filtered``.
    """
    given = [name for name, value in forms.items() if value is not None]
    if len(given) != 1:
        raise UsageError(f"predict takes exactly one of head=, tail=, heads=, tails=; got {given or 'none'}")
    check_k(k)
    if filter_paths is not None and not filtered:
        raise UsageError("filter_paths= is given without filtered=True; pass both, or neither")
    return given[0]


def default_relation(dynamic: bool, relations: Sequence[str], given: str | None, how: str) -> str:
    """``given``, or the one relation of a model without dynamic relations (``relations`` by id).

    Args:
        how: How the caller's user gives a relation (e.g. ``--relation NAME``), for the error.

    Raises:
        UsageError: no relation given, and the model has dynamic relations or several (its
            relations named): taking relation 0 would answer a question not asked.
    """
    if given is not None:
        return given
    if not dynamic and len(relations) == 1:
        return relations[0]
    shown = ", ".join(relations[:10]) + (f", ... ({len(relations)} in all)" if len(relations) > 10 else "")
    kind = "dynamic relations" if dynamic else f"{len(relations)} relations"
    raise UsageError(f"the model has {kind}, so there is no default one: give {how}; its relations: {shown}")


def check_version(version: int | None) -> None:
    """Refuse a checkpoint ``version`` that is not None or a whole number >= 1 (versions start at 1)."""
    if version is not None and (isinstance(version, bool) or not isinstance(version, int | np.integer) or version < 1):
        raise UsageError(f"version={version!r} is not allowed; give a whole number >= 1, or None for the latest")


def check_k(k: int) -> None:
    """Refuse a ``k`` that is not a whole number >= 1."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise UsageError(f"k={k!r} is not allowed; give a whole number >= 1")


def same_length(first: str, values: Sequence[str], **others: Sequence[str] | None) -> None:
    """Refuse lists (``others``) whose length is not ``values``'s."""
    for name, other in others.items():
        if other is not None and len(other) != len(values):
            raise UsageError(f"{name} has {len(other)} entries, {first} has {len(values)}; give one per query")


__all__ = ["Answer", "check_k", "check_version", "default_relation", "query_form", "same_length"]
