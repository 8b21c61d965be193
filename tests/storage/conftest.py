"""Storage-test fixtures: ``root``, a :class:`store_io.StorePath` on local disk and on S3."""

from __future__ import annotations

import pytest
from store_io import StorePath


@pytest.fixture
def root(store_root: str) -> StorePath:
    """The test's base directory, once a local temporary directory and once ``s3://<bucket>/root``."""
    return StorePath(store_root)
