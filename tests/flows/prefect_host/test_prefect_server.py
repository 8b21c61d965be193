"""flows.prefect_host.prefect_server: SQLite write transactions that wait for the lock instead of failing.

Each case runs in a fresh interpreter (the injected configuration is process-wide state of
Prefect's server) against a throw-away SQLite file: two write transactions through Prefect's
own database configuration, the second one committing between the first one's read and
write: the collision a server under load meets. Prefect's configuration refuses the first
one's write ("database is locked"); ours makes the second wait, and both land.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

COLLISION = textwrap.dedent(
    """
    import asyncio, json, sys
    import sqlalchemy as sa
    from prefect.server.database.dependencies import provide_database_interface
    from flows.prefect_host.prefect_server import install_immediate_writes

    installed = install_immediate_writes() if sys.argv[1] == "immediate" else None
    db = provide_database_interface()

    async def write(name, pause_after_read, start_after):
        await asyncio.sleep(start_after)
        async with db.session_context(begin_transaction=True) as session:
            await session.execute(sa.text("SELECT count(*) FROM t"))
            await asyncio.sleep(pause_after_read)
            await session.execute(sa.text("INSERT INTO t VALUES (:name)"), {"name": name})

    async def main():
        engine = await db.engine()
        async with engine.begin() as connection:
            await connection.execute(sa.text("CREATE TABLE t (name TEXT)"))
        results = await asyncio.gather(write("first", 0.5, 0), write("second", 0, 0.1), return_exceptions=True)
        async with db.session_context() as session:
            rows = (await session.execute(sa.text("SELECT name FROM t ORDER BY rowid"))).scalars().all()
        print(json.dumps({"installed": installed, "errors": [repr(r) for r in results if r is not None],
                          "rows": list(rows), "config": type(db.database_config).__name__}))

    asyncio.run(main())
    """
)


def run_python(tmp_path: Path, args: list[str], **settings: str) -> str:
    """``python ARGS`` with this repo importable, a fresh PREFECT_HOME and only ``settings`` of
    Prefect's own; its stdout (it must succeed)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), **settings)
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def collide(tmp_path: Path, mode: str) -> dict[str, object]:
    """Run the two colliding writes with ``mode`` ("prefect" or "immediate"); what happened."""
    out = run_python(
        tmp_path,
        ["-c", COLLISION, mode],
        PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{tmp_path / 'collide.db'}",
    )
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_prefects_own_configuration_refuses_the_write_after_a_collision(tmp_path: Path) -> None:
    # The premise: without the change the collision fails (else the other test proves nothing).
    outcome = collide(tmp_path, "prefect")
    assert outcome["config"] == "AioSqliteConfiguration"
    assert any("database is locked" in error for error in outcome["errors"]), outcome
    assert outcome["rows"] == ["second"]


@pytest.mark.slow
def test_immediate_writes_make_the_second_writer_wait_and_both_land(tmp_path: Path) -> None:
    outcome = collide(tmp_path, "immediate")
    assert outcome["installed"] is True
    assert outcome["config"] == "ImmediateWritesSqlite"
    assert outcome["errors"] == []
    assert outcome["rows"] == ["first", "second"]  # the second began only once the first committed


def test_another_database_is_left_to_prefect(tmp_path: Path) -> None:
    script = (
        "from flows.prefect_host.prefect_server import install_immediate_writes\n"
        "from prefect.server.database.dependencies import MODELS_DEPENDENCIES\n"
        "print(install_immediate_writes(), MODELS_DEPENDENCIES['database_config'])"
    )
    out = run_python(
        tmp_path,
        ["-c", script],
        PREFECT_SERVER_DATABASE_CONNECTION_URL="postgresql+asyncpg://prefect:secret@127.0.0.1:1/prefect",
    )
    assert out.split() == ["False", "None"]


@pytest.mark.parametrize("argv", [["--help"], ["server", "start", "--help"]])
def test_main_runs_prefects_own_command(argv: list[str], tmp_path: Path) -> None:
    out = run_python(tmp_path, ["-m", "flows.prefect_host.prefect_server", *argv])
    assert ("--host" in out) == (argv[0] == "server")


def test_the_embedded_servers_app_installs_it(tmp_path: Path) -> None:
    script = (
        "from flows.prefect_host.local_server_app import create_app\n"
        "from prefect.server.database.dependencies import MODELS_DEPENDENCIES\n"
        "create_app()\n"
        "print(type(MODELS_DEPENDENCIES['database_config']).__name__)"
    )
    assert run_python(tmp_path, ["-c", script]).split()[-1] == "ImmediateWritesSqlite"
