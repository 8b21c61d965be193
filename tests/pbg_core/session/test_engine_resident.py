"""pbg_core.session.engine with room for more partitions than one bucket needs (4 partitions).

What stays resident changes the I/O, never the arithmetic: trained in the same order, a session
holding every partition and one holding two per bucket commit the same embeddings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _sessions import open_session, train_bucket

from pbg_core.session import save_points
from pbg_core.session.engine import TrainingSession
from pbg_core.session.iterations import Iteration, build_iterations
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.progress import CheckpointProgress

PARTS = 4


def run(session: TrainingSession, iterations: list[Iteration]) -> dict[int, list[Bucket]]:
    """Train and commit every iteration; the bucket order of each, and the bytes read."""
    orders = {}
    for iteration in iterations:
        orders[iteration.index] = session.schedule_buckets(iteration)
        for bucket in orders[iteration.index]:
            train_bucket(session, bucket)
        session.write_checkpoint(iteration)
        session.switch_version(iteration)
    return orders


def bytes_read(session: TrainingSession) -> int:
    return sum(record.io.get("bytes_read", 0) for record in session.records)


def test_holding_every_partition_reads_none_back_and_commits_what_two_slots_would(
    make_config: Any, graph_4x4: Any, tmp_path: Path
) -> None:
    raw = make_config("all", data=graph_4x4, num_epochs=2, eval_fraction=0.0)
    config, roomy = open_session(raw, resident_partitions=PARTS)
    iterations = build_iterations(config.num_epochs, config.edge_paths, 1)
    try:
        orders = run(roomy, iterations)
        assert set(roomy.settings.resident.values()) == {PARTS}
        assert bytes_read(roomy) == 0  # epoch 2 found everything in memory
    finally:
        roomy.close()

    tight_raw = make_config("two", data=graph_4x4, num_epochs=2, eval_fraction=0.0)
    tight_config, tight = open_session(tight_raw, resident_partitions=2)
    try:
        assert set(tight.settings.resident.values()) == {2}
        # The same buckets in the same order: only what stays in memory differs.
        tight._bucket_order = lambda iteration: list(orders[iteration.index])  # type: ignore[method-assign]  # the roomy session's order, for this comparison
        run(tight, iterations)
        assert bytes_read(tight) > 0  # epoch 2 read partitions back
    finally:
        tight.close()
    ours, theirs = CheckpointStore(config.checkpoint_path), CheckpointStore(tight_config.checkpoint_path)
    assert ours.read_version() == theirs.read_version() == 2
    for part in range(PARTS):
        assert torch.equal(ours.load_embeddings("node", part, 2)[0], theirs.load_embeddings("node", part, 2)[0])


def test_with_room_for_all_the_pass_is_ordered_to_reuse_what_is_resident(make_config: Any, graph_4x4: Any) -> None:
    raw = make_config("reuse", data=graph_4x4, num_epochs=1, eval_fraction=0.0, bucket_order="random")
    config, session = open_session(raw, resident_partitions=3)
    try:
        iteration = build_iterations(1, config.edge_paths, 1)[0]
        order = session.schedule_buckets(iteration)
        loads, before = 0, set()
        for bucket in order:
            session.swap_partitions(bucket)
            loads += len(set(session.residency.resident) - before)  # read ahead or at the swap
            before = set(session.residency.resident)
            assert len([key for key in session.residency.resident if key[0] == "node"]) <= 3
            session.load_edges(bucket)
            session.train()
            session.finish_bucket()
        assert sorted(order) == sorted(Bucket(lhs, rhs) for lhs in range(PARTS) for rhs in range(PARTS))
        assert loads == 5  # 4 partitions, one of them twice; PBG's swap of random 4x4 orders: 17 on average
    finally:
        session.close()


def test_between_save_points_nothing_is_recorded_and_the_pass_commits_what_per_bucket_saves_would(
    make_config: Any, graph_4x4: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partitions treated as big (the cheap-save threshold at 0 bytes): with a long
    progress_interval only the last bucket of the pass is a save point; partitions that leave
    memory before it are written as they leave. Same order, same embeddings as a save after
    every bucket; a kill before the end of the pass loses the pass (no record)."""
    monkeypatch.setattr(save_points, "CHEAP_SAVE_BYTES", 0)
    raw = make_config("rare", data=graph_4x4, num_epochs=1, eval_fraction=0.0, progress_interval=3600)
    config, rare = open_session(raw, resident_partitions=3)
    iteration = build_iterations(1, config.edge_paths, 1)[0]
    progress = CheckpointProgress(CheckpointStore(config.checkpoint_path))
    try:
        order = rare.schedule_buckets(iteration)
        finished = [train_bucket(rare, bucket) for bucket in order]
        assert [done["recorded"] for done in finished] == [False] * (len(order) - 1) + [True]
        assert progress.read(1) is not None and progress.read(1).done == len(order)  # type: ignore[union-attr]  # checked just before
        assert [row["index"] for row in progress.read(1).rows] == list(range(len(order)))  # type: ignore[union-attr]  # as above
        rare.write_checkpoint(iteration)
        rare.switch_version(iteration)
    finally:
        rare.close()

    each_raw = make_config("each", data=graph_4x4, num_epochs=1, eval_fraction=0.0, progress_interval=0)
    each_config, each = open_session(each_raw, resident_partitions=3)
    try:
        assert each.schedule_buckets(iteration) == order
        assert all(train_bucket(each, bucket)["recorded"] for bucket in order)
        each.write_checkpoint(iteration)
        each.switch_version(iteration)
    finally:
        each.close()
    ours, theirs = CheckpointStore(config.checkpoint_path), CheckpointStore(each_config.checkpoint_path)
    for part in range(PARTS):
        assert torch.equal(ours.load_embeddings("node", part, 1)[0], theirs.load_embeddings("node", part, 1)[0])


def test_a_kill_between_save_points_resumes_from_the_last_one(
    make_config: Any, graph_4x4: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(save_points, "CHEAP_SAVE_BYTES", 0)
    raw = make_config("kill", data=graph_4x4, num_epochs=1, eval_fraction=0.0, progress_interval=3600)
    config, first = open_session(raw, resident_partitions=3)
    iteration = build_iterations(1, config.edge_paths, 1)[0]
    try:
        order = first.schedule_buckets(iteration)
        for bucket in order[:5]:
            train_bucket(first, bucket)  # some partitions left memory and were written meanwhile
    finally:
        first.close()  # killed: no save point reached
    _, again = open_session(raw, resident_partitions=3)
    try:
        assert again.schedule_buckets(iteration) == order  # the whole pass again: nothing recorded
        assert again.residency.locations == {}  # the orphan saves are not trusted
    finally:
        again.close()


def test_reading_ahead_and_writing_behind_change_no_bit_of_the_result(
    make_config: Any, graph_4x4: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two slots of 4 partitions plus two in flight: the next bucket's partition is read while one
    trains, and (big partitions: save points only at the end of a pass) the ones leaving are
    written behind. The same run with every move done in place commits the same bytes."""
    monkeypatch.setattr(save_points, "CHEAP_SAVE_BYTES", 0)
    stores = {}
    for name in ("behind", "in_place"):
        raw = make_config(name, data=graph_4x4, num_epochs=2, eval_fraction=0.0, progress_interval=3600)
        config, session = open_session(raw, resident_partitions=2)
        thread = session.residency.io_thread
        assert thread is not None and session.residency.pool.specs["node"].num_slots == 4  # 2 + 2 in flight
        if name == "in_place":
            thread.close()
            session.residency.io_thread = None
        try:
            run(session, build_iterations(2, config.edge_paths, 1))
            background = sum(record.io["background_seconds"] for record in session.records)
            assert (background > 0) == (name == "behind")
            assert bytes_read(session) > 0
        finally:
            session.close()
        stores[name] = CheckpointStore(config.checkpoint_path)
    for part in range(PARTS):
        behind = stores["behind"].load_embeddings("node", part, 2)
        in_place = stores["in_place"].load_embeddings("node", part, 2)
        assert torch.equal(behind[0], in_place[0]) and behind[1] == in_place[1]
