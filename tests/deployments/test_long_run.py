"""A long deployed run on the local stack: every subflow and task run recorded, no event dropped.

The run (``shared_runs.py``: 10 iterations of the unpartitioned planted graph; 100 in
`make test-long`, which runs this file alone with PBG_LONG_RUN_ITERATIONS=100) loads the
server's writers; then every task run must be recorded and the server log must show no
dead-lettered event, no misfired action and no refused SQLite write (``server_log.py``).
``test_worker_crash.py`` checks, once every window closed, that the crash automation did not
act on this run after it ended.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from run_records import task_run_names
from server_log import server_log_problems
from shared_runs import LONG_RUN_ITERATIONS
from stack import Stack, version_of

pytestmark = pytest.mark.integration


def test_a_long_deployed_run_drops_no_event_and_records_every_run(
    stack: Stack, long_run: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert version_of(long_run.checkpoint) == LONG_RUN_ITERATIONS
    # Every subflow and task run was recorded (the task-run recorder dropped none): per iteration
    # schedule, swap, load, train, save, write, switch, preserve, remove.
    assert len(stack.subflow_runs(long_run.id)) == LONG_RUN_ITERATIONS
    recorded = task_run_names(stack, long_run.id, LONG_RUN_ITERATIONS * 9)
    assert recorded.count("swap partitions (0, 0)") == LONG_RUN_ITERATIONS
    assert all(recorded.count(f"switch to v{version}") == 1 for version in range(1, LONG_RUN_ITERATIONS + 1))
    assert server_log_problems(stack) == []
    with capsys.disabled():
        print(
            f"\n{LONG_RUN_ITERATIONS}-iteration deployed run: {long_run.seconds:.1f} s; no dead-lettered event, "
            "misfired action nor 'database is locked' in the server log"
        )
