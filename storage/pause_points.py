"""Named points where a test can stop a real command for as long as it likes.

Crash and concurrency tests run the real ``pbg`` command as a subprocess and must act at an
exact moment of its work: start a second import while the first holds its lease, kill it with
SIGKILL in the middle of its commit. With the environment variables

- ``PBG_PAUSE_AT=<name>`` (or ``<name>:<n>``: the n-th time the point is reached, default the first) and
- ``PBG_PAUSE_FILE=<path>``,

the process writes its pid to ``<path>`` when it reaches the point and waits, checking every
20 ms, until that file is deleted (at most ``PBG_PAUSE_MAX_SECONDS``, default 300): the test
waits for the file to appear, does what it needs (or kills the process there), and deletes the
file to let it go on. Without ``PBG_PAUSE_AT`` (always, outside tests) :func:`pause_point` is one
dictionary lookup.

Points: ``import-lease-held`` (the import holds its lease and has cleaned up what killed imports
left, before it reads anything),
``import-space-checked`` (pass 1 done, free space checked, nothing written to the outputs yet),
``import-staged`` (every output staged, before the first move), ``import-move`` (after each file
moved into place) and ``import-recorded`` (every file in place and the manifest written, before
the staging and backup directories are removed); ``train-leases-held`` (a training run holds its
checkpoint's lease and its reader's lease on the entity_path, before it plans);
``validation-row-written`` (a validated version's row is in ``validation.json``, the version not
committed yet), ``validation-committed`` (the version committed, ``best.json`` not moved yet) and
``validation-best-recorded`` (``best.json`` moved, older versions not removed yet).
"""

from __future__ import annotations

import os
import time
from collections import Counter

_REACHED: Counter[str] = Counter()


def pause_point(name: str) -> None:
    """Wait here while the test's pause file exists, if ``PBG_PAUSE_AT`` names this point (see the module docstring)."""
    wanted = os.environ.get("PBG_PAUSE_AT")
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    _REACHED[name] += 1
    if _REACHED[name] != (int(nth) if nth else 1):
        return
    path = os.environ["PBG_PAUSE_FILE"]
    with open(path, "w", encoding="ascii") as handle:
        handle.write(str(os.getpid()))
    deadline = time.monotonic() + float(os.environ.get("PBG_PAUSE_MAX_SECONDS", "300"))
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
