"""pbg_core.kernels.top_k: each row's k best entries, ties by the lowest column, NaN first, as a sort would give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pbg_core.kernels.top_k import CHUNK, row_top_k


def sorted_top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Brute force: columns by (NaN first, value descending, column ascending), the first k."""
    values = scores.numpy()
    nan = np.isnan(values)
    columns = np.broadcast_to(np.arange(values.shape[1]), values.shape)
    order = np.lexsort((columns, -np.where(nan, 0, values), ~nan), axis=1)
    return torch.from_numpy(order[:, :k].copy())


@pytest.mark.parametrize("threads", [1, 2])
def test_top_k_equals_a_stable_sort_with_ties_inf_and_nan(threads: int) -> None:
    generator = torch.Generator().manual_seed(0)
    for trial in range(300):
        rows, cols = (
            int(torch.randint(1, 40, (1,), generator=generator)),
            int(torch.randint(1, 50, (1,), generator=generator)),
        )
        k = int(torch.randint(1, cols + 1, (1,), generator=generator))
        scores = torch.randint(-3, 4, (rows, cols), generator=generator).float()  # many ties
        if trial % 3 == 0:
            scores[torch.rand(rows, cols, generator=generator) < 0.2] = float("-inf")
        if trial % 5 == 0:
            scores[torch.rand(rows, cols, generator=generator) < 0.05] = float("nan")
        values, picked = row_top_k(scores, k, threads)
        want = sorted_top(scores, k)
        assert torch.equal(picked, want), trial
        assert torch.allclose(values, scores.gather(1, want), equal_nan=True), trial


def test_distinct_scores_match_torch_topk() -> None:
    scores = torch.randn(64, 5000, generator=torch.Generator().manual_seed(1))
    values, picked = row_top_k(scores, 10)
    want_values, want_picked = torch.topk(scores, 10, dim=1)
    assert torch.equal(values, want_values)
    assert torch.equal(picked, want_picked)


@pytest.mark.parametrize("k", [0, 6])
def test_k_outside_the_columns_is_refused(k: int) -> None:
    with pytest.raises(ValueError, match=f"k={k} is outside 1..5"):
        row_top_k(torch.zeros(2, 5), k)


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_of_many_chunks_equal_a_stable_sort(threads: int) -> None:
    """Rows several ``CHUNK`` runs long, so that whole runs are skipped: ties, +-inf and NaN anywhere."""
    generator = torch.Generator().manual_seed(2)
    for trial in range(120):
        cols = int(torch.randint(CHUNK - 2, 6 * CHUNK, (1,), generator=generator))
        k = int(torch.randint(1, 40, (1,), generator=generator))
        if trial % 2:
            scores = torch.randint(-50, 51, (20, cols), generator=generator).float()  # ties at the k-th
        else:
            scores = torch.randn(20, cols, generator=generator)
        draw = torch.rand(20, cols, generator=generator)
        scores[draw < 0.01 * (trial % 4)] = float("nan")  # none, then NaN late in a run, often
        scores[(draw > 0.5) & (draw < 0.52)] = float("-inf")
        scores[(draw > 0.6) & (draw < 0.6 + 0.001 * (trial % 3))] = float("inf")
        scores[0] = float("nan")  # a row of NaN only: its k-th best is NaN from the start
        values, picked = row_top_k(scores, k, threads)
        want = sorted_top(scores, k)
        assert torch.equal(picked, want), trial
        assert torch.allclose(values, scores.gather(1, want), equal_nan=True), trial
