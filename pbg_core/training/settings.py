"""What a worker needs to train or evaluate: batch settings, the trainer and the evaluator.

Built once per worker from the config (:func:`build_trainer`, :func:`build_evaluator`) and
handed to :mod:`pbg_core.training.batching` and the hand-written paths, which import this
module, never each other's callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.model.losses import LossFunction, build_loss
from pbg_core.training.optimizers import AsyncAdagrad, RowAdagrad


@dataclass(frozen=True)
class BatchSettings:
    """Flat batching and negative-sampling settings."""

    batch_size: int = 1000
    num_batch_negs: int = 50
    num_uniform_negs: int = 50
    disable_lhs_negs: bool = False
    disable_rhs_negs: bool = False
    max_norm: float | None = None

    @classmethod
    def for_training(cls, config: Any) -> BatchSettings:
        """From a ConfigSchema-like object (attribute access only)."""
        return cls(
            batch_size=config.batch_size,
            num_batch_negs=config.num_batch_negs,
            num_uniform_negs=config.num_uniform_negs,
            disable_lhs_negs=config.disable_lhs_negs,
            disable_rhs_negs=config.disable_rhs_negs,
            max_norm=config.max_norm,
        )

    @classmethod
    def for_evaluation(cls, config: Any, during_training: bool) -> BatchSettings:
        """Eval settings: during training PBG applies ``eval_num_*_negs`` and rounds the
        batch size up to a multiple of the batch negatives; offline eval uses the config's."""
        base = cls.for_training(config)
        if not during_training:
            return base
        batch_negs = config.eval_num_batch_negs if config.eval_num_batch_negs is not None else base.num_batch_negs
        uniform = config.eval_num_uniform_negs if config.eval_num_uniform_negs is not None else base.num_uniform_negs
        size = base.batch_size
        if batch_negs > 0:
            size = -(-size // batch_negs) * batch_negs
        return cls(size, batch_negs, uniform, base.disable_lhs_negs, base.disable_rhs_negs, base.max_norm)


@dataclass
class Trainer:
    """Everything a worker needs to train: model, loss, optimizers, settings."""

    model: MultiRelationEmbedder
    loss_fn: LossFunction
    settings: BatchSettings
    row_optimizer: RowAdagrad
    model_optimizer: AsyncAdagrad | None
    fast_path: bool = True  # use pbg_core.training.fast_paths / fast_dynamic for the batches they support


@dataclass
class Evaluator:
    """Everything a worker needs to evaluate: model, loss, settings."""

    model: MultiRelationEmbedder
    loss_fn: LossFunction
    settings: BatchSettings


def build_trainer(config: Any, model: MultiRelationEmbedder, model_optimizer: AsyncAdagrad | None = None) -> Trainer:
    """A Trainer from the config; builds a (non-shared) AsyncAdagrad if none is given."""
    if model_optimizer is None:
        params = list(model.parameters())
        lr = config.relation_lr if config.relation_lr is not None else config.lr
        model_optimizer = AsyncAdagrad(params, lr) if params else None
    return Trainer(
        model=model,
        loss_fn=build_loss(config.loss_fn, margin=config.margin),
        settings=BatchSettings.for_training(config),
        row_optimizer=RowAdagrad(config.lr),
        model_optimizer=model_optimizer,
    )


def build_evaluator(config: Any, model: MultiRelationEmbedder, during_training: bool = True) -> Evaluator:
    """An Evaluator from the config (``eval_num_*`` overrides only during training)."""
    settings = BatchSettings.for_evaluation(config, during_training)
    return Evaluator(model, build_loss(config.loss_fn, margin=config.margin), settings)
