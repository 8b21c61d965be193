"""The ``pbg`` flow with its iteration subflows pipelined: bench.pipeline's alternative to the product.

flows/train.py calls each iteration's subflow once the previous one has ended, the subflows
without heartbeats (``_run_in_order``), so that the run's timeline shows one iteration at a time.
:func:`use_pipelined` replaces that, in one process, by what the product did before issue 34:
each subflow created in a helper thread while the previous iteration works, its body run in the
flow's own thread (:mod:`bench.lib.subflow_pipeline`), and every subflow with the heartbeats the
settings give it. The product has no switch for it; the benchmark selects this code path in two
ways:

- embedded: ``python -m bench.lib.pipelined train CONFIG ...`` is the ``pbg`` command line with
  the replacement made as ``flows.train`` is imported (the CLI imports it late, after its
  start-up work, so the start-up is the same as ``pbg train``'s);
- deployed: the entrypoint ``bench/lib/pipelined_deployment.py:pbg`` (the same ``pbg`` flow).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from functools import partial
from types import ModuleType
from typing import Any

TRAIN_MODULE = "flows.train"
REPLACED = ("_run_in_order", "_iteration_steps")  # what flows.train must still have


def use_pipelined(train_module: ModuleType) -> None:
    """Make ``flows.train`` (given) run its iteration subflows through a :class:`SubflowPipeline`.

    Raises:
        RuntimeError: the module lacks a function this replaces (renamed or removed: this
            variant would no longer measure anything).
    """
    from bench.lib.subflow_pipeline import run_body  # imports Prefect: not before the CLI's set-up (main)

    missing = [name for name in REPLACED if not callable(getattr(train_module, name, None))]
    if missing:
        raise RuntimeError(
            f"{train_module.__name__} has no {', '.join(missing)} to replace: the pipelined variant measures nothing"
        )
    steps = vars(train_module)["_iteration_steps"]
    vars(train_module)["_iteration_steps"] = partial(run_body, steps)
    vars(train_module)["_run_in_order"] = partial(run_pipelined, train_module)


def run_pipelined(
    train: ModuleType, handle: str, config: Any, plan: Any, progress: Any, pause: tuple[int, int]
) -> list[dict[str, Any]]:
    """``flows.train._run_in_order`` as it was with the pipeline: each subflow created while the previous
    iteration works, never across a pause nor after a validation (which may stop the run)."""
    from bench.lib.subflow_pipeline import SubflowPipeline

    pause_every, pause_timeout_seconds = pause
    remaining = plan.remaining
    pause_after = [train._pause_due(pause_every, it, plan.total_iterations) for it in remaining]
    validated = [train.is_due(config.validation, it) for it in remaining]
    calls: list[Callable[[], dict[str, Any]]] = [
        partial(_run_iteration, train, handle, it, config.eval_fraction > 0, progress, config, check)
        for it, check in zip(remaining, validated, strict=True)
    ]
    outcomes = SubflowPipeline().run_in_order(
        calls, [it.label for it in remaining], overlap_after=lambda i: not pause_after[i] and not validated[i]
    )
    results: list[dict[str, Any]] = []
    with closing(outcomes) as stream:
        for iteration, due, result in zip(remaining, pause_after, stream, strict=True):
            results.append(result)
            if result.get("stop"):
                break
            if due:
                train.pause_flow_run(timeout=pause_timeout_seconds, poll_interval=2, key=f"after-v{iteration.version}")
    return results


def _run_iteration(
    train: ModuleType, handle: str, iteration: Any, evaluate: bool, progress: Any, config: Any, validate: bool
) -> dict[str, Any]:
    """The iteration's subflow, then its table artifact on the subflow's page (both in the subflow's
    helper thread: the table's post off the critical path)."""
    result: dict[str, Any] = train.train_iteration(handle, iteration, evaluate, progress, validate)
    train.publish_iteration_table(iteration, result["rows"], result["resumed"], config, result["flow_run_id"])
    return result


class _PipelinedOnImport(importlib.abc.MetaPathFinder):
    """Finds ``flows.train`` as usual and calls :func:`use_pipelined` on it right after it executes."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != TRAIN_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            use_pipelined(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this one spec's loader, for this import
        return spec


def main() -> None:
    """``pbg`` with the iteration subflows pipelined (the replacement made when flows.train is imported)."""
    if TRAIN_MODULE in sys.modules:
        use_pipelined(sys.modules[TRAIN_MODULE])
    else:
        sys.meta_path.insert(0, _PipelinedOnImport())
    from flows.cli import run

    run()


if __name__ == "__main__":
    main()
