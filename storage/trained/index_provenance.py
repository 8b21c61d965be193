"""What a similarity index was built from: the attributes a stored index must match to be used.

A stored index (``similar_{type}.v{v}.h5``) is trusted only if every field of
:class:`IndexProvenance` equals what it would be built from now: the version and entity type, the
faiss metric, the config's comparator, bias and ``max_norm``, a digest of the entity
type's global embedding, the number and dimension of the rows, and ``sources``: per partition
file, its size, the names digest its rows follow (``names/digest``) and a SHA-256 of 64 seeded rows.
Another version's file, another config's, a partition file written again: each differs in some field.
Which kind of index a file holds (IVF-Flat or HNSW-Flat) is what its build chose, not provenance
(:mod:`storage.trained.index_file`): a file of either kind is used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from pbg_core.errors import UsageError
from pbg_core.model.embedder import MultiRelationEmbedder
from storage import layout
from storage.checkpoint_names import read_digest
from storage.fs.urls import resolve, translate_errors
from storage.trained.checkpoint_rows import TypeRows

INDEX_FORMAT = 1
SOURCE_ROWS = 64


def faiss_metric(comparator: str, bias: bool) -> str:
    """The faiss metric that ranks as ``comparator`` (with ``bias``) does: ``inner_product`` or ``l2``.

    ``dot`` and ``cos`` (its vectors normalised by ``prepare``) rank by inner product, with a bias
    too (stored ``[b, v]``, queried ``[1, q]``); ``l2`` and ``squared_l2`` by L2 distance.

    Raises:
        UsageError: ``l2``/``squared_l2`` with a bias, which no faiss metric ranks.
    """
    if comparator in ("dot", "cos"):
        return "inner_product"
    if bias:
        raise UsageError(
            f"approximate search needs a faiss metric, and comparator {comparator!r} with bias=true has none "
            "(the bias is added to a distance); search exactly instead (without --approximate)"
        )
    return "l2"


@dataclass(frozen=True)
class IndexProvenance:
    """What an index is built from (stored as its file's root attributes, ints and strings only)."""

    index_format: int
    version: int
    entity: str
    metric: str  # "inner_product" or "l2"
    comparator: str
    bias: int
    global_emb: str  # SHA-256 of the type's global embedding, or "none"
    max_norm: str  # repr of the config's max_norm, or "none"
    rows: int
    dim: int
    sources: str  # JSON: per partition, {"file", "size", "names_digest", "rows_sha256"}

    def to_attrs(self) -> dict[str, int | str]:
        """The fields, as the file's attributes."""
        return asdict(self)

    def mismatch(self, attrs: dict[str, Any]) -> str | None:
        """Why a file with attributes ``attrs`` is not an index of this provenance; None if it is."""
        for field in fields(self):
            want, found = getattr(self, field.name), attrs.get(field.name)
            if found == want:
                continue
            if found is None:
                return f"it has no {field.name!r} attribute"
            if field.name == "version":
                return f"it was built from version {found}, not version {want}"
            if field.name == "sources":
                return _sources_mismatch(str(found), want)
            return f"its {field.name} is {found!r}, not {want!r}"
        return None


def _sources_mismatch(found: str, want: str) -> str:
    try:
        was = json.loads(found)
    except ValueError:
        return "its record of the partition files is unreadable"
    now = json.loads(want)
    if not isinstance(was, list) or len(was) != len(now):
        return f"it was built from {len(was) if isinstance(was, list) else 'an unknown number of'} partition files, not {len(now)}"
    for part, (old, new) in enumerate(zip(was, now, strict=True)):
        changed = sorted(key for key in new if not isinstance(old, dict) or old.get(key) != new[key])
        if changed:
            return (
                f"partition {part}'s file {new['file']} differs from the one it was built from ({', '.join(changed)})"
            )
    return "its record of the partition files differs"


def provenance_of(model: MultiRelationEmbedder, rows: TypeRows, seed: int) -> IndexProvenance:
    """The provenance an index of ``rows`` built now has (reads each partition file's metadata and 64 rows).

    Raises:
        UsageError: a comparator without a faiss metric (:func:`faiss_metric`).
    """
    config = rows.reader.config
    global_emb = "none"
    if model.global_embs is not None:
        global_emb = hashlib.sha256(model.global_embs[f"emb_{rows.entity}"].detach().numpy().tobytes()).hexdigest()
    return IndexProvenance(
        index_format=INDEX_FORMAT,
        version=rows.reader.version,
        entity=rows.entity,
        metric=faiss_metric(config.comparator, bool(config.bias)),
        comparator=config.comparator,
        bias=int(bool(config.bias)),
        global_emb=global_emb,
        max_norm="none" if rows.max_norm is None else repr(float(rows.max_norm)),
        rows=rows.count,
        dim=rows.dim,
        sources=json.dumps([_source(rows, part, seed) for part in range(len(rows.sizes))]),
    )


def _source(rows: TypeRows, part: int, seed: int) -> dict[str, Any]:
    """One partition file's identity: name, size, names digest, SHA-256 of ``SOURCE_ROWS`` seeded rows."""
    reader = rows.reader
    name = layout.embeddings_file(rows.entity, part, reader.version)
    url = reader.checkpoints.file_url(name)
    filesystem, path = resolve(url, reader.options)
    with translate_errors(url):
        size = int(filesystem.size(path))
    rows.rows.check(rows.entity, part)  # the file fits its names and the config, before its rows are sampled
    count = rows.sizes[part]
    rng = np.random.default_rng([seed, part])
    offsets = np.sort(rng.choice(count, size=min(count, SOURCE_ROWS), replace=False)).astype(np.int64)
    sample = reader.load_rows(rows.entity, part, offsets)
    return {
        "file": name,
        "size": size,
        "names_digest": read_digest(url, reader.options),
        "rows_sha256": hashlib.sha256(sample.tobytes()).hexdigest(),
    }
