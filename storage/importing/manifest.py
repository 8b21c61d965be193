"""Re-import detection: what each import read and wrote, by stable identity, in ``import_manifest.json``.

PBG's importer skips when its output files exist, even if the inputs changed since. Here an
import writes ``{entity_path}/import_manifest.json`` as its commit record, holding the
fingerprint of what it read and how and its report. A later import with the same fingerprint
and complete outputs does nothing; any difference imports again. A plain import deletes the
manifest right before it moves its first file into place (everything is staged by then), so an
interrupted commit never leaves one that matches, while an import that fails earlier leaves the
previous output and its manifest intact.

Records do not depend on where the project lies (docs/formats.md, "Imports"): places are kept
relative to the **import root**, the directory holding ``entity_path`` (:func:`import_root`),
and files by content, so a project moved or copied elsewhere is recognised:

- ``input_files``: each input's :class:`storage.fs.identity.FileIdentity` (its place under the
  root, or its base name when outside it; size; MD5, or the ETag on an object store);
- ``edge_path_places``: each edge path's place under the root (None when outside it);
  :func:`read_manifest` gives ``edge_paths`` back as they are now (the root joined with the
  place) when the recorded spelling no longer leads there;
- ``fingerprint`` (``fingerprint_version`` 2): blake2b of the options (edge paths by place)
  and of the input identities, in order (:func:`fingerprint`).

Manifests written before (no ``fingerprint_version``) hashed each input's URL as then spelled
together with its bytes; :func:`legacy_fingerprints` recomputes that hash with the recorded
spellings and the current files' bytes, so such an entry still matches inputs whose content and
options are the same, wherever they are now.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from collections.abc import Sequence
from typing import Any

from storage import layout
from storage.errors import DataNotFound
from storage.fs import atomic, changes, reads, urls
from storage.fs.identity import FileIdentity
from storage.fs.urls import resolve

FINGERPRINT_VERSION = 2
_BLOCK = 8 << 20
# What one import's record holds, beyond generation and append (docs/formats.md, "Imports").
RECORD_KEYS = (
    "fingerprint",
    "fingerprint_version",
    "import_token",
    "imported_at",
    "report",
    "inputs",
    "input_files",
    "edge_paths",
    "edge_path_places",
    "replaces",
    "replaced",
)


def import_root(entity_path: str) -> str:
    """The directory holding ``entity_path`` (as spelled; "" for a bare relative name: the current directory)."""
    return posixpath.dirname(entity_path.rstrip("/"))


def place_below(url: str, root: str, storage_options: Any = None) -> str | None:
    """``url``'s path below ``root`` (both resolved: spelling does not matter); None when it is not below it."""
    filesystem, path = resolve(url, storage_options)
    root_fs, root_path = resolve(root or ".", storage_options)
    if type(filesystem) is not type(root_fs):
        return None
    path, base = posixpath.normpath(path), posixpath.normpath(root_path).rstrip("/")
    return path[len(base) + 1 :] if path.startswith(base + "/") else None


def fingerprint(files: Sequence[FileIdentity], options: dict[str, Any]) -> str:
    """blake2b of the options (canonical JSON) and of every input's identity, in order."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    for identity in files:
        digest.update(b"\0" + json.dumps(identity.to_json(), sort_keys=True).encode())
    return digest.hexdigest()


def legacy_fingerprints(
    spellings: Sequence[Sequence[str]],
    options: Sequence[dict[str, Any]],
    inputs: Sequence[str],
    storage_options: Any = None,
) -> list[str]:
    """The fingerprints manifests without ``fingerprint_version`` recorded, one per candidate.

    Candidate i is the options ``options[i]`` and the input URLs as spelled ``spellings[i]``
    (as that manifest recorded them), hashed with the bytes of the current ``inputs``, each read once.
    """
    digests = [hashlib.blake2b(digest_size=20) for _ in spellings]
    for digest, opts in zip(digests, options, strict=True):
        digest.update(json.dumps(opts, sort_keys=True, default=str).encode())
    for i, url in enumerate(inputs):
        for digest, spelled in zip(digests, spellings, strict=True):
            digest.update(b"\0" + spelled[i].encode() + b"\0")
        filesystem, path = resolve(url, storage_options)
        with urls.translate_errors(url):
            if not urls.is_local(filesystem):
                info = filesystem.info(path)  # size and ETag stood for an object's bytes
                stand_in = f"{info.get('size')}:{info.get('ETag') or info.get('etag')}".encode()
                for digest in digests:
                    digest.update(stand_in)
                continue
            with filesystem.open(path, "rb") as handle:
                while block := handle.read(_BLOCK):
                    for digest in digests:
                        digest.update(block)
    return [digest.hexdigest() for digest in digests]


def read_manifest(entity_path: str, storage_options: Any = None) -> dict[str, Any] | None:
    """The last complete import's manifest, or None (none, or unreadable: import again).

    Each record's ``edge_paths`` are given where they are now (see the module docstring).
    """
    try:
        manifest = json.loads(reads.read_text(urls.join_url(entity_path, layout.IMPORT_MANIFEST_FILE), storage_options))
    except (DataNotFound, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    root = import_root(entity_path)
    for record in [manifest, *(g for g in manifest.get("generations") or [] if isinstance(g, dict))]:
        _locate_edge_paths(record, root, storage_options)
    return manifest


def _locate_edge_paths(record: dict[str, Any], root: str, storage_options: Any) -> None:
    """Point ``record["edge_paths"]`` at their recorded places under ``root`` where the spelling moved away."""
    paths, places = record.get("edge_paths"), record.get("edge_path_places")
    if not isinstance(paths, list) or not isinstance(places, list) or len(paths) != len(places):
        return
    for i, (path, place) in enumerate(zip(paths, places, strict=True)):
        if isinstance(place, str) and place_below(path, root, storage_options) != place:
            paths[i] = urls.join_url(root, place) if root else place


def import_stamp(entity_path: str, storage_options: Any = None) -> str | None:
    """What identifies the import now in ``entity_path``: its manifest's text (None without one).

    Every import that commits writes a new manifest (a new ``import_token``; a plain import
    deletes the old one before its first move), so two equal stamps mean no import committed between.
    """
    try:
        return reads.read_text(urls.join_url(entity_path, layout.IMPORT_MANIFEST_FILE), storage_options)
    except DataNotFound:
        return None


def import_tokens(manifest: dict[str, Any] | None) -> set[str]:
    """The tokens of every import the manifest records as complete (its commit points)."""
    if not manifest:
        return set()
    records = [manifest, *(g for g in manifest.get("generations") or [] if isinstance(g, dict))]
    return {str(r["import_token"]) for r in records if r.get("import_token")}


def remove_manifest(entity_path: str, storage_options: Any = None) -> None:
    """Forget the last import (before a new one starts writing)."""
    changes.remove(
        urls.join_url(entity_path, layout.IMPORT_MANIFEST_FILE), missing_ok=True, storage_options=storage_options
    )


def write_manifest(
    entity_path: str,
    record: dict[str, Any],
    storage_options: Any = None,
    generations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Record a complete import (atomically, once every output is in place); returns the body.

    ``record``: the import's :data:`RECORD_KEYS` (:func:`import_record`). ``generations``: an
    appending import's history (:func:`generation_history`), this import last.
    """
    body: dict[str, Any] = {key: record[key] for key in RECORD_KEYS if key in record}
    if generations is not None:
        body["generations"] = generations
    atomic.write_text_atomic(
        urls.join_url(entity_path, layout.IMPORT_MANIFEST_FILE), json.dumps(body, indent=2), storage_options
    )
    return body


def import_record(
    entity_path: str,
    inputs: Sequence[str],
    files: Sequence[FileIdentity] | None,
    edge_paths: Sequence[str],
    storage_options: Any = None,
    **fields: Any,
) -> dict[str, Any]:
    """One import's record: ``fields`` (fingerprint, import_token, report, ...) and where it read and wrote."""
    root = import_root(entity_path)
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "imported_at": now_utc(),
        "inputs": list(inputs),
        "input_files": None if files is None else [identity.to_json() for identity in files],
        "edge_paths": list(edge_paths),
        "edge_path_places": [place_below(path, root, storage_options) for path in edge_paths],
        **fields,
    }


def now_utc() -> str:
    """The time as the manifest records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def generation_history(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The imports an append builds on: the manifest's generations, or its one plain import as generation 0
    (an import without a manifest, e.g. PBG's, is generation 0 with nothing known about it).

    Each entry holds ``generation``, ``append`` and the record keys (:data:`RECORD_KEYS`) the
    manifest has for it; docs/formats.md lists them.
    """
    if not manifest:
        return [{"generation": 0, "append": False, "fingerprint": None, "imported_at": None, "report": None}]
    if isinstance(manifest.get("generations"), list):
        return list(manifest["generations"])
    always = ("fingerprint", "imported_at", "report", "inputs", "edge_paths")
    recorded = {k: manifest.get(k) for k in RECORD_KEYS if k in manifest or k in always}
    return [{"generation": 0, "append": False, **recorded}]
