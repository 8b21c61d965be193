"""Pass 1's name counting (storage.importing.count): the int32 limit on one entity type's names."""

from __future__ import annotations

from pathlib import Path

import pytest

from pbg_core.config import parse_config
from pbg_core.errors import PbgError
from storage.errors import LimitExceeded
from storage.importing import count
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.importing.spill import MAX_ID


def test_the_limit_is_what_int32_ids_can_number() -> None:
    assert MAX_ID + 1 == 2**31


def test_more_names_of_one_type_than_ids_is_one_line_naming_type_count_and_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2**31 names would take hours and ~100 GB here: the same check, with the limit lowered to 10 ids.
    monkeypatch.setattr(count, "MAX_ID", 9)
    config = parse_config(
        {
            "entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
            "relations": [{"name": "likes", "lhs": "user", "rhs": "item"}],
            "dimension": 4,
            "entity_path": str(tmp_path / "entities"),
            "edge_paths": [str(tmp_path / "edges")],
            "checkpoint_path": str(tmp_path / "ckpt"),
        }
    )
    tsv = tmp_path / "edges.tsv"
    tsv.write_text("".join(f"u{i}\ti{i % 3}\n" for i in range(12)))
    with pytest.raises(LimitExceeded) as info:
        import_edges(config, [str(tsv)], ImportOptions(lhs_col=0, rhs_col=1))
    assert isinstance(info.value, PbgError)  # the CLI prints it as one line, without a traceback
    assert str(info.value) == (
        f"{tsv}: entity type 'user' has 12 distinct names by this input; the importer numbers "
        "each entity type's names as int32, so at most 10 are allowed"
    )
    assert not (tmp_path / "entities").exists()  # nothing written
