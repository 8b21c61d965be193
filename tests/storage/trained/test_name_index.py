"""storage.trained.name_index: names -> (partition, offset) and back, lazily per type; relation ids; closest names."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pbg_core.config import parse_config
from pbg_core.errors import UnknownNameError
from storage.remap.matching import NameTable, name_table
from storage.trained.name_index import (
    CLOSEST_POOL,
    Lookup,
    NameIndex,
    NameProblem,
    UnknownEntityError,
    check_entity_type,
    closest,
)

DRUGS = [["aspirin", "insulin", "Penicillin"], ["asparagine", "ibuprofen"]]
DISEASES = [["diabetes", "asthma"]]
CONFIG = {
    "entities": {"drug": {"num_partitions": 2}, "disease": {"num_partitions": 1}},
    "relations": [{"name": "treats", "lhs": "drug", "rhs": "disease"}],
    "dimension": 4,
    "entity_path": "/nonexistent/entities",
    "edge_paths": [],
    "checkpoint_path": "/nonexistent/ckpt",
}


def index(loaded: list[str] | None = None) -> NameIndex:
    """Types drug (2 partitions) and disease (1); ``loaded`` records each type's table as it is read."""

    def loader(entity: str, parts: list[list[str]]) -> NameTable:
        if loaded is not None:
            loaded.append(entity)
        return name_table(lambda part: parts[part], len(parts))

    return NameIndex(
        {"drug": lambda: loader("drug", DRUGS), "disease": lambda: loader("disease", DISEASES)},
        ["treats", "interacts", "treats"],
    )


def test_names_are_located_and_named_back_and_each_type_is_read_once_when_first_needed() -> None:
    loaded: list[str] = []
    names = index(loaded)
    assert loaded == []
    part, offset = names.locate(["ibuprofen", "aspirin", "Penicillin", "ibuprofen"], Lookup("drug", "head"))
    assert part.tolist() == [1, 0, 0, 1] and offset.tolist() == [1, 0, 2, 1]
    assert names.names_at("drug", part, offset).to_pylist() == ["ibuprofen", "aspirin", "Penicillin", "ibuprofen"]
    assert names.count("drug") == 5 and loaded == ["drug"]
    names.locate(["asthma"], Lookup("disease", "tail"))
    names.count("drug")
    assert loaded == ["drug", "disease"]


def test_an_unknown_name_gives_the_closest_names_of_its_type() -> None:
    names = index()
    with pytest.raises(UnknownEntityError) as caught:
        names.locate(["asprin"], Lookup("drug", "head"))
    assert str(caught.value) == "unknown head 'asprin' of type 'drug' (closest: 'aspirin')"
    with pytest.raises(UnknownEntityError, match=r"\(closest: 'Penicillin'\)$"):
        names.locate(["PENICILLIN"], Lookup("drug", "head"))  # the same but for case comes first
    with pytest.raises(
        UnknownEntityError, match=r"^unknown tail 'zzz' of type 'drug' \(no close name among its 5 names\)$"
    ):
        names.locate(["zzz"], Lookup("drug", "tail"))
    assert isinstance(caught.value, UnknownNameError)


def test_a_name_of_another_type_is_named_as_such() -> None:
    names = index()
    lookup = Lookup("drug", "head", relations=["treats"])
    with pytest.raises(UnknownEntityError) as caught:
        names.locate(["asthma"], lookup)
    assert str(caught.value) == "'asthma' is of type 'disease'; relation 'treats' takes a 'drug' as head"
    with pytest.raises(UnknownEntityError, match=r"^'aspirin' is of type 'drug'; wanted: a 'disease' as entity$"):
        names.locate(["aspirin"], Lookup("disease", "entity"))


def test_many_bad_names_are_one_line_the_first_in_full_and_positions_can_be_rendered_otherwise() -> None:
    names = index()
    lookup = Lookup("drug", "head", "heads", positions=np.array([10, 11, 12, 13, 14, 15, 16]))
    given = ["aspirin", "asprin", "x", "insulin", "asthma", "y", "z"]
    part, offset, problems = names.find(given, lookup)
    assert part.tolist()[::3] == [0, 0, -1] and offset.tolist()[3] == 1
    error = UnknownEntityError(problems)
    assert str(error) == (
        "heads[11]: unknown head 'asprin' of type 'drug' (closest: 'aspirin'); 4 more not usable: "
        "'x' (heads[12]), 'asthma' (heads[14]), 'y' (heads[15]), ..."
    )
    as_rows = error.message(lambda problem: f"q.tsv row {problem.position - 9}")
    assert as_rows.startswith("q.tsv row 2: unknown head 'asprin'") and "'x' (q.tsv row 3)" in as_rows
    copy = pickle.loads(pickle.dumps(error))  # errors cross process and task boundaries
    assert str(copy) == str(error) and copy.problems == error.problems


def test_relation_names_are_ids_the_first_of_a_name_given_twice() -> None:
    names = index()
    assert names.relation_ids(["interacts", "treats", "treats"]).tolist() == [1, 0, 0]
    with pytest.raises(UnknownEntityError) as caught:
        names.relation_ids(["treats", "treat", "cures"], "relations")
    assert str(caught.value) == (
        "relations[1]: unknown relation 'treat' (closest: 'treats'); known: treats, interacts; "
        "1 more not usable: 'cures' (relations[2])"
    )
    many = NameIndex({}, [f"rel{i}" for i in range(25)])
    with pytest.raises(UnknownEntityError, match=r"known: rel0, rel1, .*, rel19, \.\.\. \(25 in all\)$"):
        many.relation_ids(["other"])


def test_a_relation_or_entity_type_in_other_case_is_suggested_first() -> None:
    names = NameIndex({}, ["interacts", "treats", "is_treated_by_drug"])
    with pytest.raises(UnknownEntityError, match=r"^unknown relation 'TREATS' \(closest: 'treats'\); known: "):
        names.relation_ids(["TREATS"])
    with pytest.raises(
        UnknownEntityError, match=r"^unknown relation 'treated_by' \(closest: 'is_treated_by_drug', 'treats'\)"
    ):
        names.relation_ids(["treated_by"])  # a short list: names of any length are compared
    with pytest.raises(UnknownNameError, match=r"^entity type 'Drugs' \(closest: 'drug'\) is not one of \['drug'"):
        check_entity_type(parse_config(CONFIG), "Drugs", ["drug", "disease"])
    with pytest.raises(UnknownNameError, match=r"^entity type 'x' is not one of \['drug', 'disease'\]$"):
        check_entity_type(parse_config(CONFIG), "x", ["drug", "disease"])


def test_closest_names_are_found_among_many() -> None:
    import pyarrow as pa

    crowd = [f"{chr(97 + i % 26)}entity{i:06d}" for i in range(CLOSEST_POOL + 5000)] + ["metformin"]
    names = pa.array(crowd, type=pa.large_string())
    assert closest("metformni", names) == ["metformin"]
    assert closest("METFORMIN", names) == ["metformin"]
    assert closest("qqqqqqqqqqqqqqqqqqqqqqqqqqqqq", names) == []


def test_a_problem_knows_where_it_was_given() -> None:
    assert NameProblem("x", "bad", "heads", 3).where() == "heads[3]"
    assert NameProblem("x", "bad").where() == ""
