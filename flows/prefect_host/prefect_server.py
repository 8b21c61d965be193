"""Prefect's API server on SQLite, with write transactions that wait for SQLite's lock.

SQLite lets one connection write at a time. Prefect opens its write transactions as
``BEGIN DEFERRED`` (only the few that lock rows for update as ``BEGIN IMMEDIATE``): such a
transaction starts as a reader, and when it then writes after another connection committed
in between, SQLite refuses at once with "database is locked" (in WAL mode the busy timeout
cannot help: the reader's snapshot is stale, waiting would not make it fresh). Under a long
deployed run that is what the server logged: the worker channel reads the work pool then
writes the worker's heartbeat, the automations read then write a held event, and the API's
own handlers read then write; each collision is a retried request, a worker reconnect or,
three times over, a dropped event.

:class:`ImmediateWritesSqlite` opens every write transaction as ``BEGIN IMMEDIATE``: it takes
the write lock first, so a second writer waits (Prefect's ``busy_timeout``, 60 s) instead of
failing, and reads outside transactions are untouched (WAL keeps them concurrent). It goes in
through Prefect's own injection point for the database configuration
(``prefect.server.database.dependencies.MODELS_DEPENDENCIES``), before the app first touches
the database. PostgreSQL has row locks and needs none of this: the configuration is left alone.

Used by the embedded server of ``pbg train`` (:mod:`flows.prefect_host.local_server_app`) and by the local
deployment stack, which starts its server as ``python -m flows.prefect_host.prefect_server server start ...``
(Prefect's own CLI, in this process, so the server it runs has the configuration installed).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import Any


def install_immediate_writes() -> bool:
    """Make the server's SQLite write transactions ``BEGIN IMMEDIATE``; False (nothing done) on another database.

    Must run before the server opens its database (the injected configuration is read on first use).
    """
    from prefect.server.database.configurations import AioSqliteConfiguration
    from prefect.server.database.dependencies import MODELS_DEPENDENCIES
    from prefect.server.utilities.database import get_dialect
    from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL

    url = PREFECT_API_DATABASE_CONNECTION_URL.value()
    if get_dialect(url).name != "sqlite":
        return False

    class ImmediateWritesSqlite(AioSqliteConfiguration):
        """Prefect's SQLite configuration, every write transaction begun IMMEDIATE (see module docstring)."""

        @asynccontextmanager
        async def begin_transaction(self, session: Any, with_for_update: bool = False) -> AsyncGenerator[Any, None]:
            async with super().begin_transaction(session, with_for_update=True) as transaction:
                yield transaction

    MODELS_DEPENDENCIES["database_config"] = ImmediateWritesSqlite(connection_url=url)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``prefect ARGV...`` (normally ``server start --host ... --port ...``) with immediate SQLite writes."""
    from prefect.cli import app

    if argv is not None:
        sys.argv = ["prefect", *argv]
    else:  # `prefect` names itself in its help and errors
        sys.argv[0] = "prefect"
    if install_immediate_writes():
        print("pbg: SQLite write transactions begin IMMEDIATE (they wait for the write lock)", file=sys.stderr)
    app()  # reads sys.argv; exits through SystemExit with Prefect's own status
    return 0


if __name__ == "__main__":
    sys.exit(main())
