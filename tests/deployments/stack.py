"""A local Prefect stack for the deployment tests, driven by ``deployments/local-up.sh``.

:func:`start_stack` runs the real scripts with a temporary PREFECT_HOME (server on 127.0.0.1,
work pool, ``prefect deploy`` of ``deployments/prefect.yaml``, worker); :class:`Stack` starts
deployment runs with the ``prefect`` CLI and reads runs, subflow runs, task runs, logs and
artifacts through the server's REST API. :meth:`Stack.kill_worker_tree` SIGKILLs the worker
with every process below it (flow-run subprocess, HOGWILD children), as a crash would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_UP = REPO_ROOT / "deployments" / "local-up.sh"
LOCAL_DOWN = REPO_ROOT / "deployments" / "local-down.sh"
PREFECT = REPO_ROOT / ".venv" / "bin" / "prefect"
UP_TIMEOUT_S = 420  # server start on a new SQLite DB (~35 s idle) + deploy + worker, on 2 busy cores
PAGE = 200  # the API's largest page
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "CRASHED"})
_UUID = re.compile(r"UUID: ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def write_json(path: Path, data: dict[str, Any]) -> Path:
    """``data`` as a JSON file (a config_url for the deployment)."""
    path.write_text(json.dumps(data, indent=2))
    return path


def version_of(checkpoint: Path) -> int:
    """The committed version pointer (0 before the first commit)."""
    pointer = checkpoint / "checkpoint_version.txt"
    return int(pointer.read_text()) if pointer.exists() else 0


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without Prefect settings, with PREFECT_HOME=``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(home)
    env["COLUMNS"] = "500"  # the CLI's messages unwrapped, one line each
    return env


def _run(args: Sequence[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``args``; raise with its output when it fails."""
    done = subprocess.run(list(args), env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        )
    return done


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def process_tree(root: int) -> set[int]:
    """``root``, its descendants, and every member of its process group."""
    table = _process_table()
    tree = {root}
    grew = True
    while grew:
        below = {pid for pid, (ppid, _) in table.items() if ppid in tree} - tree
        tree |= below
        grew = bool(below)
    pgid = table.get(root, (0, 0))[1]
    return tree | {pid for pid, (_, group) in table.items() if group == pgid and pgid > 1}


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@dataclass
class Stack:
    """A running local stack: its PREFECT_HOME and API URL."""

    home: Path
    api_url: str

    @property
    def state_dir(self) -> Path:
        """Where local-up.sh records PIDs and logs."""
        return self.home / "pbg-local"

    @property
    def env(self) -> dict[str, str]:
        """Environment of CLI calls against this stack."""
        return {**clean_env(self.home), "PREFECT_API_URL": self.api_url}

    def prefect(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``prefect ARGS...`` against this stack."""
        return _run([str(PREFECT), *args], self.env, timeout)

    # ---- runs ------------------------------------------------------------------------------

    def run_deployment(self, parameters: dict[str, Any], name: str = "pbg/train") -> str:
        """``prefect deployment run NAME --param k=<json>...``; returns the flow run id."""
        args = []
        for key, value in parameters.items():
            args += ["--param", f"{key}={json.dumps(value)}"]
        out = self.prefect("deployment", "run", name, *args).stdout
        found = _UUID.search(out)
        if found is None:
            raise RuntimeError(f"no flow run id in the output of `prefect deployment run`:\n{out}")
        return found.group(1)

    def retry(self, flow_run_id: str) -> str:
        """``prefect flow-run retry ID``; returns its output."""
        return self.prefect("flow-run", "retry", flow_run_id).stdout

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One REST call; the decoded JSON answer (None for an empty one)."""
        response = httpx.request(method, f"{self.api_url}{path}", json=body, timeout=30)
        response.raise_for_status()
        return response.json() if response.content else None

    def _filter_all(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Every row of a ``/…/filter`` endpoint, page by page."""
        rows: list[dict[str, Any]] = []
        while True:
            page = self.api("POST", path, {**body, "limit": PAGE, "offset": len(rows)})
            rows += page
            if len(page) < PAGE:
                return rows

    def flow_run(self, flow_run_id: str) -> dict[str, Any]:
        """The flow run as the API returns it."""
        return self.api("GET", f"/flow_runs/{flow_run_id}")

    def state_of(self, flow_run_id: str) -> str:
        """The flow run's state type, e.g. ``RUNNING``."""
        state = self.flow_run(flow_run_id)["state"]
        return state["type"] if state else "NONE"

    def wait_for_state(self, flow_run_id: str, wanted: Iterable[str], timeout: float = 600) -> dict[str, Any]:
        """Poll until the run's state type is one of ``wanted``; fail on another terminal state."""
        wanted = set(wanted)
        deadline = time.monotonic() + timeout
        while True:
            run = self.flow_run(flow_run_id)
            state = run["state"]["type"] if run["state"] else "NONE"
            if state in wanted:
                return run
            if state in TERMINAL:
                raise AssertionError(
                    f"flow run {flow_run_id} ended {state} ({run['state'].get('message')}), "
                    f"expected {sorted(wanted)}; worker log:\n{self.worker_log_tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"flow run {flow_run_id} still {state} after {timeout} s, "
                    f"expected {sorted(wanted)}; worker log:\n{self.worker_log_tail()}"
                )
            time.sleep(1)

    def set_state(self, flow_run_id: str, state_type: str, message: str) -> dict[str, Any]:
        """Force the run's state (what the UI's "Change state" does)."""
        state = {"type": state_type, "name": state_type.title(), "message": message}
        return self.api("POST", f"/flow_runs/{flow_run_id}/set_state", {"state": state, "force": True})

    def subflow_runs(self, flow_run_id: str) -> list[dict[str, Any]]:
        """The flow run's subflow runs, oldest first."""
        body = {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}, "sort": "EXPECTED_START_TIME_ASC"}
        return self._filter_all("/flow_runs/filter", body)

    def run_and_subflow_ids(self, flow_run_id: str) -> list[str]:
        """The run's id and its subflow runs' ids."""
        return [flow_run_id, *(run["id"] for run in self.subflow_runs(flow_run_id))]

    def task_runs(self, flow_run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Task runs of these flow runs."""
        return self._filter_all("/task_runs/filter", {"task_runs": {"flow_run_id": {"any_": list(flow_run_ids)}}})

    def logs(self, flow_run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Log records of these flow runs (their task runs' included), oldest first."""
        body = {"logs": {"flow_run_id": {"any_": list(flow_run_ids)}}, "sort": "TIMESTAMP_ASC"}
        return self._filter_all("/logs/filter", body)

    def artifacts(self, flow_run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Artifacts created by these flow runs (and their task runs), every version."""
        return self._filter_all("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": list(flow_run_ids)}}})

    # ---- processes ------------------------------------------------------------------------

    def worker_pid(self) -> int:
        """The PID local-up.sh recorded for the worker."""
        return int((self.state_dir / "worker.pid").read_text())

    def worker_log_tail(self, lines: int = 40) -> str:
        """The end of the worker's log (flow-run output included)."""
        try:
            return "\n".join((self.state_dir / "worker.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no worker log: {exc})"

    def kill_worker_tree(self) -> set[int]:
        """SIGKILL the worker and every process below it at once; wait until they are gone."""
        victims = process_tree(self.worker_pid())
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while any(running(pid) for pid in victims):
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after SIGKILL: {sorted(p for p in victims if running(p))}")
            time.sleep(0.1)
        return victims

    def start_worker(self) -> None:
        """A new worker for this stack (``local-up.sh --worker-only``)."""
        _run(["bash", str(LOCAL_UP), "--worker-only"], clean_env(self.home), UP_TIMEOUT_S)

    def down(self) -> str:
        """``local-down.sh``; returns its messages."""
        return _run(["bash", str(LOCAL_DOWN)], clean_env(self.home), 120).stderr


def start_stack(home: Path, *args: str) -> Stack:
    """Run ``local-up.sh ARGS...`` with PREFECT_HOME=``home``; the stack it started.

    On failure whatever it started is stopped again before the error is raised.
    """
    try:
        done = _run(["bash", str(LOCAL_UP), *args], clean_env(home), UP_TIMEOUT_S)
    except (RuntimeError, subprocess.TimeoutExpired):
        subprocess.run(["bash", str(LOCAL_DOWN)], env=clean_env(home), capture_output=True, timeout=120)
        raise
    last = done.stdout.strip().splitlines()[-1]
    key, _, url = last.partition("=")
    if key != "PREFECT_API_URL" or not url.startswith("http://127.0.0.1:"):
        raise RuntimeError(f"local-up.sh's last line is not PREFECT_API_URL=http://127.0.0.1:N/api: {last!r}")
    return Stack(home=home, api_url=url)
