"""The ``pbg`` command line: import, train, eval, export (PBG's habits, one entry point).

    pbg import CONFIG INPUT... --lhs-col N --rhs-col N [--rel-col N] [-p key=value ...]
    pbg train  CONFIG [-p key=value ...]
    pbg eval   CONFIG [-p key=value ...] [--filtered [--filter-path P ...]] [--json]
    pbg export CONFIG --entities-output F --relation-types-output F [-p key=value ...]
    pbg serve  [--config-url URL] [-p key=value ...] [--cron EXPR] [--retrain-keep-last K] [--name train]

``train`` and ``eval`` run Prefect flows on the embedded defaults (Prefect's
ephemeral API with SQLite) unless PREFECT_API_URL points at a server; they check the
config and their local inputs first (:mod:`flows.preflight`), before that server starts.

A failure is one line naming what is wrong (:mod:`flows.user_errors`); every subcommand
takes ``--debug`` (or ``PBG_DEBUG=1``) for the traceback.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from flows import interrupts
from flows.local_server import LocalApiServer, local_api
from flows.quiet import quiet_console
from flows.user_errors import DEBUG_VARIABLE, debug_enabled, quiet_run_failures, report
from pbg_core.parallel.worker_boot import active_workers, close_prestarted, default_num_workers, prestart_children

if TYPE_CHECKING:
    from pbg_core.config import ConfigSchema

EXIT_USAGE = 2


def _prepare_prefect_env() -> None:
    """Defaults that must be set before Prefect is imported."""
    loggers = os.environ.get("PREFECT_LOGGING_EXTRA_LOGGERS", "")
    wanted = [name for name in ("pbg_core", "storage") if name not in loggers.split(",")]
    os.environ["PREFECT_LOGGING_EXTRA_LOGGERS"] = ",".join(filter(None, [loggers, *wanted]))
    # A brand-new PREFECT_HOME needs its SQLite migrations: the default 20 s can expire.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # import/export run no flow: their storage logs must not warn about a missing flow run.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    # Prefect's client telemetry runs a thread that calls home (Prefect's opt-out variable).
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # A temporary server Prefect starts itself (ours sets this too) would call home every 10
    # minutes: "Failed to send telemetry" without network, "database is locked" on a new database.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="config file: PBG .py (get_torchbiggraph_config), .json or .yaml")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print Prefect's routine lines (every task's 'Finished in state Completed()', ...)",
    )
    _add_debug_arg(parser)
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value; dotted paths reach nested ones (relations.0.all_negs=true). "
        "Credentials (storage_options.key/secret/token) work too and are never printed, but the "
        "process list shows them: prefer AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN",
    )


def _add_debug_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"on failure, print the Python traceback (and Prefect's own failure lines) before "
        f"the one-line error; the same as {DEBUG_VARIABLE}=1",
    )


def _positive(text: str) -> int:
    """A count of 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; give a whole number >= 1")
    return int(text)


def _column(text: str) -> int | str:
    """A column: a 0-based index, or a name (Parquet inputs)."""
    if text.lstrip("-").isdigit():
        if text.startswith("-"):
            raise argparse.ArgumentTypeError(
                f"{text} is negative; give a 0-based column index (0, 1, ...) or a column name (Parquet inputs)"
            )
        return int(text)
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="pbg",
        description="PyTorch-BigGraph training as a Prefect pipeline.",
        epilog=f"A failure ends with status 1 (2 for a bad option) and one line naming the file, line or field, "
        f"the bad value and what is allowed; --debug (every subcommand) or {DEBUG_VARIABLE}=1 adds the traceback.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    imp = sub.add_parser("import", help="convert TSV edge lists into the config's entity_path and edge_paths")
    _add_config_args(imp)
    imp.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="one edge list per edge path of the config: TSV/CSV (.gz/.bz2 too) or Parquet, local or s3://",
    )
    imp.add_argument(
        "-l",
        "--lhs-col",
        type=_column,
        required=True,
        help="column of the source entity: 0-based index, or a name (Parquet)",
    )
    imp.add_argument("-r", "--rhs-col", type=_column, required=True, help="column of the target entity")
    imp.add_argument("--rel-col", type=_column, default=None, help="column of the relation name (default: relation 0)")
    imp.add_argument("--weight-col", type=_column, default=None, help="column of a float edge weight")
    imp.add_argument(
        "--force", action="store_true", help="import even if the inputs' content and the options match the last import"
    )
    imp.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip and count malformed lines (the first ones are listed) instead of failing",
    )
    imp.add_argument(
        "--unknown-relations",
        choices=("skip", "error"),
        default="skip",
        help="a relation name not in the config: skip and count the edge (default, as PBG) or treat "
        "the line as malformed (an error naming file and line, or a skip with --skip-bad-lines)",
    )
    imp.add_argument("--relation-type-min-count", type=_positive, default=1, help="drop rarer relation types")
    imp.add_argument("--entity-min-count", type=_positive, default=1, help="drop rarer entities (and their edges)")
    imp.add_argument(
        "--delimiter",
        default=None,
        help="column separator (default: tab if the file's first line has one, else a space)",
    )

    train = sub.add_parser("train", help="run the `pbg` training flow (resumes from the last committed version)")
    _add_config_args(train)

    ev = sub.add_parser("eval", help="rank the config's edge paths against the latest checkpoint")
    _add_config_args(ev)
    ev.add_argument("--filtered", action="store_true", help="filter known true edges out of the negatives")
    ev.add_argument(
        "--filter-path",
        action="append",
        default=None,
        metavar="PATH",
        help="edge path whose edges count as known (repeatable; default: all of the config's edge_paths)",
    )
    ev.add_argument("--json", action="store_true", help="print the metrics as one JSON object on the last line")

    exp = sub.add_parser(
        "export",
        help="write the latest checkpoint's embeddings (TSV, NPY + names, HDF5) and relation parameters",
    )
    _add_config_args(exp)
    pbg_mode = exp.add_argument_group("PBG's layout (torchbiggraph_export_to_tsv): two files")
    pbg_mode.add_argument("--entities-output", help="TSV file for entity embeddings (must not exist)")
    pbg_mode.add_argument("--relation-types-output", help="TSV file for relation parameters")
    per_type = exp.add_argument_group("per entity type: one file per type in --output")
    per_type.add_argument(
        "--format",
        choices=["tsv", "npy", "h5"],
        default=None,
        help="tsv: name + values per line; npy: <type>.npy float32 + <type>.names.json; "
        "h5: <type>.h5 with datasets embeddings and names",
    )
    per_type.add_argument("--output", default=None, help="directory (local or s3://) for the per-type files")
    per_type.add_argument(
        "--entity-type",
        action="append",
        default=None,
        metavar="TYPE",
        help="export only this entity type (repeatable; default: all)",
    )
    exp.add_argument("--version", type=int, default=None, help="checkpoint version (default: the committed one)")
    serve = sub.add_parser(
        "serve",
        help="serve the `pbg` flow as deployment pbg/<name> from this process (no work pool or worker); "
        "needs a Prefect server in PREFECT_API_URL",
    )
    _add_debug_arg(serve)
    serve.add_argument("--name", default="train", help="deployment name (default: train, i.e. pbg/train)")
    serve.add_argument(
        "--config-url",
        default=None,
        help="default `config_url` parameter: a JSON/YAML config (local path or s3://); runs may pass their own",
    )
    serve.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="default `overrides` parameter entry (repeatable; credentials are refused)",
    )
    serve.add_argument("--cron", default=None, help="retraining schedule, a cron expression in UTC (default: none)")
    serve.add_argument(
        "--retrain-keep-last",
        type=int,
        default=None,
        metavar="K",
        help="default `retrain` parameter: each run trains into its own directory under "
        "checkpoint_path, initialised from the previous run; keep the last K",
    )
    serve.add_argument(
        "--limit",
        type=int,
        default=1,
        help="flow runs at once in this process (default 1: two runs must not train one checkpoint)",
    )
    return parser


def _cmd_import(args: argparse.Namespace) -> int:
    # Storage only, no Prefect: importing Prefect costs ~3.5 s and ~350 MB here.
    from flows.progress_bar import import_progress
    from storage.config_loader import load_config
    from storage.importing.importer import import_edges
    from tasks.import_progress import estimate_lines

    config = load_config(args.config, list(args.param))
    with import_progress(estimate_lines(args.inputs, config.storage_options_for_fs())) as progress:
        report = import_edges(
            config,
            list(args.inputs),
            progress=progress,
            lhs_col=args.lhs_col,
            rhs_col=args.rhs_col,
            rel_col=args.rel_col,
            weight_col=args.weight_col,
            relation_type_min_count=args.relation_type_min_count,
            entity_min_count=args.entity_min_count,
            delimiter=args.delimiter,
            seed=config.seed,
            skip_bad_lines=args.skip_bad_lines,
            force=args.force,
            unknown_relations=args.unknown_relations,
        )
    print(report)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from flows.preflight import check_prefect_api, load_checked_config

    # Before the server or any worker starts: a bad config or a missing input fails in under a second.
    config = load_checked_config(args.config, args.param, training=True)
    check_prefect_api(os.environ.get("PREFECT_API_URL"))
    interrupts.describe_checkpoint_with(
        lambda: interrupts.committed_checkpoint(config.checkpoint_path, config.storage_options_for_fs())
    )
    with local_api() as server:  # then at once: the server's start-up overlaps everything below
        from flows.train import pbg
        from tasks.sessions import prepare_training_session

        _quiet_run_failures(args)

        prestart_workers(config, training=True)
        if server is not None:  # while the server starts: the session, and Prefect's serializers
            prepare_training_session(config)
            pbg.serialize_parameters(pbg.validate_parameters({"config": config}))
        started = time.perf_counter()
        with _local_run_settings(server), interrupts.flow_call():
            result = pbg(config=config)
    print(
        f"trained: {result['checkpoint_path']} is at version {result['version']} "
        f"({time.perf_counter() - started:.1f} s)"
    )
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from flows.preflight import check_prefect_api, load_checked_config

    # Before the server, as for train.
    config = load_checked_config(args.config, args.param, training=False, filter_paths=args.filter_path or ())
    check_prefect_api(os.environ.get("PREFECT_API_URL"))
    with local_api() as server:
        from flows.evaluate import pbg_eval

        _quiet_run_failures(args)

        prestart_workers(config, training=False)

        filter_paths = (args.filter_path or list(config.edge_paths)) if args.filtered else None
        with _local_run_settings(server), interrupts.flow_call():
            metrics = pbg_eval(config=config, filter_paths=filter_paths)
    print("Stats: " + " , ".join(f"{k}: {v:.6g}" for k, v in metrics.items()))
    if args.json:
        print(json.dumps(metrics))
    return 0


def _quiet_run_failures(args: argparse.Namespace) -> None:
    """Prefect's failure lines and tracebacks off the console (the API keeps them), unless debugging."""
    if not debug_enabled(args.debug):
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
    Prefect's own routine lines stay off the terminal unless --verbose (flows/quiet.py).
    """
    quiet_console()
    if server is None:
        yield
        return
    server.wait_ready()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    # "View at <url>" would name a page of a server that serves no UI and is gone at the end.
    run_urls = logging.getLogger("prefect.flow_runs")
    no_urls = _DropMessages("View at ")
    run_urls.addFilter(no_urls)
    try:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield
    finally:
        run_urls.removeFilter(no_urls)


class _DropMessages(logging.Filter):
    """Drops records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _cmd_export(args: argparse.Namespace) -> int:
    pbg_layout = args.entities_output is not None or args.relation_types_output is not None
    per_type = args.format is not None or args.output is not None or args.entity_type is not None
    problem = None
    if pbg_layout and per_type:
        problem = "give either --entities-output/--relation-types-output or --format/--output, not both"
    elif pbg_layout and not (args.entities_output and args.relation_types_output):
        problem = "PBG's layout needs both --entities-output and --relation-types-output"
    elif per_type and not (args.format and args.output):
        problem = "per-type export needs both --format (tsv, npy, h5) and --output DIR"
    elif not (pbg_layout or per_type):
        problem = "give --entities-output F --relation-types-output F, or --format {tsv,npy,h5} --output DIR"
    if problem:
        print(f"pbg export: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    # Storage only, no Prefect (as for import): ~3.5 s and ~350 MB saved.
    from storage.config_loader import load_config
    from storage.exporting.exporter import export_embeddings, export_tsv

    config = load_config(args.config, list(args.param))
    started = time.perf_counter()
    if pbg_layout:
        report = export_tsv(config, args.entities_output, args.relation_types_output, args.version)
    else:
        report = export_embeddings(config, args.output, args.format, args.entity_type or None, args.version)
    print(
        f"exported version {report.version}: {report.entities_written:,} embeddings, "
        f"{report.relation_rows_written} relation parameter rows in {time.perf_counter() - started:.1f} s "
        f"-> {', '.join(report.outputs)}"
    )
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        print(
            f"pbg serve: error: PREFECT_API_URL is not set: pbg/{args.name} must live on a Prefect server that "
            "`prefect deployment run` can reach; start one (`prefect server start --host 127.0.0.1`, or "
            "deployments/local-up.sh) and export PREFECT_API_URL=http://127.0.0.1:4200/api",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.limit < 1:
        print(f"pbg serve: error: --limit {args.limit} is not allowed; give 1 or more", file=sys.stderr)
        return EXIT_USAGE
    from prefect.types.entrypoint import EntrypointType

    from flows.train import pbg

    parameters: dict[str, object] = {}
    if args.config_url:
        parameters["config_url"] = args.config_url
    if args.param:
        parameters["overrides"] = list(args.param)
    if args.retrain_keep_last is not None:
        if args.retrain_keep_last < 1:
            print(
                f"pbg serve: error: --retrain-keep-last {args.retrain_keep_last} is not allowed; give 1 or more",
                file=sys.stderr,
            )
            return EXIT_USAGE
        parameters["retrain"] = {"keep_last": args.retrain_keep_last, "init_from_previous": True}
    pbg.serve(
        name=args.name,
        cron=args.cron,
        parameters=parameters,
        limit=args.limit,
        entrypoint_type=EntrypointType.MODULE_PATH,
        pause_on_shutdown=False,
        description="PyTorch-BigGraph training (served by `pbg serve`)",
        tags=["pbg"],
    )
    return 0


COMMANDS = {
    "import": _cmd_import,
    "train": _cmd_train,
    "eval": _cmd_eval,
    "export": _cmd_export,
    "serve": _cmd_serve,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pbg`` console script."""
    interrupts.install()  # first: Ctrl-C and SIGTERM stop every command the same orderly way
    args = build_parser().parse_args(argv)
    if getattr(args, "verbose", False):
        os.environ["PBG_VERBOSE"] = "1"
    _prepare_prefect_env()
    # Engine and storage progress lines (per bucket, per import phase) are INFO.
    for name in ("pbg_core", "storage", "tasks"):
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        return COMMANDS[args.command](args)
    except Exception as exc:  # noqa: BLE001 - reported in one line (see flows.user_errors), not swallowed
        if interrupts.stop_signal_of(exc) is None:
            return report(args.command, exc, debug_enabled(args.debug))
        # An error on the way out of a stop the user asked for: report the stop (--debug: and it).
        if debug_enabled(args.debug):
            traceback.print_exception(exc)
        print(interrupts.interruption_report(args.command, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return interrupts.exit_code()
    except KeyboardInterrupt:
        # Where it stopped, what is committed, and the command line that resumes.
        print(interrupts.interruption_report(args.command, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return interrupts.exit_code()
    finally:
        # What a failed command opened ahead but never used: sessions, then spare workers.
        if "tasks.sessions" in sys.modules:
            sys.modules["tasks.sessions"].close_prepared_sessions()
        close_prestarted()


def run() -> None:
    """The ``pbg`` console script: :func:`main`, then exit without the interpreter's teardown.

    With torch, Prefect and pydantic loaded, tearing the interpreter down (collecting every
    module's objects) takes ~0.7 s of each command's end. By then everything that matters is
    done: the flow's results are printed, the local server has flushed and stopped, and the
    atexit handlers (run here first) have closed what they own.
    """
    code = main()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
