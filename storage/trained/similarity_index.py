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

**Kind.** Chosen by measurement when the index is built, on :data:`RECALL_QUERIES` seeded entities
whose exact neighbours (the caller's exact search, the entity itself left out) are the oracle:

1. IVF-Flat, ``nlist`` about ``4 sqrt(N)`` (at most one list per 39 training rows, as faiss's
   k-means wants), trained on a seeded sample of at most :data:`TRAIN_SAMPLE_MAX` rows, the rows
   added one partition at a time; ``nprobe`` the smallest of :data:`NPROBES` (at most ``nlist``)
   whose recall@10 reaches :data:`RECALL_TARGET`.
2. If it misses the target, or its search of those entities was less than :data:`HNSW_BELOW_SPEEDUP`
   times faster than their exact search (timed, both on this machine now): HNSW-Flat too (M
   :data:`HNSW_M`, ``efConstruction`` :data:`HNSW_EF_CONSTRUCTION`, the rows added one partition at a
   time), ``efSearch`` the smallest of :data:`EF_SEARCHES` reaching the target; the kept index is
   the faster of the two that reach it (else the one of higher recall).

Why: on clustered rows IVF-Flat scans a few lists and is the fastest (1M x 100: 45-111x faster
than exact search at nprobe 8, recall 0.999) and the cheapest to build; on weakly clustered rows it
needs nprobe 256 for 0.95 and is only 15-17x faster, where HNSW-Flat (efSearch 128, recall 0.965)
answered 72x faster than exact search, though the two took 480 s to build against IVF-Flat's 58 s
alone (docs/benchmarks.md, "bench.similar"). The rule is measured, not an estimate from
``nprobe / nlist``: a list scan costs more per row than exact search's matrix product, and the bar
users see is the measured ratio. The recall measured (and the kind, structure and width) is
logged, kept, stored and printed; a warning says so if even the widest search of both kinds misses
the target. HNSW's graph depends on how its threads interleave while rows are added, so two builds
of one version may differ slightly; each measures its own recall. A build holds both indexes for a
moment: memory one partition plus up to two indexes.

**File.** ``similar_{type}.v{v}.h5`` in the checkpoint directory (:mod:`storage.trained.index_file`);
nothing else is written there, and no lease is taken. A stored index is used only when every
provenance attribute matches what it would be built from now, its bytes and attributes match their checksum and faiss
reads back the kind, rows and dimension its attributes say; otherwise one warning names why and it
is built again. An unwritable checkpoint directory: one warning, and the index lives in memory only.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.types import FloatTensorType, LongTensorType
from storage import layout
from storage.trained.checkpoint_rows import TypeRows
from storage.trained.index_file import KINDS, StoredIndex, read_index_file, warn_unusable, write_index_file
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
# HNSW is built too when IVF-Flat's measured speedup over exact search is below this: twice the
# issue's bar of 20x, as the 1,000 entities timed at build vary with the machine's load more than
# the benchmark's 10,000 do; trying HNSW costs only build time, and the faster of the two is kept.
HNSW_BELOW_SPEEDUP = 40.0
HNSW_M = 32
# faiss's default: 1M x 100 rows took 73 s (clustered) to 204 s (weakly clustered) to add on 2 cores,
# about 300 s with the machine loaded (docs/benchmarks.md, "bench.similar").
HNSW_EF_CONSTRUCTION = 40
EF_SEARCHES = (16, 32, 64, 128, 256, 512)
SEED = 0

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
        kind: ``ivf_flat`` or ``hnsw_flat`` (:data:`~storage.trained.index_file.KINDS`).
        shape: Its structure: IVF-Flat's lists (``nlist``), HNSW-Flat's links per node (``M``).
        width: Its search width: lists searched per query (``nprobe``), or HNSW's ``efSearch``.
        recall_at_10: Recall@10 against exact search, measured when built.
        recall_queries: Entities that recall was measured on.
        search_s: Seconds those entities' search took at ``width`` when built, best of 2 (0.0 once loaded).
    """

    provenance: IndexProvenance
    index: Any
    kind: str
    shape: int
    width: int
    recall_at_10: float = 0.0
    recall_queries: int = 0
    search_s: float = field(default=0.0, compare=False)

    def neighbours(self, vectors: np.ndarray, self_ids: LongTensorType, k: int) -> LongTensorType:
        """Global ids ``[Q, k]`` of the nearest of each query vector, its own id (``self_ids``) left out; -1: none."""
        if self.kind == "hnsw_flat":
            self.index.hnsw.efSearch = self.width
        else:
            self.index.nprobe = self.width
        _, found = _faiss_search(self.index, vectors, k + 1)
        own = found == self_ids.numpy()[:, None]
        own &= np.cumsum(own, axis=1) == 1  # the first occurrence only
        order = np.argsort(own, axis=1, kind="stable")[:, :k]  # the others, in faiss's order
        return torch.from_numpy(np.take_along_axis(found, order, axis=1))

    def describe(self) -> str:
        """One line: kind, size, structure, search width and recall (what ``pbg similar`` prints)."""
        prov, kind = self.provenance, KINDS[self.kind]
        return (
            f"{kind.label} index of {prov.rows:,} rows of {prov.entity!r} (v{prov.version}, {prov.metric}), "
            f"{kind.shape_label} {self.shape}, {kind.width_label} {self.width}: recall@10 {self.recall_at_10:.3f} "
            f"against exact search on {self.recall_queries:,} entities"
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
    blob = _faiss().serialize_index(built.index)
    stored = StoredIndex(blob, built.kind, built.shape, built.width, built.recall_at_10, built.recall_queries)
    write_index_file(url, rows.reader.options, expected, stored)
    return built


# ---- building ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Oracle:
    """The seeded entities recall is measured on: their global ids, query vectors and exact neighbours."""

    ids: LongTensorType
    vectors: np.ndarray
    truth: np.ndarray  # global ids [Q, k]
    k: int
    exact_s: float  # seconds their exact search took


def _oracle(model: MultiRelationEmbedder, rows: TypeRows, prov: IndexProvenance, exact: ExactNeighbours) -> _Oracle:
    ids = torch.from_numpy(_seeded_ids(rows.count, RECALL_QUERIES, SEED + 1))
    queries = rows.row_ids(ids)
    k = min(RECALL_K, rows.count - 1)
    started = time.perf_counter()
    truth = exact(queries, k).numpy() if k >= 1 else np.zeros((len(ids), 0), dtype=np.int64)
    exact_s = time.perf_counter() - started
    return _Oracle(ids, query_vectors(model, rows.entity, rows.load(queries), bool(prov.bias)), truth, k, exact_s)


def _build(
    model: MultiRelationEmbedder, rows: TypeRows, prov: IndexProvenance, exact: ExactNeighbours
) -> SimilarityIndex:
    started = time.monotonic()
    logger.info(
        "similarity index of %r: building it once for version %d (%d entities x %d dimensions; IVF-Flat first)",
        rows.entity,
        prov.version,
        rows.count,
        rows.dim,
    )
    ivf = _build_ivf(model, rows, prov)
    oracle = _oracle(model, rows, prov, exact)  # after IVF's build: both timed on rows read once already
    ivf = _tune(ivf, oracle, sorted({min(width, ivf.shape) for width in NPROBES}))
    candidates = [ivf]
    speedup = oracle.exact_s / max(ivf.search_s, 1e-9)
    if ivf.recall_at_10 < RECALL_TARGET or speedup < HNSW_BELOW_SPEEDUP:
        logger.info(
            "similarity index of %r: IVF-Flat at nprobe %d reached recall@10 %.3f, %.1fx faster than exact search "
            "(%.2f s vs %.2f s for %d entities): building HNSW-Flat too",
            rows.entity,
            ivf.width,
            ivf.recall_at_10,
            speedup,
            ivf.search_s,
            oracle.exact_s,
            len(oracle.ids),
        )
        candidates.append(_tune(_build_hnsw(model, rows, prov), oracle, list(EF_SEARCHES)))
    built = choose(candidates)
    for other in candidates:
        logger.info(
            "similarity index of %r: %s %d, %.2f s for %d entities (exact: %.2f s): %s",
            rows.entity,
            KINDS[other.kind].label + " " + KINDS[other.kind].width_label,
            other.width,
            other.search_s,
            len(oracle.ids),
            oracle.exact_s,
            "kept" if other is built else "dropped",
        )
    logger.info("similarity index built in %.1f s: %s", time.monotonic() - started, built.describe())
    if built.recall_at_10 < RECALL_TARGET:
        logger.warning(
            "similarity index of %r: recall@10 is only %.3f at %s %d (the widest tried); approximate answers miss "
            "more than %d%% of the exact ones",
            rows.entity,
            built.recall_at_10,
            KINDS[built.kind].width_label,
            built.width,
            round(100 * (1 - RECALL_TARGET)),
        )
    return built


def choose(candidates: list[SimilarityIndex]) -> SimilarityIndex:
    """The fastest of ``candidates`` reaching :data:`RECALL_TARGET` (their ``search_s``); none does: the highest recall."""
    reaching = [index for index in candidates if index.recall_at_10 >= RECALL_TARGET]
    if reaching:
        return min(reaching, key=lambda index: index.search_s)
    return max(candidates, key=lambda index: index.recall_at_10)


def _nlist(count: int) -> int:
    """IVF lists: about ``4 sqrt(count)``, at most one per 39 training rows (faiss's k-means asks as many)."""
    return max(1, min(round(4 * math.sqrt(count)), min(count, TRAIN_SAMPLE_MAX) // 39))


def _build_ivf(model: MultiRelationEmbedder, rows: TypeRows, prov: IndexProvenance) -> SimilarityIndex:
    faiss = _faiss()
    metric = faiss.METRIC_INNER_PRODUCT if prov.metric == "inner_product" else faiss.METRIC_L2
    nlist = _nlist(rows.count)
    index = faiss.IndexIVFFlat(faiss.IndexFlat(prov.dim, metric), prov.dim, nlist, metric)
    index.cp.seed = SEED
    index.train(_sample_vectors(model, rows, _seeded_ids(rows.count, TRAIN_SAMPLE_MAX, SEED)))
    for _, table in rows.partitions():
        index.add(index_vectors(model, rows.entity, table))
    return SimilarityIndex(prov, index, "ivf_flat", nlist, 0)


def _build_hnsw(model: MultiRelationEmbedder, rows: TypeRows, prov: IndexProvenance) -> SimilarityIndex:
    faiss = _faiss()
    metric = faiss.METRIC_INNER_PRODUCT if prov.metric == "inner_product" else faiss.METRIC_L2
    index = faiss.IndexHNSWFlat(prov.dim, HNSW_M, metric)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    for _, table in rows.partitions():
        _faiss()  # the thread count, as torch's now
        index.add(index_vectors(model, rows.entity, table))
    return SimilarityIndex(prov, index, "hnsw_flat", HNSW_M, 0)


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


def _tune(index: SimilarityIndex, oracle: _Oracle, widths: list[int]) -> SimilarityIndex:
    """``index`` at the smallest of ``widths`` whose recall@10 reaches the target (else the widest), timed there."""
    index.recall_queries = len(oracle.ids)
    if oracle.k < 1:  # one entity: no neighbour to miss
        index.width, index.recall_at_10 = widths[0], 1.0
        return index
    for width in widths:
        index.width = width
        index.search_s, found = _timed_search(index, oracle)
        index.recall_at_10 = _recall(found, oracle.truth)
        if index.recall_at_10 >= RECALL_TARGET:
            break
    index.search_s = min(index.search_s, _timed_search(index, oracle)[0])  # best of 2: less of others' load
    return index


def _timed_search(index: SimilarityIndex, oracle: _Oracle) -> tuple[float, np.ndarray]:
    """Wall seconds of the search of the oracle's entities at ``index.width``, and its global ids found."""
    started = time.perf_counter()
    found = index.neighbours(oracle.vectors, oracle.ids, oracle.k).numpy()
    return time.perf_counter() - started, found


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Share of the true neighbours (ids >= 0 in ``truth``) that ``found`` holds in the same row."""
    real = truth >= 0
    hit = (found[:, :, None] == truth[:, None, :]).any(axis=1) & real
    return float(hit.sum() / max(int(real.sum()), 1))


# ---- the file ---------------------------------------------------------------------------------------
def _load(url: str, options: Any, expected: IndexProvenance) -> SimilarityIndex | None:
    """The index stored at ``url`` if it is the one ``expected`` describes and faiss reads it back as its
    attributes say; else None (one warning if a file was there)."""
    stored = read_index_file(url, options, expected)
    if stored is None:
        return None
    faiss = _faiss()
    try:
        index = faiss.deserialize_index(stored.blob)
    except RuntimeError as err:  # faiss's error for bytes it cannot read
        warn_unusable(url, f"faiss cannot read it ({err})")
        return None
    want = KINDS[stored.kind].faiss_class
    read = (type(index).__name__, index.ntotal, index.d)
    if read != (want, expected.rows, expected.dim):  # faiss returns the concrete class (deserialize downcasts)
        warn_unusable(
            url,
            f"faiss reads it as {read[0]} of {read[1]} rows of dimension {read[2]}, not as the {want} of "
            f"{expected.rows} x {expected.dim} its attributes say",
        )
        return None
    return SimilarityIndex(
        expected, index, stored.kind, stored.shape, stored.width, stored.recall_at_10, stored.recall_queries
    )
