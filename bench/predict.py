"""Predict: ``pbg predict``'s ranks against ``pbg eval`` and brute force, its speed on 1M entities, and side by side.

1. **UMLS** (data/kg/umls, bench/configs/kg_complex.py: the demo's ComplEx, dynamic relations,
   ``dot``), in bench/work/predict/umls/ as bench.quality lays it out: ``pbg import`` and ``pbg
   train`` (``--epochs``, seed 0, cached), then ``pbg eval --filtered`` of test.txt (train, valid
   and test filtered, ``all_negs``) and, through the real CLI, ``pbg predict --queries test.txt
   -l 0 --rel-col 1 -r 2 -k 10 --filtered --output`` for tails and for heads. The MRR recomputed
   from the output's ``answer_partition_rank`` (both sides of each edge) must equal eval's to
   1e-6. The top-10 lists must equal a brute-force reference in numpy (float64) over ``pbg
   export``'s rows and relation parameters, the operator and comparator written out again
   here (:func:`complex_multiply`, a dot product), known edges removed by name.
2. **1M entities**: a checkpoint of ``--entities`` x ``--dim`` in ``--partitions`` partitions
   (1M x 100 in 8; seeded N(0, 1) rows, one relation with a seeded ``translation`` operator,
   ``dot``), written straight in the checkpoint format (bench.lib.synthetic, cached). In a
   child process (its peak RSS is its ``VmHWM``): ``Model.predict`` of the top-10 tails of
   ``--queries`` (10,000) seeded heads, exact. Its time against this machine's compute bound,
   ``Q x N x D`` multiply-adds at the sgemm rate ``torch.matmul`` reaches on the same products
   (``[rows of a score block, D] x [D, partition]``, every block, no ranking), measured in this
   run before and after the child (the faster counts); the large-square sgemm rate beside it.
   Then ``pbg predict`` end to end on the same queries (``--queries`` file, ``--output``
   Parquet): wall time and peak RSS of its process tree. Targets: within 2x of the bound, peak
   RSS at most one partition + 1 GiB.
3. **Side by side on UMLS**: PyKEEN 1.11's ``predict_target`` (bench/lib/pykeen_predict.py in
   PyKEEN's own virtualenv: ``$PYKEEN_VENV``, default bench/.pykeen-venv, built by ``make
   pykeen-venv``; ``skipped: <why>`` without it), time per query, next to ours per query
   (``Model.predict(head=, relation=)`` one query at a time in this process, and the batch form);
   and PBG's documented faiss recipe for ``dot``: a ``translation`` model (dynamic relations,
   ``dot``, a short training), ``pbg export``, ``faiss.IndexFlatIP`` over the entity rows,
   each query's anchor row with its relation's operator applied first, against ``pbg predict``'s
   unfiltered top-10 of the same test queries.

The load on the machine (``os.getloadavg``) is recorded before each timed part. Run:
``.venv/bin/python -m bench.predict [--entities N] [--queries Q] [--epochs E] [--skip-1m]
[--skip-umls] [--quick]``; ``--quick`` = 100k entities, 1,000 queries. Writes
bench/results/predict.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.report import format_table, ratio, verdict, write_json
from bench.lib.runner import run_measured, tail
from bench.lib.synthetic import is_cached, write_checkpoint
from bench.lib.tools import BENCH_DIR, REPO_ROOT, TSV_COLUMNS, WORK_DIR, eval_metrics, machine_info, ours_bin

CONFIG = BENCH_DIR / "configs" / "kg_complex.py"
UMLS = REPO_ROOT / "data" / "kg" / "umls"
SPLITS = ("train", "valid", "test")
FILTERS = [arg for split in SPLITS for arg in ("--filter-path", f"edges/{split}")]
PYKEEN_VENV = Path(os.environ.get("PYKEEN_VENV", BENCH_DIR / ".pykeen-venv"))
K = 10
SEED = 0
MRR_TOLERANCE = 1e-6
NEAR_TIE = 1e-4  # reference scores this close (relative) may swap places in float32
TARGET_BOUND_RATIO = 2.0
RSS_ALLOWANCE = 1 << 30


# ---- pure parts: ranks, reference, comparisons ---------------------------------------------------
def mrr_from_ranks(*ranks: Iterable[int]) -> float:
    """Mean reciprocal rank over every rank given (each side of each edge counts once, as eval's mean of sides)."""
    values = np.concatenate([np.asarray(list(r), dtype=np.float64) for r in ranks])
    return float(np.mean(1.0 / values))


def complex_multiply(x: np.ndarray, real: np.ndarray, imag: np.ndarray) -> np.ndarray:
    """(a + ib)(c + id) with a, b the halves of ``x``'s last axis (PBG's complex_diagonal operator)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * real - b * imag, a * imag + b * real], axis=-1)


def read_relation_params(path: Path) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """``relation_types.tsv`` of ``pbg export``: ``{(relation, side): {param: values}}`` (shapes restored)."""
    params: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for line in path.read_text().splitlines():
        rel, side, _operator, name, shape, *values = line.split("\t")
        dims = [int(d) for d in shape.split("x")]
        params.setdefault((rel, side), {})[name] = np.asarray(values, dtype=np.float64).reshape(dims)
    return params


def apply_operator(operator: str, rows: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """PBG's operator on ``rows`` ``[Q, D]`` from its exported parameters (none, translation, diagonal, complex)."""
    if operator == "none":
        return rows
    if operator == "translation":  # "translations" in the dynamic form: one row per relation
        return rows + params.get("translation", params.get("translations"))
    if operator == "diagonal":
        return rows * params.get("diagonal", params.get("diagonals"))
    if operator == "complex_diagonal":
        return complex_multiply(rows, params["real"], params["imag"])
    raise ValueError(
        f"operator {operator!r} is not written out here; known: none, translation, diagonal, complex_diagonal"
    )


def reference_scores(table: np.ndarray, queries: np.ndarray, known: list[set[int]] | None) -> np.ndarray:
    """Brute force: every query's dot product with every row of ``table`` (float64), known rows ``-inf``."""
    scores = queries.astype(np.float64) @ table.astype(np.float64).T
    if known is not None:
        for i, rows in enumerate(known):
            scores[i, sorted(rows)] = -np.inf
    return scores


def reference_top(scores: np.ndarray, k: int) -> list[list[int]]:
    """Each row's ``k`` best columns, ties by column as predict orders them; ``-inf`` columns left out."""
    order = np.lexsort((np.broadcast_to(np.arange(scores.shape[1]), scores.shape), -scores), axis=1)[:, :k]
    return [[int(c) for c in row if s[c] != -np.inf] for row, s in zip(order, scores, strict=True)]


def compare_lists(found: list[list[int]], reference: list[list[int]], scores: np.ndarray) -> dict[str, int]:
    """Queries whose top list equals the reference's, differs only by near-tied entries (the reference's
    scores of the two entities at each differing place within NEAR_TIE, relative), or differs."""
    equal = near = differ = 0
    for got, want, row in zip(found, reference, scores, strict=True):
        if got == want:
            equal += 1
        elif len(got) == len(want) and all(
            abs(row[a] - row[b]) <= NEAR_TIE * max(1.0, abs(row[b])) for a, b in zip(got, want, strict=True)
        ):
            near += 1
        else:
            differ += 1
    return {"equal": equal, "near_tie": near, "differ": differ}


def known_by_query(
    edges: list[tuple[str, str, str]], queries: list[tuple[str, str]], tails: bool, index: dict[str, int]
) -> list[set[int]]:
    """For each ``(anchor, relation)`` query, the rows of the entities known to complete it in ``edges``."""
    known: dict[tuple[str, str], set[int]] = {}
    for head, rel, tail_ in edges:
        anchor, other = (head, tail_) if tails else (tail_, head)
        known.setdefault((anchor, rel), set()).add(index[other])
    return [known.get(query, set()) for query in queries]


def bound_seconds(queries: int, entities: int, dim: int, flops: float) -> float:
    """Seconds of ``queries x entities x dim`` multiply-adds at ``flops`` FLOP/s (2 FLOPs each)."""
    return 2.0 * queries * entities * dim / flops


def load_now() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages."""
    return [round(v, 2) for v in os.getloadavg()]


def read_tsv(path: Path) -> list[tuple[str, str, str]]:
    """``head<TAB>relation<TAB>tail`` rows."""
    rows = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    return [(h, r, t) for h, r, t in rows]


# ---- 1. UMLS: ranks against pbg eval and brute force ----------------------------------------------
class Umls:
    """The UMLS commands of this bench, run in bench/work/predict/umls with one set of overrides."""

    def __init__(self, name: str, overrides: list[str]) -> None:
        self.cwd = WORK_DIR / "predict" / "umls"
        self.name = name
        self.params = [arg for item in [f"checkpoint_path=checkpoints/{name}", *overrides] for arg in ("-p", item)]
        self.operator = next((o.split("=", 1)[1] for o in overrides if o.startswith("relations.0.operator=")), None)

    def run(self, log: str, *args: str | Path) -> Any:
        """One ``pbg`` command (config and overrides after its name); raises on failure with its stderr's tail."""
        command, *rest = args
        result = run_measured([ours_bin(), command, CONFIG, *self.params, *rest], self.cwd, f"{self.name}-{log}")
        if result.returncode != 0:
            raise RuntimeError(f"pbg {command} failed ({result.returncode}):\n{tail(result.stderr, 15)}")
        return result

    def prepare(self, epochs: int) -> None:
        """Import UMLS (once) and train this model (once per epochs)."""
        if not (self.cwd / "import.done").exists():
            files = [UMLS / f"{split}.txt" for split in SPLITS]
            run = run_measured([ours_bin(), "import", CONFIG, *files, *TSV_COLUMNS, "-p", "seed=0"], self.cwd, "import")
            if run.returncode != 0:
                raise RuntimeError(f"pbg import failed:\n{tail(run.stderr, 15)}")
            (self.cwd / "import.done").write_text("")
        stamp = self.cwd / f"{self.name}.trained"
        if stamp.exists() and stamp.read_text() == str(epochs):
            return
        self.run("train", "train", "-p", "edge_paths=edges/train", "-p", f"num_epochs={epochs}", "-p", "seed=0")
        stamp.write_text(str(epochs))

    def predict(self, target: str, filtered: bool) -> tuple[Any, float]:
        """``pbg predict`` of test.txt's queries ranking ``target`` (with their answers): the rows and the wall seconds."""
        import pyarrow.parquet as pq

        out = self.cwd / f"{self.name}-{target}{'-filtered' if filtered else ''}.parquet"
        args = ["--queries", UMLS / "test.txt", *TSV_COLUMNS, "--target", target, "-k", str(K), "--output", out]
        run = self.run(
            f"predict-{target}", "predict", *args, "--force", *(["--filtered", *FILTERS] if filtered else [])
        )
        return pq.read_table(out).to_pylist(), run.wall_s

    def export(self) -> tuple[np.ndarray, list[str], dict[tuple[str, str], dict[str, np.ndarray]]]:
        """``pbg export --format npy``: the rows of type ``all``, their names, the relation parameters."""
        out = self.cwd / f"{self.name}-export"
        if not (out / "all.npy").exists():
            self.run("export", "export", "--output", out, "--format", "npy")
        names = json.loads((out / "all.names.json").read_text())
        return np.load(out / "all.npy"), names, read_relation_params(out / "relation_types.tsv")


def top_lists(rows: list[dict[str, Any]], side: str, index: dict[str, int]) -> tuple[list[list[int]], list[int]]:
    """Per query (in order): its top list as rows of the export, and its answer's partition rank."""
    lists: dict[int, list[int]] = {}
    ranks: dict[int, int] = {}
    for row in rows:
        got = lists.setdefault(row["query"], [])
        if row[side] is not None and row["rank"] is not None:
            got.append(index[row[side]])
        ranks[row["query"]] = row["answer_partition_rank"]
    return [lists[q] for q in sorted(lists)], [ranks[q] for q in sorted(ranks)]


def query_vectors(
    rows: np.ndarray, index: dict[str, int], queries: list[tuple[str, str]], side: str, operator: str, params: Any
) -> np.ndarray:
    """Each ``(anchor, relation)``'s vector: the anchor's row with the relation's ``side`` operator applied."""
    out = np.empty((len(queries), rows.shape[1]), dtype=np.float64)
    for i, (anchor, rel) in enumerate(queries):
        out[i] = apply_operator(operator, rows[index[anchor]].astype(np.float64), params.get((rel, side), {}))
    return out


def measure_umls(epochs: int) -> dict[str, Any]:
    """Part 1: MRR of predict's ranks vs pbg eval's; top-10 lists vs the numpy reference, both targets."""
    umls = Umls("complex", [])
    umls.prepare(epochs)
    metrics = eval_metrics(
        umls.run(
            "eval", "eval", "-p", "edge_paths=edges/test", "-p", "relations.0.all_negs=true",
            "-p", "num_uniform_negs=0", "-p", "seed=0", "--filtered", *FILTERS, "--json",
        ).stdout
    )  # fmt: skip
    table, names, params = umls.export()
    index = {name: i for i, name in enumerate(names)}
    test = read_tsv(UMLS / "test.txt")
    every = [edge for split in SPLITS for edge in read_tsv(UMLS / f"{split}.txt")]
    result: dict[str, Any] = {"eval_mrr": metrics["mrr"], "eval_count": metrics["count"], "load": load_now()}
    ranks = []
    for target, side, found_col in (("tail", "lhs", "tail"), ("head", "rhs", "head")):
        rows, wall = umls.predict(target, filtered=True)
        lists, answer_ranks = top_lists(rows, found_col, index)
        ranks.append(answer_ranks)
        queries = [(h, r) if target == "tail" else (t, r) for h, r, t in test]
        vectors = query_vectors(table, index, queries, side, "complex_diagonal", params)
        scores = reference_scores(table, vectors, known_by_query(every, queries, target == "tail", index))
        result[target] = {
            "cli_s": wall,
            "queries": len(lists),
            **compare_lists(lists, reference_top(scores, K), scores),
        }
    result["predict_mrr"] = mrr_from_ranks(*ranks)
    result["mrr_diff"] = abs(result["predict_mrr"] - float(metrics["mrr"]))
    result["mrr_equal"] = result["mrr_diff"] <= MRR_TOLERANCE
    result["lists_equal"] = all(result[t]["differ"] == 0 for t in ("tail", "head"))
    return result


# ---- 2. 1M entities: time against the compute bound, peak RSS -----------------------------------
def large_config(base: Path, args: argparse.Namespace) -> Any:
    """The 1M-entity model's config: one type ``e`` in ``--partitions``, relation ``r`` (translation), dot."""
    from pbg_core.config import parse_config

    return parse_config(
        {
            "entities": {"e": {"num_partitions": args.partitions}},
            "relations": [{"name": "r", "lhs": "e", "rhs": "e", "operator": "translation"}],
            "dimension": args.dim,
            "comparator": "dot",
            "entity_path": str(base / "entities"),
            "edge_paths": [],
            "checkpoint_path": str(base / "checkpoints"),
        }
    )


def build_large(args: argparse.Namespace) -> Path:
    """Write (once, cached) the 1M-entity checkpoint; returns its directory (it holds its config.json)."""
    import torch

    base = WORK_DIR / "predict" / "large"
    config = large_config(base, args)
    stamp = {"entities": args.entities, "dim": args.dim, "partitions": args.partitions, "seed": SEED}
    if not is_cached(base, stamp):
        rng = np.random.default_rng(SEED)

        def translation(state: dict[str, torch.Tensor]) -> None:
            for name, value in state.items():
                if "translation" in name:
                    value.copy_(torch.from_numpy(rng.standard_normal(value.shape, dtype=np.float32)))

        rows = lambda _, n: rng.standard_normal((n, args.dim), dtype=np.float32)  # noqa: E731
        write_checkpoint(base, config, "e", args.entities, rows, stamp, translation)
    return base / "checkpoints"


def query_heads(entities: int, queries: int) -> list[str]:
    """``queries`` seeded distinct head names of the 1M model."""
    picks = np.random.default_rng(SEED + 1).choice(entities, size=queries, replace=False)
    return [f"ent_{i:07d}" for i in picks]


def product_flops(entities: int, partitions: int, dim: int, queries: int, repeats: int = 2) -> dict[str, float]:
    """FLOP/s of ``torch.matmul`` on predict's products: ``[block rows, dim] x [dim, partition]`` blocks
    (as many rows as one score block holds) over ``min(queries, 2,000)`` queries, best of ``repeats``."""
    import torch

    from pbg_core.evaluation.ranking import query_block_rows

    size = -(-entities // partitions)
    generator = torch.Generator().manual_seed(SEED)
    table = torch.randn(size, dim, generator=generator)
    step = query_block_rows(size)
    rows = min(queries, 2000)
    anchors = torch.randn(rows, dim, generator=generator)
    out = torch.empty(step, size)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for start in range(0, rows, step):
            block = anchors[start : start + step]
            torch.matmul(block, table.T, out=out[: len(block)])
        best = min(best, time.perf_counter() - started)
    return {"block_rows": step, "partition_rows": size, "seconds": best, "flops": 2.0 * rows * size * dim / best}


def child_large(checkpoint: str, entities: int, queries: int) -> int:
    """In the child: load the model, time ``Model.predict`` of the queries, print time and VmHWM as JSON."""
    from storage.trained import Model

    heads = query_heads(entities, queries)
    started = time.perf_counter()
    model = Model.load(checkpoint)
    load_s = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    table = model.predict(heads=heads, relations="r", k=K)
    predict_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    with open("/proc/self/status") as status:
        hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(
        json.dumps({"load_s": load_s, "predict_s": predict_s, "cpu_s": cpu_s, "rows": table.num_rows, "vmhwm_kib": hwm})
    )
    return 0


def measure_large(args: argparse.Namespace) -> dict[str, Any]:
    """Part 2: Model.predict in a child, the bound around it, then the CLI end to end."""
    from bench.sgemm import measure_sgemm

    checkpoint = build_large(args)
    threads = len(os.sched_getaffinity(0))
    before = product_flops(args.entities, args.partitions, args.dim, args.queries)
    load = load_now()
    argv = [sys.executable, "-m", "bench.predict", "--child-large", str(checkpoint)]
    done = subprocess.run(
        [*argv, "--entities", str(args.entities), "--queries", str(args.queries)],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the Model.predict child failed:\n{tail(done.stderr, 15)}")
    child = json.loads(done.stdout.strip().splitlines()[-1])
    after = product_flops(args.entities, args.partitions, args.dim, args.queries)
    rate = max(before["flops"], after["flops"])
    square = measure_sgemm(2048, threads, 3)["flops"]
    bound_s = bound_seconds(args.queries, args.entities, args.dim, rate)
    partition_bytes = before["partition_rows"] * args.dim * 4
    return {
        "entities": args.entities, "dim": args.dim, "partitions": args.partitions, "queries": args.queries,
        "load_before": load, "product": {"before": before, "after": after}, "product_gflops": rate / 1e9,
        "square_sgemm_gflops": square / 1e9, "bound_s": bound_s,
        "square_bound_s": bound_seconds(args.queries, args.entities, args.dim, square),
        "model": child, "bound_ratio": child["predict_s"] / bound_s, "fraction_of_bound": bound_s / child["predict_s"],
        "rss_budget_mib": (partition_bytes + RSS_ALLOWANCE) / 2**20, "rss_mib": child["vmhwm_kib"] / 1024,
        "cli": measure_large_cli(checkpoint, args),
    }  # fmt: skip


def measure_large_cli(checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``pbg predict CHECKPOINT --queries`` of the same heads to Parquet: wall time, peak RSS of its tree."""
    cwd = WORK_DIR / "predict" / "large-cli"
    cwd.mkdir(parents=True, exist_ok=True)
    queries = cwd / "heads.tsv"
    queries.write_text("".join(f"{name}\n" for name in query_heads(args.entities, args.queries)))
    load = load_now()
    argv = [ours_bin(), "predict", checkpoint, "--queries", queries, "-l", "0", "--relation", "r", "-k", str(K)]
    run = run_measured([*argv, "--output", cwd / "top.parquet", "--force"], cwd, "predict")
    if run.returncode != 0:
        raise RuntimeError(f"pbg predict failed ({run.returncode}):\n{tail(run.stderr, 15)}")
    return {"wall_s": run.wall_s, "peak_rss_mib": run.peak_rss_bytes / 2**20, "load_before": load}


# ---- 3. side by side on UMLS: PyKEEN's predict_target, PBG's faiss recipe -----------------------
def measure_ours_per_query(queries: int) -> dict[str, Any]:
    """Our time per query on the UMLS model in this process: one ``predict(head=, relation=)`` call each,
    and the batch form over the same queries."""
    from storage.trained import Model

    model = Model.load(WORK_DIR / "predict" / "umls" / "checkpoints" / "complex")
    test = read_tsv(UMLS / "test.txt")[:queries]
    model.predict(head=test[0][0], relation=test[0][1], k=K)  # warm: kernels loaded, names indexed
    started = time.perf_counter()
    for head, rel, _ in test:
        model.predict(head=head, relation=rel, k=K)
    single_s = (time.perf_counter() - started) / len(test)
    started = time.perf_counter()
    model.predict(heads=[h for h, _, _ in test], relations=[r for _, r, _ in test], k=K)
    return {"queries": len(test), "single_s": single_s, "batch_s": (time.perf_counter() - started) / len(test)}


def measure_pykeen(queries: int, epochs: int) -> dict[str, Any]:
    """PyKEEN's ``predict_target`` per query (its own virtualenv), or ``{"skipped": why}``."""
    python = PYKEEN_VENV / "bin" / "python"
    if not python.exists():
        return {"skipped": f"no PyKEEN virtualenv at {PYKEEN_VENV} (make pykeen-venv, or set PYKEEN_VENV)"}
    script = BENCH_DIR / "lib" / "pykeen_predict.py"
    done = subprocess.run(
        [python, script, UMLS, str(queries), "--epochs", str(epochs)],
        cwd=WORK_DIR, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {"skipped": f"PyKEEN failed ({done.returncode}): {tail(done.stderr, 3)}"}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    per_query = sorted(found.pop("query_s"))
    return {**found, "queries": len(per_query), "median_s": per_query[len(per_query) // 2],
            "mean_s": sum(per_query) / len(per_query)}  # fmt: skip


def measure_faiss_recipe(epochs: int) -> dict[str, Any]:
    """PBG's faiss recipe for ``dot`` on a translation model: IndexFlatIP over the exported rows, each query's
    anchor with its relation's operator applied, against ``pbg predict``'s unfiltered top-10."""
    import faiss

    umls = Umls("translation", ["relations.0.operator=translation"])
    umls.prepare(epochs)
    table, names, params = umls.export()
    index = {name: i for i, name in enumerate(names)}
    flat = faiss.IndexFlatIP(table.shape[1])
    flat.add(np.ascontiguousarray(table, dtype=np.float32))
    test = read_tsv(UMLS / "test.txt")
    result: dict[str, Any] = {}
    for target, side, found_col in (("tail", "lhs", "tail"), ("head", "rhs", "head")):
        rows, _ = umls.predict(target, filtered=False)
        lists, _ = top_lists(rows, found_col, index)
        queries = [(h, r) if target == "tail" else (t, r) for h, r, t in test]
        vectors = query_vectors(table, index, queries, side, "translation", params)
        started = time.perf_counter()
        _, hits = flat.search(np.ascontiguousarray(vectors, dtype=np.float32), K)
        search_s = time.perf_counter() - started
        scores = reference_scores(table, vectors, None)
        recipe = [[int(c) for c in row] for row in hits]
        result[target] = {"search_s_per_query": search_s / len(queries), **compare_lists(lists, recipe, scores)}
    result["same_answers"] = all(result[t]["differ"] == 0 for t in ("tail", "head"))
    return result


# ---- the run -------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.predict", description=__doc__.split("\n")[0])
    parser.add_argument("--entities", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--queries", type=int, default=10_000, help="queries of the 1M-entity part")
    parser.add_argument("--epochs", type=int, default=50, help="training epochs of the UMLS ComplEx model")
    parser.add_argument("--recipe-epochs", type=int, default=10, help="epochs of the UMLS translation model")
    parser.add_argument("--side-queries", type=int, default=200, help="UMLS queries timed one by one, both tools")
    parser.add_argument("--pykeen-epochs", type=int, default=5)
    parser.add_argument("--skip-umls", action="store_true", help="skip parts 1 and 3")
    parser.add_argument("--skip-large", action="store_true", help="skip part 2")
    parser.add_argument("--quick", action="store_true", help="100k entities, 1,000 queries")
    parser.add_argument("--child-large", metavar="CHECKPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.entities, args.queries = 100_000, 1000
    return args


def main(argv: list[str]) -> int:
    """Run the parts, print their tables, write bench/results/predict.json; 0 if every target is met."""
    args = parse_args(argv)
    if args.child_large:
        return child_large(args.child_large, args.entities, args.queries)
    result: dict[str, Any] = {"machine": machine_info(), "args": vars(args), "load_start": load_now()}
    if not args.skip_umls:
        print("1. UMLS: pbg predict --filtered against pbg eval --filtered and a numpy reference", flush=True)
        result["umls"] = measure_umls(args.epochs)
        print("3. side by side on UMLS: ours, PyKEEN's predict_target, PBG's faiss recipe", flush=True)
        result["side"] = {
            "load": load_now(),
            "ours": measure_ours_per_query(args.side_queries),
            "pykeen": measure_pykeen(args.side_queries, args.pykeen_epochs),
            "faiss": measure_faiss_recipe(args.recipe_epochs),
        }
    if not args.skip_large:
        print(
            f"2. {args.entities:,} entities x {args.dim} in {args.partitions} partitions, {args.queries:,} queries",
            flush=True,
        )
        result["large"] = measure_large(args)
    result["load_end"] = load_now()
    result["targets_met"] = targets_met(result)
    print(tables(result))
    print(f"wrote {write_json('predict', result)}")
    return 0 if all(v is not False for v in result["targets_met"].values()) else 1


def targets_met(result: dict[str, Any]) -> dict[str, bool | None]:
    """Each target's verdict (None: its part did not run)."""
    umls, side, large = result.get("umls"), result.get("side"), result.get("large")
    return {
        "mrr_equal": umls["mrr_equal"] if umls else None,
        "top10_equal_reference": umls["lists_equal"] if umls else None,
        "faiss_same_answers": side["faiss"]["same_answers"] if side else None,
        "within_2x_of_bound": large["bound_ratio"] <= TARGET_BOUND_RATIO if large else None,
        "rss_within_budget": large["rss_mib"] <= large["rss_budget_mib"] if large else None,
    }


def tables(result: dict[str, Any]) -> str:
    """Every part's table, as printed."""
    parts = []
    if "umls" in result:
        u = result["umls"]
        rows = [
            [t, u[t]["queries"], u[t]["equal"], u[t]["near_tie"], u[t]["differ"], u[t]["cli_s"]]
            for t in ("tail", "head")
        ]
        parts.append(
            format_table(
                ["UMLS ranked", "queries", "top-10 = reference", "near-tie swaps", "differ", "pbg predict s"], rows
            )
        )
        parts.append(
            f"MRR: pbg eval --filtered {u['eval_mrr']:.9f}, from pbg predict --filtered ranks {u['predict_mrr']:.9f} (|diff| {u['mrr_diff']:.1e})"
        )
    if "side" in result:
        parts.append(side_table(result["side"]))
    if "large" in result:
        parts.append(large_table(result["large"]))
    met = result["targets_met"]
    parts.append(format_table(["target", "verdict"], [[name, verdict(flag)] for name, flag in met.items()]))
    parts.append(f"load average (1, 5, 15 min): start {result['load_start']}, end {result['load_end']}")
    return "\n\n".join(parts)


def side_table(side: dict[str, Any]) -> str:
    """Time per UMLS query, ours and PyKEEN's; the faiss recipe's agreement."""
    ours, pykeen, recipe = side["ours"], side["pykeen"], side["faiss"]
    rows = [
        ["ours: Model.predict(head=, relation=), one call a query", ours["single_s"] * 1e3, 1.0],
        [
            "ours: Model.predict(heads=[...]), per query",
            ours["batch_s"] * 1e3,
            ratio(ours["batch_s"], ours["single_s"]),
        ],
    ]
    if "skipped" in pykeen:
        rows.append([f"PyKEEN predict_target: skipped: {pykeen['skipped']}", None, None])
    else:
        rows.append(
            [
                f"PyKEEN {pykeen['pykeen']} predict_target, median",
                pykeen["median_s"] * 1e3,
                ratio(pykeen["median_s"], ours["single_s"]),
            ]
        )
    for target in ("tail", "head"):
        rows.append(
            [f"faiss IndexFlatIP recipe ({target}s), per query", recipe[target]["search_s_per_query"] * 1e3, None]
        )
    agree = ", ".join(
        f"{t}s: {recipe[t]['equal']} equal, {recipe[t]['near_tie']} near-tie, {recipe[t]['differ']} differ"
        for t in ("tail", "head")
    )
    return (
        format_table(["UMLS, top-10 of a query", "ms per query", "x ours (single)"], rows)
        + f"\nfaiss recipe vs pbg predict: {agree}"
    )


def large_table(large: dict[str, Any]) -> str:
    """The 1M-entity figures."""
    model, cli = large["model"], large["cli"]
    rows = [[
        large["queries"], model["predict_s"], large["bound_s"], large["fraction_of_bound"], large["product_gflops"],
        large["square_sgemm_gflops"], large["square_bound_s"], large["rss_mib"], large["rss_budget_mib"],
        cli["wall_s"], cli["peak_rss_mib"],
    ]]  # fmt: skip
    headers = ["queries", "Model.predict s", "bound s", "fraction of bound", "product GFLOP/s", "2048² GFLOP/s",
               "2048² bound s", "child RSS MiB", "budget MiB", "pbg predict s", "CLI tree RSS MiB"]  # fmt: skip
    return (
        format_table(headers, rows)
        + f"\nload before the child {large['load_before']}, before the CLI {cli['load_before']}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
