"""Ctrl-C and SIGTERM of ``pbg import`` and ``pbg export``: the output is as before, the command reruns.

Each test runs the real command in its own session with a temporary PREFECT_HOME
(:func:`_signals.signal_when`), signals it at a moment of its work seen from outside (the input
file open, staged files or an output file written), and checks that the command ends within 5 s
with status 130 or 143, that the previous output is left as it was (no partial file, no staging)
and that the command line it prints runs again to the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
from pathlib import Path

import pytest
from _random_graph import random_edges, random_graph_config
from _signals import EXIT_WITHIN_SECONDS, run_pbg, signal_when


def has_staged_files(directory: Path) -> bool:
    """Whether an import has staged files under ``directory`` (a folder vanishing while it is
    walked, such as the import's write check of its output folder, counts as not yet)."""
    try:
        return any(directory.rglob(".pbg-import-*"))
    except OSError:
        return False


def open_files(pid: int) -> set[str]:
    """The paths the process ``pid`` has open now (empty once it is gone)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    found = set()
    try:
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):
                found.add(os.readlink(fd))
    except OSError:
        pass
    return found


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (relative name -> content)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("signum", "moment"), [(signal.SIGINT, "writing"), (signal.SIGTERM, "reading")])
def test_an_interrupted_import_leaves_the_previous_output_as_it_was(
    env: dict[str, str], tmp_path: Path, signum: int, moment: str
) -> None:
    """Reading: the import has the new input open; writing: it has staged files. Either way the
    previous import (its manifest included, so a rerun of it would skip) is left as it was."""
    random_graph_config(tmp_path, dimension=8)
    edges = random_edges(tmp_path / "edges.tsv", num_edges=600_000, num_nodes=50_000)
    args = ["import", "config.json", str(edges), "--lhs-col", "0", "--rhs-col", "1"]
    assert run_pbg(args, env, tmp_path).returncode == 0
    before = snapshot(tmp_path / "data")

    random_edges(edges, num_edges=600_000, num_nodes=50_000, seed=1)  # new content: the import runs again
    data = tmp_path / "data"
    started = {
        "reading": lambda pid: str(edges) in open_files(pid),
        "writing": lambda _pid: has_staged_files(data),
    }[moment]
    result = signal_when(args, started, signum, env, tmp_path)
    assert result.signalled and result.returncode == 128 + signum, result.output
    assert result.seconds_to_exit < EXIT_WITHIN_SECONDS, result.output
    assert snapshot(tmp_path / "data") == before
    assert not [p for p in (tmp_path / "data").rglob(".pbg-import-*")], "staging left behind"

    line = next(line for line in result.output.splitlines() if line.startswith("pbg import: interrupted by"))
    again = shlex.split(line.split("run it again with: ")[1])
    assert again == ["pbg", *args]
    assert run_pbg(again[1:], env, tmp_path).returncode == 0
    assert snapshot(tmp_path / "data") != before  # the new edges are in


@pytest.mark.slow
def test_an_interrupted_export_leaves_no_output_and_runs_again(env: dict[str, str], tmp_path: Path) -> None:
    from flows.train import pbg
    from pbg_core.config import parse_config
    from storage.config_loader import load_config
    from storage.importing.importer import import_edges
    from storage.importing.options import ImportOptions

    config_path = random_graph_config(tmp_path, dimension=64)
    edges = random_edges(tmp_path / "edges.tsv", num_edges=200_000, num_nodes=100_000)
    os.chdir(tmp_path)  # the config's paths are relative
    config = load_config(str(config_path), [])
    import_edges(config, [str(edges)], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    pbg(config=parse_config(json.loads(config_path.read_text())))  # version 1 (~100k embeddings of 64)

    out = tmp_path / "out"
    out.mkdir()
    args = ["export", "config.json", "--entities-output", "out/entities.tsv", "--relation-types-output", "out/rel.tsv"]
    result = signal_when(args, lambda _pid: any(out.iterdir()), signal.SIGINT, env, tmp_path)  # while it writes
    assert result.signalled and result.returncode == 130, result.output
    assert result.seconds_to_exit < EXIT_WITHIN_SECONDS, result.output
    assert list(out.iterdir()) == []
    line = next(line for line in result.output.splitlines() if line.startswith("pbg export: interrupted by SIGINT"))
    again = shlex.split(line.split("run it again with: ")[1])
    assert again == ["pbg", *args]
    done = run_pbg(again[1:], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["entities.tsv", "rel.tsv"]
