"""Storage-level exceptions. Every message starts with the URL it is about.

The hierarchy lets callers catch broadly (:class:`StorageError`) or narrowly:

- :class:`DataNotFound`: a file that should exist does not (also a ``FileNotFoundError``).
- :class:`BadDataError`: a file exists but its content is not what the format says
  (also a ``ValueError``); :class:`FormatVersionError` is the special case of a
  wrong ``format_version`` attribute on an HDF5 file.
- :class:`TransientStorageError`: an error worth retrying (network, throttling);
  local disks never raise it, remote filesystems will.
"""

from __future__ import annotations

from pbg_core.errors import PbgError


class StorageError(PbgError):
    """Base class of every error raised on purpose by the storage package.

    Args:
        url: The file or directory the error is about.
        problem: What is wrong, naming the bad value and what was expected.

    Attributes:
        url: As given.
        problem: As given.
    """

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        self.problem = problem
        super().__init__(f"{url}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Keeps the two-argument constructor picklable (errors cross process and task boundaries).
        return (type(self), (self.url, self.problem))


class DataNotFound(StorageError, FileNotFoundError):
    """A file or directory that should exist does not."""


class OutputExistsError(StorageError, FileExistsError):
    """An output that must not be overwritten already exists."""


class BadDataError(StorageError, ValueError):
    """A file exists but its content does not follow the expected format."""


class FormatVersionError(BadDataError):
    """An HDF5 file's ``format_version`` attribute is missing or unsupported.

    Args:
        url: The file.
        found: The attribute value found (None when absent).
        expected: The supported version.
    """

    def __init__(self, url: str, found: object, expected: int) -> None:
        self.found = found
        self.expected = expected
        shown = "no format_version attribute" if found is None else f"format_version={found!r}"
        super().__init__(url, f"found {shown}, expected format_version={expected}")

    def __reduce__(self) -> tuple[type, tuple[str, object, int]]:
        return (type(self), (self.url, self.found, self.expected))


class TransientStorageError(StorageError):
    """A failure that may succeed if retried (remote filesystems only)."""

    # Read by the task layer's retry predicate (tasks/_policies.py).
    transient = True
