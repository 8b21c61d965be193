"""Raw configs shared by the tests of pbg_core.config."""

from __future__ import annotations

from typing import Any

import pytest

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError


def minimal(**fields: Any) -> dict[str, Any]:
    """The smallest valid raw config (two entity types, one relation), plus ``fields``."""
    raw: dict[str, Any] = {
        "entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
        "relations": [{"name": "buys", "lhs": "user", "rhs": "item"}],
        "dimension": 8,
        "entity_path": "data/ents",
        "edge_paths": ["data/edges"],
        "checkpoint_path": "model/ckpt",
    }
    raw.update(fields)
    return raw


def problems_of(raw: dict[str, Any], overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, overrides)
    return info.value.problems
