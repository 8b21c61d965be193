"""kill -9 of a Dask worker at three moments of a distributed ``pbg train``: does the run survive?

A command-line cluster on 127.0.0.1 (``dask scheduler`` and two ``dask worker``, each under its
nanny, allowed to start processes) trains a 4x4-partitioned power-law graph on local disk
(``shared_paths``: the workers share this machine's disk). For each moment a fresh run of
``pbg train --verbose`` is started and one worker *process* is killed with SIGKILL (its nanny
then starts a new one, which joins as a new machine):

- ``training``: once 3 buckets of the run are recorded, 0.2 s later (a bucket is training);
- ``saving``: as soon as a bucket's partition file appears in a progress area the record
  does not name yet (a machine is writing its saves);
- ``committing``: as soon as the next version's model file appears (write-checkpoint).

Checked per run: the command completes; buckets retrained (the runs's "left the cluster"
warnings: a killed machine's bucket is given to another) at most 1 per kill; every bucket of
every epoch recorded exactly once in training_stats.json (no duplicated row); every committed
version and the final one load (``pbg eval`` on the result). Writes bench/results/cluster_faults.json.

    .venv/bin/python -m bench.cluster_faults [--edges 400000] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.lib import stats
from bench.lib.graphs.powerlaw import ensure_graph
from bench.lib.report import format_table, write_json
from bench.lib.tools import WORK_DIR, ours_bin
from storage.stats_log import SUMMARY_KEY

HOST = "127.0.0.1"
DASK = str(Path(sys.executable).with_name("dask"))
FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
LOST_LINE = re.compile(r"left the cluster while it trained a bucket")


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


class Cluster:
    """``dask scheduler`` and two ``dask worker`` (nanny + worker process) under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file = root / "scheduler.json"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        self.file.unlink(missing_ok=True)
        self._spawn(
            [DASK, "scheduler", "--host", HOST, "--port", "0", "--no-dashboard", "--scheduler-file", str(self.file)]
        )
        address = self._address()
        for _ in range(2):
            argv = [DASK, "worker", "--scheduler-file", str(self.file), "--host", HOST, "--nthreads", "1"]
            self._spawn([*argv, "--no-dashboard"], FIT)
        return address

    def _address(self) -> str:
        """The scheduler's address once its file holds it (dask creates the file, then writes it)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return str(json.loads(self.file.read_text())["address"])
            except (OSError, ValueError, KeyError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no scheduler address in {self.file} after 60 s: see {self.root}") from None
                time.sleep(0.1)

    def worker_process(self) -> int | None:
        """The pid of the first nanny's worker process (None while it restarts)."""
        for kid in children(self.procs[1].pid):  # the nanny's children: the worker, and a resource tracker
            try:
                cmdline = Path(f"/proc/{kid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmdline:
                return kid
        return None

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs.clear()

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.root / f"{len(self.procs)}.log").open("ab")
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
        )
        self.procs.append(proc)


def recorded(checkpoint: Path) -> tuple[int, set[int]]:
    """(buckets recorded in the open version's record, progress areas it names)."""
    for record in sorted((checkpoint / "progress").glob("v*.json")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        return int(data["done"]), {
            int(w)
            for w in [*(entry[2] for entry in data.get("partitions", [])), data.get("model")]
            if w is not None and w >= 0
        }
    return 0, set()


def saving_now(checkpoint: Path) -> bool:
    """A partition file in a progress area the record does not name (a machine writing its saves)."""
    _, named = recorded(checkpoint)
    for area in (checkpoint / "progress").glob("v*-b*"):
        if int(area.name.rsplit("-b", 1)[1]) not in named and any(area.glob("embeddings_*.h5")):
            return True
    return False


def committing_now(checkpoint: Path) -> bool:
    """The next version's model file exists (write-checkpoint is running or done, the pointer not switched)."""
    try:
        committed = int((checkpoint / "checkpoint_version.txt").read_text().strip() or 0)
    except (OSError, ValueError):
        committed = 0
    return (checkpoint / f"model.v{committed + 1}.h5").exists() and committed >= 1


MOMENTS: dict[str, Callable[[Path], bool]] = {
    "training": lambda ckpt: recorded(ckpt)[0] >= 3,
    "saving": saving_now,
    "committing": committing_now,
}


def run_one(moment: str, root: Path, config: dict[str, object], epochs: int) -> dict[str, object]:
    """A fresh run on a fresh cluster with one worker process killed at ``moment``.

    Long because it is one experiment read top to bottom: cluster, watcher, run, checks.
    """
    shutil.rmtree(root, ignore_errors=True)
    cluster = Cluster(root / "dask")
    address = cluster.start()
    checkpoint = root / "ckpt"
    config = {**config, "checkpoint_path": str(checkpoint), "dask_address": address}
    config_file = root / "config.json"
    config_file.write_text(json.dumps(config))
    env = {**os.environ, "PREFECT_HOME": str(root / "prefect-home")}
    killed: list[float] = []

    def watch() -> None:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not killed:
            if MOMENTS[moment](checkpoint):
                if moment == "training":
                    time.sleep(0.2)
                pid = cluster.worker_process()
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(time.monotonic())
                    return
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    started = time.monotonic()
    watcher.start()
    try:
        done = subprocess.run(
            [str(ours_bin()), "train", "--verbose", str(config_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        cluster.stop()
    wall = time.monotonic() - started
    output = done.stdout + done.stderr
    (root / "output.log").write_text(output)
    buckets = [r["index"] for r in stats.read_rows(checkpoint) if SUMMARY_KEY not in r]
    evaluation = subprocess.run(
        [str(ours_bin()), "eval", str(config_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return {
        "moment": moment,
        "killed": bool(killed),
        "killed_after_s": round(killed[0] - started, 2) if killed else None,
        "exit_code": done.returncode,
        "wall_s": round(wall, 1),
        "retrained_buckets": len(LOST_LINE.findall(output)),
        "bucket_rows": len(buckets),
        "expected_rows": 16 * epochs,
        "duplicated_rows": len(buckets) - len(set(buckets)),
        "every_bucket_once": sorted(buckets) == list(range(16 * epochs)),
        "final_version_loads": evaluation.returncode == 0,
        "tail": output.strip().splitlines()[-3:] if done.returncode else [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=400_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    work = WORK_DIR / "cluster_faults"
    tsv = work / "graph.tsv"
    work.mkdir(parents=True, exist_ok=True)
    ensure_graph(tsv, num_nodes=args.edges // 10, num_edges=args.edges, num_relations=1, seed=7)
    base = {
        "entity_path": str(work / "data"),
        "edge_paths": [str(work / "data" / "edges")],
        "checkpoint_path": str(work / "unused"),
        "entities": {"node": {"num_partitions": 4}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "operator": "diagonal"}],
        "dimension": 128,
        "num_epochs": args.epochs,
        "workers": 1,
        "eval_fraction": 0.0,
        "num_machines": 2,
        "shared_paths": True,
        "seed": 0,
        "hogwild_delay": 0.0,
    }
    if not (work / "data" / "edges").exists():
        (work / "import.json").write_text(json.dumps(base))
        subprocess.run(
            [str(ours_bin()), "import", str(work / "import.json"), str(tsv), "-l", "0", "-r", "2"], check=True
        )
    results = [run_one(moment, work / moment, base, args.epochs) for moment in MOMENTS]
    headers = ["moment", "killed at s", "exit", "wall s", "retrained", "rows", "dup rows", "all once", "loads"]
    table = [
        [
            r["moment"],
            r["killed_after_s"],
            r["exit_code"],
            r["wall_s"],
            r["retrained_buckets"],
            r["bucket_rows"],
            r["duplicated_rows"],
            r["every_bucket_once"],
            r["final_version_loads"],
        ]
        for r in results
    ]
    print(format_table(headers, table))
    passed = all(
        r["killed"]
        and r["exit_code"] == 0
        and r["retrained_buckets"] <= 1
        and r["every_bucket_once"]
        and r["final_version_loads"]
        for r in results
    )
    print("PASS" if passed else "FAIL")
    path = write_json("cluster_faults", {"edges": args.edges, "epochs": args.epochs, "runs": results, "passed": passed})
    print(f"wrote {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
