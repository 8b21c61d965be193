"""Training on a grown graph: a run initialised from the previous one after ``pbg import --append``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.train import pbg
from pbg_core.config import parse_config
from storage.exporting.exporter import export_tsv
from storage.importing.importer import import_edges


def config_for(root: Path, **overrides: Any) -> Any:
    raw = {
        "entities": {"user": {"num_partitions": 2}},
        "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
        "dimension": 8,
        "entity_path": str(root / "data"),
        "edge_paths": [str(root / "edges" / "day0")],
        "checkpoint_path": str(root / "run0"),
        "num_epochs": 1,
        "hogwild_delay": 0,
        "workers": 1,
        "seed": 0,
        **overrides,
    }
    return parse_config(raw)


def exported_names(config: Any, root: Path, name: str) -> list[str]:
    export_tsv(config, str(root / f"{name}.tsv"), str(root / f"{name}-relations.tsv"))
    return [line.split("\t")[0] for line in (root / f"{name}.tsv").read_text().splitlines()]


def test_a_run_grown_from_the_previous_one_exports_the_old_entities_first_in_the_same_order(tmp_path: Path) -> None:
    (tmp_path / "day0.tsv").write_text("".join(f"u{i}\tu{(i * 7) % 60}\n" for i in range(60)))
    (tmp_path / "day1.tsv").write_text("".join(f"u{i}\tv{i % 9}\n" for i in range(30)))
    day0 = config_for(tmp_path)
    import_edges(day0, [str(tmp_path / "day0.tsv")], lhs_col=0, rhs_col=1, seed=0)
    pbg(config=day0)
    old = exported_names(day0, tmp_path, "run0")

    grow = config_for(tmp_path, edge_paths=[str(tmp_path / "edges" / "day1")])
    import_edges(grow, [str(tmp_path / "day1.tsv")], lhs_col=0, rhs_col=1, seed=0, append=True)
    edges = [str(tmp_path / "edges" / "day0"), str(tmp_path / "edges" / "day1")]
    day1 = config_for(
        tmp_path, edge_paths=edges, checkpoint_path=str(tmp_path / "run1"), init_path=str(tmp_path / "run0")
    )
    pbg(config=day1)
    new = exported_names(day1, tmp_path, "run1")

    assert len(old) == 60 and len(new) == 69  # 9 new entities v0..v8
    assert [name for name in new if not name.startswith("v")] == old  # the old ones: same names, same order
