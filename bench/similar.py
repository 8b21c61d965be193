"""Similar: where an exact (flat) faiss index stops being fast enough, and exact vs approximate ``similar``.

1. **FLAT_MAX_ROWS** (``storage/trained/similarity_index.py``: up to there a type gets no index):
   seeded clustered one-partition checkpoints of ``--flat-sizes`` rows at ``--dim``, written to
   bench/work/similar_flat/ and deleted after; 1,000 seeded entities get their 10 nearest by the
   exact search (:func:`storage.trained.similarity.exact_neighbours`, reading the partition
   included), best of 2; faiss's exact ``IndexFlatIP`` on the same rows beside it (k=11, best of 2).
   The constant is the largest size whose exact search answers 1,000 queries within
   ``FLAT_BUDGET_S`` (1 s: 10,000 names in 10 s).
2. **Exact vs approximate** on a checkpoint of ``--entities`` x ``--dim`` in ``--partitions``
   partitions (default 1M x 100 in 8; random but clustered: ``--clusters`` seeded N(0, 1) centres,
   by default one per 100 entities, every row a random centre plus N(0, ``--noise``^2) per
   coordinate, 0.5 by default; no training needed), written with the stores
   under bench/work/similar/ and cached. Through :class:`storage.trained.similarity.SimilarEntities`
   (what ``pbg similar`` runs): the index is built (its time, the kind the build chose, IVF-Flat or
   HNSW-Flat, with its structure, ``nlist`` or ``M``, its search width, ``nprobe`` or ``efSearch``, and
   recall@10 at build; what the build tried, as it logged it, printed and kept), then ``--queries`` seeded entities get their 10 nearest exactly and through the index
   (loaded again from its file first, timed apart). Recall@10 of the approximate lists against the
   exact ones. Target: approximate >= 20x faster than exact at recall@10 >= 0.95.
3. **HNSW** (``--hnsw``, once, whatever part 2's build chose): faiss ``IndexHNSWFlat`` (M=32) on the
   same vectors: build time, and per ``efSearch`` the search time and recall@10 against the exact lists.
4. **OpenMP**: torch and faiss each bring a libgomp; faiss's flat search of 1,000 queries alone vs
   right after a torch product (median of 5 each).

Run: ``.venv/bin/python -m bench.similar [--entities N] [--dim D] [--queries Q] [--hnsw] [--quick]``;
``--quick`` = 100k entities, 1,000 queries, flat sizes up to 200k. Writes bench/results/similar.json.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.lib.quiet import busy_cpu_seconds, wait_quiet
from bench.lib.report import format_table, ratio, verdict, write_json
from bench.lib.synthetic import clustered, is_cached, write_checkpoint
from bench.lib.tools import WORK_DIR, machine_info

FLAT_BUDGET_S = 1.0
FLAT_QUERIES = 1000
TARGET_SPEEDUP = 20.0
TARGET_RECALL = 0.95
SEED = 0
K = 10


def timed(fn: Callable[[], object]) -> tuple[object, dict[str, Any]]:
    """``fn()`` after a wait for a quiet machine (at most a minute), with its wall seconds, this process's CPU
    seconds, the CPU seconds the rest of the machine took meanwhile (others' load in the figure) and the
    1-minute load average (``os.getloadavg``) before and after."""
    waited = wait_quiet(60.0)
    load_before = os.getloadavg()[0]
    busy, cpu, started = busy_cpu_seconds(), time.process_time(), time.perf_counter()
    value = fn()
    wall, own = time.perf_counter() - started, time.process_time() - cpu
    return value, {
        "wall_s": wall,
        "cpu_s": own,
        "others_cpu_s": max(busy_cpu_seconds() - busy - own, 0.0),
        "waited_s": waited,
        "load_avg_1m": [load_before, os.getloadavg()[0]],
    }


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` timed calls, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


# ---- 1. FLAT_MAX_ROWS ---------------------------------------------------------------------------
def measure_flat(sizes: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """Seconds of exact searches of 1,000 queries per table size; the largest size within budget."""
    import faiss

    from storage.trained.similarity_index import index_vectors

    faiss.omp_set_num_threads(torch.get_num_threads())
    rows = []
    for size in sizes:
        base = WORK_DIR / "similar_flat"
        flat_args = argparse.Namespace(**{**vars(args), "entities": size, "partitions": 1})
        similar = open_similar(build_checkpoint(base, flat_args))
        type_rows = similar.rows("e")
        wanted = type_rows.row_ids(
            torch.from_numpy(np.random.default_rng(SEED).choice(size, FLAT_QUERIES, replace=False))
        )
        exact_s = best_of(lambda similar=similar, wanted=wanted: similar.nearest("e", wanted, K), 2)
        index = faiss.IndexFlatIP(args.dim)
        index.add(index_vectors(similar.model, "e", next(type_rows.partitions())[1]))
        queries = index_vectors(similar.model, "e", type_rows.load(wanted))
        faiss_s = best_of(lambda index=index, queries=queries: index.search(queries, K + 1), 2)
        rows.append({"rows": size, "exact_s": exact_s, "faiss_flat_s": faiss_s})
        print(
            f"  {size:>9,} rows: exact {exact_s:.3f} s, faiss IndexFlat {faiss_s:.3f} s per 1,000 queries", flush=True
        )
        del index, similar
        shutil.rmtree(base, ignore_errors=True)
    within = [row["rows"] for row in rows if row["exact_s"] <= FLAT_BUDGET_S]
    return {"budget_s": FLAT_BUDGET_S, "sizes": rows, "flat_max_rows": max(within, default=None)}


# ---- 2. the checkpoint --------------------------------------------------------------------------
def build_checkpoint(base: Path, args: argparse.Namespace) -> Any:
    """Write (once, cached by a stamp) the clustered checkpoint; returns its config."""
    from pbg_core.config import parse_config

    config = parse_config(
        {
            "entities": {"e": {"num_partitions": args.partitions}},
            "relations": [{"name": "near", "lhs": "e", "rhs": "e"}],
            "dimension": args.dim,
            "comparator": args.comparator,
            "entity_path": str(base / "entities"),
            "edge_paths": [],
            "checkpoint_path": str(base / "checkpoints"),
        }
    )
    wanted = {k: getattr(args, k) for k in ("entities", "dim", "partitions", "clusters", "noise", "comparator")}
    stamp = {**wanted, "seed": SEED}
    if is_cached(base, stamp):
        return config
    rng = np.random.default_rng(SEED)
    centres = rng.standard_normal((args.clusters, args.dim), dtype=np.float32)
    write_checkpoint(base, config, "e", args.entities, lambda _, n: clustered(rng, centres, n, args.noise), stamp)
    return config


def open_similar(config: Any, flat_max_rows: int | None = None) -> Any:
    """A :class:`SimilarEntities` on the latest version, the model restored from its file; ``flat_max_rows``:
    the library's unless given (0: an index for any size)."""
    from pbg_core.model.embedder import build_model
    from pbg_core.session.parts import ModelState
    from storage.checkpoint_reader import CheckpointReader
    from storage.trained.similarity import SimilarEntities

    reader = CheckpointReader(config, None, ["e"], "to search")
    state = ModelState(build_model(config, 0), None)
    state.restore(reader.checkpoints, reader.version, None)
    if flat_max_rows is None:
        return SimilarEntities(state.model, reader)
    return SimilarEntities(state.model, reader, flat_max_rows=flat_max_rows)


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the ids of ``b`` (>= 0) found in the same row of ``a``: recall of ``a`` against ``b``."""
    real = b >= 0
    hit = (a[:, :, None] == b[:, None, :]).any(axis=1) & real
    return float(hit.sum() / max(int(real.sum()), 1))


def measure_search(config: Any, queries: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Index build, exact and approximate top-10 of ``queries`` seeded entities through SimilarEntities."""
    from storage.trained.row_ids import RowIds

    index_path = Path(config.checkpoint_path) / "similar_e.v1.h5"
    index_path.unlink(missing_ok=True)  # the build is measured
    similar = open_similar(config, flat_max_rows=0)  # an index whatever the size (--quick's 100k too)
    rows = similar.rows("e")
    started = time.perf_counter()
    with _build_log() as build_log:  # what the build tried, each line printed as it comes
        index = similar.index("e")
    build_s = time.perf_counter() - started
    print(f"  built in {build_s:.1f} s: {index.describe()}", flush=True)
    started = time.perf_counter()
    loaded = open_similar(config, flat_max_rows=0)
    loaded.index("e")
    load_s = time.perf_counter() - started
    ids = torch.from_numpy(np.sort(np.random.default_rng(SEED + 7).choice(rows.count, queries, replace=False)))
    wanted: RowIds = rows.row_ids(ids)
    loaded.nearest("e", wanted, K, approximate=True)  # warm: the rows in the page cache
    approx, approx_t = timed(lambda: loaded.nearest("e", wanted, K, approximate=True))
    print(f"  approximate: {_describe(approx_t)} for {queries:,} queries", flush=True)
    exact, exact_t = timed(lambda: loaded.nearest("e", wanted, K))
    print(f"  exact: {_describe(exact_t)} for {queries:,} queries", flush=True)
    exact_s, approx_s = exact_t["wall_s"], approx_t["wall_s"]
    found = {
        "exact": rows.global_ids(RowIds(exact.partitions, exact.offsets)).numpy(),
        "approximate": rows.global_ids(RowIds(approx.partitions, approx.offsets)).numpy(),
        "queries": ids.numpy(),
    }
    flops = 2.0 * queries * rows.count * rows.dim
    return {
        "index": {
            "kind": index.kind,
            "shape": index.shape,
            "width": index.width,
            "describe": index.describe(),
            "build_log": build_log,
            "recall_at_10_at_build": index.recall_at_10,
            "build_s": build_s,
            "load_s": load_s,
            "file_bytes": index_path.stat().st_size,
        },
        "queries": queries,
        "exact_s": exact_s,
        "exact_gflops": flops / exact_s / 1e9,
        "approximate_s": approx_s,
        "exact_timing": exact_t,
        "approximate_timing": approx_t,
        "speedup": ratio(exact_s, approx_s),
        "cpu_speedup": ratio(exact_t["cpu_s"], approx_t["cpu_s"]),
        "recall_at_10": overlap(found["approximate"], found["exact"]),
    }, found


@contextlib.contextmanager
def _build_log() -> Iterator[list[str]]:
    """The similarity index's INFO lines while the block runs, printed and collected."""

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())
            print(f"  {lines[-1]}", flush=True)

    lines: list[str] = []
    logger, handler = logging.getLogger("storage.trained.similarity_index"), Collect(logging.INFO)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _describe(timing: dict[str, Any]) -> str:
    load = timing["load_avg_1m"]
    return (
        f"{timing['wall_s']:.2f} s ({timing['cpu_s']:.1f} CPU s; others took {timing['others_cpu_s']:.1f} CPU s "
        f"meanwhile; load average {load[0]:.1f} -> {load[1]:.1f})"
    )


# ---- 3. HNSW ------------------------------------------------------------------------------------
def measure_hnsw(config: Any, found: dict[str, np.ndarray]) -> dict[str, Any]:
    """An HNSW index (M=32) on the same vectors: build time; search time and recall per efSearch."""
    import faiss

    from storage.trained.similarity_index import index_vectors, query_vectors

    similar = open_similar(config)
    rows = similar.rows("e")
    faiss.omp_set_num_threads(torch.get_num_threads())
    hnsw = faiss.IndexHNSWFlat(rows.dim, 32, faiss.METRIC_INNER_PRODUCT)
    started = time.perf_counter()
    for _, table in rows.partitions():
        hnsw.add(index_vectors(similar.model, "e", table))
    build_s = time.perf_counter() - started
    print(f"  HNSW built in {build_s:.1f} s", flush=True)
    vectors = query_vectors(similar.model, "e", rows.load(rows.row_ids(torch.from_numpy(found["queries"]))), False)
    settings = []
    for ef in (16, 32, 64, 128, 256):
        hnsw.hnsw.efSearch = ef
        seconds = best_of(lambda: hnsw.search(vectors, K + 1), 2)
        _, hits = hnsw.search(vectors, K + 1)
        own = hits == found["queries"][:, None]
        own &= np.cumsum(own, axis=1) == 1
        hits = np.take_along_axis(hits, np.argsort(own, axis=1, kind="stable")[:, :K], axis=1)
        settings.append({"ef_search": ef, "search_s": seconds, "recall_at_10": overlap(hits, found["exact"])})
        print(f"  HNSW efSearch {ef}: {seconds:.2f} s, recall@10 {settings[-1]['recall_at_10']:.3f}", flush=True)
    return {"m": 32, "build_s": build_s, "settings": settings}


# ---- 4. OpenMP ----------------------------------------------------------------------------------
def measure_openmp(dim: int) -> dict[str, Any]:
    """A flat faiss search alone, and right after a torch product (two OpenMP runtimes in turn)."""
    import faiss

    faiss.omp_set_num_threads(torch.get_num_threads())
    rng = np.random.default_rng(SEED)
    table = rng.standard_normal((200_000, dim), dtype=np.float32)
    index = faiss.IndexFlatIP(dim)
    index.add(table)
    queries = table[:FLAT_QUERIES]
    a = torch.from_numpy(table[:20_000])

    def faiss_alone() -> float:
        started = time.perf_counter()
        index.search(queries, K)
        return time.perf_counter() - started

    def after_torch() -> float:
        (a @ a[:2000].T).max()
        return faiss_alone()

    alone = statistics.median(faiss_alone() for _ in range(5))
    turns = statistics.median(after_torch() for _ in range(5))
    return {"faiss_alone_s": alone, "faiss_after_torch_s": turns, "slowdown": ratio(turns, alone)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.similar", description=__doc__.split("\n")[0])
    parser.add_argument("--entities", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--clusters", type=int, default=None, help="cluster centres (default: one per 100 entities)")
    parser.add_argument("--noise", type=float, default=0.5, help="standard deviation of a row around its centre")
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--comparator", default="cos", choices=["dot", "cos", "l2", "squared_l2"])
    parser.add_argument("--flat-sizes", default="25000,50000,100000,200000,400000,800000")
    parser.add_argument("--skip-flat", action="store_true", help="skip part 1 (FLAT_MAX_ROWS)")
    parser.add_argument("--hnsw", action="store_true", help="also build and search an HNSW index (part 3)")
    parser.add_argument("--quick", action="store_true", help="100k entities, 1,000 queries, flat sizes to 200k")
    args = parser.parse_args(argv)
    if args.quick:
        args.entities, args.queries, args.flat_sizes = 100_000, 1000, "25000,50000,100000,200000"
    if args.clusters is None:
        args.clusters = max(1, args.entities // 100)
    return args


def main(argv: list[str]) -> int:
    """Run the parts, print their tables, write bench/results/similar.json; 0 if the target is met."""
    args = parse_args(argv)
    result: dict[str, Any] = {"machine": machine_info(), "torch_threads": torch.get_num_threads(), "args": vars(args)}
    if not args.skip_flat:
        print("1. exact search of 1,000 queries by table size", flush=True)
        result["flat"] = measure_flat([int(s) for s in args.flat_sizes.split(",")], args)
    print(f"2. exact vs approximate on {args.entities:,} x {args.dim} in {args.partitions} partitions", flush=True)
    config = build_checkpoint(WORK_DIR / "similar", args)
    result["search"], found = measure_search(config, args.queries)
    if args.hnsw:
        print("3. HNSW on the same vectors", flush=True)
        result["hnsw"] = measure_hnsw(config, found)
    result["openmp"] = measure_openmp(args.dim)
    result["peak_rss_mib"] = _peak_rss_mib()
    search = result["search"]
    met = bool(search["speedup"] >= TARGET_SPEEDUP and search["recall_at_10"] >= TARGET_RECALL)
    result["target_met"] = met
    print(_tables(result))
    print(f"wrote {write_json('similar', result)}")
    return 0 if met else 1


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(ln for ln in status if ln.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _tables(result: dict[str, Any]) -> str:
    """Every part's table, as printed."""
    parts = []
    if "flat" in result:
        flat = result["flat"]
        rows = [[r["rows"], r["exact_s"], r["faiss_flat_s"]] for r in flat["sizes"]]
        parts.append(format_table(["rows", "exact s / 1,000 queries", "faiss IndexFlat s"], rows))
        parts.append(f"FLAT_MAX_ROWS (largest within {flat['budget_s']} s): {flat['flat_max_rows']}")
    parts += _search_tables(result["search"], result["target_met"])
    if "hnsw" in result:
        rows = [[h["ef_search"], h["search_s"], h["recall_at_10"]] for h in result["hnsw"]["settings"]]
        table = format_table(["efSearch", "search s", "recall@10"], rows)
        parts.append(f"HNSW M=32 built in {result['hnsw']['build_s']:.1f} s\n{table}")
    omp = result["openmp"]
    parts.append(
        f"OpenMP: faiss alone {omp['faiss_alone_s']:.3f} s, after a torch product {omp['faiss_after_torch_s']:.3f} s"
    )
    parts.append(f"peak RSS {result['peak_rss_mib']:,.0f} MiB")
    return "\n\n".join(parts)


def _search_tables(search: dict[str, Any], met: bool) -> list[str]:
    """Part 2's tables: the index, then exact vs approximate."""
    index = search["index"]
    index_row = [index[key] for key in ("kind", "shape", "width", "recall_at_10_at_build", "build_s", "load_s")]
    search_keys = ("queries", "exact_s", "exact_gflops", "approximate_s", "speedup", "cpu_speedup", "recall_at_10")
    return [
        format_table(
            ["index", "nlist or M", "nprobe or efSearch", "recall@10 at build", "build s", "load s", "file MiB"],
            [[*index_row, index["file_bytes"] / 2**20]],
        ),
        format_table(
            [
                "queries",
                "exact s",
                "exact GFLOP/s",
                "approximate s",
                "speedup",
                "CPU-time ratio",
                "recall@10",
                "target",
            ],
            [[*(search[key] for key in search_keys), verdict(met)]],
        ),
    ]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
