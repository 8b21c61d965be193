"""The demo as a fresh clone runs it: `examples/umls/run_demo.sh` prints the README's figures (4 decimals, auc included).

The README promises that the seeded demo reproduces its metrics. This runs the script itself
(import, 50 epochs of training, filtered evaluation) in a scratch directory that links the
repository's examples, data and virtualenv, so nothing under the checkout's ``demo-out/``
is touched, and compares the printed ``Stats:`` line with the figures the README states.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_FIGURES = re.compile(r"`mrr: (\d\.\d+) , r1: (\d\.\d+) , r10: (\d\.\d+)` on UMLS \(`auc: (\d\.\d+)`")
STATS = re.compile(r"^Stats: .*$", re.MULTILINE)


def readme_figures() -> dict[str, str]:
    """The demo's metrics as the README states them (as written, e.g. ``"0.82"``)."""
    match = README_FIGURES.search((REPO / "README.md").read_text())
    assert match, "README.md no longer states the demo's figures as `mrr: X , r1: Y , r10: Z` on UMLS (`auc: W`"
    return dict(zip(("mrr", "r1", "r10", "auc"), match.groups(), strict=True))


def printed_stats(output: str) -> dict[str, float]:
    """The metrics of the last ``Stats:`` line the demo printed."""
    lines = STATS.findall(output)
    assert lines, f"the demo printed no Stats: line:\n{output[-3000:]}"
    pairs = (part.split(":") for part in lines[-1].removeprefix("Stats:").split(","))
    return {key.strip(): float(value) for key, value in pairs}


@pytest.mark.integration
@pytest.mark.slow
def test_seeded_demo_prints_the_readme_figures(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    for name, target in (("examples", REPO / "examples"), ("data", REPO / "data"), (".venv", venv)):
        (tmp_path / name).symlink_to(target)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PBG_"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect_home")
    # The script cds to its checkout's root: through the links, that is tmp_path.
    done = subprocess.run(
        ["bash", str(tmp_path / "examples" / "umls" / "run_demo.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert (tmp_path / "demo-out" / "umls" / "model").is_dir()
    assert not (tmp_path / "examples" / "umls" / "demo-out").exists()

    stats = printed_stats(done.stdout)
    for metric, stated in readme_figures().items():
        decimals = len(stated.split(".")[1])
        assert f"{stats[metric]:.{decimals}f}" == stated, (
            f"the demo printed {metric} {stats[metric]:.6f}; the README states {stated}"
        )
