"""Regularizers added to the training loss (PBG 1.11). Only N3 exists.

N3 (Lacroix et al. 2018) penalises ``coef * (sum |src|^3 + sum |dst|^3 + op term)``:
- ``src``/``dst`` are the positives' embeddings after global embedding, operator and
  comparator prepare, passed through ``operator.prepare_for_reg`` (complex moduli for
  ``complex_diagonal``);
- the operator term is ``sum |params|^3``: in standard mode the relation's parameters
  times the number of *chunks* of the batch, in dynamic mode the parameters of each
  edge's relation (once per edge).

The operator term uses ``|p|^3`` (PBG's ``diagonal``/``translation`` operators also take
``abs`` before cubing; ``complex_diagonal`` penalises moduli).

The chunk count is PBG's (main branch; 1.0.0 has no regularizer): its standard-mode N3
multiplies by ``len`` of the positives *after* they are cut into chunks
``[num_chunks, chunk_size, D]``, so by ``ceil(P / chunk_size)``, not by ``P``. With
``all_negs`` (one chunk) the operator term is counted once per batch; with
``num_batch_negs=50`` and ``batch_size=1000``, 20 times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from torch import nn

from pbg_core.errors import ConfigError
from pbg_core.registry import Registry
from pbg_core.types import FloatTensorType, LongTensorType

TensorFn = Callable[[FloatTensorType], FloatTensorType]
REGULARIZERS: Registry[type[N3Regularizer]] = Registry("regularizer")


@REGULARIZERS.register("N3")
class N3Regularizer:
    """Weighted N3 penalty.

    Args:
        weight: ``regularization_coef``.
    """

    def __init__(self, weight: float) -> None:
        self.weight = weight

    def check_operator(self, name: str, operator: nn.Module | None) -> None:
        """Raise if ``operator`` cannot be regularized (``linear``, ``affine``).

        Raises:
            ConfigError: naming the operator and the operators that support N3.
        """
        if operator is not None and not getattr(operator, "supports_regularization", True):
            raise ConfigError(
                [
                    f"regularizer N3 with regularization_coef={self.weight} is not defined for operator "
                    f"{name!r}; use regularization_coef=0 or one of none, translation, diagonal, complex_diagonal"
                ]
            )

    def penalty(
        self,
        embs: Sequence[FloatTensorType],
        operator: nn.Module | None,
        num_chunks: int,
        rel: LongTensorType | None = None,
    ) -> FloatTensorType:
        """The weighted penalty of one scoring direction.

        Args:
            embs: The src and dst positives' adjusted embeddings.
            operator: The operator applied in this direction (None for none).
            num_chunks: Number of chunks of the batch (standard-mode multiplier of the
                operator term, as PBG's).
            rel: Relation per edge in dynamic mode, else None.

        Returns:
            A 0-dim tensor.
        """
        total = embs[0].new_zeros(())
        # The operators (pbg_core.model.operators) define both methods; nn.Module attributes are untyped.
        prepare = cast(TensorFn, operator.prepare_for_reg) if operator is not None else (lambda x: x)
        for x in embs:
            total = total + prepare(x).abs().pow(3).sum()
        if operator is not None:
            reg_params = cast(Callable[..., FloatTensorType | None], operator.reg_params)
            params = reg_params(rel) if rel is not None else reg_params()
            if params is not None:
                term = params.abs().pow(3).sum()
                total = total + (term if rel is not None else term * num_chunks)
        return total * self.weight


def build_regularizer(name: str, coef: float) -> N3Regularizer | None:
    """The regularizer ``name`` with weight ``coef``, or None when ``coef == 0``.

    Raises:
        UnknownNameError: ``name`` is not registered (lists the known names).
    """
    cls = REGULARIZERS.get(name)
    return cls(coef) if coef != 0 else None
