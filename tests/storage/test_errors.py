"""Tests for storage.errors: messages name the URL, hierarchy, pickling."""

from __future__ import annotations

import pickle

import pytest

from storage.errors import BadDataError, DataNotFound, FormatVersionError, StorageError, TransientStorageError


def test_message_starts_with_url() -> None:
    err = BadDataError("file:///d/x.h5", "missing dataset 'rel'")
    assert str(err) == "file:///d/x.h5: missing dataset 'rel'"
    assert err.url == "file:///d/x.h5"


def test_hierarchy_lets_callers_catch_builtin_types() -> None:
    assert isinstance(DataNotFound("u", "p"), FileNotFoundError)
    assert isinstance(BadDataError("u", "p"), ValueError)
    assert isinstance(FormatVersionError("u", 2, 1), BadDataError)
    for cls in (DataNotFound, BadDataError, TransientStorageError):
        assert issubclass(cls, StorageError)
    with pytest.raises(StorageError):
        raise DataNotFound("u", "p")


def test_format_version_message_names_found_and_expected() -> None:
    assert str(FormatVersionError("/e.h5", 2, 1)) == "/e.h5: found format_version=2, expected format_version=1"
    assert "no format_version attribute" in str(FormatVersionError("/e.h5", None, 1))


@pytest.mark.parametrize(
    "err", [DataNotFound("/a", "gone"), BadDataError("/b", "bad"), FormatVersionError("/c", 3, 1)]
)
def test_errors_survive_pickling(err: StorageError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
