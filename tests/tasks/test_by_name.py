"""tasks.by_name: the resume refusal, the names record, init_path's start by name, the ranking check of
``pbg eval`` and an interrupted first pass on moved names (task bodies via ``.fn()``).

Graphs are imported with the real importer: a changed input imported without ``--append``
reshuffles every entity, which is what these tasks guard against.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from disk_state import changes, tree_state

from pbg_core.config import parse_config
from pbg_core.ports import CheckpointMetadata, NamesDigests, PassProgress
from pbg_core.types import Bucket
from storage.checkpoint_names import NamesArchive, NamesChangedError, current_digests, names_url
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.layout import START_BY_NAME_DIR
from storage.progress import CheckpointProgress
from tasks.by_name import check_checkpoint_names, check_ranked_names, remove_start_by_name, run_keys, start_by_name
from tasks.runs import get_run, open_run, opened_run

EDGES = [(f"u{i}", "bought", f"i{(i * 7) % 23}") for i in range(60)] + [
    (f"u{i}", "follows", f"u{(i * 5) % 60}") for i in range(60)
]


def config_for(root: Path, checkpoint: str = "run0", **overrides: Any) -> Any:
    return parse_config(
        {
            "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 2}},
            "relations": [
                {"name": "bought", "lhs": "user", "rhs": "item"},
                {"name": "follows", "lhs": "user", "rhs": "user"},
            ],
            "dimension": 4,
            "entity_path": str(root / "data"),
            "edge_paths": [str(root / "edges")],
            "checkpoint_path": str(root / checkpoint),
            "seed": 0,
            **overrides,
        }
    )


def imported(root: Path, edges: list[tuple[str, str, str]], seed: int) -> None:
    (root / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges))
    import_edges(config_for(root), [str(root / "edges.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=seed)


def committed(config: Any, record: bool = True) -> dict[str, list[float]]:
    """A committed version 1 of ``config``'s checkpoint whose row of each entity is its own; name -> row.

    ``record=False`` writes it as PBG does: no names record.
    """
    entities = EntityStore(config.entity_path)
    keys = run_keys(config)
    digests = current_digests(entities, keys, dynamic=False) if record else NamesDigests()
    store = CheckpointStore(config.checkpoint_path)
    if record:
        NamesArchive(store.url).keep({d: names_url(entities, *key) for key, d in digests.entities.items()})
    rows = {}
    generator = torch.Generator().manual_seed(1)
    for entity, part in keys:
        names = entities.load_names(entity, part)
        vectors = torch.randn(len(names), 4, generator=generator)
        rows.update({name: vectors[i].tolist() for i, name in enumerate(names)})
        store.save_embeddings(entity, part, 1, vectors, None, CheckpointMetadata("{}", names=digests))
    store.save_model(1, {}, {}, None, CheckpointMetadata("{}", names=digests))
    store.write_version(1)
    return rows


def test_resuming_a_checkpoint_whose_names_moved_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    committed(config)
    imported(tmp_path, EDGES[5:] + [("u99", "bought", "i99")], seed=0)  # a plain re-import: names reshuffle
    before = tree_state(tmp_path)
    with pytest.raises(NamesChangedError) as raised:
        check_checkpoint_names.fn(open_run(config), 1)
    message = str(raised.value)
    assert "version 1 was trained on other names" in message and f"init_path={config.checkpoint_path}" in message
    assert "entity type 'user':" in message and "names moved" in message and "1 new" in message
    assert changes(before, tree_state(tmp_path)) == []


def test_a_checkpoint_with_the_same_names_resumes(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    committed(config)
    imported(tmp_path, EDGES, seed=0)  # the same input again: the same files
    assert check_checkpoint_names.fn(open_run(config), 1) == {"checked": True}


def test_a_checkpoint_without_a_record_resumes_by_position_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    committed(config, record=False)
    with caplog.at_level(logging.WARNING):
        assert check_checkpoint_names.fn(open_run(config), 1) == {"checked": True}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "names could not be checked, rows are used by position" in warnings[0]


def test_init_path_whose_names_moved_is_remapped_by_name_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    imported(tmp_path, EDGES, seed=0)
    old = committed(config_for(tmp_path))
    imported(tmp_path, EDGES[:-10] + [("u99", "bought", "i99")], seed=0)
    config = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"))
    run = open_run(config)
    with caplog.at_level(logging.INFO):
        done = start_by_name.fn(run, 0)
    now = {name for key in run_keys(config) for name in EntityStore(config.entity_path).load_names(*key)}
    kept = len(now & set(old))
    assert done["kept"] == kept and done["new"] == len(now - set(old)) == 2 and done["dropped"] == len(set(old) - now)
    line = next(r.getMessage() for r in caplog.records if "remapped init_path by name" in r.getMessage())
    assert f"{kept:,} of {len(now):,} entities kept their trained rows, 2 new (random)" in line
    assert (tmp_path / "run1" / START_BY_NAME_DIR / "start.json").exists()
    assert len(NamesArchive(config.checkpoint_path).digests()) == 4  # the names this run trains
    # After the first commit nothing reads the start: it goes.
    CheckpointStore(config.checkpoint_path).write_version(1)
    remove_start_by_name.fn(run)
    assert not (tmp_path / "run1" / START_BY_NAME_DIR).exists()


def test_init_path_with_the_same_names_needs_no_start(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    committed(config_for(tmp_path))
    config = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"))
    assert start_by_name.fn(open_run(config), 0) == {"names_copied": 4}
    assert not (tmp_path / "run1" / START_BY_NAME_DIR).exists()


def test_a_pbg_init_path_is_used_by_position_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    imported(tmp_path, EDGES, seed=0)
    committed(config_for(tmp_path), record=False)
    imported(tmp_path, EDGES[3:], seed=1)
    config = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"))
    with caplog.at_level(logging.WARNING):
        start_by_name.fn(open_run(config), 0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "init_path" in warnings[0] and "used by position" in warnings[0]
    assert not (tmp_path / "run1" / START_BY_NAME_DIR).exists()


def test_names_of_an_attempt_that_committed_nothing_are_removed_once_committed_ones_stay(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    stale = tmp_path / "run0" / "names" / "0123abcd.json"
    stale.parent.mkdir(parents=True)
    stale.write_text('["from before a re-import"]')
    assert start_by_name.fn(open_run(config), 0)["names_copied"] == 4
    assert not stale.exists()  # nothing committed follows it
    committed(config)
    stale.write_text('["from before a re-import"]')
    start_by_name.fn(open_run(config), 1)
    assert stale.exists() and len(NamesArchive(config.checkpoint_path).digests()) == 5


def test_ranking_rows_whose_names_moved_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    committed(config)
    imported(tmp_path, EDGES[5:] + [("u99", "bought", "i99")], seed=0)  # a plain re-import: names reshuffle
    before = tree_state(tmp_path)
    with opened_run(config) as run, pytest.raises(NamesChangedError) as raised:
        check_ranked_names(config, get_run(run).stores, 1, "pbg eval")
    message = str(raised.value)
    assert "\n" not in message and "version 1 was trained on other names" in message
    assert "entity type 'user':" in message and "names moved" in message and "1 new" in message
    assert "pbg eval would rank each moved row as another entity's" in message
    assert f"init_path={config.checkpoint_path}" in message
    assert changes(before, tree_state(tmp_path)) == []


def test_ranking_rows_without_a_record_warns_once_and_goes_on_by_position(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    committed(config, record=False)
    imported(tmp_path, EDGES, seed=3)  # the same names in other places: PBG's reading cannot tell
    with opened_run(config) as run, caplog.at_level(logging.WARNING):
        check_ranked_names(config, get_run(run).stores, 1, "pbg eval")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "names could not be checked, rows are used by position" in warnings[0]


def interrupted_first_pass(config: Any) -> CheckpointProgress:
    """Bucket progress of version 1 as a first pass killed after one bucket leaves it (nothing committed)."""
    entities, keys = EntityStore(config.entity_path), run_keys(config)
    digests = current_digests(entities, keys, dynamic=False)
    progress = CheckpointProgress(CheckpointStore(config.checkpoint_path))
    area = progress.area(1, 0)
    for entity, part in (("user", 0), ("item", 0)):
        rows = torch.zeros(entities.load_count(entity, part), 4)
        area.save_embeddings(entity, part, 1, rows, None, CheckpointMetadata("{}", names=digests))
    order = [Bucket(lhs, rhs) for lhs in range(2) for rhs in range(2)]
    progress.write(
        PassProgress(version=1, iteration_index=0, order=order, done=1, partitions={("user", 0): 0, ("item", 0): 0})
    )
    return progress


def test_an_interrupted_first_pass_on_names_that_moved_is_started_afresh_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    progress = interrupted_first_pass(config)
    imported(tmp_path, EDGES[5:] + [("u99", "bought", "i99")], seed=0)  # re-imported before the rerun
    with caplog.at_level(logging.WARNING):
        start_by_name.fn(open_run(config), 0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "discarding the recorded progress of version 1 (1 of 4 buckets" in warnings[0]
    assert "entity type 'item' partition 0, entity type 'user' partition 0 follow other names" in warnings[0]
    assert progress.read(1) is None and not (tmp_path / "run0" / "progress").exists()


def test_an_interrupted_first_pass_on_the_same_names_is_resumed(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = config_for(tmp_path)
    progress = interrupted_first_pass(config)
    imported(tmp_path, EDGES, seed=0)  # the same input again: the same files
    start_by_name.fn(open_run(config), 0)
    saved = progress.read(1)
    assert saved is not None and saved.done == 1
