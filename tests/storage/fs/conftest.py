"""Fixtures of the storage.fs tests on the moto S3 server: a private read cache and a data prefix."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty read-cache directory for this test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PBG_CACHE_DIR", str(path))
    return path


@pytest.fixture
def base(s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/data"
