"""The options of ``pbg predict``, ``pbg score`` and ``pbg similar``: a trained model's answers
(:mod:`flows.cli.answers`, :mod:`flows.cli.similar`).

They read a model as :meth:`storage.trained.Model.load` does (a config or a checkpoint
directory, ``--version``, ``-p`` overrides) and files of names as ``pbg import`` reads edge
lists (``-l``/``-r``/``--rel-col``/``--delimiter``: TSV/CSV, ``.gz``/``.bz2``, Parquet, local or
``s3://``; a ``.csv`` file is read with ``,`` unless ``--delimiter`` says otherwise), and write
``--output`` (TSV, CSV or Parquet by its suffix, text ``.gz`` or ``.bz2``) only when complete,
never over a file unless ``--force``. Combinations argparse cannot express (``--target``
without ``--queries``, ...) are checked by the commands, as usage errors too (exit status 2).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from flows.cli.option_types import add_debug_arg, add_param_arg, column, positive

if TYPE_CHECKING:
    from typing import TypeAlias

    # What add_subparsers returns: argparse names its class privately, and it is generic for type checkers only.
    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

PREDICT_HELP = (
    "the top-k tails of (head, relation, ?) or heads of (?, relation, tail) by a trained checkpoint, for one "
    "query or files of them (docs/predict.md)"
)
SCORE_HELP = (
    "a trained checkpoint's score of each (head, relation, tail) row of edge-list files, written beside the rows "
    "(docs/predict.md)"
)
SIMILAR_HELP = (
    "the k entities nearest to given ones by a trained checkpoint's own metric (its comparator: dot, cos, l2 or "
    "squared_l2, bias and global embedding included), exact by default (docs/predict.md)"
)
DEFAULT_K = 10
DELIMITER_HELP = "column separator (default: tab if the file's first line has one, else a space; ',' for .csv)"


def add_predict(sub: Subcommands) -> None:
    """``pbg predict CONFIG (--head NAME | --tail NAME | --queries FILE...) [options]``."""
    pre = sub.add_parser("predict", help=PREDICT_HELP, description=PREDICT_HELP)
    _add_model_args(pre)
    query = pre.add_argument_group("the query: one of --head, --tail, --queries")
    given = query.add_mutually_exclusive_group(required=True)
    given.add_argument("--head", metavar="NAME", help="rank the tails of (NAME, relation, ?)")
    given.add_argument("--tail", metavar="NAME", help="rank the heads of (?, relation, NAME)")
    given.add_argument(
        "--queries",
        nargs="+",
        metavar="FILE",
        help="files of queries, one per row (TSV/CSV, .gz/.bz2 too, or Parquet; local or s3://): the known side's "
        "column (-l for --target tail, -r for --target head), the relation's (--rel-col); the other side's column, "
        "if given, holds each query's true answer, whose rank is reported",
    )
    query.add_argument(
        "--relation",
        metavar="NAME",
        help="the relation (with --queries: of every row, instead of --rel-col); default: the config's relation "
        "if it has one only (not dynamic)",
    )
    query.add_argument(
        "--target",
        choices=("tail", "head"),
        default=None,
        help="with --queries: the side ranked (default tail: the rows hold heads)",
    )
    pre.add_argument("-k", type=positive, default=DEFAULT_K, help=f"entities per query (default {DEFAULT_K})")
    pre.add_argument(
        "--filtered",
        action="store_true",
        help="leave out the known edges of --filter-path, as pbg eval --filtered (a query may get fewer than k)",
    )
    pre.add_argument(
        "--filter-path",
        action="append",
        default=None,
        metavar="PATH",
        help="edge path whose edges count as known (repeatable; default: all of the config's edge_paths)",
    )
    pre.add_argument(
        "--json",
        action="store_true",
        help="print a single query's answers as one JSON object on stdout (not with --queries)",
    )
    _add_output_args(pre, "the rows (query, head, relation, tail, rank, score; with answers also theirs)")
    _add_column_args(pre, required=False)


def add_score(sub: Subcommands) -> None:
    """``pbg score CONFIG INPUT... -l COL -r COL [--rel-col COL | --relation NAME] [options]``."""
    sco = sub.add_parser("score", help=SCORE_HELP, description=SCORE_HELP)
    _add_model_args(sco)
    sco.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="edge lists to score: TSV/CSV (.gz/.bz2 too) or Parquet, local or s3://",
    )
    sco.add_argument(
        "--relation",
        metavar="NAME",
        help="the relation of every row, instead of --rel-col; default: the config's relation if it has one only "
        "(not dynamic)",
    )
    _add_output_args(
        sco, "head, relation, tail, score (dynamic relations: also reverse_score)", "; without it, TSV on stdout"
    )
    _add_column_args(sco, required=True)


def add_similar(sub: Subcommands) -> None:
    """``pbg similar CONFIG (--entity NAME [--entity NAME...] | --names FILE...) [options]``."""
    sim = sub.add_parser("similar", help=SIMILAR_HELP, description=SIMILAR_HELP)
    _add_model_args(sim)
    names = sim.add_argument_group("the entities: --entity or --names")
    given = names.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--entity", action="append", metavar="NAME", help="an entity whose neighbours are searched (repeatable)"
    )
    given.add_argument(
        "--names",
        nargs="+",
        metavar="FILE",
        help="files of entity names, one per row (TSV/CSV, .gz/.bz2 too, or Parquet; local or s3://), in column -l",
    )
    names.add_argument(
        "--entity-type",
        metavar="T",
        help="the names' entity type (default: each name's own; needed for a name that is an entity of several types)",
    )
    names.add_argument(
        "-l",
        "--lhs-col",
        type=column,
        metavar="COL",
        help="with --names: the names' column (default 0; a Parquet name)",
    )
    names.add_argument("--delimiter", default=None, help=DELIMITER_HELP)
    sim.add_argument(
        "-k",
        type=positive,
        default=DEFAULT_K,
        help=f"neighbours per entity (default {DEFAULT_K}), up to its type's entity count less one: an entity is "
        "never its own neighbour",
    )
    sim.add_argument(
        "--approximate",
        action="store_true",
        help="search a type of more than 100,000 entities through its faiss index (IVF-Flat, or HNSW-Flat where that "
        "is faster at recall@10 0.95; built once per checkpoint version and type, stored beside the version, its "
        "recall@10 against exact search measured and printed); smaller types are searched exactly anyway. Default: "
        "exact search",
    )
    sim.add_argument(
        "--json", action="store_true", help="print one entity's neighbours as one JSON object (a single --entity)"
    )
    _add_output_args(sim, "the rows (query, entity, entity_type, rank, neighbour, score)")


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    """CONFIG, ``--version``, ``-v``, ``--debug``, ``-p``: which model is loaded, as ``Model.load`` takes it."""
    parser.add_argument(
        "config",
        help="config file (PBG .py, .json or .yaml), or a checkpoint directory (it records its config; a "
        "retraining root: its promoted run)",
    )
    parser.add_argument(
        "--version",
        type=positive,
        default=None,
        metavar="N",
        help="checkpoint version (default: the latest committed one)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print on stderr what was loaded and read, and how long each step took",
    )
    add_debug_arg(parser)
    add_param_arg(parser)


def _add_output_args(parser: argparse.ArgumentParser, what: str, default: str = "") -> None:
    """``--output FILE`` (``default``: what is done without it) and ``--force``."""
    parser.add_argument(
        "--output",
        metavar="FILE",
        help=f"write {what} to FILE, local or s3://: Parquet (.parquet, .pq), CSV (.csv) or TSV (any other "
        f"name), .gz or .bz2 compressing text; written whole or not at all, a missing directory created{default}",
    )
    parser.add_argument("--force", action="store_true", help="replace --output if it exists (refused otherwise)")


def _add_column_args(parser: argparse.ArgumentParser, required: bool) -> None:
    """The columns of the files read, as ``pbg import`` takes them."""
    group = parser.add_argument_group("columns of the files read, as pbg import reads edge lists")
    group.add_argument(
        "-l",
        "--lhs-col",
        type=column,
        required=required,
        metavar="COL",
        help="column of the head: 0-based index, or a name (Parquet)",
    )
    group.add_argument("-r", "--rhs-col", type=column, required=required, metavar="COL", help="column of the tail")
    group.add_argument("--rel-col", type=column, default=None, metavar="COL", help="column of the relation name")
    group.add_argument("--delimiter", default=None, help=DELIMITER_HELP)


__all__ = ["add_predict", "add_score", "add_similar"]
