"""pbg_core.session.resume: a pass resumes its matching record and discards any other."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _sessions import first_iteration, open_session

from pbg_core.ports import PassProgress
from pbg_core.session.resume import resume_or_start
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.progress import CheckpointProgress

ORDER = [Bucket(0, 0), Bucket(1, 1), Bucket(0, 1), Bucket(1, 0)]


@pytest.fixture
def session_parts(make_config: Any, graph_2x2: Any) -> Any:
    config, session = open_session(make_config("ckpt", data=graph_2x2, num_epochs=2))
    yield config, session, CheckpointProgress(CheckpointStore(config.checkpoint_path))
    session.close()


def resume(session: Any, progress: Any, iteration: Any, order: list[Bucket]) -> tuple[PassProgress, int | None]:
    return resume_or_start(
        iteration, order, progress, session.residency, session.model_state, session.store, session.kept
    )


def test_without_a_progress_store_every_pass_starts_afresh(session_parts: Any) -> None:
    config, session, _ = session_parts
    iteration = first_iteration(config)
    progress, model_where = resume(session, None, iteration, ORDER)
    assert progress == PassProgress(version=1, iteration_index=0, order=ORDER) and model_where is None


def test_a_record_of_the_same_pass_is_resumed_in_its_own_order(session_parts: Any) -> None:
    config, session, store = session_parts
    iteration = first_iteration(config)
    session.residency.ensure_resident([("node", 0)])
    handle = session.residency.handle(("node", 0))
    handle.embeddings.fill_(0.25)
    session.residency.mark_dirty([("node", 0)])
    assert session.residency.save_dirty(0) == [("node", 0)]  # what bucket 0 of the pass saved in its area
    recorded = PassProgress(version=1, iteration_index=0, order=ORDER[::-1], done=1, partitions={("node", 0): 0})
    store.write(recorded)
    handle.embeddings.zero_()  # this process's copy is lost (another process resumes)
    progress, model_where = resume(session, store, iteration, ORDER)
    assert progress == recorded and progress.order == ORDER[::-1]  # not this session's order
    assert model_where is None
    assert torch.equal(session.residency.handle(("node", 0)).embeddings, torch.full_like(handle.embeddings, 0.25))


@pytest.mark.parametrize(
    "recorded",
    [
        PassProgress(version=1, iteration_index=5, order=ORDER, done=2),  # another iteration
        PassProgress(version=1, iteration_index=0, order=ORDER[:2], done=1),  # other buckets
    ],
)
def test_a_record_of_another_pass_is_discarded(session_parts: Any, recorded: PassProgress) -> None:
    config, session, store = session_parts
    store.write(recorded)
    progress, model_where = resume(session, store, first_iteration(config), ORDER)
    assert (progress.done, progress.order, model_where) == (0, ORDER, None)
    assert store.read(1) is None  # deleted, not left to mislead a later run
