"""The readers of a checkpoint after a plain re-import: export names every row as trained, eval refuses.

A graph of two entity types in two partitions is imported and trained for two epochs (the ``pbg``
flow, seeded; an ``epoch_1/`` snapshot kept), exported in every format, then a changed input is
imported without ``--append``: every entity moves to another (partition, offset). Exports of the
latest version and of the snapshot must give each name the vector it had; ``pbg eval`` must refuse
before it reads a row, changing no byte; a checkpoint without records (PBG's) is read by position
with one warning. ``pbg export`` through the real command line is here too (it starts no Prefect
server); ``pbg eval``'s refusal through the command line is in ``test_cli_init_by_name.py`` (slow).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state
from test_init_by_name import changed, config_for, graph_edges, imported

from flows.cli.user_errors import describe
from flows.evaluate import pbg_eval
from flows.train import pbg
from storage.checkpoint_names import DIGEST_ATTR, NamesChangedError
from storage.exporting.exporter import export_embeddings, export_tsv
from storage.layout import NAMES_DIR

FORMATS = ("pbg", "tsv", "npy", "h5")


def exported(config: Any, out: Path, kind: str, version: int | None = None) -> dict[str, list[float]]:
    """name -> exported vector through ``kind`` (``pbg``: PBG's two files; else ``--format kind``)."""
    if kind == "pbg":
        export_tsv(config, str(out / "entities.tsv"), str(out / "relations.tsv"), version)
        return tsv_rows(out / "entities.tsv")
    export_embeddings(config, str(out), kind, version=version)  # type: ignore[arg-type]  # an export format
    rows: dict[str, list[float]] = {}
    for entity in ("user", "item"):
        if kind == "tsv":
            rows |= tsv_rows(out / f"{entity}.tsv")
        elif kind == "npy":
            names = json.loads((out / f"{entity}.names.json").read_text())
            rows |= dict(zip(names, np.load(out / f"{entity}.npy").tolist(), strict=True))
        else:
            with h5py.File(out / f"{entity}.h5", "r") as hf:
                rows |= dict(zip([n.decode() for n in hf["names"][()]], hf["embeddings"][()].tolist(), strict=True))
    return rows


def tsv_rows(path: Path) -> dict[str, list[float]]:
    return {line.split("\t")[0]: [float(x) for x in line.split("\t")[1:]] for line in path.read_text().splitlines()}


@dataclass(frozen=True)
class Trained:
    """run0 trained on the graph and exported (per format; ``snapshot``: epoch_1/), then the graph re-imported."""

    root: Path
    before: dict[str, dict[str, list[float]]]
    snapshot: dict[str, list[float]]
    metrics: dict[str, float]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    root = tmp_path_factory.mktemp("readers")
    imported(root, graph_edges(0), seed=0)
    config = config_for(root, "run0", checkpoint_preservation_interval=1)
    pbg(config=config)
    before = {kind: exported(config, root / f"before-{kind}", kind) for kind in FORMATS}
    snapshot = exported(config_for(root, "run0/epoch_1"), root / "before-epoch_1", "pbg")
    metrics = pbg_eval(config=config)
    imported(root, changed(graph_edges(0)), seed=1)  # no --append: every entity reshuffled
    return Trained(root, before, snapshot, metrics)


@pytest.fixture
def project(trained: Trained, tmp_path: Path) -> Iterator[Path]:
    """A copy of the module's trained and re-imported project (tests may change it)."""
    shutil.copytree(trained.root, tmp_path, dirs_exist_ok=True)
    yield tmp_path


def test_every_export_after_a_reimport_names_each_row_as_trained(trained: Trained, project: Path) -> None:
    config = config_for(project, "run0")
    for kind in FORMATS:
        assert exported(config, project / f"after-{kind}", kind) == trained.before[kind], kind
    for name in ("entities.tsv", "relations.tsv"):  # PBG's layout: byte for byte what it was
        assert (project / "after-pbg" / name).read_bytes() == (project / "before-pbg" / name).read_bytes()
    # The epoch_1 snapshot is a checkpoint directory of its own, with its own names.
    epoch_1 = exported(config_for(project, "run0/epoch_1"), project / "after-epoch_1", "pbg")
    assert epoch_1 == trained.snapshot and epoch_1 != trained.before["pbg"]


def test_eval_after_a_reimport_is_refused_in_one_line_and_changes_nothing(project: Path) -> None:
    config = config_for(project, "run0")
    before = tree_state(project / "run0"), tree_state(project / "data")
    for sampled in ({}, {"sample_edges": 50, "candidates": 5}):
        with pytest.raises(NamesChangedError) as refused:
            pbg_eval(config=config, **sampled)
        line = describe(refused.value)
        assert "\n" not in line and "version 2 was trained on other names than entity_path" in line
        assert "entity type 'user': " in line and "entity type 'item': " in line and "names moved" in line
        assert f"init_path={config.checkpoint_path}" in line
    assert changes(before[0], tree_state(project / "run0")) == []
    assert changes(before[1], tree_state(project / "data")) == []


def test_a_checkpoint_without_records_exports_and_evaluates_by_position_with_one_warning(
    trained: Trained, project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    imported(project, graph_edges(0), seed=0)  # the import run0 was trained on: the same files again
    for path in (project / "run0").glob("*.h5"):  # as PBG writes it: no names/digest, no names/
        with h5py.File(path, "a") as hf:
            hf.attrs.pop(DIGEST_ATTR, None)
    shutil.rmtree(project / "run0" / NAMES_DIR)
    config = config_for(project, "run0")
    with caplog.at_level(logging.WARNING):
        assert exported(config, project / "pbg-style", "pbg") == trained.before["pbg"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "labelled by position" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert pbg_eval(config=config) == trained.metrics
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "rows are used by position" in w]) == 1, warnings


def test_pbg_export_through_the_command_line_names_rows_as_trained(trained: Trained, project: Path) -> None:
    (project / "config.json").write_text(json.dumps(config_for(project, "run0").model_dump(mode="json")))
    env = cli_environment(project / "prefect-home")
    done = run_pbg(env, project, "export", "config.json", "--format", "npy", "--output", "cli-npy")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "warning" not in done.stderr.lower()
    names = json.loads((project / "cli-npy" / "user.names.json").read_text())
    rows = dict(zip(names, np.load(project / "cli-npy" / "user.npy").tolist(), strict=True))
    assert rows == {name: trained.before["npy"][name] for name in names}
