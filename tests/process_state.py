"""Whether a process still runs, for tests that check nothing is left behind."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone: it only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
