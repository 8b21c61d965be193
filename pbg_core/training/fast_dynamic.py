"""Hand-written forward and backward of dynamic-relation batches with a row-wise operator.

In dynamic mode (PBG 1.14) an edge ``(u, r, v)`` is scored twice: "forward"
``c(u, h_r(v))`` against LHS negatives and "reverse" ``c(v, g_r(u))`` against RHS
negatives; negatives never pass through an operator. :func:`supports` selects batches
with batch + uniform negatives (``num_batch_negs > 0``, no ``all_negs``), the ``dot``
comparator, the ranking, logistic or softmax loss, N3 or no regularizer, an operator of
:data:`pbg_core.training.row_operators.ROW_OPERATORS` (``complex_diagonal``, ``diagonal``,
``translation``, ``none``) and no featurized entity type; a short last chunk is padded
and masked as the generic path does. :func:`train_batch` then computes the same loss,
regularizer, gradients and updates as the autograd path of :mod:`pbg_core.training.batching`
(tests hold them within 1e-5), drawing the same uniform negatives. Why it is cheaper:

- Each side's rows are gathered once laid out per chunk, ``[chunk positives, chunk
  uniforms]`` (both sides in one ``index_select`` when they share a table), so a
  chunk's negatives are a view and each side's scores are one ``bmm`` ``[C, B, B + U]``
  (the autograd path scores the batch and uniform blocks apart and concatenates).
- Backward is two ``bmm`` per side, written straight into gradient buffers of the
  same chunk layout: the rows get ``M^T h`` and the other side's operator output
  ``M [rows]``, where ``M`` is the closed-form score gradient (:mod:`pbg_core.training.loss_grads`).
- The operator and N3 are closed forms (:mod:`pbg_core.training.row_operators`): no autograd
  graph, no ``pow``/``abs``/``sqrt`` backward chains.
- Big temporaries live in reused per-thread buffers (:func:`pbg_core.training.workspace.scratch`).
"""

from __future__ import annotations

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.model.comparators import DotComparator
from pbg_core.model.embedder import MASKED, MultiRelationEmbedder
from pbg_core.model.losses import LossFunction
from pbg_core.model.negatives import sample_uniform
from pbg_core.stats import Stats
from pbg_core.training.fast_backward import SideRows
from pbg_core.training.loss_grads import LOSSES, SideGrads, loss_grads
from pbg_core.training.optimizers import RowAdagrad
from pbg_core.training.row_operators import ParamGrads, RowOperator, row_operator
from pbg_core.training.settings import BatchSettings, Trainer
from pbg_core.training.tables import BucketTables
from pbg_core.training.workspace import scratch
from pbg_core.types import FloatTensorType, LongTensorType, Side, SideKey


def supports(model: MultiRelationEmbedder, loss_fn: LossFunction, settings: BatchSettings, num_pos: int) -> bool:
    """Whether :func:`train_batch` computes this batch exactly like the generic path.

    Args:
        model: The scoring model.
        loss_fn: The loss function.
        settings: Batching settings.
        num_pos: Number of edges in the batch.
    """
    if not model.dynamic or type(model.comparator) is not DotComparator or type(loss_fn) not in LOSSES:
        return False
    if model.global_embs is not None or settings.num_batch_negs <= 0:
        return False
    if settings.disable_lhs_negs and settings.disable_rhs_negs:
        return False
    spec = model.relation(0)
    if spec.all_negs or spec.lhs in model.featurized or spec.rhs in model.featurized:
        return False
    if row_operator(model.lhs_operators[0]) is None or row_operator(model.rhs_operators[0]) is None:
        return False
    return num_pos > 0


class ChunkRows:
    """A batch's rows per side laid out per chunk, ``[C, B + U, D]``, and gradient buffers alike.

    Gathered with one ``index_select`` when both sides share a table (``max_norm``
    applied as the generic path does); :meth:`step` hands the gradients to RowAdagrad,
    once per table.
    """

    def __init__(
        self,
        tables: BucketTables,
        keys: tuple[SideKey, SideKey],
        positives: tuple[LongTensorType, LongTensorType],
        uniforms: list[LongTensorType | None],
        chunk: int,
        max_norm: float | None,
    ) -> None:
        self.tables = tables
        num_chunks = positives[0].numel() // chunk
        idx = [
            (pos.view(num_chunks, chunk) if uni is None else torch.cat([pos.view(num_chunks, chunk), uni], 1)).flatten()
            for pos, uni in zip(positives, uniforms, strict=True)
        ]
        gathered = SideRows(tables, keys, idx, max_norm, "dyn_")
        # The gradients share the rows' layout, so each table's block steps with its gather index.
        if gathered.shared:
            assert gathered.all_idx is not None  # set together with shared
            self.steps = [(keys[0], gathered.all_idx, gathered.grad_blocks[0])]
        else:
            self.steps = list(zip(keys, idx, gathered.grad_blocks, strict=True))
        self.embs = [r.view(num_chunks, -1, r.shape[1]) for r in gathered.rows]
        self.grads = [g.view(num_chunks, -1, g.shape[1]) for g in gathered.grads]

    def step(self, optimizer: RowAdagrad) -> None:
        """Apply RowAdagrad with the gradient buffers (overwritten)."""
        for key, idx, grads in self.steps:
            optimizer.step(self.tables.embeddings[key], self.tables.optim_state[key], idx, grads, grads_writable=True)


def train_batch(trainer: Trainer, tables: BucketTables, batch: EdgeList, generator: torch.Generator) -> Stats:
    """Train one batch accepted by :func:`supports`; returns its stats (as the generic path).

    Args:
        trainer: Model, loss, optimizers and settings.
        tables: Shared tables and RowAdagrad states (updated in place).
        batch: The batch's edges.
        generator: Source of the uniform negatives (drawn LHS first, as the generic path).
    """
    model, settings = trainer.model, trainer.settings
    spec = model.relation(0)
    num_pos = len(batch)
    chunk = min(settings.num_batch_negs, num_pos)
    num_chunks = -(-num_pos // chunk)
    valid = num_pos - (num_chunks - 1) * chunk  # real positives in the last chunk
    keys = ((spec.lhs, Side.LHS), (spec.rhs, Side.RHS))
    sides_on = (not settings.disable_lhs_negs, not settings.disable_rhs_negs)
    uniforms = _uniforms(tables, keys, sides_on, num_chunks, settings.num_uniform_negs, generator)
    positives, rel, scale = _padded(batch, num_chunks, chunk, spec.weight)
    rows = ChunkRows(tables, keys, positives, uniforms, chunk, settings.max_norm)
    emb_l, emb_r = rows.embs
    src_l, src_r = emb_l[:, :chunk], emb_r[:, :chunk]  # the positives' own rows
    ops = (model.lhs_operators[0], model.rhs_operators[0])
    _zero_padding((src_l, src_r), valid)
    dst_r = _row_op(ops[1]).forward(ops[1], emb_r, rel, scratch("dyn_dst_r", src_r.shape, src_r.dtype))  # h_r(v)
    dst_l = _row_op(ops[0]).forward(ops[0], emb_l, rel, scratch("dyn_dst_l", src_l.shape, src_l.dtype))  # g_r(u)
    _zero_padding((dst_r, dst_l), valid)
    # Forward direction: u against h_r(v), LHS rows as negatives; reverse: v against g_r(u).
    side_l = _score(trainer.loss_fn, src_l, dst_r, emb_l if sides_on[0] else None, scale, valid, "_l")
    side_r = _score(trainer.loss_fn, src_r, dst_l, emb_r if sides_on[1] else None, scale, valid, "_r")
    grad_l, grad_r = rows.grads
    d_dst_r = _backward(side_l, emb_l, src_l, dst_r, grad_l, "_l")
    d_dst_l = _backward(side_r, emb_r, src_r, dst_l, grad_r, "_r")
    reg, param_grads = _operators_backward(
        model, batch.rel, rel, ((emb_r, dst_r, d_dst_r, grad_r), (emb_l, dst_l, d_dst_l, grad_l))
    )
    rows.step(trainer.row_optimizer)
    _step_model(trainer, param_grads)
    metrics = {
        "loss": float(side_l.loss + side_r.loss),
        "reg": float(reg),
        "violators_lhs": float(side_l.violators),
        "violators_rhs": float(side_r.violators),
    }
    return Stats(count=num_pos, metrics=metrics)


def _row_op(op: torch.nn.Module) -> RowOperator:
    row_op = row_operator(op)
    assert row_op is not None  # supports() checked it
    return row_op


def _uniforms(
    tables: BucketTables,
    keys: tuple[SideKey, SideKey],
    sides_on: tuple[bool, bool],
    num_chunks: int,
    num_uniform: int,
    generator: torch.Generator,
) -> list[LongTensorType | None]:
    """Each side's uniform negatives [C, U] (None when off), drawn LHS first as the generic path."""
    return [
        sample_uniform(num_chunks, num_uniform, tables.embeddings[key].shape[0], generator)
        if on and num_uniform > 0
        else None
        for key, on in zip(keys, sides_on, strict=True)
    ]


def _operators_backward(
    model: MultiRelationEmbedder,
    batch_rel: LongTensorType,
    rel: LongTensorType,
    directions: tuple[tuple[FloatTensorType, FloatTensorType, FloatTensorType, FloatTensorType], ...],
) -> tuple[FloatTensorType | float, ParamGrads]:
    """Both operators' backward with N3: the regularizer's value and every parameter's gradient.

    ``directions`` are ``(rows, dst, d_dst, grad_rows)`` of the RHS operator, then the
    LHS one. Each backward adds N3 of its input (the other direction's src rows) and of
    its output; the operator-parameter term counts each real edge's relation once
    (``batch_rel``: unpadded), as the generic path's per-edge ``reg_params``.
    """
    coef = model.regularizer.weight if model.regularizer is not None else 0.0
    ops = (model.rhs_operators[0], model.lhs_operators[0])
    reg: FloatTensorType | float = 0.0
    param_grads: ParamGrads = []
    for op, (rows, dst, d_dst, grad_rows) in zip(ops, directions, strict=True):
        value, grads = _row_op(op).backward(op, rows, rel, dst, d_dst, grad_rows, coef)
        reg, param_grads = reg + value, param_grads + grads
    if coef:
        counts = torch.bincount(batch_rel, minlength=model.num_dynamic_relations).to(torch.float32)
        for op in ops:
            value, grads = _row_op(op).n3_params(op, counts, coef)
            reg, param_grads = reg + value, param_grads + grads
    return reg, param_grads


def _padded(
    batch: EdgeList, num_chunks: int, chunk: int, weight: float
) -> tuple[tuple[LongTensorType, LongTensorType], LongTensorType, float | FloatTensorType]:
    """The positives and relations padded to whole chunks, and each positive's loss scale.

    The generic path zero-pads the last chunk. Here the padding rows repeat the batch's
    first edge and are zeroed once gathered (:func:`_zero_padding`); their loss scale is
    0, so their gradients are exactly 0, and a zero gradient folded into a row the batch
    updates anyway changes nothing (no other row is written).
    """
    pad = num_chunks * chunk - len(batch)
    lhs, rhs, rel = batch.lhs.tensor, batch.rhs.tensor, batch.rel
    scale: float | FloatTensorType = weight if batch.weight is None else batch.weight * weight
    if pad == 0:
        return (
            (lhs, rhs),
            rel.view(num_chunks, chunk),
            scale.view(num_chunks, -1) if isinstance(scale, torch.Tensor) else scale,
        )
    lhs, rhs, rel = (torch.cat([t, t[:1].expand(pad)]) for t in (lhs, rhs, rel))
    per_edge = scale if isinstance(scale, torch.Tensor) else torch.full((len(batch),), scale)
    scale = torch.cat([per_edge, per_edge.new_zeros(pad)]).view(num_chunks, chunk)
    return (lhs, rhs), rel.view(num_chunks, chunk), scale


def _zero_padding(tensors: tuple[FloatTensorType, ...], valid: int) -> None:
    """Zero the padding rows (after the first ``valid``) of the last chunk of each [C, B, D] tensor."""
    if valid < tensors[0].shape[1]:
        for t in tensors:
            t[-1, valid:].zero_()


def _score(
    loss_fn: LossFunction,
    src: FloatTensorType,
    dst: FloatTensorType,
    rows: FloatTensorType | None,
    scale: float | FloatTensorType,
    valid: int,
    tag: str,
) -> SideGrads:
    """Loss and score gradients of one direction: ``src`` [C, B, D] against the operator
    output ``dst``, and ``rows`` [C, B + U, D] (or None: no negatives) against ``dst``.

    Masked with -1e9 as the generic path: each positive against itself and, in a padded
    last chunk, the padding columns (``valid`` real positives).
    """
    pos = torch.mul(src, dst, out=scratch("dyn_prod", src.shape, src.dtype)).sum(-1)
    neg = None
    if rows is not None:
        chunk = src.shape[1]
        out = scratch("dyn_negs" + tag, (*dst.shape[:2], rows.shape[1]), dst.dtype)
        neg = torch.bmm(dst, rows.transpose(1, 2), out=out)
        neg[:, :, :chunk].diagonal(dim1=1, dim2=2).add_(MASKED)  # a positive is not its own negative
        if valid < chunk:
            neg[-1, :, valid:chunk].add_(MASKED)
    return loss_grads(loss_fn, pos, neg, scale, tag)


def _backward(
    side: SideGrads,
    rows: FloatTensorType,
    src: FloatTensorType,
    dst: FloatTensorType,
    grad_rows: FloatTensorType,
    tag: str,
) -> FloatTensorType:
    """Write the gradient of one direction's rows into ``grad_rows``; return that of ``dst``.

    With ``M`` the negatives' score gradients [C, B, B + U] and ``g`` the positives':
    ``d rows = M^T dst`` (plus ``g dst`` on the positives) and ``d dst = M rows + g src``.
    """
    d_dst = scratch("dyn_d_dst" + tag, dst.shape, dst.dtype)
    g = side.grad_pos.unsqueeze(-1)
    if side.grad_neg is None:
        grad_rows.zero_()
        torch.mul(g, src, out=d_dst)
    else:
        torch.bmm(side.grad_neg.transpose(1, 2), dst, out=grad_rows)
        torch.bmm(side.grad_neg, rows, out=d_dst).addcmul_(g, src)
    grad_rows[:, : src.shape[1]].addcmul_(g, dst)
    return d_dst


def _step_model(trainer: Trainer, param_grads: ParamGrads) -> None:
    """AsyncAdagrad on the operator parameters with their summed gradients."""
    if trainer.model_optimizer is None or not param_grads:
        return
    for param, grad in param_grads:
        param.grad = grad if param.grad is None else param.grad.add_(grad)
    trainer.model_optimizer.step()
    trainer.model_optimizer.zero_grad()
