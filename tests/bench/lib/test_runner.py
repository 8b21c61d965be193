"""bench.lib.runner: bytes written by a whole process tree, the deadline's signals, and the plain measured run."""

from __future__ import annotations

import sys
from pathlib import Path

from process_state import running

from bench.lib.runner import Deadline, run_measured

MIB = 2**20


def test_bytes_written_by_a_reaped_grandchild_are_counted(tmp_path: Path) -> None:
    # The shell's child writes 4 MiB (fsync'd) and is reaped before the shell exits: its
    # figures reach the shell's /proc/<pid>/io, read before the shell itself is reaped.
    target = tmp_path / "out.bin"
    script = f"( dd if=/dev/zero of={target} bs=1M count=4 conv=fsync 2>/dev/null ); true"
    measured = run_measured(["bash", "-c", script], tmp_path, "dd", sample_interval=0.05, io=True)
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
    deadline = Deadline(0.2, grace_s=0.5, start_marker="ignoring")
    measured = run_measured(["bash", "-c", script], tmp_path, "stuck", sample_interval=0.05, deadline=deadline)
    assert [s.split()[0] for s in measured.signals] == ["SIGINT", "SIGTERM"]
    assert measured.returncode != 0
    assert len(measured.leftover_pids) == 1
    assert "signal.SIG_IGN" in measured.leftovers[0]
    assert not running(measured.leftover_pids[0])


def test_no_deadline_before_the_start_marker(tmp_path: Path) -> None:
    deadline = Deadline(0.0, start_marker="never")
    measured = run_measured(
        ["bash", "-c", "sleep 0.5; echo done"], tmp_path, "late", sample_interval=0.05, deadline=deadline
    )
    assert measured.ok and measured.signals == []


def test_a_plain_run_keeps_its_output_and_the_summary_fields_of_earlier_result_files(tmp_path: Path) -> None:
    # Result files written before bench/ became a package carry exactly these fields per command.
    script = "import sys; print('out'); print('err line', file=sys.stderr); sys.exit(3)"
    measured = run_measured([sys.executable, "-c", script], tmp_path / "run", "cmd", sample_interval=0.05)
    assert (measured.returncode, measured.ok) == (3, False)
    assert measured.stdout == "out\n" and measured.stderr == "err line\n"
    assert (tmp_path / "run" / "cmd.out").read_text() == "out\n"
    assert measured.peak_processes >= 1 and measured.peak_rss_bytes > 0 and measured.wall_s > 0
    assert measured.write_bytes == 0 and measured.write_bytes_method == "" and measured.leftover_pids == []
    assert list(measured.summary()) == [
        "argv",
        "cwd",
        "returncode",
        "started_at",
        "wall_s",
        "peak_rss_bytes",
        "peak_pss_bytes",
        "peak_processes",
        "stdout_path",
        "stderr_path",
        "stderr_tail",
    ]
    assert measured.summary()["stderr_tail"] == "err line"
