"""How relation operators' parameters start (config ``operator_init``).

- ``identity`` (the default): PBG's start, exactly what the operators' constructors set
  (translation 0, diagonal 1, linear and affine the identity matrix and 0, complex_diagonal
  1 + 0i). Nothing is drawn from any random generator, so a run and its checkpoints are
  bit-identical to a run of a config without the field.
- ``normal``: every parameter of every operator drawn from N(0, scale²), in place. Each
  (relation, side, parameter) has its own generator derived from the run's seed
  (:func:`pbg_core.seeding.torch_generator`), so the same seed gives the same start whatever
  else the run draws, and a parameter's values do not depend on the other parameters.

Standard relations have a RHS operator each (index = the relation's); dynamic relations one
operator per side (index 0) whose parameters hold a row per relation type.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pbg_core.errors import ConfigError
from pbg_core.seeding import fresh_seed, torch_generator

# The config's choices (pbg_core.config.validators.OperatorInit), spelled here too: HOGWILD workers
# import the model and must not import the config.
OPERATOR_STARTS = ("identity", "normal")


def start_operator(operator: nn.Module, how: str, scale: float, seed: int, *where: object) -> None:
    """Start ``operator``'s parameters in place (identity: leave the constructor's values).

    Args:
        operator: A relation operator (:mod:`pbg_core.model.operators`), standard or dynamic.
        how: ``identity`` or ``normal``.
        scale: The standard deviation of ``normal``.
        seed: The run's seed; ``normal`` draws each parameter from
            ``torch_generator(seed, "operator", *where, parameter name)``.
        where: What names this operator among the model's, e.g. (relation index, side).

    Raises:
        ConfigError: ``how`` is not one of :data:`OPERATOR_STARTS`.
    """
    if _is_identity(how):
        return
    with torch.no_grad():
        for name, param in operator.named_parameters():
            param.normal_(generator=torch_generator(seed, "operator", *where, name)).mul_(scale)


def start_operators(
    lhs: Sequence[nn.Module | None], rhs: Sequence[nn.Module | None], how: str, scale: float, seed: int | None
) -> None:
    """Start every operator of a model (:func:`start_operator`), each side's by its index.

    ``seed`` None (a model whose parameters are loaded right after) draws from a fresh seed.

    Raises:
        ConfigError: ``how`` is not one of :data:`OPERATOR_STARTS`.
    """
    if _is_identity(how):
        return
    base = seed if seed is not None else fresh_seed()
    for side, operators in (("lhs", lhs), ("rhs", rhs)):
        for index, operator in enumerate(operators):
            if operator is not None:
                start_operator(operator, how, scale, base, index, side)


def _is_identity(how: str) -> bool:
    if how not in OPERATOR_STARTS:
        raise ConfigError([f"operator_init: {how!r} is not one of {', '.join(OPERATOR_STARTS)}"])
    return how == "identity"
