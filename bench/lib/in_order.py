"""The ``pbg`` flow with its iteration subflows called plainly in order: bench.pipeline's baseline.

flows/train.py runs the iteration subflows through :class:`flows.pipeline.SubflowPipeline`
(each one created while the previous iteration works, its ending off the critical path).
:func:`use_in_order` replaces it, in one process, by :class:`InOrder`: each subflow is called
once the previous one has returned, as a plain loop would. The product has no switch for it;
the benchmark selects this code path in two ways:

- embedded: ``python -m bench.lib.in_order train CONFIG ...`` is the ``pbg`` command line with
  the replacement made as ``flows.train`` is imported (the CLI imports it late, after its
  start-up work, so the start-up is the same as ``pbg train``'s);
- deployed: the entrypoint ``bench/lib/in_order_deployment.py:pbg`` (the same ``pbg`` flow);
  a deployment whose job environment sets :data:`SUBFLOW_HEARTBEATS_VARIABLE` to ``off`` also
  calls the subflows without heartbeats (:class:`InOrder`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, TypeVar

R = TypeVar("R")
TRAIN_MODULE = "flows.train"
SUBFLOW_HEARTBEATS_VARIABLE = "PBG_BENCH_SUBFLOW_HEARTBEATS"  # "off": see InOrder


class InOrder:
    """``SubflowPipeline.run_in_order`` without the overlap: call ``i + 1`` starts after call ``i`` returned.

    With :data:`SUBFLOW_HEARTBEATS_VARIABLE` set to ``off`` in the environment, each subflow is
    called with flow-run heartbeats off (the ``pbg`` run keeps its own): the in-order loop
    without the heartbeat thread a subflow joins as it ends, bench.pipeline's third variant.
    """

    def run_in_order(
        self, calls: Sequence[Callable[[], R]], names: Sequence[str], overlap_after: Callable[[int], bool]
    ) -> Iterator[R]:
        """Yield each call's result in order (``names`` and ``overlap_after`` have nothing to do here)."""
        quiet = os.environ.get(SUBFLOW_HEARTBEATS_VARIABLE) == "off"
        for call in calls:
            if not quiet:
                yield call()
                continue
            from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

            with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
                result = call()
            yield result


def use_in_order(train_module: ModuleType) -> None:
    """Make ``flows.train`` (given) call its iteration subflows in order.

    Raises:
        RuntimeError: the module has no ``SubflowPipeline`` to replace (the pipeline was removed
            or renamed: this baseline no longer measures anything).
    """
    if not hasattr(train_module, "SubflowPipeline"):
        raise RuntimeError(f"{train_module.__name__} has no SubflowPipeline to replace: nothing to compare against")
    vars(train_module)["SubflowPipeline"] = InOrder


class _InOrderOnImport(importlib.abc.MetaPathFinder):
    """Finds ``flows.train`` as usual and calls :func:`use_in_order` on it right after it executes."""

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
            use_in_order(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this one spec's loader, for this import
        return spec


def main() -> None:
    """``pbg`` with the iteration subflows in order (the replacement made when flows.train is imported)."""
    if TRAIN_MODULE in sys.modules:
        use_in_order(sys.modules[TRAIN_MODULE])
    else:
        sys.meta_path.insert(0, _InOrderOnImport())
    from flows.cli import run

    run()


if __name__ == "__main__":
    main()
