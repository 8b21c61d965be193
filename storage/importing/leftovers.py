"""What killed imports left behind, undone or finished by the next import (which holds the lease).

An import ended by ``kill -9`` (or a crash of its machine) leaves its journal
(:mod:`storage.importing.journal`), hidden staging directories ``.pbg-import-<token>-<n>``, and,
if it was an append killed while committing, backups ``.pbg-import-<token>-replaced`` holding
the previous import's files. The next import holds the entity_path's lease, so none of their
owners is alive; :func:`recover` brings each such import to a whole state before anything else:

- killed while **staging** (nothing moved yet): the staging directories (and the output
  directories it created, if empty) are removed; the previous import is as it was.
- an **append** killed while **committing**, before its manifest recorded it: every file it
  moved in is taken out again and every backup put back, so the previous import is whole (its
  manifest still describes it). Once the manifest records the append (its ``import_token``), the
  new import is whole and only the backups and staging directories are removed.
- a **plain import** killed while committing: the files it had not moved yet (all complete: it
  commits only once everything is staged) are moved into place, so the new import is whole.
  It deleted the manifest before committing, so the next import with the same inputs imports again.

Staging or backup directories without a journal (left by a version before journals) are found in
the entity_path and the edge paths of the import now running: staging directories are removed;
backups are put back if their import still had files to move (a staging directory not yet
empty), else removed. Spill directories (``pbg-import-spill-*`` in the temporary directory) whose
owner process is gone from this host are removed too. One log line says what was done and the
bytes freed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
from typing import Any

from storage import layout
from storage.fs import changes, reads, urls
from storage.importing.journal import COMMITTING, Journal, absolute, backup_dir, journal_tokens
from storage.importing.manifest import import_tokens, read_manifest
from storage.importing.space import human
from storage.lease import process_start

logger = logging.getLogger(__name__)


def recover(entity_path: str, edge_paths: list[str], storage_options: Any = None, spill_dir: str | None = None) -> None:
    """Undo or finish what killed imports left in ``entity_path`` (see the module docstring); log what was done."""
    so = storage_options
    committed = import_tokens(read_manifest(entity_path, so))
    done: list[str] = []
    freed = 0
    journaled = set()
    for token in journal_tokens(entity_path, so):
        journal = Journal.load(entity_path, token, so)
        if journal is not None:  # else garbage: its directories are handled as journal-less ones
            journaled.add(token)
            text, bytes_freed = _recover_one(journal, token in committed, so)
            done.append(text)
            freed += bytes_freed
        Journal(token, False).remove(entity_path, so)
    legacy, legacy_freed = _journal_less([entity_path, *edge_paths], journaled, so)
    spills, spill_freed = remove_dead_spills(spill_dir)
    if spills:
        legacy.append(f"{spills} spill director{'y' if spills == 1 else 'ies'} of dead imports removed")
    if done or legacy:
        logger.warning(
            "cleaned up what interrupted imports left: %s (%s freed)",
            "; ".join(done + legacy),
            human(freed + legacy_freed + spill_freed),
        )


def _recover_one(journal: Journal, committed: bool, so: Any) -> tuple[str, int]:
    """Bring one journaled import to a whole state; (what was done, in words; bytes freed)."""
    token = journal.token
    if journal.phase != COMMITTING:
        freed = _remove_staging(journal, so)
        _remove_created(journal, so)
        return f"import {token} was killed while staging: its staging removed, the previous import kept", freed
    if journal.keep_replaced and not committed:
        return f"append {token} was killed while committing: the previous import put back", _roll_back(journal, so)
    if not committed:
        for staging, final in journal.staged:  # a plain import: complete the moves
            for name in reads.listdir(staging, so):
                changes.move(urls.join_url(staging, name), urls.join_url(final, name), so)
    freed = _remove_staging(journal, so)
    if committed:
        return f"import {token} was killed after its commit: its staging and backups removed", freed
    return (
        f"import {token} was killed while committing: its files moved into place (no manifest: it imports again)",
        freed,
    )


def _roll_back(journal: Journal, so: Any) -> int:
    """Take out what an append moved in and put back what it replaced (its manifest never recorded it); bytes freed."""
    for staging, final in journal.staged:
        backup = backup_dir(final, journal.token)
        existed = set(journal.existed.get(staging, []))
        for name in journal.files.get(staging, []):
            target, saved = urls.join_url(final, name), urls.join_url(backup, name)
            if name not in existed:
                changes.remove(target, storage_options=so)  # new: whatever is there is this import's (or nothing)
            elif reads.exists(saved, so):
                changes.move(saved, target, so)  # the previous file, over whatever is there now
            # else: killed before it was moved aside, so the previous file is still in place
    freed = _remove_staging(journal, so)
    _remove_created(journal, so)
    return freed


def _remove_staging(journal: Journal, so: Any) -> int:
    """Remove the import's staging and backup directories; the bytes they held."""
    trees = [tree for staging, final in journal.staged for tree in (staging, backup_dir(final, journal.token))]
    freed = _tree_bytes(trees, so)
    for tree in trees:
        changes.remove_tree(tree, so)
    return freed


def _remove_created(journal: Journal, so: Any) -> None:
    for url in sorted(journal.created, key=len, reverse=True):  # children before parents
        changes.remove_empty_dir(url, so)


def _journal_less(directories: list[str], journaled: set[str], so: Any) -> tuple[list[str], int]:
    """Staging and backup directories with no journal, in ``directories``; (what was done, bytes freed)."""
    found: dict[str, list[tuple[str, str, str]]] = {}  # token -> (directory, leftover url, kind)
    for directory in dict.fromkeys(absolute(d, so) for d in directories):
        for name in reads.listdir(directory, so):
            parsed = layout.parse_import_dir(name)
            if parsed and parsed[0] not in journaled:
                found.setdefault(parsed[0], []).append((directory, urls.join_url(directory, name), parsed[1]))
    done, freed = [], 0
    for token, leftovers in sorted(found.items()):
        staging = [url for _, url, kind in leftovers if kind != "replaced"]
        unfinished = any(reads.listdir(url, so) for url in staging)
        freed += _tree_bytes(staging, so)
        for directory, url, kind in leftovers:
            if kind == "replaced" and unfinished:  # its commit had not ended: the previous files go back
                for name in reads.listdir(url, so):
                    changes.move(urls.join_url(url, name), urls.join_url(directory, name), so)
            elif kind == "replaced":
                freed += _tree_bytes([url], so)
            changes.remove_tree(url, so)
        restored = unfinished and any(kind == "replaced" for *_, kind in leftovers)
        done.append(f"import {token} (no journal): staging removed" + (", replaced files put back" if restored else ""))
    return done, freed


def _tree_bytes(tree_urls: list[str], so: Any) -> int:
    """Bytes of the files below each URL (0 for those that do not exist)."""
    total = 0
    for url in tree_urls:
        filesystem, path = urls.resolve(url, so)
        with urls.translate_errors(url):
            if filesystem.exists(path):
                total += int(filesystem.du(path, total=True))
    return total


def claim_spill(directory: str) -> None:
    """Mark the spill directory ``directory`` as this process's (so that it is removed once it is dead)."""
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start(os.getpid())}
    with open(os.path.join(directory, layout.SPILL_OWNER_FILE), "w", encoding="utf-8") as handle:
        json.dump(owner, handle)


def remove_dead_spills(spill_dir: str | None = None) -> tuple[int, int]:
    """Remove spill directories whose owner process is gone from this host; (how many, bytes freed)."""
    parent = spill_dir or tempfile.gettempdir()
    removed = freed = 0
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(layout.IMPORT_SPILL_PREFIX) and e.is_dir()]
    except OSError:
        return 0, 0
    for entry in entries:
        try:
            with open(os.path.join(entry.path, layout.SPILL_OWNER_FILE), encoding="utf-8") as handle:
                owner = json.load(handle)
            dead = owner["host"] == socket.gethostname() and process_start(int(owner["pid"])) != owner["started"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # no owner recorded (being created, or an older version's): not ours to judge
        if dead and owner["started"]:
            freed += sum(f.stat().st_size for f in os.scandir(entry.path) if f.is_file())
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed, freed


__all__ = ["claim_spill", "recover", "remove_dead_spills"]
