"""The parameters every machine trains: relation operators, global embeddings, unpartitioned types.

Partitioned embeddings are trained by one machine at a time (:mod:`.bucket_locks`); the rest
is touched by every bucket. As PBG's parameter server does, each machine starts a bucket from
the coordinator's current copy and sends back what its training changed (a delta); the
coordinator adds every delta to its copy as it arrives. Adagrad accumulators are sums of
squared gradients, so adding their deltas is exact; two buckets training at once each see the
other's changes from their next bucket on (PBG's asynchronous push and pull, here at bucket
boundaries). docs/distributed.md has the measurements behind this choice, against the
alternative also offered here: averaging the coordinator's copy with each machine's result
(``distributed_shared_merge: average``).

The tensors are named the same way on every machine built from the same config:
``model.<parameter>``, ``adagrad.<i>`` and ``embeddings.<type>`` / ``state.<type>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from pbg_core.session.engine import TrainingSession

Tensors = dict[str, torch.Tensor]


def shared_tensors(session: TrainingSession) -> Tensors:
    """The session's live tensors shared by all machines (views: writing them changes the session)."""
    tensors: Tensors = {}
    for name, param in session.model_state.model.named_parameters():
        tensors[f"model.{name}"] = param.data
    optimizer = session.model_state.optimizer
    if optimizer is not None:
        for index, acc in enumerate(optimizer.sums):
            tensors[f"adagrad.{index}"] = acc
    for entity, part in session.settings.unpartitioned_keys():
        handle = session.residency.handle((entity, part))
        tensors[f"embeddings.{entity}"] = handle.embeddings
        tensors[f"state.{entity}"] = handle.state
    return tensors


def snapshot(tensors: Mapping[str, torch.Tensor]) -> Tensors:
    """A copy of ``tensors`` (what a bucket starts from, and what its delta is taken against)."""
    return {name: tensor.detach().clone() for name, tensor in tensors.items()}


def load(tensors: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor]) -> None:
    """Overwrite the live ``tensors`` with ``values`` (a machine adopting the coordinator's copy).

    Raises:
        ValueError: the names or shapes differ (machines built from different configs).
    """
    _check_same(tensors, values)
    with torch.no_grad():
        for name, tensor in tensors.items():
            tensor.copy_(values[name])


def delta(tensors: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor]) -> Tensors:
    """What training changed: ``tensors - start``, per name."""
    _check_same(tensors, start)
    return {name: tensor.detach() - start[name] for name, tensor in tensors.items()}


def add(tensors: Mapping[str, torch.Tensor], change: Mapping[str, torch.Tensor]) -> None:
    """Add a machine's ``change`` into the live ``tensors`` (the coordinator's copy).

    Raises:
        ValueError: the names or shapes differ.
    """
    _check_same(tensors, change)
    with torch.no_grad():
        for name, tensor in tensors.items():
            tensor.add_(change[name])


def average(
    tensors: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor], change: Mapping[str, torch.Tensor]
) -> None:
    """Make the live ``tensors`` the mean of themselves and a machine's result (``start + change``).

    Raises:
        ValueError: the names or shapes differ.
    """
    _check_same(tensors, start)
    _check_same(tensors, change)
    with torch.no_grad():
        for name, tensor in tensors.items():
            tensor.add_(start[name]).add_(change[name]).mul_(0.5)


def add_delta(
    tensors: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor], change: Mapping[str, torch.Tensor]
) -> None:
    """:func:`add` with the merge signature (``start`` is not needed: a delta is already relative)."""
    add(tensors, change)


Merge = Callable[[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]], None]
# ``distributed_shared_merge``: how the coordinator folds a machine's bucket into its copy.
MERGES: dict[str, Merge] = {"delta": add_delta, "average": average}


def _check_same(tensors: Mapping[str, torch.Tensor], other: Mapping[str, torch.Tensor]) -> None:
    if set(tensors) != set(other):
        missing, extra = sorted(set(tensors) - set(other)), sorted(set(other) - set(tensors))
        raise ValueError(f"shared parameters differ: missing {missing}, unexpected {extra}")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(other[name].shape):
            raise ValueError(
                f"shared parameter {name}: shape {tuple(other[name].shape)}, expected {tuple(tensor.shape)}"
            )
