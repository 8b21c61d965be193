"""``pbg tune CONFIG --space SPACE --trials N``: the ``pbg-tune`` flow (a tuning study) on this machine.

Before the embedded server starts, in under a second: the base config and its local inputs
(:func:`flows.cli.preflight.load_checked_config`), its ``validation`` section, the search-space
file against it (every problem one line, naming the file), the options, and the study directory
(local only: the study is a SQLite file), and a resumed study's space (``space.json``) against the
file's; with ``--dask-address``, that the config's paths are ones the workers reach and that a
Dask scheduler answers there (the flow then checks its workers). Then the flow; one line per finished trial comes from
its log, and at the end the best trial and ``best_config.json``. A rerun of the same command
resumes the study (docs/tuning.md, "Running a study").
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING

from flows.cli.user_errors import debug_enabled
from flows.prefect_host import interrupts
from flows.prefect_host.local_server import local_api
from flows.prefect_host.log_filters import one_traceback_on_console, quiet_run_failures

if TYPE_CHECKING:
    from pbg_core.config import ConfigSchema
    from pbg_core.config.search_space import SearchSpace


def cmd_tune(args: argparse.Namespace) -> int:
    """``pbg tune CONFIG --space SPACE --trials N``: the ``pbg-tune`` flow; prints the best trial."""
    from flows.cli.commands import usage_error
    from flows.cli.preflight import load_checked_config
    from flows.cli.service_checks import check_prefect_api
    from pbg_core.config.space_checks import check_space, require_validation
    from storage.config_loader import load_search_space, local_path

    if args.timeout is not None and not args.timeout > 0:
        return usage_error("tune", f"--timeout {args.timeout:g}: must be > 0 seconds")
    if args.study_dir is not None and local_path(args.study_dir) is None:
        return usage_error("tune", f"--study-dir {args.study_dir}: must be a local directory (the study is SQLite)")
    config = load_checked_config(args.config, args.param, training=True)
    require_validation(config, args.config)
    space = load_search_space(args.space, config.storage_options_for_fs())
    check_space(space, config, source=args.space)
    study_dir = args.study_dir or os.path.join(config.checkpoint_path, f"tune-{space.study}")
    local = local_path(study_dir)
    if local is None:
        return usage_error(
            "tune", f"the study directory {study_dir} is not local (checkpoint_path is remote): give --study-dir DIR"
        )
    study_dir = os.path.abspath(local)
    _check_resumed_space(study_dir, space, args.space)
    refused = _placement_problem(config, args.dask_address)
    if refused is not None:
        return usage_error("tune", refused)
    check_prefect_api(os.environ.get("PREFECT_API_URL"))
    with local_api() as server:
        from flows.cli.runs import _local_run_settings
        from flows.tune import pbg_tune

        if debug_enabled(args.debug):
            one_traceback_on_console()
        else:
            quiet_run_failures()
        started = time.perf_counter()
        with _local_run_settings(server), interrupts.flow_call():
            result = pbg_tune(
                space_url=args.space,
                trials=args.trials,
                config=config,
                parallel=args.parallel,
                timeout_seconds=args.timeout,
                study_dir=study_dir,
                dask_address=args.dask_address,
            )
    elapsed = time.perf_counter() - started
    counts = _state_counts(result["trials"])
    print(
        f"study {result['study']}: {result['finished']} finished trials ({counts}) in {result['study_dir']} ({elapsed:.1f} s)"
    )
    best = result.get("best")
    if best is None:
        print("no complete trial: no best config")
        return 0
    print(f"best trial {best['number']}: {best['metric']} {best['value']:.4f} with {' '.join(best['overrides'])}")
    print(f"best config: {result['best_config']} (pbg train {result['best_config']})")
    return 0


def _placement_problem(config: ConfigSchema, dask_address: str | None) -> str | None:
    """With ``--dask-address``: paths the workers cannot reach (the line to print), else None once a
    Dask scheduler answers there (a :class:`~pbg_core.errors.ClusterError` line if none does)."""
    from flows.cli.service_checks import check_dask_scheduler
    from pbg_core.config.cluster_rules import trial_placement_problem

    if dask_address is None:
        return None
    refused = trial_placement_problem(config, dask_address)
    if refused is None:
        check_dask_scheduler(dask_address)
    return refused


def _check_resumed_space(study_dir: str, space: SearchSpace, source: str) -> None:
    """A resumed study given another space is refused here already, from the normalized space the
    study keeps beside ``study.db`` (``space.json``); the flow checks ``study.db``'s own copy again."""
    from pbg_core.config.space_digest import check_unchanged
    from storage.layout import SPACE_FILE

    kept = os.path.join(study_dir, SPACE_FILE)
    if os.path.isfile(kept):
        with open(kept, encoding="utf-8") as file:
            check_unchanged(json.load(file), space, source)


def _state_counts(rows: list[dict[str, object]]) -> str:
    """``2 complete, 1 pruned, 1 failed``."""
    names = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "INTERRUPTED": "interrupted"}
    counts = {label: sum(row["state"] == state for row in rows) for state, label in names.items()}
    return ", ".join(f"{n} {label}" for label, n in counts.items() if n) or "none"
