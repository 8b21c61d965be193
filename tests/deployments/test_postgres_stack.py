"""``deployments/local-up.sh --postgres``: the stack on a private PostgreSQL cluster.

Opt-in (``PBG_TEST_POSTGRES=1``; about 3 min: initdb, Prefect's migrations on a new database, a
40-iteration run): the default suite runs the stack on SQLite (conftest.py). Needs
Debian's ``postgresql`` package (initdb and pg_ctl under /usr/lib/postgresql/*/bin, or on PATH,
or in ``PBG_PG_BIN``). Checks that the server really uses the cluster (the database URL it was
started with, the cluster's process listening on 127.0.0.1 only), that a deployed run completes,
that its server log has no error record at all, and that local-down.sh stops the cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stack import Stack, start_stack, version_of, write_json

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("PBG_TEST_POSTGRES") != "1",
        reason="opt-in: PBG_TEST_POSTGRES=1 (about 3 min; Debian's postgresql package)",
    ),
]

ITERATIONS = 40
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def pg_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("prefect-home-pg")
    running = start_stack(home, "--postgres")
    try:
        yield running
    finally:
        running.down()
        data = Path((home / "pbg-local" / "postgres.dir").read_text().strip())
        if data.name.startswith("pbg-local-postgres-"):  # outside PREFECT_HOME (run as root): ours to remove
            shutil.rmtree(data, ignore_errors=True)


def server_environment(stack: Stack) -> dict[str, str]:
    """The environment the Prefect server process was started with."""
    pid = int((stack.state_dir / "server.pid").read_text())
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_the_stack_runs_on_its_postgres_cluster_without_a_single_error(
    pg_stack: Stack, graph: Any, config_for: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server_environment(pg_stack)["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    assert url.startswith("postgresql+asyncpg://prefect:") and "@127.0.0.1:" in url
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
    local_addresses = [line.split()[3] for line in listening.splitlines()]  # State Recv-Q Send-Q Local Peer
    assert local_addresses == [f"127.0.0.1:{port}"], listening
    password_file = pg_stack.state_dir / "postgres.password"
    assert password_file.stat().st_mode & 0o077 == 0

    config = config_for(graph, tmp_path / "ckpt", num_epochs=ITERATIONS, workers=1, seed=0, eval_fraction=0.0)
    started = time.monotonic()
    flow_run_id = pg_stack.run_deployment({"config_url": str(write_json(tmp_path / "config.json", config))})
    pg_stack.wait_for_state(flow_run_id, {"COMPLETED"}, RUN_TIMEOUT_S)
    assert version_of(tmp_path / "ckpt") == ITERATIONS
    assert len(pg_stack.subflow_runs(flow_run_id)) == ITERATIONS
    log = (pg_stack.state_dir / "server.log").read_text(errors="replace")
    assert [line for line in log.splitlines() if "| ERROR" in line or "Traceback" in line] == []
    with capsys.disabled():
        print(f"\n{ITERATIONS}-iteration run on PostgreSQL: {time.monotonic() - started:.1f} s, no error record")


def test_local_down_stops_the_cluster(pg_stack: Stack) -> None:
    data = Path((pg_stack.state_dir / "postgres.dir").read_text().strip()) / "data"
    assert (data / "postmaster.pid").exists()
    pg_stack.down()
    assert not (data / "postmaster.pid").exists()
    assert (data / "PG_VERSION").exists()  # the data stays
