"""An import's journal: where it staged its outputs, so that what a killed import left can be undone or finished.

``{entity_path}/.pbg-import-<token>.json`` (written atomically) lists every hidden staging
directory of the import (:mod:`storage.importing.staging`) before it is created, with its final
directory and the output directories the import created. Right before the first file moves into
place it is rewritten with ``phase: "committing"`` and the names of every staged file (all
complete by then; for an append, also which of them replace a file). It is deleted last, after the staging and backup directories. An import that
ends in any way but ``kill -9`` (or a crash of the machine) removes its journal with the rest;
:mod:`storage.importing.leftovers` reads the ones a killed import left.

URLs are recorded absolute (local paths resolved), so a later import run from another directory
finds them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from storage import layout
from storage.errors import DataNotFound
from storage.fs import atomic, changes, reads, urls

STAGING = "staging"
COMMITTING = "committing"


def absolute(url: str, storage_options: Any = None) -> str:
    """``url`` with a local path made absolute (remote URLs as they are)."""
    filesystem, path = urls.resolve(url, storage_options)
    return path if urls.is_local(filesystem) else url


def journal_url(entity_path: str, token: str) -> str:
    """Where the journal of the import ``token`` lives."""
    return urls.join_url(entity_path, layout.import_journal_file(token))


def backup_dir(final_url: str, token: str) -> str:
    """The hidden directory an append moves the files it replaces in ``final_url`` into."""
    return urls.join_url(final_url, layout.import_backup_dir(token))


def journal_tokens(entity_path: str, storage_options: Any = None) -> list[str]:
    """The tokens of the journals in ``entity_path``."""
    names = reads.listdir(entity_path, storage_options)
    return [token for token in map(layout.parse_import_journal_file, names) if token is not None]


@dataclass
class Journal:
    """What one import staged (see the module docstring).

    Attributes:
        token: The import's token (its staging directories are ``.pbg-import-<token>-<n>``).
        keep_replaced: An append: a file already at a final name is first moved into the backup directory.
        phase: ``"staging"`` or ``"committing"``.
        staged: (staging directory, final directory) pairs, absolute URLs, in staging order.
        created: Output directories the import created (absolute URLs).
        files: In the committing phase: the names staged in each staging directory.
        existed: In the committing phase, with ``keep_replaced``: the names of ``files`` that were
            already at their final place (each is moved into the backup directory before it is replaced).
    """

    token: str
    keep_replaced: bool
    phase: str = STAGING
    staged: list[tuple[str, str]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)
    existed: dict[str, list[str]] = field(default_factory=dict)

    def save(self, entity_path: str, storage_options: Any = None) -> None:
        """Write the journal (atomically)."""
        atomic.write_text_atomic(journal_url(entity_path, self.token), json.dumps(asdict(self)), storage_options)

    def remove(self, entity_path: str, storage_options: Any = None) -> None:
        """Delete the journal (idempotent)."""
        changes.remove(journal_url(entity_path, self.token), missing_ok=True, storage_options=storage_options)

    @classmethod
    def load(cls, entity_path: str, token: str, storage_options: Any = None) -> Journal | None:
        """The journal of ``token``, or None when it is missing or unreadable."""
        try:
            data = json.loads(reads.read_text(journal_url(entity_path, token), storage_options))
            return cls(
                token=str(data["token"]),
                keep_replaced=bool(data["keep_replaced"]),
                phase=str(data["phase"]),
                staged=[(str(s), str(f)) for s, f in data["staged"]],
                created=[str(c) for c in data["created"]],
                files={str(k): [str(n) for n in v] for k, v in data["files"].items()},
                existed={str(k): [str(n) for n in v] for k, v in data.get("existed", {}).items()},
            )
        except (DataNotFound, ValueError, KeyError, TypeError):
            return None
