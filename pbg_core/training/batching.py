"""What one HOGWILD worker does with its slice of a bucket: train or evaluate in batches.

Batches follow PBG's ``process_in_batches`` (1.16): in standard mode each batch holds
one relation, picked with probability proportional to its remaining edges, and takes
that relation's next ``batch_size`` edges; in dynamic mode batches are contiguous.

Per training batch: batches that :func:`pbg_core.training.fast_paths.supports` accepts (no
operator, dot/cos, ranking/logistic/softmax, batch + uniform negatives) run its
hand-written forward/backward; so do dynamic-relation batches with a row-wise operator
that :func:`pbg_core.training.fast_dynamic.supports` accepts. Any other batch gathers the rows it needs (positives,
uniform negatives) with one ``index_select`` per request into dense leaf tensors
(:mod:`pbg_core.training.row_gather`), differentiates the small dense graph with autograd, and
:class:`RowAdagrad` writes coalesced row updates back into the shared tables in place
(no sparse gradients). All randomness comes from the ``torch.Generator`` passed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pbg_core.edgelist import EdgeList, EntityList
from pbg_core.errors import ConfigError
from pbg_core.evaluation.candidates import mask_candidates, sample_candidates
from pbg_core.evaluation.metrics import FilterIndex, auc_sum, mask_known, rank_metric_sums, ranks_from_scores
from pbg_core.evaluation.ranking import ALL_NEGS_SCORE_BUDGET
from pbg_core.model.embedder import MultiRelationEmbedder, Scores, SideBatch
from pbg_core.model.max_norm import renorm_table_
from pbg_core.model.negatives import NegativeMode, batch_mode, chunk_layout, sample_uniform, side_mode
from pbg_core.stats import Stats
from pbg_core.training import fast_dynamic, fast_paths
from pbg_core.training.row_gather import RowGather, bag_mean
from pbg_core.training.settings import BatchSettings, Evaluator, Trainer
from pbg_core.training.tables import BucketTables
from pbg_core.types import LongTensorType, Side, SideKey


# ---- batching ------------------------------------------------------------------------------
def iter_batches(
    rel: LongTensorType, indices: LongTensorType, batch_size: int, one_group: bool, generator: torch.Generator
) -> Iterator[LongTensorType]:
    """Edge indices of every batch (PBG's ``process_in_batches`` order).

    ``one_group``: batches need not be split by relation (dynamic relations, whose operator
    takes each edge's relation, or a single relation type): consecutive slices of
    ``indices``. With one relation type that is exactly what grouping would give (one group,
    in order, the generator unused) without sorting every index of the chunk first.
    """
    if one_group:
        for start in range(0, indices.numel(), batch_size):
            yield indices[start : start + batch_size]
        return
    edge_rel = rel[indices]
    order = torch.sort(edge_rel, stable=True).indices
    _, counts = torch.unique_consecutive(edge_rel[order], return_counts=True)
    groups = list(indices[order].split(counts.tolist()))
    remaining = counts.clone()
    while True:
        total = int(remaining.sum())
        if total == 0:
            return
        pick = int(torch.multinomial(remaining.double(), 1, generator=generator)) if len(groups) > 1 else 0
        offset = groups[pick].numel() - int(remaining[pick])
        take = min(int(remaining[pick]), batch_size)
        remaining[pick] -= take
        yield groups[pick][offset : offset + take]


def _one_group(model: MultiRelationEmbedder) -> bool:
    """Whether batches may mix every edge (see :func:`iter_batches`)."""
    return model.dynamic or len(model.relations) == 1


@dataclass
class _Prepared:
    rel: int | LongTensorType
    layout: Any
    lhs: SideBatch
    rhs: SideBatch
    gather: RowGather
    weight: float
    candidates: tuple[LongTensorType | None, LongTensorType | None] = (None, None)  # per side, [C, U] offsets


def _prepare(
    model: MultiRelationEmbedder,
    settings: BatchSettings,
    tables: BucketTables,
    batch: EdgeList,
    generator: torch.Generator,
    requires_grad: bool,
) -> _Prepared:
    """Sample negatives and gather every row the batch needs."""
    rel: int | LongTensorType = batch.rel if model.dynamic else int(batch.rel[0])
    spec = model.relation(0 if model.dynamic else rel)  # type: ignore[arg-type]  # rel is an int here unless the model is dynamic (then 0 is passed)
    mode = batch_mode(spec.all_negs, settings.num_batch_negs)
    layout = chunk_layout(mode, len(batch), settings.num_batch_negs, settings.num_uniform_negs)
    gather = RowGather(tables, settings.max_norm, requires_grad)
    plans = []
    for side, entity, entities, disabled in (
        (Side.LHS, spec.lhs, batch.lhs, settings.disable_lhs_negs),
        (Side.RHS, spec.rhs, batch.rhs, settings.disable_rhs_negs),
    ):
        smode = side_mode(mode, disabled)
        plans.append(_plan_side(model, settings, tables, gather, (entity, side), entities, smode, layout, generator))
    gather.fetch()
    sides = [_side_batch(tables, gather, *plan) for plan in plans]
    candidates = (plans[0][3].get("offsets"), plans[1][3].get("offsets"))
    return _Prepared(rel, layout, sides[0], sides[1], gather, spec.weight, candidates)


def _plan_side(
    model: MultiRelationEmbedder,
    settings: BatchSettings,
    tables: BucketTables,
    gather: RowGather,
    key: SideKey,
    entities: EntityList,
    smode: NegativeMode,
    layout: Any,
    generator: torch.Generator,
) -> tuple[SideKey, EntityList, NegativeMode, dict[str, Any]]:
    """Register the rows one side needs (positives or feature rows, uniform, all)."""
    featurized = key[0] in model.featurized
    handles: dict[str, Any] = {}
    if featurized:
        if smode in (NegativeMode.UNIFORM, NegativeMode.ALL):
            raise ConfigError([f"featurized entity type {key[0]!r} supports only batch negatives, not {smode.value}"])
        if entities.tensor_list is None:
            raise ConfigError([f"entity type {key[0]!r} is featurized but the edges carry no feature lists"])
        handles["features"] = gather.add(key, entities.tensor_list.data)
    else:
        handles["pos"] = gather.add(key, entities.tensor)
    uniform_wanted = smode is NegativeMode.UNIFORM or (
        smode is NegativeMode.BATCH_UNIFORM and settings.num_uniform_negs > 0
    )
    if uniform_wanted and not featurized:  # PBG silently skips uniform negatives of featurized types
        count = tables.embeddings[key].shape[0]
        if settings.distinct_candidates:
            sampled = sample_candidates(layout.num_chunks, settings.num_uniform_negs, count, generator)
            handles["offsets"] = sampled
        else:
            sampled = sample_uniform(layout.num_chunks, settings.num_uniform_negs, count, generator)
        handles["uniform"] = gather.add(key, sampled.flatten())
        handles["uniform_shape"] = tuple(sampled.shape)
    if smode is NegativeMode.ALL and gather.requires_grad:
        handles["all"] = gather.add(key, torch.arange(tables.embeddings[key].shape[0]))
    return key, entities, smode, handles


def _side_batch(
    tables: BucketTables,
    gather: RowGather,
    key: SideKey,
    entities: EntityList,
    smode: NegativeMode,
    handles: dict[str, Any],
) -> SideBatch:
    """Turn the gathered rows of one side into a :class:`SideBatch`."""
    if "features" in handles:
        pos = bag_mean(gather.get(handles["features"]), entities)
    else:
        pos = gather.get(handles["pos"])
    side = SideBatch(entity=key[0], pos=pos, mode=smode)
    if "uniform" in handles:
        side.uniform = gather.get(handles["uniform"]).unflatten(0, handles["uniform_shape"])
    if smode is NegativeMode.ALL:
        if "all" in handles:
            side.all_embs = gather.get(handles["all"])
        else:
            # Evaluation scores the table itself; PBG looks every entity up with max_norm,
            # which renorms the candidates (in the table, as every lookup does; settled, as
            # every lookup without gradient: pbg_core.model.max_norm).
            if gather.max_norm is not None:
                renorm_table_(tables.embeddings[key], gather.max_norm, settle=True)
            side.all_embs = tables.embeddings[key]
        side.pos_offsets = entities.tensor
    return side


# ---- training ------------------------------------------------------------------------------
def train_edges(
    trainer: Trainer, tables: BucketTables, edges: EdgeList, indices: LongTensorType, generator: torch.Generator
) -> Stats:
    """Train on ``edges[indices]`` in batches; returns summed train stats.

    Args:
        trainer: Model, loss, optimizers and settings.
        tables: The bucket's shared embedding tables and RowAdagrad states (updated in place).
        edges: The bucket's edges (shared memory).
        indices: This worker's edge indices, in the order to train them.
        generator: Source of every random choice (relation picks, uniform negatives).

    Returns:
        Stats with ``loss`` (sum of batch losses), ``reg``, ``violators_lhs``, ``violators_rhs``.
    """
    model, settings = trainer.model, trainer.settings
    total = Stats()
    for batch_idx in iter_batches(edges.rel, indices, settings.batch_size, _one_group(model), generator):
        total = total + _train_batch(trainer, tables, edges[batch_idx], generator)
    return total


def _train_batch(trainer: Trainer, tables: BucketTables, batch: EdgeList, generator: torch.Generator) -> Stats:
    rel = 0 if trainer.model.dynamic else int(batch.rel[0])
    if trainer.fast_path and fast_paths.supports(trainer.model, trainer.loss_fn, trainer.settings, rel, len(batch)):
        return fast_paths.train_batch(trainer, tables, batch, rel, generator)
    if trainer.fast_path and fast_dynamic.supports(trainer.model, trainer.loss_fn, trainer.settings, len(batch)):
        return fast_dynamic.train_batch(trainer, tables, batch, generator)
    prep = _prepare(trainer.model, trainer.settings, tables, batch, generator, requires_grad=True)
    scores = trainer.model.score(prep.rel, prep.layout, prep.lhs, prep.rhs)
    loss_fn = trainer.loss_fn
    loss = prep.weight * (
        loss_fn(scores.lhs_pos, scores.lhs_neg, batch.weight) + loss_fn(scores.rhs_pos, scores.rhs_neg, batch.weight)
    )
    objective = loss if scores.reg is None else loss + scores.reg
    if objective.requires_grad:
        objective.backward()
    prep.gather.apply(trainer.row_optimizer)
    if trainer.model_optimizer is not None:
        trainer.model_optimizer.step()
        trainer.model_optimizer.zero_grad()
    with torch.no_grad():
        metrics = {
            "loss": loss.item(),
            "reg": scores.reg.item() if scores.reg is not None else 0.0,
            "violators_lhs": float((scores.lhs_neg > scores.lhs_pos.unsqueeze(1)).sum()),
            "violators_rhs": float((scores.rhs_neg > scores.rhs_pos.unsqueeze(1)).sum()),
        }
    return Stats(count=len(batch), metrics=metrics)


# ---- evaluation ----------------------------------------------------------------------------
def eval_edges(
    evaluator: Evaluator,
    tables: BucketTables,
    edges: EdgeList,
    indices: LongTensorType,
    generator: torch.Generator,
    filter_index: FilterIndex | None = None,
) -> Stats:
    """Rank ``edges[indices]`` against their negatives; returns summed eval stats.

    Each edge's ``pos_rank``/``mrr``/``r1``/``r10``/``r50``/``auc`` is the mean over the
    sides that have negatives; ``loss`` is the relation weight times the sum of the per-side
    losses, as in training. With ``filter_index``, known true edges score ``-1e9`` among
    all_negs negatives, like masked ones (PBG's filtered evaluator).
    In all_negs mode a batch is scored in row blocks of at most
    ``ALL_NEGS_SCORE_BUDGET`` scores per side.
    """
    model, settings = evaluator.model, evaluator.settings
    total = Stats()
    with torch.no_grad():
        for batch_idx in iter_batches(edges.rel, indices, settings.batch_size, _one_group(model), generator):
            for block in _all_negs_blocks(model, tables, edges, batch_idx):
                total = total + _eval_batch(evaluator, tables, edges[block], generator, filter_index)
    return total


def _all_negs_blocks(
    model: MultiRelationEmbedder, tables: BucketTables, edges: EdgeList, batch_idx: LongTensorType
) -> list[LongTensorType]:
    """Split a batch whose relation uses all_negs so each block's score matrix fits the budget."""
    spec = model.relation(0 if model.dynamic else int(edges.rel[batch_idx[0]]))
    if not spec.all_negs:
        return [batch_idx]
    count = max(tables.embeddings[(spec.lhs, Side.LHS)].shape[0], tables.embeddings[(spec.rhs, Side.RHS)].shape[0])
    rows = max(1, ALL_NEGS_SCORE_BUDGET // max(count, 1))
    return list(batch_idx.split(rows))


def _eval_batch(
    evaluator: Evaluator,
    tables: BucketTables,
    batch: EdgeList,
    generator: torch.Generator,
    filter_index: FilterIndex | None,
) -> Stats:
    prep = _prepare(evaluator.model, evaluator.settings, tables, batch, generator, requires_grad=False)
    scores = evaluator.model.score(prep.rel, prep.layout, prep.lhs, prep.rhs)
    if filter_index is not None:
        _apply_filter(scores, prep, batch, filter_index)
    if evaluator.settings.distinct_candidates:
        _mask_candidates(scores, prep, batch, filter_index)
    loss_fn = evaluator.loss_fn
    # As in training (and PBG's evaluator): the relation's weight times both sides' losses.
    loss = prep.weight * (
        loss_fn(scores.lhs_pos, scores.lhs_neg, batch.weight) + loss_fn(scores.rhs_pos, scores.rhs_neg, batch.weight)
    )
    metrics = {"loss": float(loss), "pos_rank": 0.0, "mrr": 0.0, "r1": 0.0, "r10": 0.0, "r50": 0.0, "auc": 0.0}
    sides = [(p, n) for p, n in ((scores.lhs_pos, scores.lhs_neg), (scores.rhs_pos, scores.rhs_neg)) if n.shape[1] > 0]
    for pos, neg in sides:
        for name, value in rank_metric_sums(ranks_from_scores(pos, neg)).items():
            metrics[name] += value / len(sides)
        metrics["auc"] += auc_sum(pos, neg, generator) / len(sides)
    return Stats(count=len(batch), metrics=metrics)


def _apply_filter(scores: Scores, prep: _Prepared, batch: EdgeList, filter_index: FilterIndex) -> None:
    """Set known true edges to ``MASKED`` (-1e9) in the all_negs score matrices.

    PBG's filtered evaluator gives them -1e9, as masked negatives: they stay in the AUC's
    pool of negatives (a positive beats them) and out of the ranks.
    """
    for side, neg, anchors in (
        (Side.LHS, scores.lhs_neg, batch.rhs.tensor),
        (Side.RHS, scores.rhs_neg, batch.lhs.tensor),
    ):
        if side.pick(prep.lhs, prep.rhs).mode is NegativeMode.ALL:
            mask_known(neg, filter_index, side, anchors, batch.rel)


def _mask_candidates(scores: Scores, prep: _Prepared, batch: EdgeList, filter_index: FilterIndex | None) -> None:
    """Sampled evaluation: mask each side's candidates equal to its own entity, or known (filtered)."""
    for side, neg, anchors, candidates in (
        (Side.LHS, scores.lhs_neg, batch.rhs.tensor, prep.candidates[0]),
        (Side.RHS, scores.rhs_neg, batch.lhs.tensor, prep.candidates[1]),
    ):
        if candidates is None:
            continue
        known = filter_index.known(side, anchors, batch.rel) if filter_index is not None else None
        own = side.pick(batch.lhs, batch.rhs).tensor
        mask_candidates(neg, candidates, prep.layout.chunk_size, own, known)
