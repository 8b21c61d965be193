"""Flow-test fixtures: one Prefect test harness per session, one trained checkpoint, and the
environment of a ``pbg`` command run as a subprocess.

``prefect_test_harness`` starts a throw-away API server (temporary SQLite); its start-up
can take well over the default 30 s on a busy 2-core machine, hence the long timeout.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prefect.testing.utilities import prefect_test_harness

from flows.train import pbg
from pbg_core.config import parse_config


@pytest.fixture(scope="session", autouse=True)
def prefect_harness() -> Iterator[None]:
    """Every flow of this directory runs against the same temporary API."""
    with prefect_test_harness(server_startup_timeout=180):
        yield


@dataclass(frozen=True)
class TrainedRun:
    """A finished training run of the planted graph and the config that produced it."""

    config: dict[str, Any]
    result: dict[str, Any]

    @property
    def checkpoint(self) -> Path:
        """The run's checkpoint directory."""
        return Path(self.config["checkpoint_path"])


@pytest.fixture(scope="session")
def trained(prefect_harness: None, graph: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The unpartitioned planted graph trained for 3 epochs (seed 0, 1 worker)."""
    config = config_for(graph, tmp_path_factory.mktemp("trained") / "ckpt", num_epochs=3)
    return TrainedRun(config=config, result=pbg(config=parse_config(config)))


@pytest.fixture
def calls_of(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``calls_of(module, name)``: the argument tuples of every call of ``module.name`` from now on.

    The real function still runs (a counting wrapper, not a stand-in).
    """

    def wrap(module: Any, name: str) -> list[tuple[Any, ...]]:
        calls: list[tuple[Any, ...]] = []
        real = getattr(module, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            calls.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
        return calls

    return wrap


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    """A ``pbg`` command's environment: a fresh PREFECT_HOME, no outside Prefect server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect_home")
    return env
