"""Negative sampling as pure functions (PBG 1.10).

A batch of P positives is cut into C chunks of ``chunk_size`` (zero-padded to whole
chunks). Per side, the negatives of a chunk are:

- ``ALL``: every entity of the side's current partition (chunk = the whole batch);
  each positive's own entity is masked;
- ``UNIFORM`` (``num_batch_negs == 0``): ``num_uniform_negs`` entities drawn uniformly
  with replacement from ``[0, count)``, shared by the chunk; chunk = ``min(U, P)``;
- ``BATCH_UNIFORM``: the chunk's own positives, then ``num_uniform_negs`` uniform samples
  shared by the chunk; chunk = ``min(num_batch_negs, P)``. The diagonal (a positive
  against itself) and the padding columns of the last chunk are masked;
- ``NONE``: no negatives (``disable_lhs_negs`` / ``disable_rhs_negs``).

The chunk size is decided once per batch and shared by both sides, as in PBG.
Randomness comes only from the ``torch.Generator`` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

import torch

from pbg_core.types import FloatTensorType, LongTensorType


class NegativeMode(Enum):
    """How one side's negatives are formed."""

    NONE = "none"
    UNIFORM = "uniform"
    BATCH_UNIFORM = "batch_uniform"
    ALL = "all"


@dataclass(frozen=True)
class ChunkLayout:
    """How P positives are cut into chunks.

    Attributes:
        num_pos: Number of real positives P.
        chunk_size: Rows per chunk.
        num_chunks: ceil(P / chunk_size).
    """

    num_pos: int
    chunk_size: int
    num_chunks: int

    @property
    def padded(self) -> int:
        """Rows after zero padding (num_chunks * chunk_size)."""
        return self.num_chunks * self.chunk_size

    @property
    def last_chunk_size(self) -> int:
        """Real (non-padding) rows of the last chunk."""
        return self.num_pos - (self.num_chunks - 1) * self.chunk_size


def batch_mode(all_negs: bool, num_batch_negs: int) -> NegativeMode:
    """The batch's mode before disabling sides (PBG's selection order)."""
    if all_negs:
        return NegativeMode.ALL
    if num_batch_negs == 0:
        return NegativeMode.UNIFORM
    return NegativeMode.BATCH_UNIFORM


def side_mode(mode: NegativeMode, disabled: bool) -> NegativeMode:
    """``NONE`` for a disabled side, else the batch's mode."""
    return NegativeMode.NONE if disabled else mode


def chunk_layout(mode: NegativeMode, num_pos: int, num_batch_negs: int, num_uniform_negs: int) -> ChunkLayout:
    """The chunking of a batch of ``num_pos`` positives under the batch ``mode``.

    A chunk size of 0 (no negatives of any kind) is promoted to the whole batch so the
    layout stays well defined; every side then has zero negatives.
    """
    if mode is NegativeMode.ALL:
        size = num_pos
    elif mode is NegativeMode.UNIFORM:
        size = min(num_uniform_negs, num_pos)
    else:
        size = min(num_batch_negs, num_pos)
    if size <= 0:
        size = max(num_pos, 1)
    return ChunkLayout(num_pos=num_pos, chunk_size=size, num_chunks=-(-num_pos // size))


def pad_to_chunks(embs: FloatTensorType, layout: ChunkLayout) -> FloatTensorType:
    """[P, D] -> [C, chunk, D], zero padding the last chunk."""
    pad = layout.padded - embs.shape[0]
    if pad > 0:
        embs = torch.cat([embs, embs.new_zeros(pad, embs.shape[1])], dim=0)
    return embs.view(layout.num_chunks, layout.chunk_size, embs.shape[-1])


def unchunk(scores: FloatTensorType, layout: ChunkLayout) -> FloatTensorType:
    """[C, chunk, N] -> [P, N], dropping the padding rows."""
    flat = scores.flatten(0, 1)
    return flat if flat.shape[0] == layout.num_pos else flat[: layout.num_pos]


def sample_uniform(num_chunks: int, num_samples: int, count: int, generator: torch.Generator) -> LongTensorType:
    """Offsets [num_chunks, num_samples] uniform in ``[0, count)``, with replacement."""
    if count <= 0:
        raise ValueError(f"cannot sample uniform negatives from an empty partition (count={count})")
    return torch.randint(count, (num_chunks, num_samples), generator=generator)


def batch_negative_mask(layout: ChunkLayout, num_uniform: int, value: float = -1e9) -> FloatTensorType:
    """Additive mask over BATCH_UNIFORM negative scores: ``value`` where ignored, else 0.

    Shape [1, chunk, chunk + U] when the last chunk is full (broadcasts over chunks),
    else [C, chunk, chunk + U]. Masks the diagonal (a positive against itself) and, in
    the last chunk, the padding columns. Adding a mask is cheaper than ``masked_fill``
    forward and backward (the gradient passes through unchanged).
    """
    return _batch_mask(layout.chunk_size, layout.num_chunks, layout.last_chunk_size, num_uniform, value)


@lru_cache(maxsize=64)
def _batch_mask(chunk: int, num_chunks: int, last: int, num_uniform: int, value: float) -> torch.Tensor:
    ignored = torch.cat([torch.eye(chunk, dtype=torch.bool), torch.zeros(chunk, num_uniform, dtype=torch.bool)], 1)
    ignored = ignored.unsqueeze(0)
    if last != chunk:
        ignored = ignored.expand(num_chunks, -1, -1).clone()
        ignored[-1, :, last:chunk] = True
    return torch.zeros(ignored.shape).masked_fill_(ignored, value)
