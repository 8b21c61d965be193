"""Hand-written forward and backward of the most common training batch (PBG 1.8-1.12).

:func:`supports` selects batches with batch + uniform negatives (``num_batch_negs > 0``,
no ``all_negs``), operator ``none``, the ``dot`` or ``cos`` comparator without bias,
the ranking, logistic or softmax loss, no regularizer, no global embeddings, no
featurized entity type, and a batch that fills whole chunks. :func:`train_batch` then
computes the same loss, gradients and RowAdagrad updates as the generic autograd path
of :mod:`pbg_core.training.batching` (tests hold them within 1e-5), drawing the same uniform
negatives from the generator. Why it is cheaper:

- Each side's rows are gathered in one ``index_select`` laid out per chunk as
  ``[chunk positives, chunk uniforms]`` (both sides in one call when they share a
  table), so a chunk's negatives ``[C, B + U, D]`` are a view, never a ``cat``.
- With no operator both score matrices use raw embeddings, so the LHS batch-negative
  block ``R L^T`` is the transpose of the RHS one ``L R^T``: computed once.
- Every big temporary (rows, gradients, scores) lives in a per-thread buffer reused
  from batch to batch (:func:`pbg_core.training.workspace.scratch`): fresh ones page-faulted
  ~850 times per batch. With both sides' negatives on, their scores are one
  ``[2, C, B, N]`` buffer, so the ranking loss runs each elementwise op once.
- The loss gradient is closed form (:mod:`pbg_core.training.loss_grads`; the ranking loss is
  one fused loop over both sides' scores); the embedding gradients come from
  :mod:`pbg_core.training.fast_backward`: four ``bmm`` written straight into the gradient
  buffer, or, for a ranking loss with few violating pairs, ``index_add`` over just the
  nonzero (positive, negative) pairs and RowAdagrad on just the rows they touch.
"""

from __future__ import annotations

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.model.comparators import CosComparator, DotComparator
from pbg_core.model.embedder import MASKED, MultiRelationEmbedder
from pbg_core.model.losses import LossFunction, RankingLoss
from pbg_core.model.negatives import sample_uniform
from pbg_core.model.operators import IdentityDynamicOperator, IdentityOperator
from pbg_core.stats import Stats
from pbg_core.training import fast_backward
from pbg_core.training.loss_grads import LOSSES, SideGrads, loss_grads, ranking_grads
from pbg_core.training.settings import BatchSettings, Trainer
from pbg_core.training.tables import BucketTables
from pbg_core.training.workspace import scratch
from pbg_core.types import FloatTensorType, LongTensorType, Side

_COMPARATORS = (DotComparator, CosComparator)
_IDENTITY_OPERATORS = (IdentityOperator, IdentityDynamicOperator)


def supports(
    model: MultiRelationEmbedder, loss_fn: LossFunction, settings: BatchSettings, rel: int, num_pos: int
) -> bool:
    """Whether :func:`train_batch` computes this batch exactly like the generic path.

    Args:
        model: The scoring model.
        loss_fn: The loss function.
        settings: Batching settings.
        rel: The batch's relation (0 in dynamic mode).
        num_pos: Number of edges in the batch.
    """
    if type(model.comparator) not in _COMPARATORS or type(loss_fn) not in LOSSES:
        return False
    if model.regularizer is not None or model.global_embs is not None:
        return False
    if settings.num_batch_negs <= 0 or (settings.disable_lhs_negs and settings.disable_rhs_negs):
        return False
    spec = model.relation(rel)
    if spec.all_negs or spec.lhs in model.featurized or spec.rhs in model.featurized:
        return False
    ops = [model.lhs_operators[0], model.rhs_operators[0]] if model.dynamic else [model.rhs_operators[rel]]
    if not all(type(op) in _IDENTITY_OPERATORS for op in ops):
        return False
    # A short last chunk needs zero padding and masks: left to the generic path.
    return num_pos > 0 and num_pos % min(settings.num_batch_negs, num_pos) == 0


def train_batch(trainer: Trainer, tables: BucketTables, batch: EdgeList, rel: int, generator: torch.Generator) -> Stats:
    """Train one batch accepted by :func:`supports`; returns its stats (as the generic path).

    Args:
        trainer: Model, loss, optimizers and settings.
        tables: Shared tables and RowAdagrad states (updated in place).
        batch: The batch's edges.
        rel: The batch's relation (0 in dynamic mode).
        generator: Source of the uniform negatives (drawn LHS first, as the generic path).
    """
    model, settings = trainer.model, trainer.settings
    spec = model.relation(rel)
    num_pos = len(batch)
    chunk = min(settings.num_batch_negs, num_pos)
    num_chunks = num_pos // chunk
    lhs_on, rhs_on = not settings.disable_lhs_negs, not settings.disable_rhs_negs
    keys = ((spec.lhs, Side.LHS), (spec.rhs, Side.RHS))
    uniforms = [
        _uniform(num_chunks, settings.num_uniform_negs if on else 0, tables.embeddings[key].shape[0], generator)
        for key, on in ((keys[0], lhs_on), (keys[1], rhs_on))
    ]
    positives = (batch.lhs.tensor, batch.rhs.tensor)
    rows = fast_backward.BatchRows(tables, keys, positives, uniforms, chunk, settings.max_norm)
    if type(model.comparator) is CosComparator:
        rows.normalize()
    emb_l, emb_r = rows.embs
    pos, lhs_neg, rhs_neg, both = _scores(emb_l, emb_r, chunk, lhs_on, rhs_on)
    scale = spec.weight if batch.weight is None else batch.weight.reshape(num_chunks, chunk) * spec.weight
    if both is not None and type(trainer.loss_fn) is RankingLoss:
        side_l, side_r = ranking_grads(trainer.loss_fn, pos, both, scale)
    else:
        side_l = loss_grads(trainer.loss_fn, pos, lhs_neg, scale, "_l")
        side_r = loss_grads(trainer.loss_fn, pos, rhs_neg, scale, "_r")

    if side_l.active is not None and side_r.active is not None and _sparse_enough(side_l, side_r, emb_l, emb_r):
        pairs = fast_backward.ranking_pairs(rows, side_l.grad_neg, side_r.grad_neg, (side_l.grad_pos, side_r.grad_pos))
        rows.step_pairs(trainer.row_optimizer, pairs)
    else:
        fast_backward.dense_backward(rows, side_l.grad_neg, side_r.grad_neg, side_l.grad_pos.add_(side_r.grad_pos))
        rows.step(trainer.row_optimizer)

    metrics = {
        "loss": float(side_l.loss + side_r.loss),
        "reg": 0.0,
        "violators_lhs": float(side_l.violators),
        "violators_rhs": float(side_r.violators),
    }
    return Stats(count=num_pos, metrics=metrics)


def _uniform(num_chunks: int, num_uniform: int, count: int, generator: torch.Generator) -> LongTensorType | None:
    return sample_uniform(num_chunks, num_uniform, count, generator) if num_uniform > 0 else None


def _scores(
    emb_l: FloatTensorType, emb_r: FloatTensorType, chunk: int, lhs_on: bool, rhs_on: bool
) -> tuple[FloatTensorType, FloatTensorType | None, FloatTensorType | None, FloatTensorType | None]:
    """Positive scores [C, B] and masked negative scores [C, B, B + U] per enabled side.

    LHS negatives are scored against the RHS positives and vice versa; the batch block
    of one is the transpose of the other's, so it is computed once. The positives'
    scores are not read off its diagonal: summed in another order they would break
    ties with a negative of the same entity differently from the generic path. When
    both sides have as many negatives, their scores are the two halves of one
    ``[2, C, B, N]`` buffer (also returned), so the loss can treat both in one pass.
    """
    num_chunks, dtype = emb_l.shape[0], emb_l.dtype
    lhs_pos, rhs_pos = emb_l[:, :chunk], emb_r[:, :chunk]
    prod = torch.mul(lhs_pos, rhs_pos, out=scratch("pos_prod", tuple(lhs_pos.shape), dtype))
    pos = prod.sum(-1)
    both: FloatTensorType | None = None
    rhs_neg = lhs_neg = None
    if lhs_on and rhs_on and emb_l.shape[1] == emb_r.shape[1]:
        both = scratch("negs", (2, num_chunks, chunk, emb_l.shape[1]), dtype)
        lhs_neg, rhs_neg = both[0], both[1]
        torch.bmm(lhs_pos, emb_r.transpose(1, 2), out=rhs_neg)
    elif rhs_on:
        out = scratch("rhs_neg", (num_chunks, chunk, emb_r.shape[1]), dtype)
        rhs_neg = torch.bmm(lhs_pos, emb_r.transpose(1, 2), out=out)
    elif lhs_on:
        out = scratch("lhs_neg", (num_chunks, chunk, emb_l.shape[1]), dtype)
        lhs_neg = torch.bmm(rhs_pos, emb_l.transpose(1, 2), out=out)
    block = rhs_neg if rhs_neg is not None else lhs_neg
    block[:, :, :chunk].diagonal(dim1=1, dim2=2).add_(MASKED)  # type: ignore[index]  # one of rhs_neg / lhs_neg is always computed, so block is a tensor
    if lhs_on and rhs_neg is not None:
        if lhs_neg is None:
            lhs_neg = scratch("lhs_neg", (num_chunks, chunk, emb_l.shape[1]), dtype)
        lhs_neg[:, :, :chunk] = rhs_neg[:, :, :chunk].transpose(1, 2)
        if emb_l.shape[1] > chunk:
            # bmm into a strided ``out`` goes through a temporary anyway; a contiguous
            # scratch plus one copy is ~15 us cheaper.
            uni = scratch("lhs_uni", (num_chunks, chunk, emb_l.shape[1] - chunk), dtype)
            lhs_neg[:, :, chunk:] = torch.bmm(rhs_pos, emb_l[:, chunk:].transpose(1, 2), out=uni)
    return pos, lhs_neg, rhs_neg, both


def _sparse_enough(side_l: SideGrads, side_r: SideGrads, emb_l: FloatTensorType, emb_r: FloatTensorType) -> bool:
    """Whether few enough score gradients are nonzero for the sparse backward to pay off."""
    num_chunks, chunk = side_l.grad_pos.shape
    entries = num_chunks * chunk * ((emb_l.shape[1] if side_l.grad_neg is not None else 0) +
                                    (emb_r.shape[1] if side_r.grad_neg is not None else 0))  # fmt: skip
    active = float(side_l.active + side_r.active)  # type: ignore[operator]  # the caller checked that both are not None
    return active <= fast_backward.SPARSE_MAX_DENSITY * entries
