"""The problems a local stack's server logged (``$PREFECT_HOME/pbg-local/server.log``).

:data:`SERVER_LOG_PROBLEMS` are what the server logs when its event consumers gave a message up
(a dropped event: a task run, a log or an automation's count is missing), when an automation
acted on a run in vain, and when SQLite refused a write ("database is locked": a retried request,
a worker's reconnect, or three times over a dropped event). The stack's server begins its SQLite
writes IMMEDIATE (flows.prefect_host.prefect_server), so a second writer waits for the lock instead: before
that, the fresh-clone CI run of 2026-12-04 saw two refused automation writes in 100 iterations.
"""

from __future__ import annotations

import re

from stack import Stack

SERVER_LOG_PROBLEMS = ("dead letter queue", "Action failed", "database is locked")
_RECORD_START = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| ", re.MULTILINE)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b")


def server_log_records(stack: Stack, *needles: str) -> list[str]:
    """The server log's records (a header line and its traceback) containing one of ``needles``,
    each as its header, the last Prefect frame and the exception, if it has a traceback."""
    text = (stack.state_dir / "server.log").read_text(errors="replace")
    starts = [match.start() for match in _RECORD_START.finditer(text)]
    records = [text[start:end].strip() for start, end in zip([0, *starts], [*starts, len(text)], strict=True)]
    return [_summary(record) for record in records if any(needle in record for needle in needles)]


def _summary(record: str) -> str:
    """A log record in one line: its header, then where and what it raised (if it did)."""
    lines = record.splitlines()
    frames = [line.strip() for line in lines if "/prefect/server/" in line and line.strip().startswith("File")]
    errors = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return " | ".join([lines[0], *frames[-1:], *errors[-1:]])


def server_log_problems(stack: Stack) -> list[str]:
    """Records reporting one of :data:`SERVER_LOG_PROBLEMS`."""
    return server_log_records(stack, *SERVER_LOG_PROBLEMS)
