"""The options of an import: which columns to read, how to read them, what to keep, how to write.

One model for every way in: ``pbg import``'s flags (``flows/cli/commands.py``), the ``pbg-import``
flow's parameters (``flows/importing.py``), the ``import-edges`` task,
:func:`storage.importing.importer.import_edges` itself, and a scheduled retraining's import of
what arrived (``tasks/retrain.py``). How the edge lists are read is
:class:`storage.edge_columns.EdgeColumns`, shared with the retraining's ``incoming`` options; this
model adds what only an import decides. Each description is the one Prefect's UI shows for the
flow parameter of that name (a test keeps them equal). The import's seed is not an option: the
callers pass the config's ``seed`` beside it.
"""

from __future__ import annotations

from pydantic import Field

from storage.edge_columns import EdgeColumns


class ImportOptions(EdgeColumns):
    """How ``pbg import`` reads its edge lists and writes the config's entity and edge files.

    The fields of :class:`~storage.edge_columns.EdgeColumns` (columns, delimiter,
    ``entity_min_count``, ``skip_bad_lines``, ``unknown_relations``), and:

    Attributes:
        relation_type_min_count: Dynamic mode: drop relation names seen fewer times.
        force: Import even when the inputs' content and the options match the last import
            (:mod:`storage.importing.manifest`; otherwise that case writes nothing and returns the
            last report with ``unchanged_since`` set); write inputs that share an edge path into
            it together; let an append replace an earlier generation's edge path.
        append: Add to the import already in ``config.entity_path`` (:mod:`storage.importing.append`):
            names imported before keep their (partition, offset), new ones are appended, the inputs
            go to ``config.edge_paths``; the same append twice does nothing the second time.
    """

    relation_type_min_count: int = Field(
        1, ge=1, description="Dynamic relations: drop relation types seen fewer times."
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
