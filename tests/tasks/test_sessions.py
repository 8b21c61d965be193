"""Opening, looking up and closing the live training session (task bodies via ``.fn()``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import config_to_json, parse_config
from pbg_core.types import Bucket
from tasks.buckets import swap_partitions
from tasks.checkpoint import switch_version, write_checkpoint
from tasks.plan import plan_training
from tasks.runs import close_run, get_run, open_run
from tasks.sessions import close_training_session, get_session, open_training_session, session_run


@pytest.fixture
def one_epoch(make_config: Any, train_buckets: Any) -> dict[str, Any]:
    """A checkpoint committed at version 1 by the task bodies; returns its config."""
    config = make_config("source", num_epochs=1)
    parsed = parse_config(config)
    (iteration,) = plan_training.fn(open_run(parsed)).remaining
    handle = open_training_session.fn(open_run(parsed))
    try:
        train_buckets(handle, iteration)
        write_checkpoint.fn(handle, iteration)
        switch_version.fn(handle, iteration)
    finally:
        close_training_session.fn(handle)
    return config


def first_table(handle: str) -> torch.Tensor:
    """The node table as the first bucket loads it (one partition: loaded on the first swap)."""
    swap_partitions.fn(handle, Bucket(0, 0))
    return get_session(handle).residency.handle(("node", 0)).embeddings


def stored_embeddings(checkpoint: str, version: int, h5_datasets: Any) -> torch.Tensor:
    return torch.from_numpy(h5_datasets(Path(checkpoint) / f"embeddings_node_0.v{version}.h5")["embeddings"])


def test_open_session_starts_workers_and_saves_the_config(make_config: Any) -> None:
    config = parse_config(make_config(workers=2, seed=7))
    handle = open_training_session.fn(open_run(config))
    try:
        assert handle.startswith("train-")
        session = get_session(handle)
        assert session.workers.num_workers == 2
        assert session.seed == 7
        assert session.residency.committed_version == 0
        assert session.model_state.source == "fresh"
        # A fresh run starts from seeded normal(0, init_scale) embeddings; nothing else is written yet.
        table = first_table(handle)
        assert table.shape == (200, 16)
        assert 0.5e-3 < float(table.std()) < 2e-3
        checkpoint = Path(config.checkpoint_path)
        assert json.loads((checkpoint / "config.json").read_text()) == config_to_json(config)
        assert sorted(p.name for p in checkpoint.iterdir()) == ["config.json"]
    finally:
        close_training_session.fn(handle)
    with pytest.raises(LookupError, match=handle):
        get_session(handle)
    close_training_session.fn(handle)  # idempotent


def test_a_session_resolves_to_the_run_it_was_built_on(make_config: Any) -> None:
    config = parse_config(make_config(storage_options={"key": KEY, "secret": SECRET}))
    run = open_run(config)
    handle = open_training_session.fn(run)
    try:
        assert session_run(handle) is get_run(run)  # one owner of the config and its credentials
        assert get_session(handle).store is get_run(run).stores.checkpoint
        close_run(run)
        with pytest.raises(LookupError, match=f"run {run!r} is not open"):
            session_run(handle)
    finally:
        close_training_session.fn(handle)
    with pytest.raises(LookupError, match=f"training session {handle!r} is not open in this process"):
        session_run(handle)


def test_unknown_handle_names_itself() -> None:
    with pytest.raises(LookupError, match="train-doesnotexist"):
        get_session("train-doesnotexist")


def test_reopening_resumes_from_the_committed_version(one_epoch: dict[str, Any], h5_datasets: Any) -> None:
    handle = open_training_session.fn(open_run(parse_config({**one_epoch, "num_epochs": 2})))
    try:
        session = get_session(handle)
        assert session.residency.committed_version == 1
        assert session.model_state.source == "version 1"
        loaded = first_table(handle)
        assert torch.equal(loaded, stored_embeddings(one_epoch["checkpoint_path"], 1, h5_datasets))
    finally:
        close_training_session.fn(handle)


def test_init_path_loads_the_other_checkpoint(one_epoch: dict[str, Any], make_config: Any, h5_datasets: Any) -> None:
    config = make_config("with_init", init_path=one_epoch["checkpoint_path"])
    handle = open_training_session.fn(open_run(parse_config(config)))
    try:
        session = get_session(handle)
        assert session.residency.committed_version == 0
        assert session.model_state.source == "init_path version 1"
        loaded = first_table(handle)
        assert torch.equal(loaded, stored_embeddings(one_epoch["checkpoint_path"], 1, h5_datasets))
        source_model = h5_datasets(Path(one_epoch["checkpoint_path"]) / "model.v1.h5")
        global_emb = session.model_state.model.state_dict()["global_embs.emb_node"]
        assert torch.equal(global_emb, torch.from_numpy(source_model["model/entities/node/global_embedding"]))
    finally:
        close_training_session.fn(handle)
    # Nothing is written into init_path; the new checkpoint holds only its config so far.
    assert sorted(p.name for p in Path(config["checkpoint_path"]).iterdir()) == ["config.json"]
    assert Path(one_epoch["checkpoint_path"], "checkpoint_version.txt").read_text() == "1\n"


KEY, SECRET = "AKIAPLANTEDSESSION", "planted-session-s3cr3t"


def test_config_json_masks_credentials_and_resume_never_uses_the_mask(make_config: Any, train_buckets: Any) -> None:
    raw = make_config("secret_run", num_epochs=1, storage_options={"key": KEY, "secret": SECRET})
    config = parse_config(raw)
    (iteration,) = plan_training.fn(open_run(config)).remaining
    handle = open_training_session.fn(open_run(config))
    try:
        assert session_run(handle).config.storage_options_for_fs() == {"key": KEY, "secret": SECRET}
        train_buckets(handle, iteration)
        write_checkpoint.fn(handle, iteration)
        switch_version.fn(handle, iteration)
    finally:
        close_training_session.fn(handle)
    checkpoint = Path(config.checkpoint_path)
    for path in checkpoint.rglob("*"):
        if path.is_file():  # config.json, the HDF5 files' config/json attribute, stats, version
            assert SECRET.encode() not in path.read_bytes() and KEY.encode() not in path.read_bytes(), path
    saved = json.loads((checkpoint / "config.json").read_text())
    assert saved["storage_options"]["secret"] == "**********"
    # Resuming (or evaluating) with the saved file: masks are dropped, the environment applies.
    resumed = parse_config({**saved, "num_epochs": 2})
    handle = open_training_session.fn(open_run(resumed))
    try:
        assert session_run(handle).config.storage_options_for_fs() == {}
        assert get_session(handle).residency.committed_version == 1
    finally:
        close_training_session.fn(handle)
    assert json.loads((checkpoint / "config.json").read_text())["storage_options"]["secret"] == "**********"


def test_a_session_opened_ahead_is_adopted_by_the_task(make_config: Any) -> None:
    from tasks.sessions import prepare_training_session

    config = parse_config(make_config(workers=1, seed=3))
    assert prepare_training_session(config)
    prepared = _prepared_sessions()
    assert len(prepared) == 1
    handle = open_training_session.fn(open_run(parse_config(make_config(workers=1, seed=3))))  # an equal config
    try:
        assert get_session(handle) is prepared[0] and _prepared_sessions() == []
        assert (Path(config.checkpoint_path) / "config.json").exists()  # written by the task, under the lease
    finally:
        close_training_session.fn(handle)


def test_no_session_is_opened_ahead_of_the_neighbor_means_it_would_start_from(
    one_epoch: dict[str, Any], make_config: Any
) -> None:
    from tasks.sessions import close_prepared_sessions, prepare_training_session

    init = {"init_path": one_epoch["checkpoint_path"], "init_new_entities": "neighbor_mean"}
    assert not prepare_training_session(parse_config(make_config("grown", workers=1, **init)))
    assert _prepared_sessions() == []  # the flow writes init_new_rows.h5 first, then opens it
    random_start = {**init, "init_new_entities": "random"}
    assert prepare_training_session(parse_config(make_config("grown", workers=1, **random_start)))
    close_prepared_sessions()


def test_a_session_opened_ahead_is_dropped_when_the_checkpoint_moved_or_the_config_differs(
    one_epoch: dict[str, Any], make_config: Any
) -> None:
    from tasks.sessions import prepare_training_session

    fresh = parse_config(make_config("moved", workers=1))
    assert prepare_training_session(fresh)
    prepared = _prepared_sessions()[0]
    # Meanwhile another run committed version 1 there.
    shutil.copytree(one_epoch["checkpoint_path"], fresh.checkpoint_path, dirs_exist_ok=True)
    handle = open_training_session.fn(open_run(fresh))
    try:
        session = get_session(handle)
        assert session is not prepared and session.residency.committed_version == 1
        assert _prepared_sessions() == []
    finally:
        close_training_session.fn(handle)

    assert prepare_training_session(parse_config(make_config("other", workers=1)))
    other = parse_config(make_config("other", workers=1, seed=99))  # another config
    handle = open_training_session.fn(open_run(other))
    try:
        assert _prepared_sessions() == [] and get_session(handle).seed == 99
    finally:
        close_training_session.fn(handle)


def test_a_session_opened_ahead_is_dropped_when_an_import_committed_meanwhile(
    make_config: Any, graph: Any, tmp_path: Path
) -> None:
    """``pbg train`` reads the entities ahead of its reader's lease: an import committed in between
    (here: an append of two new names) must not leave the run with the old counts."""
    from storage.importing.importer import import_edges
    from storage.importing.options import ImportOptions
    from tasks.sessions import prepare_training_session

    entities = tmp_path / "entities"
    shutil.copytree(graph.entity_path, entities)
    config = parse_config(make_config("appended", workers=1, entity_path=str(entities)))
    before = sum(int((entities / f"entity_count_node_{p}.txt").read_text()) for p in range(graph.num_partitions))
    assert prepare_training_session(config)
    prepared = _prepared_sessions()[0]
    (tmp_path / "day1.tsv").write_text("brand-new-1\tlinked\tbrand-new-2\n")
    grown = config.model_copy(update={"edge_paths": [str(tmp_path / "day1")]})
    import_edges(
        grown, [str(tmp_path / "day1.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, append=True), seed=0
    )
    handle = open_training_session.fn(open_run(config))
    try:
        session = get_session(handle)
        assert session is not prepared
        assert sum(session.residency.counts[("node", p)] for p in range(graph.num_partitions)) == before + 2
    finally:
        close_training_session.fn(handle)


@pytest.mark.parametrize("eval_fraction", [0.0, 0.1])
def test_a_session_opened_ahead_reads_the_first_bucket_and_trains_the_same(
    make_config: Any, graph_2x2: Any, train_buckets: Any, eval_fraction: float
) -> None:
    from tasks.sessions import prepare_training_session

    def trained(name: str, ahead: bool) -> dict[str, torch.Tensor]:
        config = parse_config(make_config(name, data=graph_2x2, workers=1, seed=5, eval_fraction=eval_fraction))
        first = plan_training.fn(open_run(config)).remaining[0]
        if ahead:
            assert prepare_training_session(config)
            session = _prepared_sessions()[0]
            bucket = session._bucket_order(first)[0]
            # The first bucket's partitions are resident and its edges read, before any task ran.
            assert set(session.residency.resident) == set(session.settings.bucket_partitions(bucket))
            assert session.loaded is not None and session.loaded.key[3] == bucket
            assert len(session.loaded.edges) > 0
        handle = open_training_session.fn(open_run(config))
        try:
            if ahead:
                assert get_session(handle) is session
            train_buckets(handle, first)
            residency = get_session(handle).residency
            return {f"{k[0]}_{k[1]}": residency.handle(k).embeddings.clone() for k in sorted(residency.resident)}
        finally:
            close_training_session.fn(handle)

    plain, ahead = trained("plain", ahead=False), trained("ahead", ahead=True)
    assert plain.keys() == ahead.keys()
    for key in plain:
        assert torch.equal(plain[key], ahead[key]), f"{key} differs when the first bucket was read ahead"


def test_opening_ahead_is_only_a_hint(make_config: Any, tmp_path: Path) -> None:
    from tasks.sessions import close_prepared_sessions, prepare_training_session

    broken = parse_config({**make_config("broken"), "entity_path": str(tmp_path / "no-entities")})
    assert not prepare_training_session(broken)  # the flow's own checks report what is wrong
    assert _prepared_sessions() == []
    assert prepare_training_session(parse_config(make_config("spare", workers=1)))
    close_prepared_sessions()
    assert _prepared_sessions() == []


def _prepared_sessions() -> list[Any]:
    from tasks import sessions

    return list(sessions._PREPARED.values())
