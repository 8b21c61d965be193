"""The typed training config: PBG's ``ConfigSchema``, its parsing and the storage options.

Imports only the foundations (``pbg_core.errors``). The public names are re-exported
here: ``from pbg_core.config import ConfigSchema, parse_config``.

- :mod:`.validation`: :func:`parse_config` for untrusted input, and the config back to data;
- :mod:`.schema`: the frozen :class:`ConfigSchema` and its cross-field rules;
- :mod:`.sections`: the entity and relation type sections;
- :mod:`.validators`: the choice types and field validators the models share;
- :mod:`.parsing`: raw-dict helpers (legacy keys, ``-p`` overrides, error lines);
- :mod:`.storage_options`: filesystem options, with secrets hidden;
- :mod:`.search_space`: a tuning study's search-space file, and a sampled point as ``-p`` overrides;
- :mod:`.space_checks`: :func:`~.space_checks.check_space`, whether a search space fits a config;
- :mod:`.space_digest`: a search space's normalized form and digest, for resuming a study.
"""

from pbg_core.config.schema import ConfigSchema
from pbg_core.config.sections import EntitySchema, RelationSchema
from pbg_core.config.storage_options import StorageOptions
from pbg_core.config.validation import config_to_json, config_to_raw, parse_config

__all__ = [
    "ConfigSchema",
    "EntitySchema",
    "RelationSchema",
    "StorageOptions",
    "config_to_json",
    "config_to_raw",
    "parse_config",
]
