"""What runs inside a HOGWILD worker process: set-up once, then per-bucket jobs.

Functions here are module-level so that spawn/forkserver children can unpickle
them by reference. Workers receive the shared model, its Adagrad state and the
embedding pool buffers once (``init_worker``); every job then only names slots,
the bucket's shared edges, its slice of edge indices and a seed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.evaluation.metrics import FilterIndex
from pbg_core.kernels import complex_diagonal, fused
from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.parallel.memory import PoolBuffers, SlotMap
from pbg_core.stats import Stats
from pbg_core.training.batching import eval_edges, train_edges
from pbg_core.training.optimizers import AsyncAdagrad
from pbg_core.training.settings import Evaluator, Trainer, WorkerSettings, build_evaluator, build_trainer
from pbg_core.training.tables import BucketTables

logger = logging.getLogger(__name__)


@dataclass
class WorkerInit:
    """Sent to each worker once: its settings (not the config) and the shared state."""

    settings: WorkerSettings
    model: MultiRelationEmbedder
    model_optimizer: AsyncAdagrad | None
    buffers: PoolBuffers


@dataclass
class WorkerState:
    """A worker's long-lived objects."""

    trainer: Trainer
    holdout_evaluator: Evaluator
    offline_evaluator: Evaluator
    buffers: PoolBuffers


@dataclass
class JobArgs:
    """One worker's share of a bucket job."""

    slots: SlotMap
    edges: EdgeList
    indices: torch.Tensor
    seed: int
    mode: str = "train"  # train | holdout | offline
    filter_index: FilterIndex | None = None


def init_worker(index: int, payload: WorkerInit) -> WorkerState:
    """Build the trainer and evaluators around the shared model (runs in the child)."""
    settings = payload.settings
    # In the background: the kernels' ~0.3 s first-call cost overlaps the rest of the
    # start-up instead of landing in the first bucket (a kernel called meanwhile waits
    # on numba's compiler lock).
    threading.Thread(target=_warm_up_kernels, name="pbg-kernel-warm-up", daemon=True).start()
    return WorkerState(
        trainer=build_trainer(settings, payload.model, payload.model_optimizer),
        holdout_evaluator=build_evaluator(settings, payload.model, during_training=True),
        offline_evaluator=build_evaluator(settings, payload.model, during_training=False),
        buffers=payload.buffers,
    )


def _warm_up_kernels() -> None:
    try:
        fused.warm_up()
        complex_diagonal.warm_up()
    except Exception as exc:  # noqa: BLE001 - an optimisation only: the first real call reports any problem
        logger.warning("could not preload the numba kernels (%s); they load on first use", exc)


def _tables(state: WorkerState, args: JobArgs) -> BucketTables:
    embeddings, optim_state = state.buffers.views(args.slots)
    return BucketTables(embeddings=embeddings, optim_state=optim_state)


def _generator(seed: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def train_job(state: WorkerState, args: JobArgs) -> Stats:
    """HOGWILD training of this worker's edge slice."""
    if len(args.indices) == 0:
        return Stats()
    return train_edges(state.trainer, _tables(state, args), args.edges, args.indices, _generator(args.seed))


def eval_job(state: WorkerState, args: JobArgs) -> Stats:
    """Ranking evaluation of this worker's edge slice."""
    if len(args.indices) == 0:
        return Stats()
    evaluator = state.offline_evaluator if args.mode == "offline" else state.holdout_evaluator
    return eval_edges(
        evaluator, _tables(state, args), args.edges, args.indices, _generator(args.seed), args.filter_index
    )
