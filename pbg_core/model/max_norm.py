"""PBG's ``max_norm``: embedding rows above a norm are scaled down when they are looked up.

PBG looks rows up with ``F.embedding(max_norm=...)``, which renorms the looked-up rows *in the
table too*. Training's row gather, evaluation's all-entities scoring and the answers of a trained
model all look rows up through these functions. The scale ``max_norm / (norm + 1e-7)`` is computed
in float64 and rounded once, as torch's ``embedding_renorm_`` does: one lookup is bit-identical to
PBG's.

One lookup does not always bring a row to ``max_norm`` or below: float32 rounding leaves about 5%
of the rows it scales a hair above, and the next lookup scales them again (measured: at most
three lookups change a row). A row's bits therefore depend on how often it was looked up before,
which in evaluation depends on the batches. A lookup with ``settle=True`` repeats the scaling
until the row no longer changes: whatever lookups came before, the row comes out as the same
fixed point (every lookup is the same function of the row alone, and its magnitudes only
shrink). Lookups without gradient (evaluation, a trained model's answers) settle; training's
lookups do one scaling each, as PBG's.
"""

from __future__ import annotations

import torch

from pbg_core.types import FloatTensorType, LongTensorType


def renormed_rows(
    table: FloatTensorType,
    idx: LongTensorType,
    max_norm: float | None,
    out: FloatTensorType | None = None,
    settle: bool = False,
) -> FloatTensorType:
    """``table[idx]`` as a dense tensor, renormed (in the table too) when ``max_norm`` is set.

    Duplicate indices are fine: every copy of a row is scaled by the same factor.

    Args:
        table: The table [count, D].
        idx: Rows to fetch.
        max_norm: Renorm rows above this norm, or None.
        out: Optional buffer [len(idx), D] to gather into (reused buffers avoid page faults).
        settle: Scale until the rows stop changing (see the module docstring), not once.
    """
    rows = table.index_select(0, idx) if out is None else torch.index_select(table, 0, idx, out=out)
    if max_norm is not None:
        renorm_rows_(table, idx, rows, max_norm, settle)
    return rows


def renorm_rows_(
    table: FloatTensorType, idx: LongTensorType, rows: FloatTensorType, max_norm: float, settle: bool = False
) -> None:
    """Scale the ``rows`` (fetched as ``table[idx]``) above ``max_norm`` down, in the table too.

    With ``settle``, rows still above ``max_norm`` after a scaling that changed them are scaled
    again, until none changes.
    """
    norms = rows.norm(dim=1)
    over = (norms > max_norm).nonzero().squeeze(1)
    norms = norms[over]
    while over.numel():
        before = rows.index_select(0, over)
        scale = (max_norm / (norms.double() + 1e-7)).to(rows.dtype)
        after = before * scale.unsqueeze(1)
        rows[over] = after
        table[idx[over]] = after
        if not settle:
            return
        # A row whose scale rounded to 1 is a fixed point even above max_norm.
        norms = after.norm(dim=1)
        again = (after != before).any(dim=1) & (norms > max_norm)
        over, norms = over[again], norms[again]


def renorm_table_(table: FloatTensorType, max_norm: float, settle: bool = False) -> None:
    """Every row of ``table`` above ``max_norm`` scaled down in place (PBG's lookup of all entities).

    Rows at most ``max_norm`` are left alone, as in PBG. ``settle``: as in :func:`renorm_rows_`.
    """
    over = (table.norm(dim=1) > max_norm).nonzero().squeeze(1)
    if over.numel():
        renorm_rows_(table, over, table.index_select(0, over), max_norm, settle)
