"""The typed training config: PBG's ``ConfigSchema``, its parsing and the storage options.

Imports only the foundations (``pbg_core.errors``). The public names are re-exported
here: ``from pbg_core.config import ConfigSchema, parse_config``.

- :mod:`.schema`: the frozen pydantic models, cross-field checks and :func:`parse_config`;
- :mod:`.parsing`: raw-dict helpers (legacy keys, ``-p`` overrides, error lines);
- :mod:`.storage_options`: filesystem options, with secrets hidden.
"""

from pbg_core.config.schema import (
    ConfigSchema,
    EntitySchema,
    RelationSchema,
    config_to_json,
    config_to_raw,
    parse_config,
)
from pbg_core.config.storage_options import StorageOptions

__all__ = [
    "ConfigSchema",
    "EntitySchema",
    "RelationSchema",
    "StorageOptions",
    "config_to_json",
    "config_to_raw",
    "parse_config",
]
