"""``init_by_name/`` in a checkpoint directory: ``init_path``'s rows, remapped by name for this run.

Layout (written by :mod:`storage.remap.prepare`, ``start.json`` last):

- ``embeddings_{type}_{part}.v{V}.h5``: the partitions of each entity type whose names moved,
  in the current layout (``V``: ``init_path``'s version; ``names/digest``: the current names);
- ``model.v{V}.h5``: the model, when dynamic relation types moved;
- ``fresh_rows.h5``: per remapped partition, the sorted offsets of the rows of entities
  ``init_path`` never trained (root attribute ``keys``: JSON list of ``[type, partition]``;
  dataset ``offsets_{i}`` for ``keys[i]``), for neighbor means;
- ``start.json``: the record: ``init_path`` and its version, the names record of both sides, the
  types and whether the relations were remapped, the counts, the seed.

Every process that starts a partition from ``init_path`` (the run's own, a cluster's machines)
reads through :class:`InitByName`: the remapped types from here, the others from ``init_path``.
The directory is used only while its record matches ``init_path``'s version and names record
and the names the entity files hold now; once a version is committed nothing reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from pbg_core.errors import PbgError
from pbg_core.ports import CheckpointMetadata, NamesDigests
from pbg_core.types import EntityName, Partition, PartitionKey
from storage import hdf5, layout
from storage.checkpoint_names import NamesChangedError, compare, recorded_digests
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, changes, reads, urls
from storage.fs.urls import StorageOptions

FORMAT = 1


def digests_json(names: NamesDigests) -> dict[str, Any]:
    """A names record as JSON: ``{"entities": [[type, part, digest], ...], "relations": digest or null}``."""
    entities = [[entity, part, digest] for (entity, part), digest in sorted(names.entities.items())]
    return {"entities": entities, "relations": names.relations}


class StartDir:
    """The ``init_by_name/`` directory of one checkpoint directory."""

    def __init__(self, checkpoint_url: str, storage_options: StorageOptions = None) -> None:
        self.url = urls.join_url(checkpoint_url, layout.START_BY_NAME_DIR)
        self.storage_options = storage_options
        self.store = CheckpointStore(self.url, storage_options)

    def __repr__(self) -> str:
        return f"StartDir({self.url!r})"

    def identity(
        self, init: CheckpointStore, init_version: int, recorded: NamesDigests, current: NamesDigests
    ) -> dict[str, Any]:
        """What a record must say to be this run's start: whose rows, which names on both sides."""
        return {
            "format": FORMAT,
            "init_path": init.url,
            "version": init_version,
            "init_names": digests_json(recorded),
            "names": digests_json(current),
        }

    def record(self) -> dict[str, Any] | None:
        """The record, or None when there is none (never prepared, or an attempt cut off before it)."""
        url = urls.join_url(self.url, layout.START_RECORD_FILE)
        try:
            loaded = json.loads(reads.read_text(url, self.storage_options))
        except DataNotFound:
            return None
        except json.JSONDecodeError as err:
            raise BadDataError(url, f"not a start record of pbg-flow ({err.msg})") from None
        return loaded if isinstance(loaded, dict) else None

    def write_record(self, record: Mapping[str, Any]) -> None:
        """Write the record (the last step of a preparation: it makes the directory usable)."""
        text = json.dumps(dict(record), indent=2, sort_keys=True)
        atomic.write_text_atomic(urls.join_url(self.url, layout.START_RECORD_FILE), text, self.storage_options)

    def matches(self, identity: Mapping[str, Any]) -> dict[str, Any] | None:
        """The record if it is complete and for ``identity`` (see :meth:`identity`), else None."""
        record = self.record()
        if record is None or any(record.get(key) != value for key, value in identity.items()):
            return None
        return record

    def remove(self) -> None:
        """Delete the directory and everything in it (idempotent)."""
        changes.remove_tree(self.url, self.storage_options)

    def save_fresh(self, fresh: Mapping[PartitionKey, torch.Tensor]) -> None:
        """Write the offsets of the rows ``init_path`` never trained, per remapped partition."""
        keys = sorted(fresh)
        with hdf5.open_write(urls.join_url(self.url, layout.FRESH_ROWS_FILE), self.storage_options) as hf:
            hf.attrs["keys"] = json.dumps([list(key) for key in keys])
            for i, key in enumerate(keys):
                hf.create_dataset(f"offsets_{i}", data=fresh[key].numpy().astype(np.int64))

    def load_fresh(self) -> dict[PartitionKey, torch.Tensor]:
        """What :meth:`save_fresh` wrote ({} when there is no file)."""
        url = urls.join_url(self.url, layout.FRESH_ROWS_FILE)
        try:
            with hdf5.open_read(url, self.storage_options) as hf:
                keys = json.loads(str(hf.attrs["keys"]))
                return {
                    (str(entity), int(part)): torch.from_numpy(hdf5.require_dataset(hf, f"offsets_{i}", url)[()])
                    for i, (entity, part) in enumerate(keys)
                }
        except DataNotFound:
            return {}
        except (KeyError, ValueError, TypeError) as err:
            raise BadDataError(url, f"not a fresh-rows file of pbg-flow ({err})") from None


class InitByName:
    """``init_path`` as a session reads it after a remap: the remapped types (and model) from the
    start directory, the rest from ``init_path`` itself, all at ``init_path``'s version. Read-only."""

    def __init__(self, init: CheckpointStore, start: StartDir, record: Mapping[str, Any]) -> None:
        self.init = init
        self.start = start
        self.version = int(record["version"])
        self.remapped = frozenset(str(entity) for entity in record.get("remapped", []))
        self.relations = bool(record.get("relations", False))
        self.url = f"{init.url} (remapped by name into {start.url})"

    def __repr__(self) -> str:
        return f"InitByName({self.init.url!r}, {sorted(self.remapped)})"

    def read_version(self) -> int:
        """``init_path``'s version (the one the record was prepared from)."""
        return self.version

    def _for(self, entity: EntityName) -> CheckpointStore:
        return self.start.store if entity in self.remapped else self.init

    def has_embeddings(self, entity: EntityName, part: Partition, version: int) -> bool:
        """Whether (entity, part) has a start here."""
        return self._for(entity).has_embeddings(entity, part, version)

    def load_embeddings(
        self, entity: EntityName, part: Partition, version: int, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, bytes | None]:
        """The start rows of (entity, part) and their row-Adagrad state."""
        return self._for(entity).load_embeddings(entity, part, version, out)

    def embeddings_shape(self, entity: EntityName, part: Partition, version: int) -> tuple[int, int]:
        """(rows, dimension) of the start of (entity, part)."""
        return self._for(entity).embeddings_shape(entity, part, version)

    def has_model(self, version: int) -> bool:
        """Whether there is a model to start from."""
        return (self.start.store if self.relations else self.init).has_model(version)

    def load_model(self, version: int) -> tuple[dict[str, torch.Tensor], bytes | None]:
        """The model to start from (relation rows remapped by name in dynamic mode)."""
        return (self.start.store if self.relations else self.init).load_model(version)

    def save_embeddings(self, *args: Any, **kwargs: Any) -> None:
        """Refused: a start is never written through a session."""
        raise PbgError(f"{self.url} is read-only")

    def save_model(self, *args: Any, **kwargs: Any) -> None:
        """Refused: a start is never written through a session."""
        raise PbgError(f"{self.url} is read-only")

    def fresh_rows(self) -> dict[PartitionKey, torch.Tensor]:
        """Per remapped partition, the offsets of rows of entities ``init_path`` never trained."""
        return self.start.load_fresh()


def init_rows(
    init: CheckpointStore, start: StartDir, current: NamesDigests, keys: list[PartitionKey], dynamic: bool
) -> CheckpointStore | InitByName:
    """``init`` when its names record matches ``current`` (or cannot be checked), else its start by name.

    Raises:
        NamesChangedError: the names moved and ``start`` holds no start prepared for them.
    """
    version = init.read_version()
    recorded = recorded_digests(init.url, version, keys, dynamic, init.storage_options)
    if compare(recorded, current, keys, dynamic).same:
        return init
    record = start.matches(start.identity(init, version, recorded, current))
    if record is None:
        raise NamesChangedError(
            f"init_path {init.url} version {version} holds rows of other entity names than the entity files "
            f"list now, and {start.url} holds no start remapped by name for them; `pbg train` (the pbg flow) "
            "prepares it before training"
        )
    return InitByName(init, start, record)


def start_metadata(init: CheckpointStore, version: int, names: NamesDigests) -> CheckpointMetadata:
    """The attributes of a start file: ``init_path``'s config and iteration, the current names record."""
    if init.has_model(version):
        found = init.load_metadata(version)
        return CheckpointMetadata(config_json=found.config_json, iteration=found.iteration, names=names)
    return CheckpointMetadata(config_json="", names=names)


__all__ = [
    "InitByName",
    "StartDir",
    "digests_json",
    "init_rows",
    "start_metadata",
]
