"""The ``pbg-predict`` flow: batch scoring, the top-k entities of every query of some files, in one output.

A run, each step a task retried on a transient storage fault (:mod:`tasks.predict`):

1. **resolves the config** (inline ``config`` or ``config_url``, then ``overrides``);
2. **opens the model**: the checkpoint version asked for (default: the latest committed; a
   retraining root: its promoted run), read-only; the version and directory are fixed for the
   whole run, whatever is committed or promoted meanwhile;
3. **lists the query files** ``queries`` names (files, directories or S3 prefixes, glob
   patterns), and checks the output is none of the inputs, does not exist (unless ``force``) and
   has a suffix that is written (not ``.zst``, ...) before anything is ranked;
4. **predicts each file** into a Parquet part under ``{PBG_CACHE_DIR}/predict-{flow run id}``;
5. **publishes** the parts as one output (TSV, CSV, ``.gz``/``.bz2`` or Parquet by suffix; local or
   s3://): written whole under a temporary name, then renamed or uploaded in one step, so a
   reader never sees half of it; a failure or Ctrl-C leaves the output as it was;
6. posts a **table artifact**: the first rows, the counts, the checkpoint version and the output.

The output is :meth:`storage.trained.Model.predict`'s table over every query of the files, in
order (``query`` counts over all of them), as ``pbg predict --queries FILE... --output`` writes it.
The deployment ``pbg-predict/predict`` runs it after each promoted retraining (docs/deployments.md).
The query files' columns are flat parameters, as ``pbg-import``'s (:mod:`flows.importing`).
"""

# No `from __future__ import annotations`: Prefect resolves parameter annotations at run time.
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from prefect import flow
from prefect.runtime import flow_run
from pydantic import Field

from flows.importing import inputs_label
from flows.prefect_host.interrupts import cancel_on_interrupt
from flows.prefect_host.run_logs import forward_engine_logs
from flows.run_names import run_name
from pbg_core.config import ConfigSchema
from tasks.artifacts import publish_predictions_table
from tasks.config import resolve_config
from tasks.predict import (
    QuerySpec,
    check_output,
    close_model,
    list_query_files,
    open_model,
    part_file,
    predict_file,
    publish_predictions,
    remove_staging,
    staging_dir,
)

Column = int | str


def _queries_and_output(parameters: Mapping[str, Any]) -> str:
    """``<queries> -> <output>``: what a prediction run's name says after its subject."""
    queries = parameters.get("queries") or []
    listed = [queries] if isinstance(queries, str) else [str(q) for q in queries]
    return f"{inputs_label(listed, 50)} -> {parameters.get('output')}"


@flow(name="pbg-predict", flow_run_name=run_name("predict", _queries_and_output))
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg_predict(
    queries: str | list[str],
    output: str,
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
    target: Literal["tail", "head"] = "tail",
    lhs_col: Column | None = None,
    rhs_col: Column | None = None,
    rel_col: Column | None = None,
    delimiter: str | None = None,
    relation: str | None = None,
    k: Annotated[int, Field(ge=1)] = 10,
    filtered: bool = False,
    filter_paths: list[str] | None = None,
    version: Annotated[int, Field(ge=1)] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """The top-k entities of every query of ``queries`` by a trained model, published as one file ``output``.

    Args:
        queries: Query files (TSV/CSV, .gz, Parquet; local or s3://): a file, a directory or S3
            prefix (its files), a glob pattern, or a list of them.
        output: The file to write (.tsv, .csv, .gz, .bz2, .parquet; local or s3://), published whole.
        config: The config, inline (or give `config_url`).
        config_url: A JSON or YAML config file; its checkpoint_path may be a retraining root (its promoted run).
        overrides: PBG-style `key=value` overrides (e.g. `checkpoint_path=...`).
        target: "tail" ranks the tails of (head, relation, ?); "head" the heads of (?, relation, tail).
        lhs_col: Column of each query's head: 0-based index, or a name for Parquet (needed for target tail).
        rhs_col: Column of each query's tail (needed for target head); on the ranked side, the true answer, ranked too.
        rel_col: Column of each query's relation name (default: `relation`, else the config's one relation).
        delimiter: Column separator of text files (default: tab if the first line has one, else space).
        relation: Every query's relation when there is no `rel_col`.
        k: Entities per query, at most the ranked type's entity count.
        filtered: Leave out the known edges of `filter_paths` (as `pbg eval --filtered`): a query may get fewer than k.
        filter_paths: Edge paths whose edges are known (default: the config's edge_paths); needs `filtered`.
        version: The checkpoint version to load (default: the latest committed).
        force: Replace `output` if it exists (refused otherwise, before anything is ranked).

    Returns:
        ``output``, ``checkpoint`` (the directory loaded), ``version``, ``files``, ``queries``,
        ``rows`` and ``first_rows``.
    """
    forward_engine_logs()
    spec = QuerySpec(target, lhs_col, rhs_col, rel_col, delimiter, relation, k, filtered, filter_paths)
    spec.check()  # a query nothing can answer stops here, before the model is read
    resolved = resolve_config(config, config_url, overrides or [])
    staging = staging_dir(str(flow_run.id) if flow_run.id else None)
    model = open_model(resolved, version)  # version and directory fixed for the run
    try:
        files = list_query_files(model, [queries] if isinstance(queries, str) else list(queries))
        check_output(model, output, files, config_url, force)
        parts = _predict_files(model, files, spec, staging)
        summary = publish_predictions(model, parts, output, force)
    finally:
        close_model(model)
        remove_staging(staging)
    publish_predictions_table(output, summary["first_rows"], _description(summary))
    return summary


def _predict_files(model: str, files: list[str], spec: QuerySpec, staging: str) -> list[dict[str, Any]]:
    """Each file's answers in its own part under ``staging``, its queries numbered after the earlier files'."""
    parts: list[dict[str, Any]] = []
    for index, url in enumerate(files):
        first = sum(done["queries"] for done in parts)
        parts.append(predict_file(model, url, spec, part_file(staging, index), first))
    return parts


def _description(summary: dict[str, Any]) -> str:
    """The artifact's description: counts, the checkpoint version used, the output."""
    return (
        f"{summary['queries']:,} queries of {summary['files']} file(s), {summary['rows']:,} rows; "
        f"version {summary['version']} of `{summary['checkpoint']}` -> `{summary['output']}`"
        f" (first {len(summary['first_rows'])} rows shown)"
    )
