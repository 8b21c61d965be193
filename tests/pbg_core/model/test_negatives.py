"""Negative modes, chunk layouts, masks and uniform sampling (PBG 1.10)."""

import torch

from pbg_core.model.negatives import (
    NegativeMode,
    batch_mode,
    batch_negative_mask,
    chunk_layout,
    pad_to_chunks,
    sample_uniform,
    side_mode,
    unchunk,
)


def test_mode_selection_order() -> None:
    assert batch_mode(all_negs=True, num_batch_negs=50) is NegativeMode.ALL
    assert batch_mode(False, 0) is NegativeMode.UNIFORM
    assert batch_mode(False, 50) is NegativeMode.BATCH_UNIFORM
    assert side_mode(NegativeMode.ALL, disabled=True) is NegativeMode.NONE


def test_chunk_sizes() -> None:
    assert chunk_layout(NegativeMode.BATCH_UNIFORM, 120, 50, 10) == chunk_layout(
        NegativeMode.BATCH_UNIFORM, 120, 50, 99
    )
    lay = chunk_layout(NegativeMode.BATCH_UNIFORM, 120, 50, 10)
    assert (lay.chunk_size, lay.num_chunks, lay.last_chunk_size, lay.padded) == (50, 3, 20, 150)
    assert chunk_layout(NegativeMode.BATCH_UNIFORM, 7, 50, 10).chunk_size == 7
    assert chunk_layout(NegativeMode.UNIFORM, 120, 0, 30).chunk_size == 30
    assert chunk_layout(NegativeMode.ALL, 120, 50, 10).num_chunks == 1
    assert chunk_layout(NegativeMode.UNIFORM, 5, 0, 0).chunk_size == 5  # no negatives at all


def test_pad_and_unchunk() -> None:
    lay = chunk_layout(NegativeMode.BATCH_UNIFORM, 5, 2, 0)
    x = torch.arange(10.0).view(5, 2)
    chunks = pad_to_chunks(x, lay)
    assert chunks.shape == (3, 2, 2) and chunks[2, 1].tolist() == [0.0, 0.0]
    assert torch.equal(unchunk(chunks, lay), x)


def test_mask_diagonal_and_padding_columns() -> None:
    lay = chunk_layout(NegativeMode.BATCH_UNIFORM, 5, 3, 0)  # chunks of 3, last has 2 real rows
    mask = batch_negative_mask(lay, num_uniform=2, value=-1.0)
    assert mask.shape == (2, 3, 5)
    assert mask[0].tolist() == [[-1, 0, 0, 0, 0], [0, -1, 0, 0, 0], [0, 0, -1, 0, 0]]
    # last chunk: diagonal, plus column 2 (padding) for every row; uniform columns kept
    assert mask[1].tolist() == [[-1, 0, -1, 0, 0], [0, -1, -1, 0, 0], [0, 0, -1, 0, 0]]
    full = batch_negative_mask(chunk_layout(NegativeMode.BATCH_UNIFORM, 6, 3, 0), 1, -1.0)
    assert full.shape == (1, 3, 4)  # broadcasts over chunks


def test_uniform_samples_are_seeded_and_in_range() -> None:
    a = sample_uniform(4, 1000, 7, torch.Generator().manual_seed(3))
    b = sample_uniform(4, 1000, 7, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (4, 1000)
    assert int(a.min()) == 0 and int(a.max()) == 6  # with replacement over [0, count)
