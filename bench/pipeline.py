"""What the product's iteration order costs: one training run, its subflows in order vs pipelined.

flows/train.py calls each iteration's subflow once the previous one has ended, the subflows
without flow-run heartbeats, so that the run's timeline shows one iteration at a time (issue 34,
docs/prefect-costs.md). The alternative, ``pipelined``, is what the product did before: each
subflow created in a helper thread while the previous iteration works, its body run in the
flow's thread (:mod:`bench.lib.subflow_pipeline`), every subflow with its heartbeats, so that a
subflow's creation (its API calls before its body) and its ending (its final state, and on a
deployed run the join of its heartbeat thread) overlap the neighbouring iteration's work.
:mod:`bench.lib.pipelined` selects that code path; the product has no switch.

The training: UMLS's train split imported once with ``pbg import`` (5.2k edges, one partition,
one chunk: one bucket and one iteration per epoch), ``--epochs`` iterations (40 by default), 2
HOGWILD workers, no held-out evaluation. Two cases, each variant of each run trained from scratch
into its own checkpoint directory:

- ``deployed``: a local stack (``deployments/local-up.sh`` in a temporary PREFECT_HOME: Prefect
  server on 127.0.0.1 with SQLite, the ``pbg-local`` process work pool and worker, flow-run
  heartbeats every 30 s as deployments/prefect.yaml sets them). ``in-order`` runs the product's
  deployment ``pbg/train``; ``pipelined`` a deployment ``pbg/pipelined`` of
  ``bench/lib/pipelined_deployment.py:pbg`` registered with the same work pool and job variables.
  Each run is ``prefect deployment run ... --param config_url=... --param overrides=[...]``.
- ``embedded``: ``pbg train CONFIG -p checkpoint_path=...`` (our embedded server, heartbeats off)
  vs ``python -m bench.lib.pipelined train CONFIG ...``, one temporary PREFECT_HOME for both.

One unmeasured warm-up run of each variant and case (2 epochs), then ``--repeats`` rounds; in
each round every case runs its variants back to back, in order and reversed on alternate rounds
(A B, B A, ...) so that a drift in the machine's load hits them alike. Per run:

- ``command_s``: deployed, from just before ``prefect deployment run`` to the poll (every 0.2 s)
  that sees the flow run COMPLETED; embedded, the command's wall time (spawn to exit);
- ``flow_run_s`` (deployed): the flow run's ``start_time`` to ``end_time`` in the API;
- ``iteration_s``: the median gap between two consecutive iterations' "bucket (l, r): trained N
  edges in T s" log lines (the engine logs it as a bucket's training ends: the gap is one whole
  iteration, Prefect's part included), from the API's log records (deployed) or the command's
  output (embedded); ``span_s``: the first such line to the last;
- ``machine_busy``: the machine's busy CPU share during the run (/proc/stat, all cores; this run
  included), beside the load average at its start.

Reported: medians with [min-max] per case and variant; per round, the product's (in-order)
figure over the pipelined run's, with its median and [min-max] over the rounds and the rounds in
which the product was the slower of the two; "beyond noise" when the two variants' ranges do not
overlap (every run of one faster than every run of the other; n/a with one round).
Writes bench/results/pipeline.json. A failed run stops the benchmark with its error (the stack
is brought down first).

Run: ``.venv/bin/python -m bench.pipeline [--repeats 4] [--epochs 40] [--skip-deployed]
[--skip-embedded] [--lock /tmp/pbg-bench.lock]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.deployed_stack import clean_env, import_umls, interrupt, stack_down, stack_up
from bench.lib.logs import LOG_LINE, TRAINED, clock_time
from bench.lib.prefect_api import Api, epoch_s
from bench.lib.quiet import busy_cpu_seconds, measurement_lock
from bench.lib.report import format_table, write_json
from bench.lib.runner import run_measured
from bench.lib.tools import REPO_ROOT, WORK_DIR, machine_info, ours_bin

PRODUCT = "in-order"  # flows/train.py as it is
CASE_VARIANTS = {"deployed": (PRODUCT, "pipelined"), "embedded": (PRODUCT, "pipelined")}
DEPLOYMENTS = {PRODUCT: "pbg/train", "pipelined": "pbg/pipelined"}
PIPELINED_ENTRYPOINT = "bench/lib/pipelined_deployment.py:pbg"
WARMUP_EPOCHS = 2
UUID_RE = re.compile(r"UUID: ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
FIGURES = ("command_s", "flow_run_s", "iteration_s", "span_s")
Run = dict[str, Any]


def iteration_figures(times: list[float], iterations: int, where: str) -> dict[str, float]:
    """``iteration_s`` (median gap) and ``span_s`` of the "trained" lines' times; all ``iterations`` must be there."""
    if len(times) != iterations:
        raise RuntimeError(
            f"{where}: {len(times)} 'trained N edges' log lines, expected {iterations} (one per iteration)"
        )
    times = sorted(times)
    gaps = [after - before for before, after in zip(times, times[1:], strict=False)]
    return {"iteration_s": statistics.median(gaps), "span_s": times[-1] - times[0]}


class Machine:
    """The machine's busy CPU share over one run (every core, every process)."""

    def __init__(self) -> None:
        self.load = round(os.getloadavg()[0], 2)
        self.busy, self.wall = busy_cpu_seconds(), time.monotonic()

    def figures(self) -> dict[str, float]:
        cores = os.cpu_count() or 1
        share = (busy_cpu_seconds() - self.busy) / ((time.monotonic() - self.wall) * cores)
        return {"load_at_start": self.load, "machine_busy": round(share, 3)}


def deploy_pipelined(api: Api, env: dict[str, str], work: Path) -> None:
    """Register ``pbg/pipelined`` with ``pbg/train``'s work pool, queue and job variables (heartbeats included)."""
    product = api.call("GET", f"/deployments/name/{DEPLOYMENTS[PRODUCT]}")
    spec = {
        "name": "pbg-flow-bench-pipeline",
        "build": None,
        "push": None,
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO_ROOT)}}],
        "deployments": [
            {
                "name": DEPLOYMENTS["pipelined"].split("/")[1],
                "entrypoint": PIPELINED_ENTRYPOINT,
                "work_pool": {
                    "name": product["work_pool_name"],
                    "work_queue_name": product["work_queue_name"],
                    "job_variables": product["job_variables"],
                },
            }
        ],
    }
    path = work / "pipelined_deployment.yaml"
    path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    argv = [str(ours_bin("prefect")), "--no-prompt", "deploy", "--prefect-file", str(path), "--all"]
    done = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not api.deployment_exists(DEPLOYMENTS["pipelined"]):
        raise RuntimeError(
            f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )


def run_deployed(api: Api, env: dict[str, str], variant: str, config: Path, checkpoint: Path, epochs: int) -> Run:
    """One ``prefect deployment run`` of the variant's deployment, waited to completion; its figures."""
    overrides = json.dumps([f"checkpoint_path={checkpoint}", f"num_epochs={epochs}"])
    argv = [str(ours_bin("prefect")), "deployment", "run", DEPLOYMENTS[variant]]
    argv += ["--param", f"config_url={config}", "--param", f"overrides={overrides}"]
    machine = Machine()
    t0 = time.time()
    done = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    found = UUID_RE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    run_id = found.group(1)
    flow_run = api.wait_done(run_id, poll_s=0.2)
    command_s = time.time() - t0
    trained = api.log_times(run_id, TRAINED, epochs, wait_s=60)
    return {
        "flow_run_id": run_id,
        "command_s": command_s,
        "flow_run_s": epoch_s(flow_run["end_time"]) - epoch_s(flow_run["start_time"]),
        **iteration_figures(trained, epochs, f"flow run {run_id}"),
        **machine.figures(),
    }


def run_embedded(variant: str, config: Path, checkpoint: Path, epochs: int, home: Path) -> Run:
    """One ``pbg train`` (or its pipelined twin) to completion; its figures."""
    head = [str(ours_bin("pbg"))] if variant == PRODUCT else [str(ours_bin("python")), "-m", "bench.lib.pipelined"]
    argv: list[str | Path] = [
        *head,
        "train",
        str(config),
        "-p",
        f"checkpoint_path={checkpoint}",
        "-p",
        f"num_epochs={epochs}",
    ]
    env = {k: v for k, v in clean_env(home).items() if k in ("PREFECT_HOME", "PYTHONPATH")}
    machine = Machine()
    run = run_measured(argv, checkpoint.parent, f"{checkpoint.name}-{variant}", env=env)
    if not run.ok:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited with {run.returncode}:\n{run.stderr[-3000:]}")
    trained = []
    for line in run.text().splitlines():
        match = LOG_LINE.match(line)
        if match and TRAINED.search(match.group("message")):
            trained.append(clock_time(match.group("clock"), near=run.started_at))
    where = f"{' '.join(map(str, argv))} (log {run.stdout_path})"
    return {
        "command_s": run.wall_s,
        "flow_run_s": None,
        **iteration_figures(trained, epochs, where),
        **machine.figures(),
    }


def spread(values: list[float]) -> dict[str, Any]:
    """Median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: dict[str, dict[str, list[Run]]]) -> dict[str, Any]:
    """Per case: each variant's figures (median [min-max]) and, per round, each other variant's over the pipelined one's."""
    summary: dict[str, Any] = {}
    for case, by_variant in runs.items():
        pipelined = by_variant["pipelined"]
        figures = [f for f in FIGURES if pipelined[0].get(f) is not None]
        variants = {v: {f: spread([r[f] for r in rs]) for f in figures} for v, rs in by_variant.items()}
        over: dict[str, Any] = {}
        for variant, others in by_variant.items():
            if variant == "pipelined":
                continue
            over[variant] = {}
            for figure in figures:
                per_round = [other[figure] / fast[figure] for other, fast in zip(others, pipelined, strict=True)]
                ratios = spread(per_round)
                ratios["rounds_slower"] = sum(ratio > 1 for ratio in per_round)
                a, b = variants["pipelined"][figure], variants[variant][figure]
                separate = a["max"] < b["min"] or b["max"] < a["min"]
                ratios["beyond_noise"] = separate if len(pipelined) > 1 else None  # one round: no spread
                ratios["saved_s_median"] = b["median"] - a["median"]
                over[variant][figure] = ratios
        summary[case] = {"variants": variants, "over_pipelined": over}
    return summary


def _cell(s: dict[str, Any], scale: float = 1.0, digits: int = 2) -> str:
    """``median [min-max]`` of a spread, times ``scale``."""
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}]"


def print_tables(summary: dict[str, Any], rounds: int) -> None:
    """The figures per case and variant, then the ratios."""
    rows: list[list[object]] = []
    for case, entry in summary.items():
        for variant, s in entry["variants"].items():
            rows.append(
                [
                    case,
                    variant,
                    _cell(s["command_s"]),
                    _cell(s["flow_run_s"]) if "flow_run_s" in s else None,
                    _cell(s["iteration_s"], 1000, 0),
                    _cell(s["span_s"]),
                ]
            )
    print(
        format_table(["case", "variant", "command s", "flow run s", "per iteration ms", "1st-last iteration s"], rows)
    )
    ratios: list[list[object]] = []
    for case, entry in summary.items():
        for variant, by_figure in entry["over_pipelined"].items():
            for figure, r in by_figure.items():
                noise = {True: "yes", False: "no", None: "n/a (1 round)"}[r["beyond_noise"]]
                slower = f"{r['rounds_slower']}/{rounds}"
                ratios.append([case, variant, figure, _cell(r, 1.0, 3), f"{r['saved_s_median']:+.3f}", slower, noise])
    headers = [
        "case",
        "variant",
        "figure",
        "variant / pipelined",
        "variant - pipelined s",
        "rounds slower",
        "beyond noise",
    ]
    print(format_table(headers, ratios))


def _run_all(args: argparse.Namespace, work: Path, config: Path) -> dict[str, dict[str, list[Run]]]:
    """Bring the stack up (deployed case), warm up, run the rounds; always bring the stack down."""
    home, embedded_home = work / "prefect-home", work / "embedded-home"
    cases = [c for c in ("deployed", "embedded") if not getattr(args, f"skip_{c}")]
    runs: dict[str, dict[str, list[Run]]] = {case: {v: [] for v in CASE_VARIANTS[case]} for case in cases}
    api, env = None, {}
    try:
        if "deployed" in cases:
            print(f"bringing the local stack up (PREFECT_HOME={home}) ...", flush=True)
            api_url = stack_up(home)
            env = {**clean_env(home), "PREFECT_API_URL": api_url}
            api = Api(api_url)
            deploy_pipelined(api, env, work)

        def one(case: str, variant: str, label: str, epochs: int) -> Run:
            checkpoint = work / f"{case}-{variant}-{label}"
            if case == "deployed":
                assert api is not None  # brought up above whenever the case runs
                result = run_deployed(api, env, variant, config, checkpoint, epochs)
            else:
                result = run_embedded(variant, config, checkpoint, epochs, embedded_home)
            shutil.rmtree(checkpoint, ignore_errors=True)
            return result

        for case in cases:
            for variant in CASE_VARIANTS[case]:
                print(f"[{case}] warm-up of {variant} ({WARMUP_EPOCHS} epochs, not counted) ...", flush=True)
                one(case, variant, "warmup", WARMUP_EPOCHS)
        for round_index in range(args.repeats):
            for case in cases:
                order = CASE_VARIANTS[case] if round_index % 2 == 0 else CASE_VARIANTS[case][::-1]
                for variant in order:
                    with measurement_lock(args.lock):
                        result = one(case, variant, str(round_index), args.epochs)
                    runs[case][variant].append(result)
                    print(
                        f"round {round_index + 1}/{args.repeats} [{case}] {variant}: command {result['command_s']:.2f} s, "
                        f"per iteration {result['iteration_s'] * 1000:.0f} ms, machine busy {result['machine_busy']:.0%}",
                        flush=True,
                    )
    finally:
        if "deployed" in cases:
            print("bringing the local stack down ...", flush=True)
            stack_down(home)
    return runs


def main(argv: list[str] | None = None) -> int:
    """Parse flags, import UMLS, measure, print the tables, write bench/results/pipeline.json."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=4, help="rounds of every variant per case (default 4)")
    parser.add_argument("--epochs", type=int, default=40, help="iterations per run (default 40)")
    parser.add_argument("--skip-deployed", action="store_true", help="only the embedded case")
    parser.add_argument("--skip-embedded", action="store_true", help="only the deployed case")
    parser.add_argument("--lock", type=Path, default=None, help="flock this file around each measured run")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.epochs < 3:
        parser.error(f"--repeats {args.repeats} --epochs {args.epochs}: give at least 1 round and 3 epochs")
    if args.skip_deployed and args.skip_embedded:
        parser.error("--skip-deployed and --skip-embedded leave nothing to measure; give at most one")
    signal.signal(signal.SIGTERM, interrupt)
    for name in [n for n in os.environ if n.startswith("PREFECT_")]:
        del os.environ[name]  # the embedded runs inherit our environment: no server of the caller's
    work_root = WORK_DIR / "pipeline"
    shutil.rmtree(work_root, ignore_errors=True)
    work_root.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    print(f"importing UMLS into {work / 'data'} ...", flush=True)
    config = import_umls(work, args.epochs)
    runs = _run_all(args, work, config)
    load["end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize(runs)
    print_tables(summary, args.repeats)
    print(f"load average (1, 5, 15 min): {load['start']} at start, {load['end']} at end (2 shared cores)")
    payload: dict[str, object] = {
        "machine": machine_info(),
        "args": vars(args),
        "load_average": load,
        "runs": runs,
        "summary": summary,
    }
    print(f"wrote {write_json('pipeline', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
