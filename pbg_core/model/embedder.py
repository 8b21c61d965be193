"""The scoring model: operators, global embeddings and the comparator (PBG 1.6, 1.14).

:class:`MultiRelationEmbedder` holds only operator parameters and global embeddings;
entity tables live in shared memory and the caller passes the rows it gathered
(:class:`SideBatch`). Scoring follows PBG's ``adjust_embs`` order: add the global
embedding, apply the operator, comparator ``prepare``.

- Standard mode: one operator per relation on the RHS only; an edge scores
  ``c(u, f_r(v))``, LHS negatives against ``f_r(v)``, RHS negatives are passed through
  ``f_r``.
- Dynamic mode (``num_dynamic_relations > 0``): one LHS and one RHS operator module with
  [N, ...] parameters. "Forward" ``c(u, h_r(v))`` with LHS negatives and "reverse"
  ``c(v, g_r(u))`` with RHS negatives; negatives never pass through an operator.

State dict keys are PBG's private names (``rhs_operators.{i}.{param}``,
``lhs_operators.{i}.{param}``, ``global_embs.emb_{entity}``); the public names of
checkpoint files are given by :func:`pbg_core.model.param_names.model_public_names`.

Ranking every entity of a partition (evaluation's ``all_negs``, a trained model's answers)
goes through :meth:`MultiRelationEmbedder.ranking_query`, :meth:`~MultiRelationEmbedder.ranking_candidates`
and :meth:`~MultiRelationEmbedder.candidate_scores`, one path for both. Without autograd, rows
pass every product in blocks padded to :data:`~pbg_core.model.row_blocks.ROW_BLOCK`, so a
(query, candidate) pair scores the same bits whatever block it is computed in.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pbg_core.errors import ConfigError
from pbg_core.model.comparators import Comparator, build_comparator
from pbg_core.model.negatives import (
    ChunkLayout,
    NegativeMode,
    batch_negative_mask,
    pad_to_chunks,
    unchunk,
)
from pbg_core.model.operator_init import start_operators
from pbg_core.model.operators import build_operator
from pbg_core.model.regularizers import N3Regularizer, build_regularizer
from pbg_core.model.row_blocks import ROW_BLOCK, by_padded_rows, padded_rows
from pbg_core.types import EntityName, FloatTensorType, LongTensorType, Side

MASKED = -1e9  # PBG's score for masked negatives (contributes ~0 to every loss)


@dataclass(frozen=True)
class RelationSpec:
    """What scoring and batching need of one relation type."""

    name: str
    lhs: EntityName
    rhs: EntityName
    weight: float = 1.0
    operator: str = "none"
    all_negs: bool = False


@dataclass
class SideBatch:
    """Raw (table) embeddings of one side of a batch.

    Attributes:
        entity: Entity type of this side.
        pos: [P, D] the positives' embeddings.
        mode: How this side's negatives are formed.
        uniform: [C, U, D] uniform negatives (UNIFORM / BATCH_UNIFORM), or None.
        all_embs: [count, D] every entity of the partition (ALL), or None.
        pos_offsets: [P] the positives' own offsets (masked in ALL mode), or None.
    """

    entity: EntityName
    pos: FloatTensorType
    mode: NegativeMode
    uniform: FloatTensorType | None = None
    all_embs: FloatTensorType | None = None
    pos_offsets: LongTensorType | None = None


@dataclass
class Scores:
    """Scores of a batch: positives [P] and negatives [P, N] per corrupted side."""

    lhs_pos: FloatTensorType
    rhs_pos: FloatTensorType
    lhs_neg: FloatTensorType
    rhs_neg: FloatTensorType
    reg: FloatTensorType | None


class MultiRelationEmbedder(nn.Module):
    """Operators + global embeddings + comparator for a set of relation types.

    Args:
        relations: One spec per relation (dynamic mode: the single template).
        dimensions: Embedding dimension per entity type.
        comparator: Built comparator (possibly biased).
        lhs_operators: Per relation, the LHS operator or None (standard mode: all None).
        rhs_operators: Per relation, the RHS operator.
        num_dynamic_relations: 0 for standard mode.
        global_emb: Learn one additive vector per entity type.
        regularizer: N3 regularizer or None.
        featurized: Entity types whose entities are bags of features.
    """

    def __init__(
        self,
        relations: list[RelationSpec],
        dimensions: dict[EntityName, int],
        comparator: Comparator,
        lhs_operators: list[nn.Module | None],
        rhs_operators: list[nn.Module | None],
        num_dynamic_relations: int = 0,
        global_emb: bool = False,
        regularizer: N3Regularizer | None = None,
        featurized: frozenset[EntityName] = frozenset(),
    ) -> None:
        super().__init__()
        self.relations = relations
        self.dimensions = dict(dimensions)
        self.comparator = comparator
        # None marks a relation without an operator on that side; ModuleList keeps None entries.
        self.lhs_operators = nn.ModuleList(lhs_operators)  # type: ignore[arg-type]  # see above
        self.rhs_operators = nn.ModuleList(rhs_operators)  # type: ignore[arg-type]  # see above
        self.num_dynamic_relations = num_dynamic_relations
        self.regularizer = regularizer
        self.featurized = featurized
        self.global_embs: nn.ParameterDict | None = None
        if global_emb:
            self.global_embs = nn.ParameterDict(
                {f"emb_{e}": nn.Parameter(torch.zeros(d)) for e, d in self.dimensions.items()}
            )

    @property
    def dynamic(self) -> bool:
        """Whether relations are dynamic (one template, N relation indices)."""
        return self.num_dynamic_relations > 0

    def relation(self, rel: int) -> RelationSpec:
        """The spec of relation ``rel`` (dynamic mode: the template)."""
        return self.relations[0] if self.dynamic else self.relations[rel]

    def adjust(
        self,
        embs: FloatTensorType,
        entity: EntityName,
        operator: nn.Module | None = None,
        rel: LongTensorType | None = None,
    ) -> FloatTensorType:
        """Global embedding, then operator, then comparator prepare.

        Without autograd, rows ``[R, D]`` pass the operator padded to a multiple of ``ROW_BLOCK``
        (a linear operator's product rounds by its row count); chunked ``[C, U, D]`` negatives do not.
        """
        if self.global_embs is not None:
            embs = embs + self.global_embs[f"emb_{entity}"]
        if operator is not None:
            if torch.is_grad_enabled() or embs.dim() != 2:
                embs = _operate(operator, embs, rel)
            else:
                embs = by_padded_rows(functools.partial(_operate, operator), embs, rel)
        return self.comparator.prepare(embs)

    # ---- ranking every entity of a partition -------------------------------------------------
    def ranking_query(self, side: Side, rel: int | LongTensorType, anchor_rows: FloatTensorType) -> FloatTensorType:
        """What the candidates of ``side`` are compared with: the other side's rows, adjusted.

        Standard mode: ranking the RHS, the LHS rows (no operator); ranking the LHS, the RHS rows
        through relation ``rel``'s operator. Dynamic mode: the other side's rows through that
        side's operator with each row's relation (``h_r(v)`` for the LHS, ``g_r(u)`` for the RHS).

        Args:
            side: The side being ranked.
            rel: The relation (standard mode), or each row's relation ``[Q]`` (dynamic mode; an
                int stands for every row).
            anchor_rows: ``[Q, D]`` the other side's rows, as looked up (``max_norm`` applied).

        Returns:
            ``[Q, D']``, for :meth:`candidate_scores`.
        """
        spec = self.relation(0 if self.dynamic else int(rel))
        entity = side.other.pick(spec.lhs, spec.rhs)
        if self.dynamic:
            rels = rel if isinstance(rel, torch.Tensor) else torch.full((anchor_rows.shape[0],), int(rel))
            return self.adjust(anchor_rows, entity, side.pick(self.rhs_operators[0], self.lhs_operators[0]), rels)
        return self.adjust(anchor_rows, entity, self.rhs_operators[int(rel)] if side is Side.LHS else None)

    def ranking_candidates(self, side: Side, rel: int | LongTensorType, table: FloatTensorType) -> FloatTensorType:
        """Every row of ``table`` (entities of ``side``'s type) adjusted as a candidate ``[N, D']``.

        Only a standard-mode RHS passes an operator (relation ``rel``'s); dynamic-mode
        candidates never do, so ``rel`` is then unused.
        """
        spec = self.relation(0 if self.dynamic else int(rel))
        return self.adjust(table, side.pick(spec.lhs, spec.rhs), self._candidate_operator(side, rel))

    def candidate_scores(
        self, query: FloatTensorType, cands: FloatTensorType, out: FloatTensorType | None = None
    ) -> FloatTensorType:
        """Scores ``[Q, N]`` of every query row ``[Q, D']`` against every candidate ``[N, D']``.

        The comparator's ``neg_scores`` over one chunk; without autograd the query rows are
        padded to ``ROW_BLOCK``, so a row's scores do not depend on ``Q``. ``out``: without
        autograd, a contiguous ``[R, N]`` buffer (``R`` at least ``Q`` padded to ``ROW_BLOCK``)
        whose leading rows receive the scores, the same bits: the result is a view of it.

        Raises:
            ValueError: ``out`` has too few rows, or not one column per candidate.
        """
        if out is not None and (out.shape[0] < padded_rows(query.shape[0]) or out.shape[1:] != cands.shape[:1]):
            raise ValueError(
                f"out of shape {list(out.shape)} cannot hold the scores of {query.shape[0]} rows (padded to a "
                f"multiple of {ROW_BLOCK}) against {cands.shape[0]} candidates: it needs at least "
                f"[{padded_rows(query.shape[0])}, {cands.shape[0]}]"
            )

        def scores(rows: FloatTensorType) -> FloatTensorType:
            into = None if out is None else out[: rows.shape[0]].unsqueeze(0)
            return self.comparator.neg_scores(rows.unsqueeze(0), cands.unsqueeze(0), into)[0]

        return scores(query) if torch.is_grad_enabled() else by_padded_rows(scores, query)

    def _candidate_operator(self, side: Side, rel: int | LongTensorType) -> nn.Module | None:
        """The operator negatives of ``side`` pass: a standard-mode RHS's relation operator, else none."""
        if self.dynamic or side is Side.LHS:
            return None
        return self.rhs_operators[int(rel)]

    def score(self, rel: int | LongTensorType, layout: ChunkLayout, lhs: SideBatch, rhs: SideBatch) -> Scores:
        """Positive and negative scores (and the regularizer term) of one batch.

        Args:
            rel: The batch's relation (standard mode) or a relation per edge (dynamic).
            layout: Chunking shared by both sides.
            lhs: LHS embeddings and negatives.
            rhs: RHS embeddings and negatives.

        Returns:
            Masked negatives are set to -1e9.
        """
        if self.dynamic:
            return self._score_dynamic(rel, layout, lhs, rhs)  # type: ignore[arg-type]  # in dynamic mode rel is the per-edge LongTensor, not an int
        return self._score_standard(int(rel), layout, lhs, rhs)

    def _score_standard(self, rel: int, layout: ChunkLayout, lhs: SideBatch, rhs: SideBatch) -> Scores:
        # Each side's positives are also the query of the other side's candidates.
        lhs_p = self.ranking_query(Side.RHS, rel, lhs.pos)
        rhs_p = self.ranking_query(Side.LHS, rel, rhs.pos)
        pos = self.comparator.pos_scores(lhs_p, rhs_p)
        lhs_c, rhs_c = self._chunks(lhs, lhs_p, layout), self._chunks(rhs, rhs_p, layout)
        lhs_neg = self._negative_scores(Side.LHS, rel, lhs, lhs_c, rhs_c, rhs_p, layout)
        rhs_neg = self._negative_scores(Side.RHS, rel, rhs, rhs_c, lhs_c, lhs_p, layout)
        reg = None
        if self.regularizer is not None:
            reg = self.regularizer.penalty([lhs_p, rhs_p], self.rhs_operators[rel], layout.num_chunks)
        return Scores(pos, pos, lhs_neg, rhs_neg, reg)

    def _score_dynamic(self, rel: LongTensorType, layout: ChunkLayout, lhs: SideBatch, rhs: SideBatch) -> Scores:
        lhs_op, rhs_op = self.lhs_operators[0], self.rhs_operators[0]
        # Sources are adjusted as candidates (no operator), destinations as the other side's query.
        lhs_src, rhs_src = (
            self.ranking_candidates(Side.LHS, rel, lhs.pos),
            self.ranking_candidates(Side.RHS, rel, rhs.pos),
        )
        rhs_dst, lhs_dst = self.ranking_query(Side.LHS, rel, rhs.pos), self.ranking_query(Side.RHS, rel, lhs.pos)
        lhs_pos = self.comparator.pos_scores(lhs_src, rhs_dst)
        rhs_pos = self.comparator.pos_scores(rhs_src, lhs_dst)
        lhs_c, rhs_c = self._chunks(lhs, lhs_src, layout), self._chunks(rhs, rhs_src, layout)
        lhs_neg = self._negative_scores(Side.LHS, rel, lhs, lhs_c, self._chunks(lhs, rhs_dst, layout), rhs_dst, layout)
        rhs_neg = self._negative_scores(Side.RHS, rel, rhs, rhs_c, self._chunks(rhs, lhs_dst, layout), lhs_dst, layout)
        reg = None
        if self.regularizer is not None:
            n = layout.num_chunks  # unused: dynamic mode penalises each edge's own parameters
            reg = self.regularizer.penalty([lhs_src, rhs_dst], rhs_op, n, rel) + self.regularizer.penalty(
                [rhs_src, lhs_dst], lhs_op, n, rel
            )
        return Scores(lhs_pos, rhs_pos, lhs_neg, rhs_neg, reg)

    @staticmethod
    def _chunks(side: SideBatch, embs: FloatTensorType, layout: ChunkLayout) -> FloatTensorType | None:
        # A side without negatives needs no chunked view of its own positives.
        return None if side.mode is NegativeMode.NONE else pad_to_chunks(embs, layout)

    def _negative_scores(
        self,
        which: Side,
        rel: int | LongTensorType,
        side: SideBatch,
        own_c: FloatTensorType | None,
        other_c: FloatTensorType | None,
        other_flat: FloatTensorType,
        layout: ChunkLayout,
    ) -> FloatTensorType:
        """Scores [P, N] of the negatives of ``side`` (the batch's ``which`` side) against the other side's positives."""
        mode = side.mode
        if mode is NegativeMode.NONE:
            return other_flat.new_empty(layout.num_pos, 0)
        if mode is NegativeMode.ALL:
            negs = self.ranking_candidates(which, rel, _required(side.all_embs, "all_embs"))
            scores = self.candidate_scores(other_flat, negs)
            rows = torch.arange(layout.num_pos)
            return scores.index_put((rows, _required(side.pos_offsets, "pos_offsets")), scores.new_tensor(MASKED))
        operator = self._candidate_operator(which, rel)
        if other_c is None:
            other_c = pad_to_chunks(other_flat, layout)
        if mode is NegativeMode.UNIFORM:
            negs = self.adjust(_required(side.uniform, "uniform"), side.entity, operator)
            return unchunk(self.comparator.neg_scores(other_c, negs), layout)
        # Every comparator scores each negative column independently, so the batch and
        # uniform blocks are scored apart and their (small) score matrices concatenated:
        # concatenating the [C, U, D] negatives instead costs a large copy forward and
        # a non-contiguous gradient (another copy) backward.
        own_c = _required(own_c, "pos")
        uniform = self.adjust(side.uniform, side.entity, operator) if side.uniform is not None else None
        if uniform is not None and not torch.is_grad_enabled():
            # No backward (evaluation, 1000 + 1000 negatives by default): one product with
            # the negatives side by side, masked in place, copies [C, B + U, D] instead of
            # the [C, B, B + U] scores twice (the mask's sum, then the concatenation).
            scores = self.comparator.neg_scores(other_c, torch.cat([own_c, uniform], dim=1))
            scores.add_(batch_negative_mask(layout, uniform.shape[1], MASKED))
            return unchunk(scores, layout)
        scores = self.comparator.neg_scores(other_c, own_c) + batch_negative_mask(layout, 0, MASKED)
        if uniform is not None:
            scores = torch.cat([scores, self.comparator.neg_scores(other_c, uniform)], dim=2)
        return unchunk(scores, layout)


def _operate(operator: nn.Module, embs: FloatTensorType, rel: LongTensorType | None) -> FloatTensorType:
    return operator(embs, rel) if rel is not None else operator(embs)  # type: ignore[no-any-return]  # operators return tensors


def _required(value: Any, name: str) -> Any:
    if value is None:
        raise ValueError(f"SideBatch.{name} is required for this negative mode")
    return value


# ---- builder --------------------------------------------------------------------------------
def build_model(config: Any, num_dynamic_relations: int, seed: int | None = None) -> MultiRelationEmbedder:
    """Build the model from a ConfigSchema-like object (attribute access only).

    Args:
        config: Has ``entities``, ``relations``, ``comparator``, ``bias``,
            ``global_emb``, ``regularizer``, ``regularization_coef``, ``dynamic_relations``,
            ``operator_init`` (with ``normal``: ``operator_init_scale`` and ``init_scale``)
            and ``entity_dimension(name)``.
        num_dynamic_relations: Number of relation types in dynamic mode (ignored otherwise).
        seed: The run's seed, from which ``operator_init=normal`` draws the operators' start
            (:mod:`pbg_core.model.operator_init`); None: a fresh one (the caller loads the
            parameters right after). The identity start draws nothing.

    Raises:
        ConfigError: global embeddings with dynamic relations, a regularizer with an
            operator that does not support it, an odd dimension for complex_diagonal.
    """
    dynamic = bool(config.dynamic_relations)
    n_dyn = num_dynamic_relations if dynamic else 0
    if dynamic and n_dyn <= 0:
        raise ConfigError([f"dynamic_relations needs num_dynamic_relations >= 1, got {num_dynamic_relations}"])
    if dynamic and config.global_emb:
        raise ConfigError(["global_emb=true cannot be combined with dynamic_relations=true; set global_emb=false"])
    specs = [
        RelationSpec(r.name, r.lhs, r.rhs, float(r.weight), r.operator, bool(r.all_negs)) for r in config.relations
    ]
    regularizer = build_regularizer(config.regularizer, float(config.regularization_coef))
    lhs_ops: list[nn.Module | None] = []
    rhs_ops: list[nn.Module | None] = []
    for spec in specs[:1] if dynamic else specs:
        rhs_ops.append(build_operator(spec.operator, config.entity_dimension(spec.rhs), n_dyn))
        lhs_ops.append(build_operator(spec.operator, config.entity_dimension(spec.lhs), n_dyn) if dynamic else None)
        if regularizer is not None:
            regularizer.check_operator(spec.operator, rhs_ops[-1])
    if config.operator_init != "identity":
        scale = config.operator_init_scale if config.operator_init_scale is not None else config.init_scale
        start_operators(lhs_ops, rhs_ops, config.operator_init, float(scale), seed)
    return MultiRelationEmbedder(
        relations=specs,
        dimensions={name: config.entity_dimension(name) for name in config.entities},
        comparator=build_comparator(config.comparator, bool(config.bias)),
        lhs_operators=lhs_ops,
        rhs_operators=rhs_ops,
        num_dynamic_relations=n_dyn,
        global_emb=bool(config.global_emb),
        regularizer=regularizer,
        featurized=frozenset(name for name, e in config.entities.items() if e.featurized),
    )
