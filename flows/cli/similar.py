"""``pbg similar``: the entities nearest to given ones by a trained model's own metric, thin over ``Model.similar``.

The command loads the model as ``pbg predict`` does (:func:`flows.cli.answers.load_model`: a
config or a checkpoint directory, ``--version``, ``-p``; read-only), takes the names from
``--entity`` or from files (``--names``, column ``-l``, read as ``pbg import`` reads edge lists),
asks :meth:`storage.trained.Model.similar`, and shows the table it returns: readable on stdout,
``--json`` for one entity, or in ``--output`` (published whole or not at all, an existing file
refused unless ``--force``). Exact by default; ``--approximate`` searches a type of more than
``FLAT_MAX_ROWS`` entities through its faiss index, and says on stderr how each type was searched:
the index's kind (IVF-Flat or HNSW-Flat), search width (``nprobe`` or ``efSearch``) and recall@10
against exact search, measured when it was built.

Every check runs before the output is staged; a bad name, file, version or checkpoint is one line
naming it (exit status 1), a name of a file by its file and line; options that do not go together
are usage errors (exit status 2). Nothing here imports Prefect.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from flows.cli.answers import Steps, counted, estimated_size, load_model, output_writer, readable
from flows.cli.commands import usage_error

if TYPE_CHECKING:
    import pyarrow as pa

    from pbg_core.errors import PbgError
    from storage.trained import Model
    from storage.trained.answer_files import Rows
    from storage.trained.name_index import UnknownEntityError
    from storage.trained.similar_names import AmbiguousNameError

SIMILARITY = "similarity"  # the noun of the output's messages
NAMES_COLUMN = 0  # -l's default: a file of names has them in its first column


def cmd_similar(args: argparse.Namespace) -> int:
    """``pbg similar CONFIG (--entity NAME... | --names FILE...)``: each entity's ``k`` nearest entities."""
    problem = similar_usage_problem(args)
    if problem:
        return usage_error("similar", problem)
    steps = Steps("similar", args.verbose)
    from storage.trained.name_index import UnknownEntityError
    from storage.trained.similar_names import AmbiguousNameError

    model = load_model(args, args.names or [], steps)
    names, rows = _names(args, model, steps)
    files = [("the names file", url) for url in args.names or []]
    with output_writer(args, model, files, estimated_size(names, [], args.k), SIMILARITY) as write, _build_lines():
        try:
            table = model.similar(names, k=args.k, entity_type=args.entity_type, approximate=args.approximate)
        except (UnknownEntityError, AmbiguousNameError) as err:
            raise _placed(err, rows) from err
        steps.note(f"searched the neighbours of {counted(len(names), 'entity', 'entities')}")
        if write is not None:
            write(table)
    searches = _searches(model, table) if args.approximate else {}
    for _, line in searches.values():
        print(f"pbg similar: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(_single_json(model, args, table, searches)))
    elif args.output is not None:
        print(
            f"searched the {args.k} nearest of {counted(len(names), 'entity', 'entities')} "
            f"({counted(table.num_rows, 'row', 'rows')}) with version {model.version} of "
            f"{model.config.checkpoint_path} in {steps.total():.1f} s -> {args.output}"
        )
    else:
        print(_heading(model, args, names, table, searches))
        print(readable(table.select(["rank", "neighbour", "score"] if len(names) == 1 else table.column_names)))
    return 0


@contextlib.contextmanager
def _build_lines() -> Iterator[None]:
    """Print an index build's progress lines on stderr while it runs (a build of a 1M-entity type takes
    minutes): the index module's INFO lines, which no handler prints otherwise."""
    logger = logging.getLogger("storage.trained.similarity_index")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pbg similar: %(message)s"))
    handler.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def similar_usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``pbg similar``'s combination of options, or None."""
    file_only = {"-l/--lhs-col": args.lhs_col, "--delimiter": args.delimiter}
    given = [option for option, value in file_only.items() if value is not None]
    if not args.names and given:
        return f"{', '.join(given)} go(es) with --names FILE... (the column of the names), not --entity"
    if args.json and (args.names or len(args.entity) > 1):
        return "--json prints one entity's neighbours (a single --entity); write several with --output FILE"
    if args.force and args.output is None:
        return "--force replaces --output FILE, which is not given"
    return None


def _names(args: argparse.Namespace, model: Model, steps: Steps) -> tuple[list[str], Rows | None]:
    """The names searched: ``--entity``'s, or the files' (with their rows, to place a bad name)."""
    if not args.names:
        return list(args.entity), None
    from storage.edge_lists.parse import Columns
    from storage.trained.answer_files import read_rows

    column = NAMES_COLUMN if args.lhs_col is None else args.lhs_col
    rows = read_rows(
        args.names,
        Columns(lhs=column, rhs=None, rel=None, weight=None),
        args.delimiter,
        model.config.storage_options_for_fs(),
        rows="names",
    )
    steps.note(f"read {counted(len(rows), 'name', 'names')} of {', '.join(args.names)}")
    assert rows.lhs is not None  # the column was given
    return rows.lhs, rows


def _placed(err: UnknownEntityError | AmbiguousNameError, rows: Rows | None) -> PbgError:
    """``err``'s one line, a bad name placed by file and line (``--names``), or by itself (``--entity``)."""
    from pbg_core.errors import UnknownNameError, UsageError
    from storage.trained.name_index import UnknownEntityError

    def where(problem: Any) -> str:
        return rows.where(problem.position) if rows is not None and problem.position is not None else ""

    text = err.message(where)
    return UnknownNameError(text) if isinstance(err, UnknownEntityError) else UsageError(text)


def _searches(model: Model, table: pa.Table) -> dict[str, tuple[bool, str]]:
    """Per entity type searched, how ``--approximate`` searched it: whether through its index, and the line
    saying how (the index's kind, search width and recall, or that it was searched exactly)."""
    from storage.trained.similarity_index import FLAT_MAX_ROWS

    lines = {}
    for entity in dict.fromkeys(table.column("entity_type").to_pylist()):
        index = model.similarity_index(entity)  # the one the search opened: loaded or built once
        lines[entity] = (
            (True, index.describe())
            if index is not None
            else (
                False,
                f"entity type {entity!r} searched exactly: an index is built only for more than {FLAT_MAX_ROWS:,} "
                "entities",
            )
        )
    return lines


def _heading(
    model: Model, args: argparse.Namespace, names: list[str], table: pa.Table, searches: dict[str, tuple[bool, str]]
) -> str:
    """The line above a readable table: what was asked of which version, and how it was searched
    (``approximate`` only for the types :func:`_searches` found searched through an index)."""
    indexed = [entity for entity, (through_index, _) in searches.items() if through_index]
    how = "exact"
    if indexed:
        how = "approximate" if len(indexed) == len(searches) else f"approximate for {', '.join(indexed)}, else exact"
    source = f"version {model.version} of {model.config.checkpoint_path} ({how})"
    if len(names) != 1:
        where = ", ".join(args.names) if args.names else "--entity"
        return f"{len(names):,} entities of {where}: the {args.k} nearest of each by {source}"
    kind = table.column("entity_type")[0].as_py() if table.num_rows else args.entity_type
    return f"the {args.k} entities nearest to {names[0]} ({kind}) by {source}"


def _single_json(
    model: Model, args: argparse.Namespace, table: pa.Table, searches: dict[str, tuple[bool, str]]
) -> dict[str, Any]:
    """One entity's neighbours as ``--json`` prints them."""
    entity_type = table.column("entity_type")[0].as_py() if table.num_rows else args.entity_type
    return {
        "checkpoint": model.config.checkpoint_path,
        "version": model.version,
        "entity": args.entity[0],
        "entity_type": entity_type,
        "k": args.k,
        "approximate": args.approximate,
        "search": searches.get(entity_type, (False, "exact"))[1],
        "neighbours": [
            {"rank": row["rank"], "entity": row["neighbour"], "score": row["score"]}
            for row in table.to_pylist()
            if row["rank"] is not None
        ],
    }


__all__ = ["cmd_similar", "similar_usage_problem"]
