"""Relation operators g_r applied to one side's embeddings before comparison (PBG 1.7).

Standard operators (``OPERATORS``) hold the parameters of one relation and map
``[..., D] -> [..., D]``. Dynamic operators (``DYNAMIC_OPERATORS``) hold ``[N, ...]``
parameters for N relations and map ``(x [B, D], rel [B]) -> [B, D]``, each row using
its own relation. Parameter names and initialisation equal PBG's, so checkpoints map
one to one.

N3 regularization asks two things of an operator: ``reg_params()`` (the parameters
to penalise, or None) and ``prepare_for_reg(x)`` (for ``complex_diagonal`` the complex
moduli). ``linear``/``affine`` set ``supports_regularization = False``.
"""

from __future__ import annotations

import torch
from torch import nn

from pbg_core.errors import ConfigError
from pbg_core.registry import Registry
from pbg_core.types import FloatTensorType, LongTensorType

OPERATORS: Registry[type[nn.Module]] = Registry("operator")
DYNAMIC_OPERATORS: Registry[type[nn.Module]] = Registry("dynamic operator")


class _Base(nn.Module):
    """Shared defaults: regularizable, penalises nothing, identity for reg prep."""

    supports_regularization = True

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def prepare_for_reg(self, embs: FloatTensorType) -> FloatTensorType:
        """What N3 cubes for an embedding: the embedding itself by default."""
        return embs


# ---- standard (one relation) ---------------------------------------------------------------
@OPERATORS.register("none")
class IdentityOperator(_Base):
    """x -> x."""

    def forward(self, embs: FloatTensorType) -> FloatTensorType:
        return embs

    def reg_params(self) -> FloatTensorType | None:
        return None


@OPERATORS.register("translation")
class TranslationOperator(_Base):
    """x -> x + t; ``translation`` [D] starts at zeros."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.translation = nn.Parameter(torch.zeros(dim))

    def forward(self, embs: FloatTensorType) -> FloatTensorType:
        return embs + self.translation

    def reg_params(self) -> FloatTensorType | None:
        return self.translation


@OPERATORS.register("diagonal")
class DiagonalOperator(_Base):
    """x -> x * d; ``diagonal`` [D] starts at ones."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.diagonal = nn.Parameter(torch.ones(dim))

    def forward(self, embs: FloatTensorType) -> FloatTensorType:
        return embs * self.diagonal

    def reg_params(self) -> FloatTensorType | None:
        return self.diagonal


@OPERATORS.register("linear")
class LinearOperator(_Base):
    """x -> A x; ``linear_transformation`` [D, D] starts at the identity."""

    supports_regularization = False

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.linear_transformation = nn.Parameter(torch.eye(dim))

    def forward(self, embs: FloatTensorType) -> FloatTensorType:
        return torch.matmul(embs, self.linear_transformation.t())

    def reg_params(self) -> FloatTensorType | None:
        raise NotImplementedError("N3 regularization is not defined for the linear operator")


@OPERATORS.register("affine")
class AffineOperator(_Base):
    """x -> A x + t; ``linear_transformation`` identity, ``translation`` zeros."""

    supports_regularization = False

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.linear_transformation = nn.Parameter(torch.eye(dim))
        self.translation = nn.Parameter(torch.zeros(dim))

    def forward(self, embs: FloatTensorType) -> FloatTensorType:
        return torch.addmm(self.translation, embs.reshape(-1, self.dim), self.linear_transformation.t()).view(
            embs.shape
        )

    def reg_params(self) -> FloatTensorType | None:
        raise NotImplementedError("N3 regularization is not defined for the affine operator")


def _check_even(dim: int) -> None:
    if dim % 2 != 0:
        raise ConfigError(
            [f"complex_diagonal needs an even dimension (first half real, second half imaginary), got {dim}"]
        )


def complex_multiply(embs: FloatTensorType, real: FloatTensorType, imag: FloatTensorType) -> FloatTensorType:
    """(a + ib)(c + id) with a, b the halves of ``embs`` and c, d = ``real``, ``imag``."""
    half = embs.shape[-1] // 2
    a, b = embs[..., :half], embs[..., half:]
    return torch.cat([a * real - b * imag, a * imag + b * real], dim=-1)


def complex_modulus(embs: FloatTensorType) -> FloatTensorType:
    """|a + ib| per complex coordinate (halves of the last dim)."""
    half = embs.shape[-1] // 2
    return torch.sqrt(embs[..., :half] ** 2 + embs[..., half:] ** 2)


@OPERATORS.register("complex_diagonal")
class ComplexDiagonalOperator(_Base):
    """Complex multiplication by (``real`` + i ``imag``) [D/2]; starts at 1 + 0i."""

    def __init__(self, dim: int) -> None:
        _check_even(dim)
        super().__init__(dim)
        self.real = nn.Parameter(torch.ones(dim // 2))
        self.imag = nn.Parameter(torch.zeros(dim // 2))

    def forward(self, embs: FloatTensorType) -> FloatTensorType:
        return complex_multiply(embs, self.real, self.imag)

    def reg_params(self) -> FloatTensorType | None:
        return torch.sqrt(self.real**2 + self.imag**2)

    def prepare_for_reg(self, embs: FloatTensorType) -> FloatTensorType:
        return complex_modulus(embs)


# ---- dynamic (N relations in one module) ---------------------------------------------------
class _DynBase(_Base):
    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim)
        self.num_operations = num_operations


@DYNAMIC_OPERATORS.register("none")
class IdentityDynamicOperator(_DynBase):
    """x -> x for every relation."""

    def forward(self, embs: FloatTensorType, rel: LongTensorType) -> FloatTensorType:
        return embs

    def reg_params(self, rel: LongTensorType) -> FloatTensorType | None:
        return None


@DYNAMIC_OPERATORS.register("translation")
class TranslationDynamicOperator(_DynBase):
    """x -> x + t_r; ``translations`` [N, D] zeros."""

    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.translations = nn.Parameter(torch.zeros(num_operations, dim))

    def forward(self, embs: FloatTensorType, rel: LongTensorType) -> FloatTensorType:
        return embs + self.translations[rel]

    def reg_params(self, rel: LongTensorType) -> FloatTensorType | None:
        return self.translations[rel]


@DYNAMIC_OPERATORS.register("diagonal")
class DiagonalDynamicOperator(_DynBase):
    """x -> x * d_r; ``diagonals`` [N, D] ones."""

    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.diagonals = nn.Parameter(torch.ones(num_operations, dim))

    def forward(self, embs: FloatTensorType, rel: LongTensorType) -> FloatTensorType:
        return embs * self.diagonals[rel]

    def reg_params(self, rel: LongTensorType) -> FloatTensorType | None:
        return self.diagonals[rel]


@DYNAMIC_OPERATORS.register("linear")
class LinearDynamicOperator(_DynBase):
    """x -> A_r x; ``linear_transformations`` [N, D, D] identities."""

    supports_regularization = False

    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.linear_transformations = nn.Parameter(torch.eye(dim).expand(num_operations, dim, dim).clone())

    def forward(self, embs: FloatTensorType, rel: LongTensorType) -> FloatTensorType:
        return torch.bmm(self.linear_transformations[rel], embs.unsqueeze(-1)).squeeze(-1)

    def reg_params(self, rel: LongTensorType) -> FloatTensorType | None:
        raise NotImplementedError("N3 regularization is not defined for the linear operator")


@DYNAMIC_OPERATORS.register("affine")
class AffineDynamicOperator(_DynBase):
    """x -> A_r x + t_r; ``linear_transformations`` identities, ``translations`` zeros."""

    supports_regularization = False

    def __init__(self, dim: int, num_operations: int) -> None:
        super().__init__(dim, num_operations)
        self.linear_transformations = nn.Parameter(torch.eye(dim).expand(num_operations, dim, dim).clone())
        self.translations = nn.Parameter(torch.zeros(num_operations, dim))

    def forward(self, embs: FloatTensorType, rel: LongTensorType) -> FloatTensorType:
        rotated = torch.bmm(self.linear_transformations[rel], embs.unsqueeze(-1)).squeeze(-1)
        return rotated + self.translations[rel]

    def reg_params(self, rel: LongTensorType) -> FloatTensorType | None:
        raise NotImplementedError("N3 regularization is not defined for the affine operator")


@DYNAMIC_OPERATORS.register("complex_diagonal")
class ComplexDiagonalDynamicOperator(_DynBase):
    """Complex multiplication by (``real[r]`` + i ``imag[r]``), each [N, D/2]."""

    def __init__(self, dim: int, num_operations: int) -> None:
        _check_even(dim)
        super().__init__(dim, num_operations)
        self.real = nn.Parameter(torch.ones(num_operations, dim // 2))
        self.imag = nn.Parameter(torch.zeros(num_operations, dim // 2))

    def forward(self, embs: FloatTensorType, rel: LongTensorType) -> FloatTensorType:
        return complex_multiply(embs, self.real[rel], self.imag[rel])

    def reg_params(self, rel: LongTensorType) -> FloatTensorType | None:
        return torch.sqrt(self.real[rel] ** 2 + self.imag[rel] ** 2)

    def prepare_for_reg(self, embs: FloatTensorType) -> FloatTensorType:
        return complex_modulus(embs)


def build_operator(name: str, dim: int, num_dynamic_relations: int = 0) -> nn.Module:
    """A fresh operator: standard when ``num_dynamic_relations == 0``, dynamic otherwise.

    Raises:
        UnknownNameError: ``name`` is not registered (lists the known names).
        ConfigError: ``complex_diagonal`` with an odd ``dim``.
    """
    if num_dynamic_relations > 0:
        return DYNAMIC_OPERATORS.get(name)(dim, num_dynamic_relations)
    return OPERATORS.get(name)(dim)
