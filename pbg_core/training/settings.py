"""What a worker needs to train or evaluate: batch settings, the trainer and the evaluator.

Built once per worker from its :class:`WorkerSettings` (:func:`build_trainer`,
:func:`build_evaluator`), never from the config, and handed to
:mod:`pbg_core.training.batching` and the hand-written paths, which import this module,
never each other's callers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    # Sampled offline evaluation (pbg_core.evaluation.sampling): uniform negatives are distinct
    # per chunk, and a candidate equal to the edge's own entity (or a known edge) is masked.
    distinct_candidates: bool = False

    def for_holdout(self, eval_num_batch_negs: int | None, eval_num_uniform_negs: int | None) -> BatchSettings:
        """The settings of held-out evaluation during training: PBG applies ``eval_num_*_negs``
        (None: the training value) and rounds the batch size up to a multiple of the batch negatives."""
        batch_negs = self.num_batch_negs if eval_num_batch_negs is None else eval_num_batch_negs
        uniform = self.num_uniform_negs if eval_num_uniform_negs is None else eval_num_uniform_negs
        size = self.batch_size
        if batch_negs > 0:
            size = -(-size // batch_negs) * batch_negs
        return replace(self, batch_size=size, num_batch_negs=batch_negs, num_uniform_negs=uniform)


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a HOGWILD worker reads of the run's config, and nothing more.

    Built once per session from the validated config (``pbg_core.session.build.worker_settings``)
    and pickled to each worker at spawn: the worker side never sees the config itself.
    """

    loss_fn: str
    margin: float
    lr: float  # the embedding tables' (RowAdagrad)
    relation_lr: float | None  # the model's parameters' (AsyncAdagrad); None: ``lr``
    train: BatchSettings
    holdout: BatchSettings  # held-out edges evaluated during training
    offline: BatchSettings  # ``pbg eval``: the config's own negatives

    @property
    def model_lr(self) -> float:
        """Learning rate of the model's parameters (operators, global embeddings)."""
        return self.relation_lr if self.relation_lr is not None else self.lr


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


def build_trainer(
    settings: WorkerSettings, model: MultiRelationEmbedder, model_optimizer: AsyncAdagrad | None = None
) -> Trainer:
    """A Trainer from the worker settings; builds a (non-shared) AsyncAdagrad if none is given."""
    if model_optimizer is None:
        params = list(model.parameters())
        model_optimizer = AsyncAdagrad(params, settings.model_lr) if params else None
    return Trainer(
        model=model,
        loss_fn=build_loss(settings.loss_fn, margin=settings.margin),
        settings=settings.train,
        row_optimizer=RowAdagrad(settings.lr),
        model_optimizer=model_optimizer,
    )


def build_evaluator(settings: WorkerSettings, model: MultiRelationEmbedder, during_training: bool = True) -> Evaluator:
    """An Evaluator: held-out settings (``eval_num_*`` applied) during training, else the offline ones."""
    batches = settings.holdout if during_training else settings.offline
    return Evaluator(model, build_loss(settings.loss_fn, margin=settings.margin), batches)
