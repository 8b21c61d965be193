"""The ``pbg-import`` flow: ``pbg import`` as a Prefect flow (a deployment step before training).

Same options as the command line; a progress artifact follows the two passes, and the
import report (counts of edges read, written and skipped by reason) is the flow's result
and its log. Parameters are data: a config object or a JSON/YAML ``config_url``.
"""

# No `from __future__ import annotations`: Prefect resolves parameter annotations at run time.
from typing import Annotated, Any, Literal

from prefect import flow, get_run_logger
from pydantic import Field

from pbg_core.config import ConfigSchema
from tasks.config import resolve_config
from tasks.convert import import_edges_task
from tasks.run_logs import forward_engine_logs

Column = int | str


@flow(name="pbg-import", flow_run_name="import {inputs}")
def pbg_import(
    inputs: list[str],
    lhs_col: Column,
    rhs_col: Column,
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
    rel_col: Column | None = None,
    weight_col: Column | None = None,
    delimiter: str | None = None,
    entity_min_count: Annotated[int, Field(ge=1)] = 1,
    relation_type_min_count: Annotated[int, Field(ge=1)] = 1,
    skip_bad_lines: bool = False,
    unknown_relations: Literal["skip", "error"] = "skip",
    force: bool = False,
) -> dict[str, Any]:
    """Convert edge lists (TSV/CSV, .gz, Parquet; local or s3://) into the config's entity and edge files.

    Args:
        inputs: One edge list per edge path of the config.
        lhs_col: Column of the source entity: 0-based index, or a name for Parquet.
        rhs_col: Column of the target entity.
        config: The config, inline (or give `config_url`).
        config_url: A JSON or YAML config file.
        overrides: PBG-style `key=value` overrides.
        rel_col: Column of the relation name (default: every edge has relation 0).
        weight_col: Column of a float edge weight.
        delimiter: Column separator of text inputs (default: tab if the first line has one, else space).
        entity_min_count: Drop entities seen fewer times.
        relation_type_min_count: Dynamic relations: drop relation types seen fewer times.
        skip_bad_lines: Skip and count malformed lines (listing the first ones) instead of failing.
        unknown_relations: A relation name not in the config: "skip" the edge and count it (as
            PBG), or "error": the line is malformed (see `skip_bad_lines`).
        force: Import even if the inputs' content and the options match the last import.
    """
    forward_engine_logs()
    resolved = resolve_config(config, config_url, overrides or [])
    options = dict(
        lhs_col=lhs_col,
        rhs_col=rhs_col,
        rel_col=rel_col,
        weight_col=weight_col,
        delimiter=delimiter,
        entity_min_count=entity_min_count,
        relation_type_min_count=relation_type_min_count,
        skip_bad_lines=skip_bad_lines,
        unknown_relations=unknown_relations,
        seed=resolved.seed,
        force=force,
    )
    report = import_edges_task(resolved, inputs, options)
    get_run_logger().info("%s", report["summary"])
    return report
