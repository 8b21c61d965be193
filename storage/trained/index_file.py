"""A similarity index's file: its kinds, and its bytes and attributes stored beside its version.

``similar_{type}.v{v}.h5`` (docs/formats.md, "Similarity index") holds the faiss index's bytes
(dataset ``index``, ``faiss.serialize_index``) and, as root attributes, its provenance
(:class:`~storage.trained.index_provenance.IndexProvenance`), its kind (:data:`KINDS`) with that
kind's structure and search width (``nlist`` and ``nprobe``, or ``m`` and ``ef_search``), the
recall@10 measured when it was built, and a checksum (:func:`checksum`) of the bytes and every other
attribute: a file whose ``nprobe`` or recall was changed is as untrusted as one with a flipped byte. It is written atomically
(:func:`storage.hdf5.open_write`) and read back (:func:`read_index_file`) only if every provenance
attribute equals what it would be built from now, its kind is known, its kind's attributes are
there and its bytes and attributes match their checksum; otherwise one warning names why, and the caller builds it
again. Which kind a file holds is the build's choice, not provenance: a stored index of either kind is used.
The bytes are read here and handed to faiss by :mod:`storage.trained.similarity_index`, the one
module importing faiss, which also checks that what faiss read is what the attributes say.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from storage import hdf5
from storage.errors import BadDataError, DataNotFound, StorageError
from storage.trained.index_provenance import IndexProvenance

logger = logging.getLogger("storage.trained.similarity_index")  # one logger for the index, built or read

INDEX_DATASET = "index"
COMMON_ATTRS = ("kind", "recall_at_10", "recall_queries", "checksum")


@dataclass(frozen=True)
class IndexKind:
    """One kind of faiss index: its name as printed, its faiss class, and the attributes of its two numbers.

    Attributes:
        label: As printed (``IVF-Flat``).
        faiss_class: The class faiss reads it back as.
        shape_attr, shape_label: Its structure (IVF: ``nlist`` lists; HNSW: ``M`` links per node).
        width_attr, width_label: Its search width, tuned to the recall target (``nprobe``; ``efSearch``).
    """

    label: str
    faiss_class: str
    shape_attr: str
    shape_label: str
    width_attr: str
    width_label: str


KINDS = {
    "ivf_flat": IndexKind("IVF-Flat", "IndexIVFFlat", "nlist", "nlist", "nprobe", "nprobe"),
    "hnsw_flat": IndexKind("HNSW-Flat", "IndexHNSWFlat", "m", "M", "ef_search", "efSearch"),
}


@dataclass(frozen=True)
class StoredIndex:
    """What a trusted file holds: the faiss bytes and what the build found (attributes by name)."""

    blob: np.ndarray
    kind: str
    shape: int
    width: int
    recall_at_10: float
    recall_queries: int


def write_index_file(url: str, options: Any, prov: IndexProvenance, stored: StoredIndex) -> None:
    """Write ``stored`` atomically at ``url``; if the directory refuses, warn (it is kept in memory only)."""
    kind = KINDS[stored.kind]
    attrs: dict[str, Any] = {
        **prov.to_attrs(),
        "kind": stored.kind,
        kind.shape_attr: stored.shape,
        kind.width_attr: stored.width,
        "recall_at_10": stored.recall_at_10,
        "recall_queries": stored.recall_queries,
    }
    attrs["checksum"] = checksum(stored.blob, attrs)
    try:
        with hdf5.open_write(url, options) as hf:
            hf.create_dataset(INDEX_DATASET, data=stored.blob)
            for key, value in attrs.items():
                hf.attrs[key] = value
    except OSError as err:  # AccessDenied (also S3's) is a PermissionError; a read-only mount: EROFS
        if not isinstance(err, PermissionError) and err.errno not in (errno.EROFS, errno.ENOSPC):
            raise
        logger.warning("cannot write the similarity index %s (%s): it is kept in memory only", url, err)


def read_index_file(url: str, options: Any, expected: IndexProvenance) -> StoredIndex | None:
    """The index stored at ``url`` if it is one ``expected`` describes; else None (one warning if a file was there)."""
    try:
        with hdf5.open_read(url, options) as hf:
            attrs = hdf5.read_attrs(hf)
            blob = np.asarray(hdf5.require_dataset(hf, INDEX_DATASET, url)[...], dtype=np.uint8)
    except DataNotFound:
        return None
    except BadDataError as err:
        warn_unusable(url, err.problem)
        return None
    except StorageError:
        raise  # unreachable or refused: nothing said about the file's content
    except OSError as err:  # h5py reading a damaged dataset
        warn_unusable(url, f"unreadable ({err})")
        return None
    why = expected.mismatch(attrs) or _attrs_mismatch(attrs)
    if why is None and attrs["checksum"] != checksum(blob, attrs):
        why = "its bytes or attributes do not match their checksum"
    if why is not None:
        warn_unusable(url, why)
        return None
    kind = KINDS[str(attrs["kind"])]
    return StoredIndex(
        blob,
        str(attrs["kind"]),
        int(attrs[kind.shape_attr]),
        int(attrs[kind.width_attr]),
        float(attrs["recall_at_10"]),
        int(attrs["recall_queries"]),
    )


def checksum(blob: np.ndarray, attrs: dict[str, Any]) -> str:
    """SHA-256 of the index's bytes, then of every attribute but ``checksum`` and ``format_version``
    (as sorted JSON; ``format_version`` is :mod:`storage.hdf5`'s, set and checked by it).

    Attributes come back from HDF5 as plain Python values (:func:`storage.hdf5.read_attrs`), and
    JSON writes a float's shortest round-trip form, so the file's own values hash as written.
    """
    digest = hashlib.sha256(blob.tobytes())
    settings = {key: value for key, value in attrs.items() if key not in ("checksum", hdf5.FORMAT_VERSION_ATTR)}
    digest.update(json.dumps(settings, sort_keys=True, default=_plain).encode())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """A numpy value as JSON takes it (``json.dumps``'s fallback)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"attribute value {value!r} of type {type(value).__name__} has no JSON form")


def _attrs_mismatch(attrs: dict[str, Any]) -> str | None:
    """Why the build's attributes are not usable (a missing one, an unknown kind); None if they are."""
    lacking = [key for key in COMMON_ATTRS if key not in attrs]
    if lacking:
        return f"it has no {lacking[0]!r} attribute"
    if attrs["kind"] not in KINDS:
        return f"its kind is {attrs['kind']!r}, not one of {', '.join(map(repr, sorted(KINDS)))}"
    kind = KINDS[str(attrs["kind"])]
    lacking = [key for key in (kind.shape_attr, kind.width_attr) if key not in attrs]
    if lacking:
        return f"it has no {lacking[0]!r} attribute (its kind is {attrs['kind']!r})"
    return None


def warn_unusable(url: str, why: str) -> None:
    """One warning naming the file and ``why`` it is not used (and is built again)."""
    logger.warning("similarity index %s is not used (%s): building it again", url, why)
