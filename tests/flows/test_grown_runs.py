"""Training on a grown graph: a run initialised from the previous one after ``pbg import --append``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from flows.train import pbg
from pbg_core.config import parse_config
from storage.exporting.exporter import export_tsv
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions


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


@pytest.mark.slow
def test_a_run_grown_from_the_previous_one_exports_the_old_entities_first_in_the_same_order(tmp_path: Path) -> None:
    (tmp_path / "day0.tsv").write_text("".join(f"u{i}\tu{(i * 7) % 60}\n" for i in range(60)))
    (tmp_path / "day1.tsv").write_text("".join(f"u{i}\tv{i % 9}\n" for i in range(30)))
    day0 = config_for(tmp_path)
    import_edges(day0, [str(tmp_path / "day0.tsv")], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    pbg(config=day0)
    old = exported_names(day0, tmp_path, "run0")

    grow = config_for(tmp_path, edge_paths=[str(tmp_path / "edges" / "day1")])
    import_edges(grow, [str(tmp_path / "day1.tsv")], ImportOptions(lhs_col=0, rhs_col=1, append=True), seed=0)
    edges = [str(tmp_path / "edges" / "day0"), str(tmp_path / "edges" / "day1")]
    day1 = config_for(
        tmp_path, edge_paths=edges, checkpoint_path=str(tmp_path / "run1"), init_path=str(tmp_path / "run0")
    )
    pbg(config=day1)
    new = exported_names(day1, tmp_path, "run1")

    assert len(old) == 60 and len(new) == 69  # 9 new entities v0..v8
    assert [name for name in new if not name.startswith("v")] == old  # the old ones: same names, same order


def exported_vectors(config: Any, root: Path, name: str) -> dict[str, list[float]]:
    export_tsv(config, str(root / f"{name}.tsv"), str(root / f"{name}-relations.tsv"))
    rows = [line.split("\t") for line in (root / f"{name}.tsv").read_text().splitlines()]
    return {row[0]: [float(x) for x in row[1:]] for row in rows}


@pytest.mark.slow
def test_new_entities_start_at_the_mean_of_their_trained_neighbors_when_asked(tmp_path: Path) -> None:
    (tmp_path / "day0.tsv").write_text("".join(f"u{i}\tu{(i * 7) % 60}\n" for i in range(60)))
    (tmp_path / "day1.tsv").write_text("".join(f"u{i}\tv{i % 9}\n" for i in range(30)) + "v0\tw0\n")
    day0 = config_for(tmp_path)
    import_edges(day0, [str(tmp_path / "day0.tsv")], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    pbg(config=day0)
    old = exported_vectors(day0, tmp_path, "run0")
    grow = config_for(tmp_path, edge_paths=[str(tmp_path / "edges" / "day1")])
    import_edges(grow, [str(tmp_path / "day1.tsv")], ImportOptions(lhs_col=0, rhs_col=1, append=True), seed=0)

    def grown_run(name: str, init: str) -> dict[str, list[float]]:
        # lr 0: training leaves every row where it started, so the export shows the starts.
        edges = [str(tmp_path / "edges" / "day0"), str(tmp_path / "edges" / "day1")]
        ckpt, lr = str(tmp_path / name), {"lr": 0.0, "relation_lr": 0.0}
        config = config_for(tmp_path, edge_paths=edges, checkpoint_path=ckpt, init_path=str(tmp_path / "run0"), **lr)
        pbg(config=config.model_copy(update={"init_new_entities": init}))
        return exported_vectors(config, tmp_path, name)

    means, randoms = grown_run("run-mean", "neighbor_mean"), grown_run("run-random", "random")
    for k in range(9):
        neighbors = torch.tensor([old[f"u{i}"] for i in range(30) if i % 9 == k])
        torch.testing.assert_close(torch.tensor(means[f"v{k}"]), neighbors.mean(0), atol=1e-5, rtol=1e-4)
        assert not torch.allclose(torch.tensor(randoms[f"v{k}"]), neighbors.mean(0), atol=1e-3)
    assert means["w0"] == randoms["w0"]  # its only neighbor (v0) is new too: random, as without the option
    assert all(means[name] == old[name] for name in old)  # old rows untouched
