"""``pbg predict`` and ``pbg score``: a trained model's answers on the command line, thin over ``Model``.

Each command loads the model (:meth:`storage.trained.Model.load`: a config or a checkpoint
directory, ``--version``, ``-p`` overrides; read-only), reads its files of names
(:func:`storage.trained.answer_files.read_rows`, as ``pbg import`` reads edge lists), asks the
model, and shows the table it returns: on stdout (``predict``: a readable table, or ``--json``
for a single query; ``score``: TSV), or in ``--output`` (:func:`storage.trained.answer_files.table_output`:
published whole or not at all, an existing file refused unless ``--force``).

Every check runs before the output is staged: options argparse cannot combine are usage errors
(exit status 2); a bad name, file, version or checkpoint is one line naming it (exit status 1,
:mod:`flows.cli.user_errors`), a bad name of a file by its file and line. Nothing here imports
Prefect: a command's start-up is torch's import and the model's load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from flows.cli.commands import usage_error

if TYPE_CHECKING:
    import pyarrow as pa

    from pbg_core.errors import UnknownNameError
    from storage.trained import Model
    from storage.trained.answer_files import Rows
    from storage.trained.name_index import UnknownEntityError

PREDICTION, SCORING = "prediction", "scoring"  # the nouns of the output's messages
RANKED_NAME_BYTES = 32  # about the bytes of a ranked entity's name, for the output's size estimate
NUMERIC = ("query", "rank", "score", "answer_score", "answer_rank", "answer_partition_rank", "reverse_score")


class Steps:
    """With ``-v``, one line on stderr per step: what was done and how long it took."""

    def __init__(self, command: str, verbose: bool) -> None:
        self.command, self.verbose = command, verbose
        self.started = self.last = time.perf_counter()

    def note(self, text: str) -> None:
        """Print ``text`` and the time since the previous step, with ``-v``."""
        now = time.perf_counter()
        if self.verbose:
            print(f"pbg {self.command}: {text} ({now - self.last:.2f} s)", file=sys.stderr)
        self.last = now

    def total(self) -> float:
        """Seconds since the command started."""
        return time.perf_counter() - self.started


def cmd_predict(args: argparse.Namespace) -> int:
    """``pbg predict CONFIG (--head NAME | --tail NAME | --queries FILE...)``: each query's top-k entities."""
    problem = predict_usage_problem(args)
    if problem:
        return usage_error("predict", problem)
    steps = Steps("predict", args.verbose)
    from storage.trained.name_index import UnknownEntityError

    model = load_model(args, args.queries or [], steps)
    target = "head" if args.tail is not None or args.target == "head" else "tail"
    rows = _query_rows(args, model, target, steps)
    anchors = rows.rhs if target == "head" else rows.lhs
    answers = (rows.lhs if target == "head" else rows.rhs) if args.queries else None
    assert anchors is not None  # predict_usage_problem: the known side's column is given
    relations = rows.rel or [_default_relation(model, args.relation, bool(args.queries))] * len(anchors)
    size = estimated_size(anchors, relations, args.k)
    with output_writer(args, model, [("the query file", url) for url in args.queries or []], size, PREDICTION) as write:
        try:
            table = _predict(model, args, target, anchors, relations, answers)
        except UnknownEntityError as err:
            raise rows.located(err) if args.queries else single_name(err) from err
        steps.note(f"ranked {counted(len(anchors), 'query', 'queries')}")
        if write is not None:
            write(table)
    if args.json:
        print(json.dumps(_single_json(model, args, target, table)))
    elif args.output is not None:
        print(
            f"predicted {counted(len(anchors), 'query', 'queries')} ({counted(table.num_rows, 'row', 'rows')}) "
            f"with version {model.version} of "
            f"{model.config.checkpoint_path} in {steps.total():.1f} s -> {args.output}"
        )
    else:
        print(_heading(model, args, target, len(anchors), table))
        shown = ["rank", target, "score"] if not args.queries else table.column_names
        print(readable(table.select(shown)))
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    """``pbg score CONFIG INPUT... -l COL -r COL``: the model's score of each (head, relation, tail) row."""
    problem = score_usage_problem(args)
    if problem:
        return usage_error("score", problem)
    steps = Steps("score", args.verbose)
    from storage.edge_lists.parse import Columns
    from storage.trained.answer_files import read_rows, write_tsv
    from storage.trained.name_index import UnknownEntityError

    model = load_model(args, args.inputs, steps)
    columns = Columns(lhs=args.lhs_col, rhs=args.rhs_col, rel=args.rel_col, weight=None)
    rows = read_rows(args.inputs, columns, args.delimiter, model.config.storage_options_for_fs(), rows="edges to score")
    steps.note(f"read {counted(len(rows), 'row', 'rows')} of {', '.join(args.inputs)}")
    assert rows.lhs is not None and rows.rhs is not None  # -l and -r are required
    relations = rows.rel or [_default_relation(model, args.relation, True)] * len(rows)
    inputs = [("the input", url) for url in args.inputs]
    with output_writer(args, model, inputs, estimated_size(rows.lhs, relations, 1), SCORING) as write:
        try:
            table = model.score(rows.lhs, relations, rows.rhs)
        except UnknownEntityError as err:
            raise rows.located(err) from err
        steps.note(f"scored {counted(len(rows), 'edge', 'edges')}")
        if write is not None:
            write(table)
    if args.output is None:
        write_tsv(table, sys.stdout.buffer, "stdout")
        sys.stdout.flush()
    else:
        print(
            f"scored {counted(len(rows), 'edge', 'edges')} with version {model.version} of {model.config.checkpoint_path} in "
            f"{steps.total():.1f} s -> {args.output}"
        )
    return 0


def _predict(
    model: Model,
    args: argparse.Namespace,
    target: str,
    anchors: list[str],
    relations: list[str],
    answers: list[str] | None,
) -> pa.Table:
    """``model.predict`` of the queries, the heads ranked for ``target == "head"``, else the tails."""
    options: dict[str, Any] = {"k": args.k, "filtered": args.filtered, "filter_paths": args.filter_path}
    if target == "head":
        return model.predict(tails=anchors, relations=relations, answers=answers, **options)
    return model.predict(heads=anchors, relations=relations, answers=answers, **options)


def predict_usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``pbg predict``'s combination of options, or None."""
    file_only = {
        "--target": args.target,
        "-l/--lhs-col": args.lhs_col,
        "-r/--rhs-col": args.rhs_col,
        "--rel-col": args.rel_col,
        "--delimiter": args.delimiter,
    }
    given = [option for option, value in file_only.items() if value is not None]
    if not args.queries and given:
        return f"{', '.join(given)} go(es) with --queries FILE... (the columns of query files), not --head/--tail"
    if args.queries:
        side, option = ("-r/--rhs-col", args.rhs_col) if args.target == "head" else ("-l/--lhs-col", args.lhs_col)
        if option is None:
            ranked = "heads" if args.target == "head" else "tails"
            known = "tail" if args.target == "head" else "head"
            return (
                f"--queries ranks {ranked} (--target {args.target or 'tail'}): give {side}, the column of each "
                f"query's {known} (a 0-based index, or a Parquet column name)"
            )
        if args.json:
            return "--json prints a single query's answers (--head or --tail); write a file's with --output FILE"
    if args.filter_path and not args.filtered:
        return "--filter-path is given without --filtered; pass both, or neither"
    return _common_problem(args)


def score_usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``pbg score``'s combination of options, or None."""
    return _common_problem(args)


def _common_problem(args: argparse.Namespace) -> str | None:
    """The problems both commands share: the relation given twice, ``--force`` without an output."""
    if args.relation is not None and args.rel_col is not None:
        return "give --relation NAME (every row's) or --rel-col COL (each row's), not both"
    if args.force and args.output is None:
        return "--force replaces --output FILE, which is not given"
    return None


def load_model(args: argparse.Namespace, inputs: Sequence[str], steps: Steps) -> Model:
    """The model ``args`` names, once every URL the command uses has a filesystem that loads here."""
    from flows.cli.preflight import check_urls
    from storage.trained import Model
    from storage.trained.answer_files import table_format

    named = [("CONFIG", args.config), *(("input", url) for url in inputs)]
    named += [("--output", args.output)] if args.output is not None else []
    named += [("--filter-path", path) for path in getattr(args, "filter_path", None) or []]
    check_urls(named)
    if args.output is not None:
        table_format(args.output)  # a suffix that is not written (.zst, .parquet.gz) is refused before the load
    model = Model.load(args.config, args.version, list(args.param))
    steps.note(f"loaded version {model.version} of {model.config.checkpoint_path}")
    return model


def _query_rows(args: argparse.Namespace, model: Model, target: str, steps: Steps) -> Rows:
    """The queries: the files' rows, or the one of ``--head``/``--tail``."""
    from storage.edge_lists.parse import Columns
    from storage.trained.answer_files import Rows, read_rows

    if not args.queries:
        single = [args.head] if target == "tail" else [args.tail]
        return Rows(single if target == "tail" else None, single if target == "head" else None, None, [])
    columns = Columns(lhs=args.lhs_col, rhs=args.rhs_col, rel=args.rel_col, weight=None)
    rows = read_rows(args.queries, columns, args.delimiter, model.config.storage_options_for_fs(), rows="queries")
    steps.note(f"read {counted(len(rows), 'query', 'queries')} of {', '.join(args.queries)}")
    return rows


def _default_relation(model: Model, relation: str | None, files: bool) -> str:
    """``--relation``, or the one relation of a model that has one (``files``: rows are read)."""
    from storage.trained.arguments import default_relation

    how = "--relation NAME or --rel-col COL" if files else "--relation NAME"
    return default_relation(model.config.dynamic_relations, model.relations, relation, how)


def single_name(err: UnknownEntityError) -> UnknownNameError:
    """A single query's bad name: the model's line without list positions (there is one name of each kind)."""
    from pbg_core.errors import UnknownNameError

    return UnknownNameError(err.message(lambda problem: ""))


def estimated_size(anchors: Sequence[str], relations: Sequence[str], per_query: int) -> int:
    """About the bytes of an output of ``per_query`` rows per query."""
    from storage.trained.answer_files import estimated_bytes

    count = max(len(anchors), 1)
    name_bytes = (sum(map(len, anchors)) + sum(map(len, relations))) // count + RANKED_NAME_BYTES
    return estimated_bytes(len(anchors) * per_query, name_bytes)


@contextlib.contextmanager
def output_writer(
    args: argparse.Namespace, model: Model, inputs: Sequence[tuple[str, str]], size: int, what: str
) -> Iterator[Callable[[pa.Table], None] | None]:
    """The writer of ``--output`` (None without it), once it is known distinct from every input.

    Args:
        args: The command's options (``--output``, ``--force``, the config).
        model: The model loaded (its directories are inputs too).
        inputs: (what the command calls it, URL) of each file read.
        size: About the output's bytes.
        what: The noun of the messages (``prediction``).
    """
    if args.output is None:
        yield None
        return
    from storage.errors import OutputExistsError
    from storage.outputs import check_distinct
    from storage.trained.answer_files import table_output

    config, options = model.config, model.config.storage_options_for_fs()
    files = [("the config", args.config), *((f"{label} {url}", url) for label, url in inputs)]
    dirs = [("checkpoint_path", config.checkpoint_path), ("entity_path", config.entity_path)]
    check_distinct([("--output", args.output)], files, dirs, options, what=what)
    try:
        with table_output(args.output, size, options, what=what, replace=args.force) as write:
            yield write
    except OutputExistsError as err:
        if err.problem.startswith("refusing to overwrite"):
            raise OutputExistsError(err.url, f"{err.problem}; give --force to replace it") from err
        raise


def _heading(model: Model, args: argparse.Namespace, target: str, count: int, table: pa.Table) -> str:
    """The line above a readable table: what was asked of which version (a single ``--filtered`` query
    left with fewer than ``k`` entities says how many it shows)."""
    filtered = ", known edges left out" if args.filtered else ""
    source = f"version {model.version} of {model.config.checkpoint_path}"
    if args.queries:
        return f"{count:,} queries of {', '.join(args.queries)}: top {args.k} {target}s by {source}{filtered}"
    relation = _default_relation(model, args.relation, False)
    shape = f"(?, {relation}, {args.tail})" if target == "head" else f"({args.head}, {relation}, ?)"
    shown = table.num_rows - table.column("rank").null_count
    top = f"top {args.k} {target}s"
    if shown < args.k:  # only --filtered leaves fewer: k is at most the entity count
        top = f"top {shown} {target}s ({args.k} asked; the rest are known edges)"
    return f"{top} of {shape} by {source}{filtered}"


def _single_json(model: Model, args: argparse.Namespace, target: str, table: pa.Table) -> dict[str, Any]:
    """A single query's answers as ``--json`` prints them."""
    found = [row for row in table.to_pylist() if row["rank"] is not None]
    return {
        "checkpoint": model.config.checkpoint_path,
        "version": model.version,
        "head": args.head,
        "relation": table.column("relation")[0].as_py(),
        "tail": args.tail,
        "target": target,
        "k": args.k,
        "filtered": args.filtered,
        "answers": [{"rank": row["rank"], "entity": row[target], "score": row["score"]} for row in found],
    }


def counted(count: int, one: str, many: str) -> str:
    """``1 query``, ``1,000 queries``."""
    return f"{count:,} {one if count == 1 else many}"


def readable(table: pa.Table) -> str:
    """``table`` as aligned columns under a header (numbers right-aligned; null shown as ``-``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # pyarrow's text of a float32 is its shortest exact one (12.249147), not the double's digits.
    columns = [
        [name] + ["-" if value is None else value for value in pc.cast(column, pa.string()).to_pylist()]
        for name, column in zip(table.column_names, table.columns, strict=True)
    ]
    widths = [max(map(len, column)) for column in columns]
    lines = []
    for row in zip(*columns, strict=True):
        cells = [
            cell.rjust(width) if name in NUMERIC else cell.ljust(width)
            for cell, width, name in zip(row, widths, table.column_names, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


__all__ = [
    "Steps",
    "cmd_predict",
    "cmd_score",
    "counted",
    "estimated_size",
    "load_model",
    "output_writer",
    "predict_usage_problem",
    "readable",
    "score_usage_problem",
    "single_name",
]
