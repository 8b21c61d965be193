"""Whether a directory could be created on the local disk, found out before any work is done.

``os.access`` answers yes to root everywhere (under ``/proc``, on a read-only mount), so the
nearest existing ancestor is probed by creating a directory in it and removing it at once:
nothing is left behind, and the output directory itself is not created before it is used.
Only :mod:`os` and :mod:`tempfile`: ``pbg train`` calls this before it starts its server.
"""

from __future__ import annotations

import os
import tempfile

from storage import layout


def creatable_problem(path: str) -> str | None:
    """Why the local directory ``path`` (existing or not) cannot be created or written; None if it can."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=layout.WRITE_CHECK_PREFIX, dir=existing))
    except OSError as err:
        return f"cannot create a directory in {existing} ({err.strerror})"
    return None
