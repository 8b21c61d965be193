"""The import a retraining run builds on: its generations, typed, and how to import more.

A retraining run reads the import manifest's generations (``pbg import`` and each ``--append``
are one generation each, docs/formats.md "Imports") and may import what arrived as the next one.
This package does not import :mod:`storage.importing` (the stores and their users never do: its
importer loads no torch, retraining's holdout split does), so the task that runs the retraining
step reads the manifest into :class:`ImportedData` and hands over an :data:`ImportFiles` that
imports through it (:func:`tasks.retrain.receive_arrivals`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from storage.fs.identity import FileIdentity


@dataclass(frozen=True)
class Generation:
    """One import generation as the manifest records it.

    Attributes:
        number: The generation (0: the first import).
        edge_paths: Its edge paths as recorded (the project may have moved since).
        inputs: The files it imported, as spelled then ("" for a record that is not a path).
        input_files: Each input's identity where the import recorded it (None for older records).
        imported_at: When (ISO 8601), if recorded.
    """

    number: int
    edge_paths: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    input_files: tuple[FileIdentity | None, ...] = ()
    imported_at: str | None = None

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Generation:
        """The generation a manifest history entry describes (a missing number is 0: an import of one generation)."""
        when = entry.get("imported_at")
        return cls(
            number=int(entry.get("generation") or 0),
            edge_paths=tuple(str(p) for p in entry.get("edge_paths") or []),
            inputs=tuple(p if isinstance(p, str) else "" for p in entry.get("inputs") or []),
            input_files=tuple(FileIdentity.from_json(f) for f in entry.get("input_files") or []),
            imported_at=str(when) if when is not None else None,
        )

    def input_identity(self, index: int) -> FileIdentity | None:
        """The recorded identity of input ``index``, if the import recorded one."""
        return self.input_files[index] if index < len(self.input_files) else None


@dataclass(frozen=True)
class ImportedData:
    """What ``entity_path`` holds, as retraining needs it.

    Attributes:
        generations: The manifest's generations, oldest first (empty without a manifest).
        holds_import: Whether ``entity_path`` holds an import at all (perhaps PBG's, without a manifest).
        entity_path: Where (for messages).
        manifest_url: The manifest's URL (for messages).
    """

    generations: tuple[Generation, ...]
    holds_import: bool
    entity_path: str
    manifest_url: str

    def numbers(self) -> list[int]:
        """The generations there are, sorted; an import without a manifest is generation 0."""
        found = sorted({g.number for g in self.generations})
        return found or ([0] if self.holds_import else [])

    def newest(self) -> int | None:
        """The newest generation of the manifest; None before the first import."""
        return max((g.number for g in self.generations), default=None)


# Import ``files`` into ``edge_paths`` (one each), appending when ``append``; what entity_path holds after.
ImportFiles = Callable[[list[str], list[str], bool], ImportedData]


__all__ = ["Generation", "ImportFiles", "ImportedData"]
