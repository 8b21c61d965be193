"""tasks.worker_checks: what a Dask worker is compared by."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tasks.worker_checks import source_digest


def test_a_directory_named_like_a_package_ahead_on_the_path_does_not_change_the_digest(tmp_path: Path) -> None:
    """A `dask worker` runs in its local directory, sys.path[0], which holds its spill directory `storage/`.

    There `import storage` is a namespace package without files while `storage.checkpoints` still
    loads from the installed package: the sources are the same and so must be the digest.
    """
    (tmp_path / "storage").mkdir()
    (tmp_path / "flows").mkdir()
    probe = "import storage, flows; from tasks.worker_checks import source_digest; print(source_digest())"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == source_digest()


def test_a_package_found_nowhere_is_hashed_as_missing(tmp_path: Path) -> None:
    probe = (
        "import sys; import tasks.worker_checks as w; "
        "w.SOURCE_PACKAGES = (*w.SOURCE_PACKAGES, 'no_such_package_here'); print(w.source_digest())"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip()) == 12
    assert done.stdout.strip() != source_digest()
