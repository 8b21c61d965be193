"""pbg_core.evaluation.candidates: distinct candidate draws and the mask of those that are not negatives."""

from __future__ import annotations

import pytest
import torch

from pbg_core.evaluation.candidates import distinct_draw, mask_candidates, sample_candidates
from pbg_core.model.embedder import MASKED


@pytest.mark.parametrize(("total", "num"), [(1000, 7), (1000, 600), (50, 50), (3, 10)])
def test_a_draw_is_distinct_sorted_and_in_range(total: int, num: int) -> None:
    drawn = distinct_draw(total, num, torch.Generator().manual_seed(0))
    assert drawn.tolist() == sorted(set(drawn.tolist()))
    assert len(drawn) == min(total, num) and all(0 <= x < total for x in drawn.tolist())


def test_each_chunk_draws_its_own_candidates_and_all_of_them_is_every_entity() -> None:
    generator = torch.Generator().manual_seed(1)
    chunks = sample_candidates(3, 40, 100, generator)
    assert chunks.shape == (3, 40) and not torch.equal(chunks[0], chunks[1])
    assert sample_candidates(2, 5, 5, generator).tolist() == [list(range(5))] * 2
    with pytest.raises(ValueError, match="cannot draw 6 distinct candidates from a partition of 5 entities"):
        sample_candidates(1, 6, 5, generator)


def test_the_edges_own_entity_and_known_edges_are_masked_and_nothing_else() -> None:
    candidates = torch.tensor([[0, 2, 4], [1, 3, 5]])  # two chunks of two edges, the last one short
    neg = torch.zeros(3, 3)
    own = torch.tensor([2, 9, 5])  # edge 0's own entity is its candidate 2; edge 2's is 5
    known = (torch.tensor([1, 1, 2]), torch.tensor([0, 4, 1]))  # edge 1 knows 0 and 4; edge 2 knows 1
    mask_candidates(neg, candidates, 2, own, known)
    expected = [[0, MASKED, 0], [MASKED, 0, MASKED], [MASKED, 0, MASKED]]
    assert neg.tolist() == expected


def test_raw_ranking_masks_only_the_own_entity() -> None:
    neg = torch.zeros(2, 2)
    mask_candidates(neg, torch.tensor([[7, 8]]), 2, torch.tensor([8, 1]), None)
    assert neg.tolist() == [[0, MASKED], [0, 0]]
