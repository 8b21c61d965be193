"""PBG 1.0.0 and ours as the two sides of a comparison (bench.speed, bench.whole_run): how each
imports and trains, and how its training throughput is read back.

Both sides load the *same* config file (bench/configs/speed_*.py, relative paths) and each runs
in its own working directory, so their entity/edge/checkpoint directories never collide.

Training throughput ("train edges/s") is what each tool reports about its own compute phase:
- PBG 1.0.0: the per-bucket log lines ``Processed N edges in T s`` (HOGWILD compute time, I/O
  excluded), summed over buckets and epochs.
- ours: the bucket rows of ``<checkpoint_path>/training_stats.json`` (bench.lib.stats): sum of
  ``row["stats"]["count"]`` over sum of ``row["timing"]["train"]`` seconds. A row without
  ``timing`` falls back to the train command's wall time (reported as ``timing_source``).
The wall-clock rate (edges x epochs / whole train command wall time, start-up and checkpoint
writes included) is reported too, because compute-only timers are each tool's own claim.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench.lib import stats
from bench.lib.logs import pbg_buckets
from bench.lib.report import mib
from bench.lib.runner import RunResult, run_measured, tail
from bench.lib.tools import TSV_COLUMNS, ToolMissingError, ours_bin, pbg_bin

IMPORT_DONE = "import.done"  # marker: the importer finished for this graph in this directory


@dataclass(frozen=True)
class SideCommands:
    """How one tool imports and trains; argv lists without the config/graph arguments.

    ``tool`` ("pbg" or "ours") names the importer, the working directory and the way
    throughput is read; ``name`` labels the run, so variants of one tool (ours with N3) share
    its import.
    """

    name: str
    tool: str
    import_argv: list[str]
    train_argv: list[str]
    train_overrides: list[str]  # extra `-p key=value` for this side only


def pbg_commands() -> SideCommands:
    """PyPI torchbiggraph 1.0.0 console scripts in bench/.pbg-venv."""
    return SideCommands(
        "pbg", "pbg", [str(pbg_bin("torchbiggraph_import_from_tsv"))], [str(pbg_bin("torchbiggraph_train"))], []
    )


def ours_commands(seed: int) -> SideCommands:
    """Our CLI; ``seed`` is pbg-flow-only, so it goes through -p and never into the shared file."""
    pbg = str(ours_bin("pbg"))
    return SideCommands("ours", "ours", [pbg, "import"], [pbg, "train"], [f"seed={seed}"])


def variant(side: SideCommands, name: str, overrides: list[str]) -> SideCommands:
    """``side`` trained with extra ``-p`` overrides, labelled ``name`` (same tool and import)."""
    return dataclasses.replace(side, name=name, train_overrides=[*side.train_overrides, *overrides])


def throughput_from_stats(rows: list[dict[str, object]], wall_s: float) -> dict[str, object]:
    """Edges, seconds and edges/s from our stats rows; wall-time fallback if timing is missing."""
    edges = stats.edges(rows)
    if rows and all("timing" in row and "train" in row["timing"] for row in rows):
        seconds = sum(float(row["timing"]["train"]) for row in rows)
        source = "training_stats.json timing.train"
    else:
        seconds = wall_s
        source = "wall time of `pbg train` (training_stats.json rows lack timing.train)"
    return {
        "edges": edges,
        "compute_s": seconds,
        "timing_source": source,
        "per_bucket": [[int(r["stats"]["count"]), float(r.get("timing", {}).get("train", 0.0))] for r in rows],
    }


def ours_throughput(checkpoint: Path, wall_s: float) -> dict[str, object] | None:
    """:func:`throughput_from_stats` of the checkpoint's bucket rows; None when it has no stats file."""
    if not (checkpoint / "training_stats.json").exists():
        return None
    return throughput_from_stats(stats.bucket_rows(checkpoint), wall_s)


def throughput_from_pbg(run: RunResult) -> dict[str, object]:
    """Edges, seconds and per-bucket pairs from PBG's training log."""
    buckets = [(edges, seconds) for edges, seconds, _ in pbg_buckets(run.text())]
    return {
        "edges": sum(e for e, _ in buckets),
        "compute_s": sum(s for _, s in buckets),
        "timing_source": "PBG log 'Processed N edges in T s'",
        "per_bucket": [list(pair) for pair in buckets],
    }


def run_import(side: SideCommands, config: Path, graph: Path, workdir: Path) -> dict[str, object]:
    """Import ``graph`` into ``workdir`` once (a marker file skips later runs)."""
    marker = workdir / IMPORT_DONE
    if marker.exists():
        return {"status": "cached", **json.loads(marker.read_text())}
    if workdir.exists():
        shutil.rmtree(workdir)  # a half-finished import must not be mistaken for a complete one
    argv = [*side.import_argv, config, graph, *TSV_COLUMNS]
    run = run_measured(argv, workdir, "import")
    record = {
        "status": "ok" if run.ok else "failed",
        "wall_s": run.wall_s,
        "peak_rss_mib": mib(run.peak_rss_bytes),
        "run": run.summary(),
    }
    if run.ok:
        marker.write_text(json.dumps({"wall_s": run.wall_s, "peak_rss_mib": mib(run.peak_rss_bytes)}))
    return record


def run_side(side: SideCommands, config: Path, graph: Path, workdir: Path, epochs: int) -> dict[str, object]:
    """Import (cached) then train from scratch; return timings, memory and throughput.

    Returns:
        ``{"status": "ok" | "failed", "import": {...}, "train": {...}, ...}``; a failed command
        is recorded with its stderr tail rather than raised, so the other side still runs.
    """
    result: dict[str, object] = {"side": side.name, "overrides": side.train_overrides, "workdir": str(workdir)}
    result["import"] = run_import(side, config, graph, workdir)
    if result["import"]["status"] == "failed":
        result["status"] = "failed"
        return result
    shutil.rmtree(workdir / "checkpoints", ignore_errors=True)  # else both tools would resume
    overrides = [f"num_epochs={epochs}", *side.train_overrides]
    argv = [*side.train_argv, config, *[a for o in overrides for a in ("-p", o)]]
    log_name = "train" if side.name == side.tool else f"train-{side.name}"
    run = run_measured(argv, workdir, log_name)
    result["train"] = run.summary()
    if not run.ok:
        result["status"] = "failed"
        return result
    if side.tool == "pbg":
        throughput = throughput_from_pbg(run)
    else:
        throughput = ours_throughput(workdir / "checkpoints", run.wall_s)
        if throughput is None:
            result["status"] = "failed"
            result["error"] = f"{workdir / 'checkpoints' / 'training_stats.json'} not written"
            return result
    edges, seconds = throughput["edges"], throughput["compute_s"]
    result.update(throughput)
    result.update(
        {
            "status": "ok",
            "edges_per_s": edges / seconds if seconds else None,
            "wall_edges_per_s": edges / run.wall_s if run.wall_s else None,
            "train_wall_s": run.wall_s,
            "peak_rss_mib": mib(run.peak_rss_bytes),
            "peak_pss_mib": mib(run.peak_pss_bytes),
            "log_tail": tail(run.stdout, 5),
        }
    )
    return result


def build_sides(skip_pbg: bool, skip_ours: bool, seed: int) -> tuple[list[SideCommands], list[str]]:
    """The sides to run, plus a note for each side that is unavailable (tool not installed)."""
    sides, notes = [], []
    for skip, factory in ((skip_pbg, pbg_commands), (skip_ours, lambda: ours_commands(seed))):
        if skip:
            continue
        try:
            sides.append(factory())
        except ToolMissingError as error:
            notes.append(str(error))
    return sides, notes
