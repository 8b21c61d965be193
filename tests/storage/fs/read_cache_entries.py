"""What the storage.fs tests see of the read cache: its committed entries, read from its directory."""

from __future__ import annotations

from pathlib import Path


def entries(cache: Path) -> list[str]:
    """Committed cache entries (no in-flight downloads, links or upload directories)."""
    if not cache.exists():
        return []
    return sorted(p.name for p in cache.iterdir() if p.is_file() and not p.name.endswith((".part", ".link")))
