"""Model FLOPs per training edge, the numerator of "achieved fraction of sgemm FLOP/s".

Counted: the multiply-adds that dominate PBG-style training, i.e. dot products of dimension D
(2D FLOPs each) for the positive score and every negative score, plus the relation operator.
Not counted: the loss (a handful of FLOPs per score), the optimizer (O(D) per touched row,
dwarfed by the O(D x negatives) scoring) and gathers/copies (memory traffic, not FLOPs).

Negatives per corrupted side and positive: ``n = min(num_batch_negs, batch_size) +
num_uniform_negs`` (batch negatives come from a chunk of ``c = min(num_batch_negs, batch_size)``
positives, including the positive itself, which is masked but still computed).

Operator FLOPs per embedding row ``op(D)``: none 0, translation D, diagonal D,
complex_diagonal 3D (D/2 complex products of 6 FLOPs), linear/affine 2D^2 (+D).

- Standard mode (both sides corrupted, one positive score shared by both):
  ``fwd = 2D + 2 * 2D*n + op(D) * (1 + n/c)`` (operator on the rhs positive and on the rhs
  negatives of its chunk, amortised over the chunk).
- Dynamic relations (as PBG: each edge scored twice, "forward" with lhs negatives,
  "reverse" with rhs negatives, the operator on the positive side only):
  ``fwd = 2 * (op(D) + 2D + 2D*n)``.

Training = forward + backward, with backward ~2x forward (gradients w.r.t. both operands of every
product): ``train = 3 * fwd``. Config A (D=100, n=100, none): 120.6 kFLOP/edge. Config B
(D=400, n=1050, complex_diagonal, dynamic): 5.05 MFLOP/edge. Config C (D=200, n=150,
complex_diagonal, dynamic): 366 kFLOP/edge. N3 regularization (our side's variant of C) adds
O(D) per edge and is not counted: its cost shows as a lower achieved fraction.
"""

from __future__ import annotations

from collections.abc import Mapping

TRAIN_OVER_FORWARD = 3.0  # forward + backward (~2x forward)


def operator_flops(operator: str, dim: int) -> float:
    """FLOPs of applying ``operator`` to one embedding row of dimension ``dim``.

    Raises:
        ValueError: If ``operator`` is not one of PBG's built-in operator names.
    """
    table = {
        "none": 0.0,
        "translation": float(dim),
        "diagonal": float(dim),
        "complex_diagonal": 3.0 * dim,
        "linear": 2.0 * dim * dim,
        "affine": 2.0 * dim * dim + dim,
    }
    if operator not in table:
        raise ValueError(f"unknown operator {operator!r}; known: {sorted(table)}")
    return table[operator]


def forward_flops_per_edge(
    dim: int,
    num_batch_negs: int,
    num_uniform_negs: int,
    batch_size: int,
    operator: str,
    dynamic_relations: bool,
) -> float:
    """Forward-pass FLOPs for one positive edge (formulas in the module docstring)."""
    chunk = min(num_batch_negs, batch_size) if num_batch_negs > 0 else min(num_uniform_negs, batch_size)
    negatives = min(num_batch_negs, batch_size) + num_uniform_negs
    op = operator_flops(operator, dim)
    if dynamic_relations:
        return 2.0 * (op + 2 * dim + 2 * dim * negatives)
    amortised_op = op * (1 + negatives / max(chunk, 1))
    return 2 * dim + 2 * (2 * dim * negatives) + amortised_op


def train_flops_per_edge(config: Mapping[str, object]) -> float:
    """Training FLOPs per edge for a PBG-format config dict (PBG defaults where keys are absent).

    Uses ``relations[0].operator``, which is the operator of every edge in dynamic mode and of
    the only relation in the speed configs.
    """
    relations = config["relations"]
    operator = relations[0].get("operator", "none")
    forward = forward_flops_per_edge(
        dim=int(config["dimension"]),
        num_batch_negs=int(config.get("num_batch_negs", 50)),
        num_uniform_negs=int(config.get("num_uniform_negs", 50)),
        batch_size=int(config.get("batch_size", 1000)),
        operator=str(operator),
        dynamic_relations=bool(config.get("dynamic_relations", False)),
    )
    return TRAIN_OVER_FORWARD * forward
