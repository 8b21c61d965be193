"""pbg_core.training.settings: held-out batch settings, learning rates, building trainers and evaluators."""

from __future__ import annotations

import pytest
from fast_path_cases import fake_config, make_relation

from pbg_core.model.embedder import build_model
from pbg_core.model.losses import RankingLoss, SoftmaxLoss
from pbg_core.training.settings import BatchSettings, WorkerSettings, build_evaluator, build_trainer


@pytest.mark.parametrize(
    ("batch_negs", "uniform", "want"),
    [
        (None, None, BatchSettings(batch_size=1000, num_batch_negs=50, num_uniform_negs=50)),
        (300, 7, BatchSettings(batch_size=1200, num_batch_negs=300, num_uniform_negs=7)),  # rounded up
        (0, 0, BatchSettings(batch_size=1000, num_batch_negs=0, num_uniform_negs=0)),  # no rounding by 0
    ],
)
def test_for_holdout_applies_eval_negatives_and_rounds_the_batch(
    batch_negs: int | None, uniform: int | None, want: BatchSettings
) -> None:
    assert BatchSettings(max_norm=None).for_holdout(batch_negs, uniform) == want


def test_for_holdout_keeps_the_other_fields() -> None:
    train = BatchSettings(batch_size=10, num_batch_negs=4, disable_lhs_negs=True, max_norm=2.0)
    held = train.for_holdout(None, None)
    assert (held.batch_size, held.disable_lhs_negs, held.max_norm) == (12, True, 2.0)


def _settings(loss_fn: str = "ranking", relation_lr: float | None = None) -> WorkerSettings:
    train, offline = BatchSettings(batch_size=8), BatchSettings(batch_size=99)
    return WorkerSettings(loss_fn, 0.25, 0.1, relation_lr, train, train.for_holdout(3, 2), offline)


def test_model_lr_is_relation_lr_when_set_else_lr() -> None:
    assert _settings().model_lr == 0.1
    assert _settings(relation_lr=0.02).model_lr == 0.02


def test_build_trainer_uses_the_settings_and_builds_a_model_optimizer_only_with_parameters() -> None:
    plain = build_model(fake_config(), 1)  # a "none" operator: no parameters
    trainer = build_trainer(_settings(), plain)
    assert isinstance(trainer.loss_fn, RankingLoss) and trainer.loss_fn.margin == 0.25
    assert trainer.row_optimizer.lr == 0.1 and trainer.settings.batch_size == 8
    assert trainer.model_optimizer is None

    with_params = build_model(fake_config(relations=[make_relation(operator="diagonal")]), 1)
    trainer = build_trainer(_settings(relation_lr=0.02), with_params)
    assert trainer.model_optimizer is not None and trainer.model_optimizer.lr == 0.02
    assert trainer.model_optimizer.params == list(with_params.parameters())


def test_build_evaluator_picks_holdout_during_training_else_offline() -> None:
    model = build_model(fake_config(), 1)
    during = build_evaluator(_settings("softmax"), model)
    assert isinstance(during.loss_fn, SoftmaxLoss)
    assert (during.settings.num_batch_negs, during.settings.num_uniform_negs) == (3, 2)
    assert build_evaluator(_settings(), model, during_training=False).settings.batch_size == 99
