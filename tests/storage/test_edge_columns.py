"""One model of how an edge list is read, shared by `pbg import` and retraining's arrivals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from storage.edge_columns import EdgeColumns
from storage.importing.options import ImportOptions
from storage.retraining.options import IncomingOptions


def test_both_ways_in_read_edge_lists_with_the_same_fields_and_words() -> None:
    shared = list(EdgeColumns.model_fields)
    for model in (ImportOptions, IncomingOptions):
        assert issubclass(model, EdgeColumns)
        for name in shared:
            assert model.model_fields[name].description == EdgeColumns.model_fields[name].description, name
    only_import = set(ImportOptions.model_fields) - set(shared)
    only_incoming = set(IncomingOptions.model_fields) - set(shared)
    assert only_import == {"relation_type_min_count", "force", "append"}
    assert only_incoming == {"inputs", "edges_dir", "holdout_fraction"}


def test_an_incoming_setting_reaches_the_import_unchanged() -> None:
    incoming = IncomingOptions(
        inputs="in/*.tsv",
        edges_dir="edges",
        lhs_col="src",
        rhs_col=2,
        rel_col=1,
        weight_col=3,
        delimiter=",",
        entity_min_count=2,
        skip_bad_lines=True,
        unknown_relations="error",
    )
    options = ImportOptions(**incoming.edge_columns().model_dump())
    assert options.edge_columns() == incoming.edge_columns()
    assert (options.force, options.append, options.relation_type_min_count) == (False, False, 1)


def test_incoming_files_default_to_pbgs_columns_while_pbg_import_names_them() -> None:
    incoming = IncomingOptions(inputs="in", edges_dir="edges")
    assert (incoming.lhs_col, incoming.rhs_col) == (0, 1)
    with pytest.raises(ValidationError, match="lhs_col\n  Field required"):
        ImportOptions(rhs_col=1)  # type: ignore[call-arg]


def test_a_bad_reading_value_is_refused_the_same_way_on_both() -> None:
    for model, base in (
        (ImportOptions, {"lhs_col": 0, "rhs_col": 1}),
        (IncomingOptions, {"inputs": "i", "edges_dir": "e"}),
    ):
        with pytest.raises(ValidationError, match="unknown_relations\n  Input should be 'skip' or 'error'"):
            model.model_validate({**base, "unknown_relations": "drop"})
