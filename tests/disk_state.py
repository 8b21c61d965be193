"""What a directory holds, byte for byte: for tests that check a refusal changed nothing on disk.

``tree_state(root)`` maps every file below ``root`` (local directory or ``s3://`` prefix) to its
size and SHA-256, by path relative to ``root``; two states are equal when the same files hold
the same bytes. Read with fsspec directly (no listings cache), independent of the code under test.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from fsspec.core import url_to_fs


def tree_state(root: str | Path) -> dict[str, tuple[int, str]]:
    """Relative path -> (size, sha256 hex) of every file below ``root`` ({} if it does not exist)."""
    url = str(root)
    options = {"use_listings_cache": False} if url.startswith("s3://") else {}
    filesystem, base = url_to_fs(url, **options)
    if not filesystem.exists(base):
        return {}
    state: dict[str, tuple[int, str]] = {}
    for path in filesystem.find(base):
        data = filesystem.cat_file(path)
        relative = str(path)[len(base.rstrip("/")) + 1 :]
        state[relative] = (len(data), hashlib.sha256(data).hexdigest())
    return state


def changes(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    """``added x``, ``removed y``, ``changed z`` lines between two states (empty: byte-identical)."""
    lines = [f"added {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    lines += [f"changed {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return lines
