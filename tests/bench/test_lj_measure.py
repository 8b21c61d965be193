"""bench/lj_measure.py: bytes written by a whole process tree, and the deadline's signals."""

from __future__ import annotations

import sys
from pathlib import Path

from lj_measure import run_io_measured
from process_state import running

MIB = 2**20


def test_bytes_written_by_a_reaped_grandchild_are_counted(tmp_path: Path) -> None:
    # The shell's child writes 4 MiB (fsync'd) and is reaped before the shell exits: its
    # figures reach the shell's /proc/<pid>/io, read before the shell itself is reaped.
    target = tmp_path / "out.bin"
    script = f"( dd if=/dev/zero of={target} bs=1M count=4 conv=fsync 2>/dev/null ); true"
    measured = run_io_measured(["bash", "-c", script], tmp_path, "dd", interval=0.05)
    assert measured.ok
    assert 4 * MIB <= measured.write_bytes < 6 * MIB
    assert measured.write_bytes_method.startswith("main process")


def test_deadline_escalates_and_leftovers_are_killed(tmp_path: Path) -> None:
    # The main process ignores SIGINT; its background child ignores SIGINT and SIGTERM and would
    # outlive it: SIGTERM ends the main process, and the child is found in the group and killed.
    # The clock starts at the child's "ignoring" line, once both ignore what they must.
    child = (
        "import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ignoring', flush=True); time.sleep(120)"
    )
    script = f"trap '' INT; {sys.executable} -c \"{child}\" & sleep 120"
    measured = run_io_measured(
        ["bash", "-c", script], tmp_path, "stuck", deadline_s=0.2, grace_s=0.5, interval=0.05, start_marker="ignoring"
    )
    assert [s.split()[0] for s in measured.signals] == ["SIGINT", "SIGTERM"]
    assert measured.returncode != 0
    assert len(measured.leftover_pids) == 1
    assert "signal.SIG_IGN" in measured.leftovers[0]
    assert not running(measured.leftover_pids[0])


def test_no_deadline_before_the_start_marker(tmp_path: Path) -> None:
    measured = run_io_measured(
        ["bash", "-c", "sleep 0.5; echo done"], tmp_path, "late", deadline_s=0.0, interval=0.05, start_marker="never"
    )
    assert measured.ok and measured.signals == []
