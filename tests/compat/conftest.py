"""Fixtures of the PBG file-compatibility tests (helpers: :mod:`pbg_compat`).

Every fixture that runs PBG depends on :func:`pbg_tools`, which skips when the PBG
virtualenv is absent, so nothing expensive (PBG, a Prefect test server) starts in a
skipped run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pbg_compat import MAIN_SRC_ENV, VENV_ENV, PbgTools, main_src_dir, venv_dir


@pytest.fixture(scope="session")
def pbg_tools() -> PbgTools:
    """PBG's console scripts; skips the test when the PBG virtualenv is absent."""
    bin_dir = venv_dir() / "bin"
    if not (bin_dir / "torchbiggraph_train").is_file():
        pytest.skip(
            f"PyPI torchbiggraph==1.0.0 not found: {bin_dir / 'torchbiggraph_train'} is missing "
            f"(run `make pbg-venv`, or set {VENV_ENV} to a virtualenv that has it)"
        )
    return PbgTools(bin_dir)


@pytest.fixture(scope="session")
def pbg_main_src(pbg_tools: PbgTools) -> Path:
    """PBG's main-branch source (run with the 1.0.0 virtualenv's Python); skips when absent."""
    src = main_src_dir()
    if src is None:
        pytest.skip(
            f"PBG main-branch source not found: set {MAIN_SRC_ENV} to a checkout of "
            "github.com/facebookresearch/PyTorch-BigGraph (main) kept outside this repo, the directory "
            "holding torchbiggraph/regularizers.py (PyPI 1.0.0 has no N3 regularizer and no eval loss)"
        )
    return src


@pytest.fixture(scope="module")
def prefect_api(pbg_tools: PbgTools) -> Iterator[None]:
    """A throw-away Prefect API for the in-process ``pbg`` / ``pbg-eval`` flow runs of a module."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
