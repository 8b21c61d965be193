"""Re-import detection: a content fingerprint of an import's inputs and options.

PBG's importer skips when its output files exist, even if the inputs changed since. Here an
import writes ``{entity_path}/import_manifest.json`` last, holding the fingerprint of what it
read and how (every input's bytes, or size + ETag on object stores, plus the options and the
config fields that shape the output) and its report. A later import with the same fingerprint
and complete outputs does nothing; any difference imports again. The manifest is deleted
right before a new import moves its first file into place (everything is staged by then), so
an interrupted commit never leaves one that matches, while an import that fails earlier leaves
the previous output and its manifest intact.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

from storage.errors import DataNotFound
from storage.fs import atomic, changes, reads, urls
from storage.fs.urls import resolve

MANIFEST = "import_manifest.json"
_BLOCK = 8 << 20


def fingerprint(inputs: Sequence[str], options: dict[str, Any], storage_options: Any = None) -> str:
    """blake2b of the options (canonical JSON) and of every input's content (in order)."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    for url in inputs:
        digest.update(b"\0" + url.encode() + b"\0")
        _content_digest(url, storage_options, digest)
    return digest.hexdigest()


def _content_digest(url: str, storage_options: Any, digest: Any) -> None:
    filesystem, path = resolve(url, storage_options)
    with urls.translate_errors(url):
        if not urls.is_local(filesystem):
            # Reading an object store twice costs a second download: its ETag (an MD5 of
            # the content for single-part uploads) and size stand for the bytes.
            info = filesystem.info(path)
            digest.update(f"{info.get('size')}:{info.get('ETag') or info.get('etag')}".encode())
            return
        with filesystem.open(path, "rb") as handle:
            while block := handle.read(_BLOCK):
                digest.update(block)


def read_manifest(entity_path: str, storage_options: Any = None) -> dict[str, Any] | None:
    """The last complete import's manifest, or None (none, or unreadable: import again)."""
    try:
        manifest = json.loads(reads.read_text(urls.join_url(entity_path, MANIFEST), storage_options))
    except (DataNotFound, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def remove_manifest(entity_path: str, storage_options: Any = None) -> None:
    """Forget the last import (before a new one starts writing)."""
    changes.remove(urls.join_url(entity_path, MANIFEST), missing_ok=True, storage_options=storage_options)


def write_manifest(
    entity_path: str,
    print_: str | None,
    report: dict[str, Any],
    storage_options: Any = None,
    where: dict[str, list[str]] | None = None,
    generations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Record a complete import (written atomically, after every output is in place); returns the body.

    ``where``: a plain import's ``inputs`` and ``edge_paths``. ``generations``: an appending
    import's history (:func:`generation_history`), this import last.
    """
    body: dict[str, Any] = {"fingerprint": print_, "imported_at": now_utc(), "report": report, **(where or {})}
    if generations is not None:
        body["generations"] = generations
    atomic.write_text_atomic(urls.join_url(entity_path, MANIFEST), json.dumps(body, indent=2), storage_options)
    return body


def now_utc() -> str:
    """The time as the manifest records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def generation_history(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The imports an append builds on: the manifest's generations, or its one plain import as generation 0
    (an import without a manifest, e.g. PBG's, is generation 0 with nothing known about it)."""
    if not manifest:
        return [{"generation": 0, "append": False, "fingerprint": None, "imported_at": None, "report": None}]
    if isinstance(manifest.get("generations"), list):
        return list(manifest["generations"])
    keys = ("fingerprint", "imported_at", "report", "inputs", "edge_paths")
    return [{"generation": 0, "append": False, **{k: manifest.get(k) for k in keys}}]
