"""One frozen model of an import's options: the CLI's flags, the flow's parameters, the importer's entry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from flows.cli.parser import build_parser
from storage.importing.options import ImportOptions


def test_defaults_are_the_command_line_defaults() -> None:
    args = build_parser().parse_args(["import", "config.json", "in.tsv", "-l", "0", "-r", "2"])
    options = ImportOptions.model_validate({name: getattr(args, name) for name in ImportOptions.model_fields})
    assert options == ImportOptions(lhs_col=0, rhs_col=2)
    assert options.model_dump() == {
        "lhs_col": 0,
        "rhs_col": 2,
        "rel_col": None,
        "weight_col": None,
        "delimiter": None,
        "entity_min_count": 1,
        "relation_type_min_count": 1,
        "skip_bad_lines": False,
        "unknown_relations": "skip",
        "force": False,
        "append": False,
    }


def test_every_import_flag_is_a_field_and_every_field_a_flag() -> None:
    """`pbg import`'s option flags (past the config's and the logging's) are exactly the model's fields."""
    parser = build_parser()
    subcommands = next(action for action in parser._actions if action.dest == "command")
    imp = subcommands.choices["import"]  # type: ignore[attr-defined]
    shared = {"help", "config", "param", "verbose", "debug", "inputs"}
    assert {action.dest for action in imp._actions} - shared == set(ImportOptions.model_fields)


def test_columns_keep_their_type_and_names_pass() -> None:
    options = ImportOptions(lhs_col="src", rhs_col=1, weight_col="w")
    assert (options.lhs_col, options.rhs_col, options.weight_col) == ("src", 1, "w")


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("unknown_relations", "fail", "Input should be 'skip' or 'error'"),
        ("entity_min_count", 0, "Input should be greater than or equal to 1"),
        ("relation_type_min_count", -2, "Input should be greater than or equal to 1"),
        ("columns", [0, 1], "Extra inputs are not permitted"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field_and_what_is_allowed(field: str, value: object, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ImportOptions.model_validate({"lhs_col": 0, "rhs_col": 1, field: value})
    assert f"{field}\n  {says}" in str(refused.value)


def test_the_columns_of_both_ends_are_required() -> None:
    with pytest.raises(ValidationError) as refused:
        ImportOptions.model_validate({"lhs_col": 0})
    assert "rhs_col\n  Field required" in str(refused.value)


def test_options_are_frozen() -> None:
    options = ImportOptions(lhs_col=0, rhs_col=1)
    with pytest.raises(ValidationError, match="frozen"):
        options.force = True  # type: ignore[misc]
    assert options.model_copy(update={"append": True}).append and not options.append
