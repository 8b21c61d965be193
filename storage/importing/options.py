"""The options of an import: which columns to read, how to read them, what to keep, how to write.

One model for every way in: ``pbg import``'s flags (``flows/cli_commands.py``), the ``pbg-import``
flow's parameters (``flows/importing.py``), the ``import-edges`` task and
:func:`storage.importing.importer.import_edges` itself. Each description is the one Prefect's UI
shows for the flow parameter of that name (a test keeps them equal). The import's seed is not
an option: the callers pass the config's ``seed`` beside it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from storage.importing.parse import Column


class ImportOptions(BaseModel):
    """How ``pbg import`` reads its edge lists and writes the config's entity and edge files.

    Attributes:
        lhs_col: Column of the source entity name: 0-based index, or a name (Parquet only).
        rhs_col: Column of the target entity name.
        rel_col: Column of the relation name; None means relation 0 (not allowed in dynamic mode).
        weight_col: Column of a float edge weight; None writes no weights.
        delimiter: Column separator of text inputs; None: tab if a file's first non-blank line
            has one, else a space.
        entity_min_count: Drop entities seen fewer times (per type, over all inputs).
        relation_type_min_count: Dynamic mode: drop relation names seen fewer times.
        skip_bad_lines: Skip malformed lines (counted in ``skipped["malformed_line"]``, the first
            ones listed with their line numbers) instead of failing.
        unknown_relations: ``"skip"`` (PBG's behaviour): an edge whose relation name is not in the
            config is skipped and counted, and the report lists the most frequent such names.
            ``"error"``: such a line is malformed (an error naming file, line and the expected
            names, or with ``skip_bad_lines`` a counted, listed skip). Only meaningful with
            ``rel_col`` and standard relations (in dynamic mode every name is a relation).
        force: Import even when the inputs' content and the options match the last import
            (:mod:`storage.importing.manifest`; otherwise that case writes nothing and returns the
            last report with ``unchanged_since`` set); write inputs that share an edge path into
            it together; let an append replace an earlier generation's edge path.
        append: Add to the import already in ``config.entity_path`` (:mod:`storage.importing.append`):
            names imported before keep their (partition, offset), new ones are appended, the inputs
            go to ``config.edge_paths``; the same append twice does nothing the second time.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lhs_col: Column = Field(description="Column of the source entity: 0-based index, or a name for Parquet.")
    rhs_col: Column = Field(description="Column of the target entity.")
    rel_col: Column | None = Field(
        None, description="Column of the relation name (default: every edge has relation 0)."
    )
    weight_col: Column | None = Field(None, description="Column of a float edge weight.")
    delimiter: str | None = Field(
        None,
        description="Column separator of text inputs (default: tab if the first line has one, else space).",
    )
    entity_min_count: int = Field(1, ge=1, description="Drop entities seen fewer times.")
    relation_type_min_count: int = Field(
        1, ge=1, description="Dynamic relations: drop relation types seen fewer times."
    )
    skip_bad_lines: bool = Field(
        False, description="Skip and count malformed lines (listing the first ones) instead of failing."
    )
    unknown_relations: Literal["skip", "error"] = Field(
        "skip",
        description='A relation name not in the config: "skip" the edge and count it (as PBG), or "error": '
        "the line is malformed (see `skip_bad_lines`).",
    )
    force: bool = Field(
        False,
        description="Import even if the inputs' content and the options match the last import; write inputs "
        "sharing an edge path into it together; let an append replace an earlier generation's edge path.",
    )
    append: bool = Field(
        False,
        description="Add to the import in entity_path; names imported before keep their places "
        "(`pbg import --append`).",
    )
