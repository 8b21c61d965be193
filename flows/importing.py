"""The ``pbg-import`` flow: ``pbg import`` as a Prefect flow (a deployment step before training).

Same options as the command line (:class:`storage.importing.options.ImportOptions`); a progress
artifact follows the two passes, and the import report (counts of edges read, written and
skipped by reason) is the flow's result and its log. Parameters are data: a config object or a
JSON/YAML ``config_url``.

The options stay flat parameters (``lhs_col``, ``force``, ...), each with its description in
the docstring: they are the names deployments, ``prefect deployment run --param`` and saved
runs use, and the fields of the UI's run form; one ``options`` parameter would rename every one
(``options.lhs_col``). They become one :class:`ImportOptions` at the top of the flow, and
``tests/flows/test_importing.py`` keeps them equal to its fields (names, types' defaults, descriptions).
"""

# No `from __future__ import annotations`: Prefect resolves parameter annotations at run time.
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from prefect import flow, get_run_logger
from pydantic import Field

from flows.prefect_host.run_logs import forward_engine_logs
from flows.run_names import run_name
from pbg_core.config import ConfigSchema
from storage.importing.options import ImportOptions
from tasks.config import resolve_config
from tasks.convert import import_edges_task

Column = int | str
RUN_NAME_WIDTH = 80  # the UI's run list shows about this much of a name


def inputs_label(inputs: Sequence[str], width: int = RUN_NAME_WIDTH) -> str:
    """``a.tsv, b.tsv``: the inputs as a command line lists them; past ``width``, ``a.tsv and 4 more``.

    The first input always shows (its end, after ``...``, when it alone is longer than ``width``).
    """
    if not inputs:
        return "(no inputs)"
    first = inputs[0] if len(inputs[0]) <= width else "..." + inputs[0][-(width - 3) :]
    shown = [first]
    for count, name in enumerate(inputs[1:], start=2):
        more = f" and {len(inputs) - count} more" if count < len(inputs) else ""
        if len(", ".join([*shown, name]) + more) > width:
            break
        shown.append(name)
    hidden = len(inputs) - len(shown)
    return ", ".join(shown) + (f" and {hidden} more" if hidden else "")


def _inputs(parameters: Mapping[str, Any]) -> str:
    """An import run's inputs (:func:`inputs_label`), not the list's Python repr: what its name says after its subject."""
    return inputs_label([str(name) for name in parameters.get("inputs") or []])


@flow(name="pbg-import", flow_run_name=run_name("import", _inputs))
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
    append: bool = False,
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
        force: Import even if the inputs' content and the options match the last import; write inputs
            sharing an edge path into it together; let an append replace an earlier generation's edge path.
        append: Add to the import in entity_path; names imported before keep their places (`pbg import --append`).
    """
    forward_engine_logs()
    resolved = resolve_config(config, config_url, overrides or [])
    options = ImportOptions(
        lhs_col=lhs_col,
        rhs_col=rhs_col,
        rel_col=rel_col,
        weight_col=weight_col,
        delimiter=delimiter,
        entity_min_count=entity_min_count,
        relation_type_min_count=relation_type_min_count,
        skip_bad_lines=skip_bad_lines,
        unknown_relations=unknown_relations,
        force=force,
        append=append,
    )
    report = import_edges_task(resolved, inputs, options)
    get_run_logger().info("%s", report["summary"])
    return report
