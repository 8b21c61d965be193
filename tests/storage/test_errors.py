"""Tests for storage.errors: messages name the URL, hierarchy, pickling."""

from __future__ import annotations

import pickle

import pytest

from storage.errors import (
    AccessDenied,
    BadDataError,
    BadUrlError,
    DataNotFound,
    FormatVersionError,
    StorageError,
    TransientStorageError,
    translate,
)


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


@pytest.mark.parametrize("err", [DataNotFound("/a", "gone"), BadDataError("/b", "bad"), FormatVersionError("/c", 3, 1)])
def test_errors_survive_pickling(err: StorageError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)


# -- translate: what s3fs / botocore / aiohttp / the OS raise -> storage errors ----------------


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"
    )


def _wrapped(inner: Exception, outer: Exception) -> Exception:
    """``outer`` raised ``from inner``, the way s3fs re-raises botocore errors."""
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (_wrapped(_client_error("NoSuchKey", 404), FileNotFoundError("k")), DataNotFound),
        (_wrapped(_client_error("NoSuchBucket", 404), FileNotFoundError("b")), DataNotFound),
        (_wrapped(_client_error("AccessDenied", 403), PermissionError("denied")), AccessDenied),
        (_wrapped(_client_error("InvalidAccessKeyId", 403), PermissionError("x")), AccessDenied),
        (_wrapped(_client_error("InvalidBucketName", 400), OSError(22, "bad")), BadUrlError),
        (_wrapped(_client_error("SlowDown", 503), OSError(5, "slow")), TransientStorageError),
        (_wrapped(_client_error("InternalError", 500), OSError(5, "boom")), TransientStorageError),
        (_client_error("Whatever", 502), TransientStorageError),
        (ConnectionResetError(104, "Connection reset by peer"), TransientStorageError),
        (ConnectionRefusedError(111, "refused"), TransientStorageError),
        (TimeoutError("timed out"), TransientStorageError),
    ],
)
def test_translate_maps_backend_errors(err: Exception, expected: type) -> None:
    translated = translate(err, "s3://bkt/key.h5")
    assert type(translated) is expected
    assert str(translated).startswith("s3://bkt/key.h5: ")
    assert getattr(translated, "transient", False) is (expected is TransientStorageError)


def test_translate_botocore_connection_and_credential_errors() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, ReadTimeoutError

    assert isinstance(
        translate(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "s3://b/k"), TransientStorageError
    )
    assert isinstance(translate(ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), "s3://b/k"), TransientStorageError)
    denied = translate(NoCredentialsError(), "s3://b/k")
    assert isinstance(denied, AccessDenied) and isinstance(denied, PermissionError)
    assert "AWS_ACCESS_KEY_ID" in str(denied) and "storage_options" in str(denied)


def test_translate_reports_the_s3_code_and_leaves_unknown_errors_alone() -> None:
    err = _wrapped(_client_error("SlowDown", 503), OSError(5, "Please reduce your request rate"))
    assert "S3 error SlowDown, HTTP 503" in str(translate(err, "s3://b/k"))
    assert translate(ValueError("unrelated"), "s3://b/k") is None
    assert translate(OSError(28, "No space left on device"), "/d/f") is None
    own = DataNotFound("/d/f", "gone")
    assert translate(own, "/other") is own


def test_new_errors_are_permanent_builtin_types_and_pickle() -> None:
    assert isinstance(AccessDenied("u", "p"), PermissionError) and isinstance(BadUrlError("u", "p"), ValueError)
    for err in (AccessDenied("s3://b/k", "denied"), BadUrlError("s3://", "no bucket"), TransientStorageError("u", "p")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
    assert not getattr(AccessDenied("u", "p"), "transient", False)
