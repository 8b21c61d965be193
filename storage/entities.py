"""Entity metadata of a PBG ``entity_path``: counts, names and dynamic relations.

Files (docs/formats.md, "Entity files"), all small text files written atomically:

- ``entity_count_{type}_{part}.txt``: one non-negative integer and a newline.
- ``entity_names_{type}_{part}.json``: JSON list of names ordered by offset (indent 4).
- ``dynamic_rel_count.txt``: one non-negative integer and a newline.
- ``dynamic_rel_names.json``: JSON list of relation names by index (indent 4).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pbg_core.types import EntityName, Partition
from storage import layout
from storage.errors import BadDataError
from storage.fs import atomic, reads, urls
from storage.fs.urls import StorageOptions


class EntityStore:
    """Reads and writes the entity metadata files under one directory URL.

    Args:
        url: The entity directory (local path, ``file://`` or other fsspec URL).
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, url: str, storage_options: StorageOptions = None) -> None:
        self.url = url
        self.storage_options = storage_options

    def _url(self, name: str) -> str:
        return urls.join_url(self.url, name)

    def has_count(self, entity: EntityName, part: Partition) -> bool:
        """Whether the count file of (entity, part) exists."""
        return reads.exists(self._url(layout.entity_count_file(entity, part)), self.storage_options)

    def load_count(self, entity: EntityName, part: Partition) -> int:
        """Number of entities (or features, for featurized types) in (entity, part).

        Raises:
            DataNotFound: the count file is missing.
            BadDataError: the file holds anything but one non-negative integer.
        """
        return self._read_int(layout.entity_count_file(entity, part))

    def save_count(self, entity: EntityName, part: Partition, count: int) -> None:
        """Write the count of (entity, part)."""
        self._write_int(layout.entity_count_file(entity, part), count)

    def load_names(self, entity: EntityName, part: Partition) -> list[str]:
        """Names of the entities of (entity, part), by offset.

        Raises:
            DataNotFound: the names file is missing.
            BadDataError: the file is not a JSON list of strings.
        """
        return self.read_names_file(layout.entity_names_file(entity, part))

    def save_names(self, entity: EntityName, part: Partition, names: Sequence[str]) -> None:
        """Write the names of (entity, part), by offset."""
        self._write_names(layout.entity_names_file(entity, part), names)

    def load_dynamic_relation_count(self) -> int:
        """Number of relation types (dynamic-relations mode)."""
        return self._read_int(layout.DYNAMIC_REL_COUNT_FILE)

    def save_dynamic_relation_count(self, n: int) -> None:
        """Write the number of relation types."""
        self._write_int(layout.DYNAMIC_REL_COUNT_FILE, n)

    def load_dynamic_relation_names(self) -> list[str]:
        """Relation type names, by index."""
        return self.read_names_file(layout.DYNAMIC_REL_NAMES_FILE)

    def save_dynamic_relation_names(self, names: Sequence[str]) -> None:
        """Write the relation type names, by index."""
        self._write_names(layout.DYNAMIC_REL_NAMES_FILE, names)

    def _read_int(self, name: str) -> int:
        url = self._url(name)
        text = reads.read_text(url, self.storage_options)
        stripped = text.strip()
        if not stripped.isascii() or not stripped.isdigit():
            raise BadDataError(url, f"expected one non-negative integer, got {text!r}")  # url names the file
        return int(stripped)

    def _write_int(self, name: str, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: count must be a non-negative int, got {value!r}")
        atomic.write_text_atomic(self._url(name), f"{value}\n", self.storage_options)

    def read_names_file(self, name: str) -> list[str]:
        """The JSON list of names in the file ``name`` of this directory (any names file of this layout).

        Raises:
            DataNotFound: the file is missing.
            BadDataError: it is not a JSON list of strings.
        """
        url = self._url(name)
        names, text = reads.read_json(url, self.storage_options)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise BadDataError(url, f"{name}: expected a JSON list of strings, got {shown!r}")
        return names

    def _write_names(self, name: str, names: Sequence[str]) -> None:
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise ValueError(f"{name}: names must be strings, got {bad[0]!r}")
        # indent 4, no trailing newline: byte-identical to PBG's json.dump(names, f, indent=4).
        atomic.write_text_atomic(self._url(name), json.dumps(list(names), indent=4), self.storage_options)
