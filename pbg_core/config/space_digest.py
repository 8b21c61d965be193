"""A search space's normalized form and digest: a resumed study refuses a space that changed.

The study keeps :func:`normalized_space` (every default filled in, params by path) and
:func:`space_digest` when it starts; on resume :func:`check_unchanged` compares the space given
now with the kept one and names the first difference. Key order in the file does not matter;
the order of a categorical's choices does (it is part of what the sampler draws from).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pbg_core.config.search_space import SearchSpace
from pbg_core.errors import SearchSpaceError


def normalized_space(space: SearchSpace) -> dict[str, Any]:
    """The space as JSON-safe data with every default filled in and params by path (the stored copy)."""
    data = space.model_dump(mode="json")
    data["params"] = {path: data["params"][path] for path in sorted(data["params"])}
    return data


def space_digest(space: SearchSpace) -> str:
    """SHA-256 (hex) of the normalized space: the same for the same space, whatever its key order."""
    text = json.dumps(normalized_space(space), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def space_changes(stored: Mapping[str, Any], space: SearchSpace) -> list[str]:
    """What differs between a study's stored normalized space and ``space``, one line each.

    Top-level sections first, then params by path: ``params.lr.high: 0.5 -> 0.9``,
    ``params.dimension: added``, ``params.margin: removed``.
    """
    new = normalized_space(space)
    lines: list[str] = []
    for key in new:
        if key != "params" and stored.get(key) != new[key]:
            lines.extend(_differences(key, stored.get(key), new[key]))
    old_params = stored.get("params") or {}
    for path in sorted(set(old_params) | set(new["params"])):
        if path not in new["params"]:
            lines.append(f"params.{path}: removed")
        elif path not in old_params:
            lines.append(f"params.{path}: added")
        elif old_params[path] != new["params"][path]:
            lines.extend(_differences(f"params.{path}", old_params[path], new["params"][path]))
    return lines


def _differences(path: str, old: Any, new: Any) -> list[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        if old.get("type") != new.get("type"):  # another kind of pruner or param: its settings differ too
            return [f"{path}.type: {old.get('type')!r} -> {new.get('type')!r}"]
        return [
            f"{path}.{key}: {old.get(key)!r} -> {new.get(key)!r}"
            for key in [*new, *(k for k in old if k not in new)]
            if old.get(key) != new.get(key)
        ]
    return [f"{path}: {old!r} -> {new!r}"]


def check_unchanged(stored: Mapping[str, Any], space: SearchSpace, source: str | None = None) -> None:
    """Refuse to resume a study whose space changed since it started, naming the first change.

    Args:
        stored: The study's normalized space (:func:`normalized_space`, kept with the study).
        space: The space given now.
        source: The space file given now, named in the error.

    Raises:
        SearchSpaceError: one line naming the first changed key and the count of the others.
    """
    changes = space_changes(stored, space)
    if not changes:
        return
    more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
    raise SearchSpaceError(
        [
            f"{changes[0]}{more}: the study was started with another space and keeps it; restore the "
            "space or start a new study (another study name)"
        ],
        source,
    )
