"""Stable identities of files: where a file is relative to a root, and what it holds.

A file that was already handled (imported, received for retraining) must be recognised again
after the directory holding it moves, is copied to another disk, or is named another way
(``./in/a.tsv``, ``in//a.tsv``, ``file:///…/in/a.tsv``). An absolute path or a URL as spelled is
none of that, so records keep a :class:`FileIdentity` instead:

- ``relative``: the path from a root the caller chooses (the incoming directory, the config's
  directory), POSIX separators, no ``.`` or ``..``; a file outside the root is its base name;
- ``size`` and ``digest``: the content. On local disk the digest is the MD5 of the bytes (the
  ETag S3 gives an object uploaded in one part, so the same bytes match on both); on an object
  store it is the object's ETag as the store reports it, quotes removed: no second download.

Two identities name the same file when all three fields are equal (:meth:`FileIdentity.same_file`),
and the same content when size and digest are (:meth:`FileIdentity.same_content`).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import asdict, dataclass
from typing import Any

from storage.fs.urls import StorageOptions, is_local, resolve, translate_errors

_BLOCK = 8 << 20


@dataclass(frozen=True)
class FileIdentity:
    """A file known by its place under a root and its content (JSON-safe through :meth:`to_json`)."""

    relative: str
    size: int
    digest: str

    def same_file(self, other: FileIdentity) -> bool:
        """Same place under the root and same content."""
        return self == other

    def same_content(self, other: FileIdentity) -> bool:
        """Same bytes, wherever they are."""
        return (self.size, self.digest) == (other.size, other.digest)

    def to_json(self) -> dict[str, Any]:
        """``{"relative", "size", "digest"}``."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> FileIdentity | None:
        """The identity a record holds, or None when ``data`` is not one (an older record)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(relative=str(data["relative"]), size=int(data["size"]), digest=str(data["digest"]))
        except (KeyError, TypeError, ValueError):
            return None


def relative_place(url: str, root: str | None, storage_options: StorageOptions = None) -> str:
    """``url``'s path below ``root`` (both resolved, so spelling does not matter); its base name
    when ``root`` is None, on another filesystem, or not above it."""
    filesystem, path = resolve(url, storage_options)
    path = posixpath.normpath(path)
    if root is not None:
        root_fs, root_path = resolve(root, storage_options)
        root_path = posixpath.normpath(root_path)
        if type(root_fs) is type(filesystem) and path.startswith(root_path.rstrip("/") + "/"):
            return path[len(root_path.rstrip("/")) + 1 :]
    return posixpath.basename(path)


def identify(url: str, root: str | None = None, storage_options: StorageOptions = None) -> FileIdentity:
    """The :class:`FileIdentity` of the file at ``url`` (see the module docstring).

    Raises:
        DataNotFound: ``url`` does not exist.
        StorageError: the store could not be read.
    """
    filesystem, path = resolve(url, storage_options)
    relative = relative_place(url, root, storage_options)
    with translate_errors(url):
        if not is_local(filesystem):
            info = filesystem.info(path)
            etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
            return FileIdentity(relative, int(info.get("size") or 0), etag)
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        with filesystem.open(path, "rb") as handle:
            while block := handle.read(_BLOCK):
                digest.update(block)
                size += len(block)
    return FileIdentity(relative, size, digest.hexdigest())


__all__ = ["FileIdentity", "identify", "relative_place"]
