"""``pbg import``, ``pbg export`` and ``pbg serve``: the commands that run no flow here.

``import`` and ``export`` use storage only (no Prefect: importing it costs ~3.5 s and
~350 MB), after checking that every URL they use has a filesystem that loads here
(:func:`flows.cli.preflight.load_config_checked`). ``serve`` checks every option (``--cron`` by
Prefect's own schedule model), its config URL and the config's URLs, and that a Prefect API
answers at PREFECT_API_URL, before it serves anything.
A usage problem prints ``pbg <command>: error: ...`` and returns :data:`EXIT_USAGE`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefect import Flow
    from pydantic import ValidationError

EXIT_USAGE = 2
# The config's paths each command uses (their URLs are checked first: flows.cli.preflight.check_urls).
IMPORT_FIELDS = ("entity_path", "edge_paths")
EXPORT_FIELDS = ("entity_path", "checkpoint_path")
# The exporters' parameters as `pbg export` spells them, for their errors.
EXPORT_LABELS = {
    "entities_output": "--entities-output",
    "relation_types_output": "--relation-types-output",
    "output": "--output",
}
# What a served run reads (tasks.config.resolve_config refuses .py: it would be executed).
SERVED_CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
CRON_HELP = (
    "give 5 fields, minute hour day-of-month month day-of-week, in UTC: e.g. '0 3 * * *' "
    "(03:00 every day), '*/30 * * * *' (every 30 minutes), '0 4 * * 1-5' (04:00 Monday to Friday), or @daily"
)
SERVE_API_HINT = (
    "point PREFECT_API_URL at a running server (`prefect server start --host 127.0.0.1`, or "
    "deployments/local-up.sh, starts one)"
)


def cmd_import(args: argparse.Namespace) -> int:
    """``pbg import CONFIG INPUT...``: the edge lists into the config's entity and edge files."""
    from flows.cli.preflight import load_config_checked
    from flows.cli.progress_bar import import_progress
    from storage.importing.importer import import_edges
    from storage.importing.options import ImportOptions
    from storage.importing.progress import estimate_lines

    # The import's flags are spelled as ImportOptions' fields (flows/cli_parser.py); argparse checked each.
    options = ImportOptions.model_validate({name: getattr(args, name) for name in ImportOptions.model_fields})
    inputs = [(f"input {number}", path) for number, path in enumerate(args.inputs, start=1)]
    config = load_config_checked(args.config, args.param, inputs, IMPORT_FIELDS)
    with import_progress(estimate_lines(args.inputs, config.storage_options_for_fs())) as progress:
        report = import_edges(config, list(args.inputs), options, seed=config.seed, progress=progress)
    print(report)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``pbg export CONFIG ...``: a checkpoint's embeddings in PBG's two files or one file per type."""
    problem = _export_usage_problem(args)
    if problem:
        return usage_error("export", problem)
    from flows.cli.preflight import load_config_checked
    from storage.exporting.exporter import export_embeddings, export_tsv

    outputs = [
        (f"--{key.replace('_', '-')}", getattr(args, key))
        for key in ("entities_output", "relation_types_output", "output")
        if getattr(args, key) is not None
    ]
    config = load_config_checked(args.config, args.param, outputs, EXPORT_FIELDS)
    started = time.perf_counter()
    reads = [("the config", args.config)]
    if args.entities_output is not None:
        report = export_tsv(
            config, args.entities_output, args.relation_types_output, args.version, reads, EXPORT_LABELS
        )
    else:
        report = export_embeddings(
            config, args.output, args.format, args.entity_type or None, args.version, reads, EXPORT_LABELS
        )
    print(
        f"exported version {report.version}: {report.entities_written:,} embeddings, "
        f"{report.relation_rows_written} relation parameter rows in {time.perf_counter() - started:.1f} s "
        f"-> {', '.join(report.outputs)}"
    )
    return 0


def _export_usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the export options' combination, or None."""
    pbg_layout = args.entities_output is not None or args.relation_types_output is not None
    per_type = args.format is not None or args.output is not None or args.entity_type is not None
    if pbg_layout and per_type:
        return "give either --entities-output/--relation-types-output or --format/--output, not both"
    if pbg_layout and not (args.entities_output and args.relation_types_output):
        return "PBG's layout needs both --entities-output and --relation-types-output"
    if per_type and not (args.format and args.output):
        return "per-type export needs both --format (tsv, npy, h5) and --output DIR"
    if not (pbg_layout or per_type):
        return "give --entities-output F --relation-types-output F, or --format {tsv,npy,h5} --output DIR"
    return None


def cmd_serve(args: argparse.Namespace) -> int:
    """``pbg serve``: deployment pbg/<name> (pbg-retrain/<name> with ``--retrain-keep-last``) served from
    this process until stopped."""
    problem = _serve_usage_problem(args) or (args.config_url and config_url_problem(args.config_url, list(args.param)))
    if problem:
        return usage_error("serve", problem)
    from flows.cli.service_checks import check_prefect_api

    check_prefect_api(os.environ.get("PREFECT_API_URL"), otherwise=SERVE_API_HINT)
    from prefect.types.entrypoint import EntrypointType

    parameters: dict[str, object] = {}
    if args.config_url:
        parameters["config_url"] = args.config_url
    if args.param:
        parameters["overrides"] = list(args.param)
    served: Flow[..., Any]
    if args.retrain_keep_last is not None:  # scheduled retraining: the pbg-retrain flow
        from flows.retrain import pbg_retrain as served

        parameters["retrain"] = {"keep_last": args.retrain_keep_last, "init_from_previous": True}
        name, what = args.name or "retrain", "PyTorch-BigGraph scheduled retraining"
    else:
        from flows.train import pbg as served

        name, what = args.name or "train", "PyTorch-BigGraph training"
    served.serve(
        name=name,
        cron=args.cron,
        parameters=parameters,
        limit=args.limit,
        entrypoint_type=EntrypointType.MODULE_PATH,
        pause_on_shutdown=False,
        description=f"{what} (served by `pbg serve`)",
        tags=["pbg"],
    )
    return 0


def served_name(args: argparse.Namespace) -> str:
    """The deployment ``pbg serve`` files: ``pbg/<name>``, or ``pbg-retrain/<name>`` with ``--retrain-keep-last``."""
    if args.retrain_keep_last is not None:
        return f"pbg-retrain/{args.name or 'retrain'}"
    return f"pbg/{args.name or 'train'}"


def _serve_usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the serve options or environment (before Prefect is imported), or None."""
    if not os.environ.get("PREFECT_API_URL"):
        return (
            f"PREFECT_API_URL is not set: the deployment {served_name(args)} must live on a Prefect server that "
            "`prefect deployment run` can reach; start one (`prefect server start --host 127.0.0.1`, or "
            "deployments/local-up.sh) and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    if args.limit < 1:
        return f"--limit {args.limit} is not allowed; give 1 or more"
    if args.retrain_keep_last is not None and args.retrain_keep_last < 1:
        return f"--retrain-keep-last {args.retrain_keep_last} is not allowed; give 1 or more"
    if args.cron is not None:
        return cron_problem(args.cron)
    return None


def cron_problem(expression: str) -> str | None:
    """What is wrong with ``--cron EXPR``, or None: the schedule is validated as ``pbg.serve`` will build it.

    ``serve(cron=...)`` makes Prefect's ``CronSchedule``, whose validator (croniter, random and
    hashed fields refused) decides; building one here accepts exactly what Prefect accepts.
    """
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=expression)
    except ValidationError as err:
        return f"--cron {expression!r} is not a cron expression Prefect accepts ({_cron_reason(expression, err)}); {CRON_HELP}"
    return None


def _cron_reason(expression: str, err: ValidationError) -> str:
    """Prefect's reason; for "Invalid cron string" (which only repeats the expression), croniter's."""
    reason = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in err.errors())
    if not reason.startswith("Invalid cron string"):
        return reason
    try:  # the croniter Prefect validates with (Prefect vendors it): its error names what is wrong
        from prefect._vendor.croniter.croniter import croniter

        croniter(expression)  # type: ignore[no-untyped-call]  # vendored, unannotated
    except ImportError:
        return reason
    except Exception as detail:  # noqa: BLE001 - croniter's message is the reason shown, nothing is swallowed
        return str(detail)
    return reason


def config_url_problem(config_url: str, overrides: list[str]) -> str | None:
    """What is wrong with ``--config-url`` (read and validated with the ``-p`` overrides), or None.

    The served runs read it in this process, with this environment's credentials, so what
    fails here would fail every run: here it fails in one line, before the deployment exists.
    Refused: a ``.py`` or other unsupported file type, a URL scheme that cannot be used here
    (unknown, or its package or native library missing: also for the config's own URLs), a
    file that cannot be read, an invalid config.
    """
    from flows.cli.preflight import check_urls, config_urls
    from pbg_core.errors import PbgError
    from storage.config_loader import load_config

    where = f"--config-url {config_url!r}"
    suffix = os.path.splitext(config_url.split("?", 1)[0])[1].lower()
    if suffix not in SERVED_CONFIG_SUFFIXES:
        return (
            f"{where}: file type {suffix or '(none)'!r} is not served; allowed: {', '.join(SERVED_CONFIG_SUFFIXES)} "
            "(a .py config is executed, so only `pbg train` reads it)"
        )
    try:
        check_urls([("--config-url", config_url)])
    except PbgError as err:
        return str(err)
    try:
        check_urls(config_urls(load_config(config_url, overrides)))  # the served runs' URLs
    except PbgError as err:
        return f"--config-url: {err}"
    return None


def usage_error(command: str, problem: str) -> int:
    """Print ``pbg <command>: error: <problem>`` and return :data:`EXIT_USAGE`."""
    print(f"pbg {command}: error: {problem}", file=sys.stderr)
    return EXIT_USAGE
