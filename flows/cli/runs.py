"""``pbg train``, ``pbg retrain`` and ``pbg eval``: the commands that run Prefect flows.

Both check the config and their local inputs first (:mod:`flows.cli.preflight`), before the
embedded API server starts (:mod:`flows.prefect_host.local_server`), then fork the HOGWILD children the
run will use while the server starts, and run the flow on it (or on PREFECT_API_URL's server).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from flows.cli.user_errors import debug_enabled
from flows.prefect_host import interrupts
from flows.prefect_host.local_server import LocalApiServer, local_api
from flows.prefect_host.log_filters import no_run_urls, one_traceback_on_console, quiet_console, quiet_run_failures
from pbg_core.parallel.worker_boot import active_workers, default_num_workers, prestart_children

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

    from pbg_core.config import ConfigSchema
    from storage.retraining.options import RetrainOptions

# What `pbg eval`'s flow returns about a sampled evaluation, printed on its own line, not in Stats.
SAMPLE_KEYS = ("total_edges", "sample_edges", "candidates", "sample_seed")
# `pbg retrain`'s options: the fields of RetrainOptions and of its `incoming`, by option name.
RETRAIN_OPTIONS = {
    "keep_last": "--keep-last",
    "init_from_previous": "--no-init-from-previous",
    "epochs": "--epochs",
    "on_no_new_data": "--on-no-new-data",
    "min_mrr": "--min-mrr",
    "max_mrr_drop": "--max-mrr-drop",
}
INCOMING_OPTIONS = {
    "inputs": "--incoming",
    "edges_dir": "--edges-dir",
    "lhs_col": "--lhs-col",
    "rhs_col": "--rhs-col",
    "rel_col": "--rel-col",
    "weight_col": "--weight-col",
    "delimiter": "--delimiter",
    "entity_min_count": "--entity-min-count",
    "skip_bad_lines": "--skip-bad-lines",
    "unknown_relations": "--unknown-relations",
    "holdout_fraction": "--holdout-fraction",
}


def cmd_train(args: argparse.Namespace) -> int:
    """``pbg train CONFIG``: the ``pbg`` flow on the config; prints the committed version."""
    from flows.cli.preflight import load_checked_config
    from flows.cli.service_checks import check_dask_scheduler, check_prefect_api

    # Before the server or any worker starts: a bad config or a missing input fails in under a second.
    config = load_checked_config(args.config, args.param, training=True)
    check_prefect_api(os.environ.get("PREFECT_API_URL"))
    check_dask_scheduler(config.dask_address if config.num_machines > 1 else None)
    interrupts.describe_checkpoint_with(
        lambda: interrupts.committed_checkpoint(config.checkpoint_path, config.storage_options_for_fs())
    )
    with local_api() as server:  # then at once: the server's start-up overlaps everything below
        from flows.train import pbg
        from tasks.sessions import prepare_training_session

        _quiet_run_failures(args)

        on_one_machine = config.num_machines == 1  # else the HOGWILD workers are the Dask workers'
        if on_one_machine:
            prestart_workers(config, training=True)
        if server is not None:  # while the server starts: the session, and Prefect's serializers
            if on_one_machine:
                prepare_training_session(config)
            pbg.serialize_parameters(pbg.validate_parameters({"config": config}))
        started = time.perf_counter()
        with _local_run_settings(server), interrupts.flow_call():
            result = pbg(config=config)
    print(
        f"trained: {result['checkpoint_path']} is at version {result['version']} "
        f"({time.perf_counter() - started:.1f} s)"
    )
    if result.get("stopped"):
        print(result["stopped"])  # "early stopping: mrr did not improve in the last 4 validations (...)"
    return 0


def cmd_retrain(args: argparse.Namespace) -> int:
    """``pbg retrain CONFIG``: the ``pbg-retrain`` flow on the config's root; prints what it promoted."""
    from flows.cli.commands import usage_error
    from flows.cli.preflight import load_config_checked
    from flows.cli.service_checks import check_prefect_api

    options = retrain_options(args)
    if isinstance(options, str):
        return usage_error("retrain", options)
    config = load_config_checked(args.config, args.param)  # before the server: a bad config fails at once
    check_prefect_api(os.environ.get("PREFECT_API_URL"))
    with local_api() as server:
        from flows.retrain import pbg_retrain

        _quiet_run_failures(args)
        prestart_workers(config, training=False)  # the holdout evaluations use every worker
        started = time.perf_counter()
        from tasks.verdicts import verdict_of

        with _local_run_settings(server), interrupts.flow_call():
            state: State[Any] = pbg_retrain(config=config, retrain=options, return_state=True)  # type: ignore[assignment]
        failed = verdict_of(state)  # a failed gate, nothing new under on_no_new_data: fail
        if failed is not None:
            raise failed  # its one line, exit 1 (flows.cli.user_errors)
        result: dict[str, Any] = state.result()  # the run's own error, if it raised one
    elapsed = f"({time.perf_counter() - started:.1f} s)"
    if "skipped" in result:
        print(f"skipped: {result['skipped']}; latest.json names {result['latest']} {elapsed}")
        return 0
    gate = result.get("gate") or {}
    verdict = f"; quality gate {gate['gate']}: {gate.get('reason', '')}" if gate else ""
    print(f"retrained: {result['checkpoint_path']} is at version {result['version']}{verdict} {elapsed}")
    return 0


def retrain_options(args: argparse.Namespace) -> RetrainOptions | str:
    """The ``retrain`` parameter ``pbg retrain``'s options give, or the one-line problem with them."""
    from pydantic import ValidationError

    from storage.retraining.options import RetrainOptions

    given = {field: getattr(args, field) for field in RETRAIN_OPTIONS if getattr(args, field) is not None}
    incoming = {field: getattr(args, field) for field in INCOMING_OPTIONS if getattr(args, field) is not None}
    if incoming:
        given["incoming"] = incoming
    try:
        return RetrainOptions.model_validate(given)
    except ValidationError as err:
        first = err.errors()[0]
        loc = [str(part) for part in first["loc"]]
        option = (
            INCOMING_OPTIONS.get(loc[-1]) if loc[:1] == ["incoming"] else RETRAIN_OPTIONS.get(loc[0]) if loc else None
        )
        message = str(first["msg"]).removeprefix("Value error, ")
        if option is None:
            return message
        value = first.get("input")
        shown = f" {value}" if value is not None and not isinstance(value, dict) else ""
        return f"{option}{shown}: {message}"


def cmd_eval(args: argparse.Namespace) -> int:
    """``pbg eval CONFIG``: the ``pbg-eval`` flow on the latest checkpoint; prints its metrics."""
    from flows.cli.preflight import load_checked_config
    from flows.cli.service_checks import check_prefect_api

    # Before the server, as for train.
    config = load_checked_config(args.config, args.param, training=False, filter_paths=args.filter_path or ())
    sampling = args.sample_edges is not None or args.candidates is not None
    if sampling:
        from flows.cli.eval_sampling import check_sampling

        check_sampling(config, args.candidates)
    check_prefect_api(os.environ.get("PREFECT_API_URL"))
    with local_api() as server:
        from flows.evaluate import pbg_eval

        _quiet_run_failures(args)

        prestart_workers(config, training=False)

        filter_paths = (args.filter_path or list(config.edge_paths)) if args.filtered else None
        with _local_run_settings(server), interrupts.flow_call():
            metrics = pbg_eval(
                config=config,
                filter_paths=filter_paths,
                sample_edges=args.sample_edges,
                candidates=args.candidates,
                sample_seed=args.sample_seed,
                version=args.version,
            )
    print("Stats: " + " , ".join(f"{k}: {v:.6g}" for k, v in metrics.items() if k not in SAMPLE_KEYS))
    if sampling:
        from pbg_core.evaluation.sampling import describe_sample

        print(
            describe_sample(
                int(metrics["count"]), int(metrics["total_edges"]), args.candidates, int(metrics["sample_seed"])
            )
        )
    if args.json:
        print(json.dumps(metrics))
    return 0


def _quiet_run_failures(args: argparse.Namespace) -> None:
    """Prefect's failure lines and tracebacks off the console (the API keeps them); when debugging,
    its lines without their traceback (the command prints it once, see :mod:`flows.prefect_host.log_filters`)."""
    if debug_enabled(args.debug):
        one_traceback_on_console()
    else:
        quiet_run_failures()


def prestart_workers(config: ConfigSchema, training: bool) -> None:
    """Fork the HOGWILD children the run will use now, ready at once (see pbg_core.parallel.worker_boot).

    Call it once torch and the engine are imported and before Prefect starts any thread.
    Training starts children only for buckets big enough to share (the engine's rule,
    :func:`pbg_core.parallel.worker_boot.active_workers`), so a small graph on local disk starts none;
    holdout and offline evaluation use every worker.
    """
    from storage.probe import largest_local_bucket

    workers = config.workers or default_num_workers()
    children = workers - 1
    if children and training and config.eval_fraction == 0:
        largest = largest_local_bucket(config.edge_paths)
        if largest is not None:
            children = active_workers(largest, config.batch_size, workers) - 1
    prestart_children(children, start_method="fork")


@contextlib.contextmanager
def _local_run_settings(server: LocalApiServer | None) -> Iterator[None]:
    """Wait for the embedded server, and run without flow-run heartbeats on it.

    Heartbeats let a server mark a run whose process died as CRASHED; the embedded server
    dies with the process, so nothing watches them, and each flow run's heartbeat thread
    costs up to a second at its end (it is joined, and it sleeps in 1 s steps).
    Prefect's own routine lines stay off the terminal unless --verbose (flows/prefect_host/log_filters.py).
    """
    quiet_console()
    if server is None:
        yield
        return
    server.wait_ready()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    # "View at <url>" would name a page of a server that serves no UI and is gone at the end.
    with no_run_urls(), temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
