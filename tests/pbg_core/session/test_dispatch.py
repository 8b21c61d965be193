"""pbg_core.session.dispatch: the held-out split, the training order and one job per worker."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _sessions import open_session

from pbg_core.parallel import worker_jobs
from pbg_core.session.dispatch import dispatch, holdout_split, shuffled
from pbg_core.session.iterations import build_iterations
from pbg_core.types import Bucket

ITERATIONS = build_iterations(num_epochs=3, edge_paths=["a", "b"], num_edge_chunks=2)
EPOCH_1, EPOCH_2 = ITERATIONS[0], ITERATIONS[4]  # same edge path and chunk, another epoch
OTHER_CHUNK = ITERATIONS[1]


def test_holdout_split_holds_out_the_fraction_disjoint_from_training() -> None:
    train, held = holdout_split(1000, 0.05, seed=7, iteration=EPOCH_1, bucket=Bucket(0, 1))
    assert len(held) == 50 and len(train) == 950
    assert sorted(torch.cat([train, held]).tolist()) == list(range(1000))  # without replacement


def test_holdout_split_is_the_same_every_epoch_and_differs_per_chunk_bucket_and_seed() -> None:
    assert (EPOCH_1.epoch_idx, EPOCH_1.edge_path_idx, EPOCH_1.edge_chunk_idx) == (0, 0, 0)
    assert (EPOCH_2.epoch_idx, EPOCH_2.edge_path_idx, EPOCH_2.edge_chunk_idx) == (1, 0, 0)
    held = holdout_split(500, 0.1, 7, EPOCH_1, Bucket(0, 0))[1]
    assert torch.equal(held, holdout_split(500, 0.1, 7, EPOCH_2, Bucket(0, 0))[1])
    for other in [
        holdout_split(500, 0.1, 7, OTHER_CHUNK, Bucket(0, 0))[1],
        holdout_split(500, 0.1, 7, EPOCH_1, Bucket(1, 0))[1],
        holdout_split(500, 0.1, 8, EPOCH_1, Bucket(0, 0))[1],
    ]:
        assert not torch.equal(held, other)


@pytest.mark.parametrize(("num_edges", "fraction"), [(9, 0.1), (100, 0.0)])
def test_holdout_split_with_nothing_held_out_keeps_the_file_order(num_edges: int, fraction: float) -> None:
    train, held = holdout_split(num_edges, fraction, 7, EPOCH_1, Bucket(0, 0))
    assert held.tolist() == [] and train.tolist() == list(range(num_edges))


def test_shuffled_is_a_seeded_permutation_new_every_iteration() -> None:
    indices = torch.arange(100, 200)
    first = shuffled(indices, 3, EPOCH_1, Bucket(0, 0))
    assert sorted(first.tolist()) == indices.tolist() and first.tolist() != indices.tolist()
    assert torch.equal(first, shuffled(indices, 3, EPOCH_1, Bucket(0, 0)))
    assert not torch.equal(first, shuffled(indices, 3, EPOCH_2, Bucket(0, 0)))
    assert not torch.equal(first, shuffled(indices, 3, EPOCH_1, Bucket(0, 1)))


def test_dispatch_evaluates_every_index_once_and_its_tag_seeds_the_negatives(make_config: Any) -> None:
    _, session = open_session(make_config("ckpt"))
    try:
        bucket = Bucket(0, 0)
        session.residency.ensure_resident([("node", 0)])
        edges = session.edge_sources[0].load_chunk(bucket, 0, 1, shared=True)
        indices = torch.arange(len(edges))
        args = (session.workers, session.settings, session.residency, session.seed, worker_jobs.eval_job, bucket)

        def run(tag: tuple[Any, ...], idx: torch.Tensor = indices) -> Any:
            return dispatch(*args, edges, idx, tag, "holdout")

        stats = run(("t", 0))
        assert stats.count == len(edges) > 0
        assert run(("t", 0)).metrics == stats.metrics  # the same tag: the same negatives
        assert run(("t", 1)).metrics != stats.metrics  # another tag: other negatives
        assert run(("t", 0), indices[:10]).count == 10
    finally:
        session.close()
