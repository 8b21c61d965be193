"""A faiss index of one entity type's rows in one checkpoint version, for approximate ``similar``.

The only module that imports faiss, lazily (``faiss-cpu``; import-linter holds it). faiss and torch
each bring their own OpenMP runtime (two copies of libgomp in one process); both compute
correctly in either import order (tests/storage/trained/test_similarity_index.py runs them in
turns), and faiss is given torch's thread count at every call, so ``torch.set_num_threads`` or
``OMP_NUM_THREADS`` governs both.

**Vectors.** A row is looked up as evaluation does (``max_norm`` settled,
:class:`~storage.trained.checkpoint_rows.TypeRows`), then adjusted without operator
(:meth:`~pbg_core.model.embedder.MultiRelationEmbedder.adjust`: the global embedding, then the
comparator's ``prepare``, which normalises for ``cos``). The comparator picks the faiss metric:

=============  ===================================  ============================================
comparator     faiss metric                         why it ranks as the model does
=============  ===================================  ============================================
dot            inner product                        the same sum
cos            inner product on normalised vectors  ``prepare`` normalised them
l2             L2 (squared distances)               ``-sqrt`` is decreasing in the distance
squared_l2     L2                                   ``-d``
+ bias         inner product, query dim 0 set to 1  stored ``[b, v]``, query ``[1, q]``: ``b + q.v``
=============  ===================================  ============================================

``l2`` or ``squared_l2`` with a bias has no faiss metric (a bias added to a distance):
:func:`~storage.trained.index_provenance.faiss_metric` refuses it. faiss only finds the
candidates: the caller rescores every hit with the model (:mod:`storage.trained.similarity`), so
reported scores are the model's.

**When.** Only for a type of more than :data:`FLAT_MAX_ROWS` entities: up to there exact search
(:func:`storage.trained.similarity.exact_neighbours`) is fast enough, and an approximate search
answers exactly, with no index. faiss's own exact index (``IndexFlat``) would store a copy of every
row and search no faster where it would matter: at 100k-800k rows it took 1.4-3.9x the exact
search's time in a quiet run (docs/benchmarks.md, "bench.similar").

**Kind.** IVF-Flat with ``nlist`` about ``4 sqrt(N)`` (at most one list per 39 training rows, as
faiss's k-means wants), trained on a seeded sample of at most :data:`TRAIN_SAMPLE_MAX` rows, the
rows added one partition at a time. Its ``nprobe`` is the smallest of 8, 16, ..., 256 (at most
``nlist``) whose recall@10 against exact search (the caller's, the entity itself left out) on
:data:`RECALL_QUERIES` seeded entities reaches :data:`RECALL_TARGET`; that recall is logged, kept
and stored, and a warning says so if even the widest search misses the target.

**File.** ``similar_{type}.v{v}.h5`` in the checkpoint directory, written atomically
(:func:`storage.hdf5.open_write`; docs/formats.md, "Similarity index"); nothing else is written
there, and no lease is taken. A stored index is used only when every provenance attribute matches what it
would be built from now and its bytes match their MD5; otherwise one warning names why and it is
built again. An unwritable checkpoint directory: one warning, and the index lives in memory only.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.types import FloatTensorType, LongTensorType
from storage import hdf5, layout
from storage.errors import BadDataError, DataNotFound, StorageError
from storage.trained.checkpoint_rows import TypeRows
from storage.trained.index_provenance import IndexProvenance, provenance_of
from storage.trained.row_ids import RowIds

logger = logging.getLogger(__name__)

# Up to this many entities a type gets no index: exact search is fast enough. Measured by
# bench/similar.py (docs/benchmarks.md, "bench.similar"): the largest table (d=100) whose exact
# search answered 1,000 queries within 1 s on the 2-core benchmark machine (100k rows: 0.42-0.64 s;
# 200k: 1.4 s and more).
FLAT_MAX_ROWS = 100_000
TRAIN_SAMPLE_MAX = 256 * 1024
RECALL_QUERIES = 1000
RECALL_K = 10
RECALL_TARGET = 0.95
NPROBES = (8, 16, 32, 64, 128, 256)
SEED = 0
INDEX_DATASET = "index"
# Attributes the build adds to the provenance's.
_BUILD_ATTRS = ("nlist", "nprobe", "recall_at_10", "recall_queries", "checksum")

# The recall oracle: the exact neighbours' global ids [Q, k] (-1: none) of entities, the entity itself excluded.
ExactNeighbours = Callable[[RowIds, int], LongTensorType]


def _faiss() -> Any:
    """The faiss module, imported on first use, running on torch's thread count."""
    import faiss  # here, not at the top: only a similarity index loads it

    faiss.omp_set_num_threads(torch.get_num_threads())
    return faiss


@torch.no_grad()
def index_vectors(model: MultiRelationEmbedder, entity: str, rows: FloatTensorType) -> np.ndarray:
    """The stored vectors of looked-up ``rows``: adjusted without operator, float32, contiguous."""
    return np.ascontiguousarray(model.adjust(rows, entity).detach().numpy(), dtype=np.float32)


def query_vectors(model: MultiRelationEmbedder, entity: str, rows: FloatTensorType, bias: bool) -> np.ndarray:
    """What the index is searched with: the adjusted rows, dim 0 set to 1 with a bias (``[1, q]``)."""
    vectors = index_vectors(model, entity, rows)
    if bias:
        vectors[:, 0] = 1.0
    return vectors


@dataclass
class SimilarityIndex:
    """A built or loaded index and what it was built from.

    Attributes:
        provenance: What it was built from (stored as the file's attributes).
        index: The faiss index; ids are global ids (:meth:`TypeRows.global_ids`).
        nlist: Its lists.
        nprobe: Lists searched per query.
        recall_at_10: Recall@10 against exact search, measured when built.
        recall_queries: Entities that recall was measured on.
    """

    provenance: IndexProvenance
    index: Any
    nlist: int
    nprobe: int
    recall_at_10: float
    recall_queries: int

    def neighbours(self, vectors: np.ndarray, self_ids: LongTensorType, k: int) -> LongTensorType:
        """Global ids ``[Q, k]`` of the nearest of each query vector, its own id (``self_ids``) left out; -1: none."""
        self.index.nprobe = self.nprobe
        _, found = _faiss_search(self.index, vectors, k + 1)
        own = found == self_ids.numpy()[:, None]
        own &= np.cumsum(own, axis=1) == 1  # the first occurrence only
        order = np.argsort(own, axis=1, kind="stable")[:, :k]  # the others, in faiss's order
        return torch.from_numpy(np.take_along_axis(found, order, axis=1))

    def describe(self) -> str:
        """One line: kind, size, search width and recall (what ``pbg similar`` prints)."""
        prov = self.provenance
        return (
            f"IVF-Flat index of {prov.rows:,} rows of {prov.entity!r} (v{prov.version}, {prov.metric}), nlist "
            f"{self.nlist}, nprobe {self.nprobe}: recall@10 {self.recall_at_10:.3f} against exact search on "
            f"{self.recall_queries:,} entities"
        )


def _faiss_search(index: Any, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    _faiss()  # the thread count, as torch's now
    distances, ids = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
    return distances, ids.astype(np.int64, copy=False)


def open_index(model: MultiRelationEmbedder, rows: TypeRows, exact: ExactNeighbours) -> SimilarityIndex:
    """The index of ``rows``: the stored one if all its provenance matches, else built (and stored).

    Args:
        model: The model (its comparator and global embedding shape the vectors).
        rows: The entity type's rows in the version read.
        exact: Exact search, the oracle recall is measured against.

    Raises:
        UsageError: a comparator without a faiss metric (:func:`~storage.trained.index_provenance.faiss_metric`).
    """
    expected = provenance_of(model, rows, SEED)
    url = rows.reader.checkpoints.file_url(layout.similarity_index_file(rows.entity, rows.reader.version))
    loaded = _load(url, rows.reader.options, expected)
    if loaded is not None:
        logger.info("similarity index %s: %s", url, loaded.describe())
        return loaded
    built = _build(model, rows, expected, exact)
    _save(built, url, rows.reader.options)
    return built


# ---- building ---------------------------------------------------------------------------------------
def _build(
    model: MultiRelationEmbedder, rows: TypeRows, prov: IndexProvenance, exact: ExactNeighbours
) -> SimilarityIndex:
    faiss = _faiss()
    started = time.monotonic()
    metric = faiss.METRIC_INNER_PRODUCT if prov.metric == "inner_product" else faiss.METRIC_L2
    sample = _seeded_ids(rows.count, TRAIN_SAMPLE_MAX, SEED)
    nlist = max(1, min(round(4 * math.sqrt(rows.count)), len(sample) // 39))
    index = faiss.IndexIVFFlat(faiss.IndexFlat(prov.dim, metric), prov.dim, nlist, metric)
    index.cp.seed = SEED
    index.train(_sample_vectors(model, rows, sample))
    for _, table in rows.partitions():
        index.add(index_vectors(model, rows.entity, table))
    built = SimilarityIndex(prov, index, nlist, 0, 0.0, 0)
    _tune(built, model, rows, exact)
    logger.info("similarity index built in %.1f s: %s", time.monotonic() - started, built.describe())
    if built.recall_at_10 < RECALL_TARGET:
        logger.warning(
            "similarity index of %r: recall@10 is only %.3f at nprobe %d (the widest tried); approximate "
            "answers miss more than %d%% of the exact ones",
            rows.entity,
            built.recall_at_10,
            built.nprobe,
            round(100 * (1 - RECALL_TARGET)),
        )
    return built


def _seeded_ids(count: int, at_most: int, seed: int) -> np.ndarray:
    """A seeded sample of at most ``at_most`` distinct global ids of ``count``, ascending."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(count, size=min(count, at_most), replace=False)).astype(np.int64)


def _sample_vectors(model: MultiRelationEmbedder, rows: TypeRows, sample: np.ndarray) -> np.ndarray:
    """The vectors of the global ids ``sample``, picked from each partition as it is read."""
    parts = rows.row_ids(torch.from_numpy(sample))
    picked = []
    for part, table in rows.partitions():
        offsets = parts.offsets[parts.partitions == part]
        picked.append(index_vectors(model, rows.entity, table[offsets]))
    return np.concatenate(picked)


def _tune(index: SimilarityIndex, model: MultiRelationEmbedder, rows: TypeRows, exact: ExactNeighbours) -> None:
    """Measure recall@10 on seeded entities at the smallest ``nprobe`` reaching the target (else the widest)."""
    ids = torch.from_numpy(_seeded_ids(rows.count, RECALL_QUERIES, SEED + 1))
    queries = rows.row_ids(ids)
    k = min(RECALL_K, rows.count - 1)
    index.recall_queries = len(ids)
    if k < 1:  # one entity: no neighbour to miss
        index.recall_at_10 = 1.0
        return
    truth = exact(queries, k).numpy()
    vectors = query_vectors(model, rows.entity, rows.load(queries), bool(index.provenance.bias))
    for nprobe in sorted({min(width, index.nlist) for width in NPROBES}):
        index.nprobe = nprobe
        index.recall_at_10 = _recall(index.neighbours(vectors, ids, k).numpy(), truth)
        if index.recall_at_10 >= RECALL_TARGET:
            return


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Share of the true neighbours (ids >= 0 in ``truth``) that ``found`` holds in the same row."""
    real = truth >= 0
    hit = (found[:, :, None] == truth[:, None, :]).any(axis=1) & real
    return float(hit.sum() / max(int(real.sum()), 1))


# ---- the file ---------------------------------------------------------------------------------------
def _save(index: SimilarityIndex, url: str, options: Any) -> None:
    """Write the index atomically beside its version; if the directory refuses, warn and keep it in memory."""
    blob = _faiss().serialize_index(index.index)
    attrs: dict[str, Any] = {
        **index.provenance.to_attrs(),
        "nlist": index.nlist,
        "nprobe": index.nprobe,
        "recall_at_10": index.recall_at_10,
        "recall_queries": index.recall_queries,
        "checksum": hashlib.md5(blob.tobytes()).hexdigest(),
    }
    try:
        with hdf5.open_write(url, options) as hf:
            hf.create_dataset(INDEX_DATASET, data=blob)
            for key, value in attrs.items():
                hf.attrs[key] = value
    except OSError as err:  # AccessDenied (also S3's) is a PermissionError; a read-only mount: EROFS
        if not isinstance(err, PermissionError) and err.errno not in (errno.EROFS, errno.ENOSPC):
            raise
        logger.warning("cannot write the similarity index %s (%s): it is kept in memory only", url, err)


def _load(url: str, options: Any, expected: IndexProvenance) -> SimilarityIndex | None:
    """The index stored at ``url`` if it is the one ``expected`` describes; else None (one warning if a file was there)."""
    try:
        with hdf5.open_read(url, options) as hf:
            attrs = hdf5.read_attrs(hf)
            blob = np.asarray(hdf5.require_dataset(hf, INDEX_DATASET, url)[...], dtype=np.uint8)
    except DataNotFound:
        return None
    except BadDataError as err:
        return _unusable(url, err.problem)
    except StorageError:
        raise  # unreachable or refused: nothing said about the file's content
    except OSError as err:  # h5py reading a damaged dataset
        return _unusable(url, f"unreadable ({err})")
    why = expected.mismatch(attrs)
    lacking = [key for key in _BUILD_ATTRS if key not in attrs]
    if why is None and lacking:
        why = f"it has no {lacking[0]!r} attribute"
    if why is None and attrs["checksum"] != hashlib.md5(blob.tobytes()).hexdigest():
        why = "its bytes do not match their MD5 checksum"
    if why is not None:
        return _unusable(url, why)
    try:
        index = _faiss().deserialize_index(blob)
    except RuntimeError as err:  # faiss's error for bytes it cannot read
        return _unusable(url, f"faiss cannot read it ({err})")
    return SimilarityIndex(
        expected,
        index,
        int(attrs["nlist"]),
        int(attrs["nprobe"]),
        float(attrs["recall_at_10"]),
        int(attrs["recall_queries"]),
    )


def _unusable(url: str, why: str) -> SimilarityIndex | None:
    """None, after one warning naming the file and ``why`` it is not used."""
    logger.warning("similarity index %s is not used (%s): building it again", url, why)
    return None
