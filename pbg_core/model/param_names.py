"""The model's parameter names: PBG's private state-dict keys and the public names of checkpoint files.

Private (``MultiRelationEmbedder.state_dict()``, as PBG's): ``{lhs,rhs}_operators.{i}.{param}``
and ``global_embs.emb_{entity}``. Public (``model.v{N}.h5``): ``relations/{i}/operator/{side}/{param}``
and ``entities/{entity}/global_embedding``.
"""

from __future__ import annotations

import re

import torch

_OPERATOR_RE = re.compile(r"^(lhs|rhs)_operators\.(\d+)\.(.+)$")
_GLOBAL_RE = re.compile(r"^global_embs\.emb_(.+)$")
_PUBLIC_OP_RE = re.compile(r"^relations/(\d+)/operator/(lhs|rhs)/(.+)$")
_PUBLIC_GLOBAL_RE = re.compile(r"^entities/(.+)/global_embedding$")


def private_to_public(name: str) -> str:
    """``rhs_operators.3.diagonal`` -> ``relations/3/operator/rhs/diagonal`` etc.

    Raises:
        ValueError: ``name`` is not a model state-dict key.
    """
    if m := _OPERATOR_RE.match(name):
        return f"relations/{m.group(2)}/operator/{m.group(1)}/{m.group(3)}"
    if m := _GLOBAL_RE.match(name):
        return f"entities/{m.group(1)}/global_embedding"
    raise ValueError(
        f"unknown model parameter {name!r}; expected {{lhs,rhs}}_operators.<i>.<param> or global_embs.emb_<entity>"
    )


def public_to_private(name: str) -> str:
    """Inverse of :func:`private_to_public`.

    Raises:
        ValueError: ``name`` is not a public model parameter name.
    """
    if m := _PUBLIC_OP_RE.match(name):
        return f"{m.group(2)}_operators.{m.group(1)}.{m.group(3)}"
    if m := _PUBLIC_GLOBAL_RE.match(name):
        return f"global_embs.emb_{m.group(1)}"
    raise ValueError(
        f"unknown public model name {name!r}; expected relations/<i>/operator/<side>/<param> "
        "or entities/<entity>/global_embedding"
    )


def model_public_names(state_dict: dict[str, torch.Tensor]) -> dict[str, str]:
    """Private state-dict key -> public checkpoint name, for every key."""
    return {key: private_to_public(key) for key in state_dict}


def model_private_names(public_names: list[str]) -> dict[str, str]:
    """Public checkpoint name -> private state-dict key."""
    return {name: public_to_private(name) for name in public_names}
