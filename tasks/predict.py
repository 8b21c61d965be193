"""The batch-scoring tasks of the ``pbg-predict`` flow (:mod:`flows.predict`): open a model, list the
query files, rank each file's queries into a part, publish the parts as one output.

Tasks pass handles and small records, never tables: :func:`open_model` keeps the loaded
:class:`storage.trained.Model` in this process (a :class:`tasks.runs.Registry`) and returns its
handle; :func:`predict_file` writes its file's answers to a Parquet part on local disk (the
run's staging directory, :func:`staging_dir`) and returns where, with its counts. Every step
may run again after a transient storage fault: a part is written under a temporary name and
renamed, so a retry replaces it whole; :func:`publish_predictions` publishes through
:func:`storage.trained.answer_files.table_output` (:mod:`storage.outputs`), so the output is the
old file or the complete new one, never part of one, and an existing output is refused
unless ``force``.

The output is what :meth:`storage.trained.Model.predict` returns for every query of every file
read in order (``query`` counts over all of them), as ``pbg predict --queries FILE... --output``
writes it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pbg_core.config import ConfigSchema
from pbg_core.errors import UsageError
from storage import layout, read_cache
from storage.edge_columns import Column
from storage.edge_lists.parse import Columns
from storage.errors import DataNotFound, OutputExistsError
from storage.fs import globs, reads
from storage.fs.atomic import local_write
from storage.outputs import check_distinct
from storage.trained import Model
from storage.trained.answer_files import estimated_bytes, read_rows, table_format, table_output
from storage.trained.arguments import default_relation
from storage.trained.name_index import UnknownEntityError
from tasks._policies import plain_task, run_logger, storage_task
from tasks.runs import Registry

FLOW_COLUMNS = {"lhs": "lhs_col=", "rhs": "rhs_col=", "rel": "rel_col="}  # the parameters giving the columns
WHAT = "prediction"  # the noun of the output's messages ("refusing to overwrite prediction output(s)")
NAME_BYTES = 64  # about the bytes of a row's names, for the output's size estimate
SHOWN_ROWS = 20  # rows of the output the artifact shows

_MODELS: Registry[Model] = Registry("model")


@dataclass(frozen=True)
class QuerySpec:
    """What a query file holds and what is asked of each query (the flow's parameters, checked).

    Attributes:
        target: ``tail`` ranks the tails of ``(head, relation, ?)``; ``head`` the heads of ``(?, relation, tail)``.
        lhs_col, rhs_col, rel_col: Columns of the head, the tail and the relation (0-based index, or
            a Parquet name); the known side's is required, the ranked side's, when given, is each
            query's true answer (ranked too).
        delimiter: Column separator of text files; None: tab if the first line has one, else a space.
        relation: Every query's relation when there is no ``rel_col``; None: the config's one relation
            (a config with several, or dynamic ones, is refused naming them).
        k: Entities per query.
        filtered: Leave out the known edges of ``filter_paths``, as ``pbg eval --filtered``.
        filter_paths: The edge paths whose edges are known; None: the config's ``edge_paths``.
    """

    target: Literal["tail", "head"] = "tail"
    lhs_col: Column | None = None
    rhs_col: Column | None = None
    rel_col: Column | None = None
    delimiter: str | None = None
    relation: str | None = None
    k: int = 10
    filtered: bool = False
    filter_paths: list[str] | None = None

    def check(self) -> None:
        """Refuse a combination that asks nothing answerable, naming the parameters.

        Raises:
            UsageError: no column of the known side, both ``relation`` and ``rel_col``, or
                ``filter_paths`` without ``filtered``.
        """
        known, column = ("rhs_col", self.rhs_col) if self.target == "head" else ("lhs_col", self.lhs_col)
        if column is None:
            side = "tail" if self.target == "head" else "head"
            raise UsageError(
                f"target {self.target!r} ranks the {self.target}s: give {known}, the column of each query's {side} "
                "(a 0-based index, or a Parquet column name)"
            )
        if self.relation is not None and self.rel_col is not None:
            raise UsageError("give relation (every query's) or rel_col (each query's), not both")
        if self.filter_paths is not None and not self.filtered:
            raise UsageError("filter_paths is given without filtered=true; pass both, or neither")

    def columns(self) -> Columns:
        """The columns a query file is read by."""
        return Columns(lhs=self.lhs_col, rhs=self.rhs_col, rel=self.rel_col, weight=None)


def get_model(handle: str) -> Model:
    """The model of ``handle`` (:func:`open_model`).

    Raises:
        LookupError: the handle belongs to no model open in this process.
    """
    return _MODELS.get(handle)


@storage_task(name="open-model", task_run_name="open the model")
def open_model(config: ConfigSchema, version: int | None) -> str:
    """Load ``version`` of the config's checkpoint (None: the latest committed; a retraining root:
    its promoted run), read-only; returns the model's handle.

    The version and the checkpoint directory are fixed here: every later task answers with this
    model, whatever is committed or promoted meanwhile.

    Raises:
        DataNotFound, IncompleteVersionError, ShapeError, NamesChangedError: see :meth:`storage.trained.Model.load`.
    """
    model = Model.load(config, version)
    run_logger().info("loaded version %d of %s", model.version, model.config.checkpoint_path)
    return _MODELS.add("model", model)


@plain_task(name="close-model", task_run_name="close the model")
def close_model(handle: str) -> None:
    """Forget the model of ``handle`` (idempotent)."""
    _MODELS.pop(handle)


@storage_task(name="list-query-files", task_run_name="list the query files")
def list_query_files(handle: str, queries: Sequence[str]) -> list[str]:
    """The files ``queries`` names, in order: a file as it is, a directory's (or S3 prefix's) files
    sorted, a glob pattern's matches sorted (:func:`storage.fs.globs.glob`); each file once.

    Raises:
        DataNotFound: an entry names nothing, or no file at all.
    """
    options = get_model(handle).config.storage_options_for_fs()
    files: list[str] = []
    for entry in queries:
        if globs.has_glob(entry):
            found = globs.glob(entry, "file", options)
        elif reads.isdir(entry, options):
            found = globs.glob(entry.rstrip("/") + "/*", "file", options)
        elif reads.exists(entry, options):
            found = [entry]
        else:
            raise DataNotFound(entry, "does not exist; give a query file, a directory (or S3 prefix) or a glob pattern")
        if not found:
            raise DataNotFound(entry, "holds no query file; give a query file, a directory of them or a glob pattern")
        files += [url for url in found if url not in files]
    run_logger().info("%d query file(s): %s", len(files), ", ".join(files))
    return files


@storage_task(name="check-output", task_run_name="check the output {output}")
def check_output(handle: str, output: str, query_files: Sequence[str], config_url: str | None, force: bool) -> None:
    """Refuse, before anything is ranked, an output that is an input or exists (unless ``force``), or whose
    suffix names a format or compression that is not written.

    Raises:
        UnwritableFormat: e.g. ``.zst`` or ``.parquet.gz`` (:func:`storage.trained.answer_files.table_format`).
        OutputsOverlap: the output is a query file, the config file, or a file of the model's directories.
        OutputExistsError: the output exists and not ``force``, or is a directory.
    """
    table_format(output)
    config = get_model(handle).config
    options = config.storage_options_for_fs()
    inputs = [("the config", config_url)] if config_url is not None else []
    inputs += [(f"the query file {url}", url) for url in query_files]
    dirs = [("checkpoint_path", config.checkpoint_path), ("entity_path", config.entity_path)]
    check_distinct([("output", output)], inputs, dirs, options, what=WHAT)
    if reads.isdir(output, options):
        raise OutputExistsError(output, f"is a directory, and the {WHAT} replaces files only: give the name of a file")
    if not force and reads.exists(output, options):
        raise OutputExistsError(
            output, f"refusing to overwrite {WHAT} output(s) {output}; give force=true to replace it"
        )


def part_file(staging: str, index: int) -> str:
    """The part of the ``index``-th query file in ``staging`` (:func:`staging_dir`)."""
    return os.path.join(staging, layout.prediction_part_file(index))


def staging_dir(run_id: str | None) -> str:
    """The local directory of a flow run's parts: ``{PBG_CACHE_DIR}/predict-{run id}`` (a fresh id outside a run)."""
    return os.path.join(read_cache.cache_dir(), layout.prediction_staging_dir(run_id or uuid.uuid4().hex))


def remove_staging(directory: str) -> None:
    """Remove a run's staging directory and its parts (none there: nothing to do)."""
    shutil.rmtree(directory, ignore_errors=True)


@storage_task(name="predict-file", task_run_name="predict {url}")
def predict_file(handle: str, url: str, spec: QuerySpec, part: str, first_query: int) -> dict[str, Any]:
    """Rank every query of ``url`` with the model of ``handle``; its answers go to the Parquet file ``part``.

    Args:
        handle: The model's handle (:func:`open_model`).
        url: A query file (TSV/CSV, ``.gz``/``.bz2``, Parquet; local or remote), read as ``pbg import``
            reads edge lists.
        spec: The columns and what is asked.
        part: A local path; written under a temporary name, then renamed (a retry replaces it).
        first_query: The ``query`` number of this file's first query (the queries of earlier files before it).

    Returns:
        ``file``, ``queries``, ``rows`` (of answers) and ``part``.

    Raises:
        BadDataError: a malformed line, a missing column, no rows (naming the file, and its line or Parquet row).
        UnknownNameError: an unknown name, or one of the wrong type for its side (naming the file and line, or Parquet row).
        UsageError: ``k`` above the ranked type's entity count, or no relation in dynamic mode.
    """
    model = get_model(handle)
    storage_options = model.config.storage_options_for_fs()
    rows = read_rows([url], spec.columns(), spec.delimiter, storage_options, rows="queries", labels=FLOW_COLUMNS)
    anchors, answers = (rows.rhs, rows.lhs) if spec.target == "head" else (rows.lhs, rows.rhs)
    assert anchors is not None  # QuerySpec.check: the known side's column is given
    relations = rows.rel or [
        default_relation(model.config.dynamic_relations, model.relations, spec.relation, "relation or rel_col")
    ] * len(anchors)
    options: dict[str, Any] = {"k": spec.k, "answers": answers, "filtered": spec.filtered}
    options["filter_paths"] = spec.filter_paths
    try:
        if spec.target == "head":
            table = model.predict(tails=anchors, relations=relations, **options)
        else:
            table = model.predict(heads=anchors, relations=relations, **options)
    except UnknownEntityError as err:
        raise rows.located(err) from err
    table = table.set_column(0, "query", pc.add(table.column("query"), pa.scalar(first_query, table.schema[0].type)))
    with local_write(part) as temporary:  # a retry replaces the part whole; an interrupted write leaves none
        pq.write_table(table, temporary)
    run_logger().info("%s: %d queries ranked, %d rows", url, len(anchors), table.num_rows)
    return {"file": url, "queries": len(anchors), "rows": table.num_rows, "part": part}


@storage_task(name="publish-predictions", task_run_name="publish {output}")
def publish_predictions(handle: str, parts: Sequence[dict[str, Any]], output: str, force: bool) -> dict[str, Any]:
    """Write the parts, in order, as one output file, published whole (format by suffix, as ``pbg predict --output``).

    Returns:
        The run's summary: ``output``, ``checkpoint`` (the directory the model was loaded from),
        ``version``, ``files``, ``queries``, ``rows`` and ``first_rows`` (the output's first rows).

    Raises:
        OutputExistsError: the output exists and not ``force``, or is a directory.
        NoSpaceForOutput: the output's disk has too little room.
    """
    model = get_model(handle)
    tables = [pq.read_table(part["part"]) for part in parts]
    table = pa.concat_tables(tables) if tables else pa.table({})
    size = estimated_bytes(table.num_rows, NAME_BYTES)
    options = model.config.storage_options_for_fs()
    try:
        with table_output(output, size, options, what=WHAT, replace=force) as write:
            write(table)
    except OutputExistsError as err:
        if err.problem.startswith("refusing to overwrite"):
            raise OutputExistsError(err.url, f"{err.problem}; give force=true to replace it") from err
        raise
    summary = {
        "output": output,
        "checkpoint": model.config.checkpoint_path,
        "version": model.version,
        "files": len(parts),
        "queries": sum(part["queries"] for part in parts),
        "rows": table.num_rows,
        "first_rows": table.slice(0, SHOWN_ROWS).to_pylist(),
    }
    run_logger().info(
        "published %d rows for %d queries of %d file(s), version %d of %s -> %s",
        summary["rows"],
        summary["queries"],
        summary["files"],
        summary["version"],
        summary["checkpoint"],
        output,
    )
    return summary


__all__ = [
    "QuerySpec",
    "check_output",
    "close_model",
    "get_model",
    "list_query_files",
    "open_model",
    "part_file",
    "predict_file",
    "publish_predictions",
    "remove_staging",
    "staging_dir",
]
