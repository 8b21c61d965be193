"""How an edge list is read: its columns, its separator, what is kept and what a bad line does.

One model, :class:`EdgeColumns`, for both ways edge lists come in: ``pbg import``'s options
(:class:`storage.importing.options.ImportOptions` adds what only an import decides) and the files
a scheduled retraining imports as they arrive (:class:`storage.retraining.options.IncomingOptions`
adds where they arrive and what is held out). Each description is the one ``--help`` and Prefect's
run form show. No I/O: the stores and both subpackages may import it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Column = int | str  # a 0-based index, or a column name (Parquet)


class EdgeColumns(BaseModel):
    """Which columns of an edge list hold what, how text is split, which entities and lines are kept.

    Attributes:
        lhs_col: Column of the source entity name: 0-based index, or a name (Parquet only).
        rhs_col: Column of the target entity name.
        rel_col: Column of the relation name; None means relation 0 (not allowed in dynamic mode).
        weight_col: Column of a float edge weight; None writes no weights.
        delimiter: Column separator of text inputs; None: tab if a file's first non-blank line
            has one, else a space.
        entity_min_count: Drop entities seen fewer times (per type, over all inputs).
        skip_bad_lines: Skip malformed lines (counted in ``skipped["malformed_line"]``, the first
            ones listed with their line numbers) instead of failing.
        unknown_relations: ``"skip"`` (PBG's behaviour): an edge whose relation name is not in the
            config is skipped and counted, and the report lists the most frequent such names.
            ``"error"``: such a line is malformed (an error naming file, line and the expected
            names, or with ``skip_bad_lines`` a counted, listed skip). Only meaningful with
            ``rel_col`` and standard relations (in dynamic mode every name is a relation).
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
    skip_bad_lines: bool = Field(
        False, description="Skip and count malformed lines (listing the first ones) instead of failing."
    )
    unknown_relations: Literal["skip", "error"] = Field(
        "skip",
        description='A relation name not in the config: "skip" the edge and count it (as PBG), or "error": '
        "the line is malformed (see `skip_bad_lines`).",
    )

    def edge_columns(self) -> EdgeColumns:
        """Only these fields, as an :class:`EdgeColumns` (what a subclass adds dropped)."""
        return EdgeColumns(**{name: getattr(self, name) for name in EdgeColumns.model_fields})


__all__ = ["Column", "EdgeColumns"]
