"""The ``pbg`` command line's argument parser: one function per subcommand's options.

Every option's help text is what ``pbg <command> --help`` prints; README.md and docs/
quote it, so a change here is a change for users.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from flows.cli.answer_parser import add_predict, add_score, add_similar
from flows.cli.option_types import OneLineParser, add_debug_arg, add_param_arg, column, positive, version_choice
from flows.cli.user_errors import DEBUG_VARIABLE

if TYPE_CHECKING:
    from typing import TypeAlias

    # What add_subparsers returns: argparse names its class privately, and it is generic for type checkers only.
    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser: argparse.ArgumentParser = OneLineParser(
        prog="pbg",
        description="PyTorch-BigGraph training as a Prefect pipeline.",
        epilog=f"A failure ends with status 1 (2 for a bad option) and one line naming the file, line or field, "
        f"the bad value and what is allowed; --debug (every subcommand) or {DEBUG_VARIABLE}=1 adds the traceback.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_import(sub)
    train = sub.add_parser("train", help="run the `pbg` training flow (resumes from the last committed version)")
    _add_config_args(train)
    _add_retrain(sub)
    _add_tune(sub)
    _add_eval(sub)
    _add_export(sub)
    add_predict(sub)
    add_score(sub)
    add_similar(sub)
    _add_serve(sub)
    return parser


def _add_retrain(sub: Subcommands) -> None:
    """``pbg retrain``: one option per field of the ``retrain`` parameter, its help the field's description."""
    from storage.retraining.options import IncomingOptions, RetrainOptions

    def described(model: type[RetrainOptions] | type[IncomingOptions], field: str, extra: str = "") -> str:
        return (model.model_fields[field].description or "") + extra

    ret = sub.add_parser(
        "retrain",
        help="run the `pbg-retrain` flow: a new run directory under the config's checkpoint_path (the root), "
        "grown from the promoted run, trained, judged by the gate and promoted (docs/retraining.md)",
    )
    _add_config_args(ret)
    r, i = RetrainOptions, IncomingOptions
    ret.add_argument(
        "--keep-last", type=positive, default=None, metavar="K", help=described(r, "keep_last", " (default 3)")
    )
    ret.add_argument(
        "--no-init-from-previous",
        dest="init_from_previous",
        action="store_false",
        help="start from the config's init_path, not from the newest earlier run ("
        + described(r, "init_from_previous")
        + ")",
    )
    ret.add_argument("--epochs", type=positive, default=None, metavar="N", help=described(r, "epochs"))
    ret.add_argument("--on-no-new-data", choices=("skip", "fail"), default=None, help=described(r, "on_no_new_data"))
    ret.add_argument("--min-mrr", type=float, default=None, metavar="X", help=described(r, "min_mrr"))
    ret.add_argument("--max-mrr-drop", type=float, default=None, metavar="X", help=described(r, "max_mrr_drop"))
    inbox = ret.add_argument_group(
        "new edge lists (retrain.incoming: give --incoming and --edges-dir to import what arrived before each run)"
    )
    inbox.add_argument("--incoming", dest="inputs", default=None, metavar="PATTERN", help=described(i, "inputs"))
    inbox.add_argument("--edges-dir", default=None, metavar="DIR", help=described(i, "edges_dir"))
    inbox.add_argument("-l", "--lhs-col", type=column, default=None, help=described(i, "lhs_col", " (default 0)"))
    inbox.add_argument("-r", "--rhs-col", type=column, default=None, help=described(i, "rhs_col", " (default 1)"))
    inbox.add_argument("--rel-col", type=column, default=None, help=described(i, "rel_col"))
    inbox.add_argument("--weight-col", type=column, default=None, help=described(i, "weight_col"))
    inbox.add_argument("--delimiter", default=None, help=described(i, "delimiter"))
    inbox.add_argument("--entity-min-count", type=positive, default=None, help=described(i, "entity_min_count"))
    inbox.add_argument("--skip-bad-lines", action="store_true", default=None, help=described(i, "skip_bad_lines"))
    inbox.add_argument(
        "--unknown-relations", choices=("skip", "error"), default=None, help=described(i, "unknown_relations")
    )
    inbox.add_argument(
        "--holdout-fraction",
        type=float,
        default=None,
        metavar="F",
        help=described(i, "holdout_fraction", " (default 0.05)"),
    )


def _add_tune(sub: Subcommands) -> None:
    """``pbg tune``: CONFIG, -v, --debug and -p as for ``pbg train``, and the study's options."""
    tune = sub.add_parser(
        "tune",
        help="run the `pbg-tune` flow: an Optuna study over the config's fields, each trial a `pbg` run in its "
        "own checkpoint directory (here, or one per worker of a Dask cluster), pruned on validation; a rerun "
        "resumes it (docs/tuning.md)",
    )
    _add_config_args(tune)
    tune.add_argument(
        "--space",
        required=True,
        metavar="SPACE",
        help="search-space file (.yaml, .yml or .json): the fields to tune and their ranges, the metric, pruner "
        "and sampler (docs/tuning.md, 'Search space'); checked before any trial",
    )
    tune.add_argument(
        "--trials",
        type=positive,
        required=True,
        metavar="N",
        help="finished trials the study should have (complete, pruned or failed; not interrupted ones): a rerun "
        "of the same command resumes the study up to N",
    )
    tune.add_argument(
        "--parallel",
        type=positive,
        default=1,
        metavar="P",
        help="trials at once at most (default 1); also bounded by the cores and the memory available, each "
        "trial's workers the cores divided among them (with --dask-address: by the cluster's workers)",
    )
    tune.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop asking for new trials after S seconds (running trials finish; a rerun goes on)",
    )
    tune.add_argument(
        "--study-dir",
        default=None,
        metavar="DIR",
        help="the study's local directory: study.db, space.json, trials/, best_config.json, best_trial.json "
        "(default: <checkpoint_path>/tune-<study>)",
    )
    tune.add_argument(
        "--dask-address",
        default=None,
        metavar="ADDRESS",
        help="train the trials on the workers of this Dask scheduler (tcp://host:8786, or tls:// with Dask's TLS "
        "settings), one trial per worker; checkpoint_path must be an s3:// URL or shared_paths true: the trials "
        "write under <checkpoint_path>/tune-<study>/trials (docs/tuning.md, 'Trials on a Dask cluster')",
    )


def _add_import(sub: Subcommands) -> None:
    imp = sub.add_parser(
        "import", help="convert edge lists (TSV/CSV, Parquet) into the config's entity_path and edge_paths"
    )
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
        type=column,
        required=True,
        help="column of the source entity: 0-based index, or a name (Parquet)",
    )
    imp.add_argument("-r", "--rhs-col", type=column, required=True, help="column of the target entity")
    imp.add_argument("--rel-col", type=column, default=None, help="column of the relation name (default: relation 0)")
    imp.add_argument("--weight-col", type=column, default=None, help="column of a float edge weight")
    imp.add_argument(
        "--force",
        action="store_true",
        help="import even if the inputs' content and the options match the last import; write inputs that "
        "share an edge path into it together; let --append replace an earlier generation's edge path",
    )
    imp.add_argument(
        "--append",
        action="store_true",
        help="add to the import in entity_path: names imported before keep their partition and offset, new "
        "names go to the partitions' ends, the inputs go to the config's edge_paths (give new ones: an "
        "earlier generation's are refused); "
        "the same append twice imports once",
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
    imp.add_argument("--relation-type-min-count", type=positive, default=1, help="drop rarer relation types")
    imp.add_argument("--entity-min-count", type=positive, default=1, help="drop rarer entities (and their edges)")
    imp.add_argument(
        "--delimiter",
        default=None,
        help="column separator (default: tab if the file's first line has one, else a space)",
    )


def _add_eval(sub: Subcommands) -> None:
    ev = sub.add_parser("eval", help="rank the config's edge paths against the latest (or a chosen) checkpoint version")
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
    ev.add_argument(
        "--version",
        type=version_choice,
        default=None,
        metavar="N|best",
        help="checkpoint version to rank (default: the committed one); best: the one best.json names "
        "(the best validated version, config section validation)",
    )
    sampled = ev.add_argument_group(
        "sampled evaluation (for graphs whose full ranking is out of reach; its MRR is higher than "
        "full ranking's and not comparable with it)"
    )
    sampled.add_argument(
        "--sample-edges",
        type=positive,
        default=None,
        metavar="N",
        help="rank a seeded uniform sample of N edges (without replacement, across every bucket of the "
        "edge paths; more than there are: all of them)",
    )
    sampled.add_argument(
        "--candidates",
        type=positive,
        default=None,
        metavar="K",
        help="rank each edge's lhs and rhs against K distinct entities drawn uniformly from the entity type's "
        "partition (shared by a chunk of up to K edges) instead of the config's negatives; 1 to the smallest "
        "ranked partition's entity count. The edge's own entity never counts; with --filtered, neither "
        "does a candidate forming a known edge (all_negs is not needed)",
    )
    sampled.add_argument(
        "--sample-seed",
        type=int,
        default=None,
        metavar="S",
        help="seed of the edge sample and the candidates (default: the config's seed, 0 if it has none); "
        "the same seed and workers give the same edges, candidates and metrics",
    )


def _add_export(sub: Subcommands) -> None:
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
    exp.add_argument(
        "--version",
        type=version_choice,
        default=None,
        metavar="N|best",
        help="checkpoint version (default: the committed one); best: the one best.json names (the best "
        "validated version, config section validation)",
    )


def _add_serve(sub: Subcommands) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the `pbg` flow as deployment pbg/<name> (with --retrain-keep-last: the `pbg-retrain` flow "
        "as pbg-retrain/<name>) from this process (no work pool or worker); needs a Prefect server in PREFECT_API_URL",
    )
    add_debug_arg(serve)
    serve.add_argument(
        "--name",
        default=None,
        help="deployment name (default: train, i.e. pbg/train; with --retrain-keep-last: retrain, i.e. pbg-retrain/retrain)",
    )
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
    serve.add_argument(
        "--cron",
        default=None,
        help="retraining schedule: a cron expression in UTC, 5 fields (0 3 * * *: 03:00 daily), "
        "checked as Prefect checks it (default: none)",
    )
    serve.add_argument(
        "--retrain-keep-last",
        type=int,
        default=None,
        metavar="K",
        help="serve the `pbg-retrain` flow instead, its default `retrain` parameter keeping the last K runs: each "
        "run trains into its own directory under checkpoint_path, initialised from the previous run",
    )
    serve.add_argument(
        "--limit",
        type=int,
        default=1,
        help="flow runs at once in this process (default 1: two runs must not train one checkpoint)",
    )


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="config file: PBG .py (get_torchbiggraph_config), .json or .yaml")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print Prefect's routine lines (every task's 'Finished in state Completed()', ...)",
    )
    add_debug_arg(parser)
    add_param_arg(parser)
