"""The training schedule: epochs x edge paths x edge chunks.

One (epoch, edge path, edge chunk) triple is an *iteration*, and iteration ``i``
(0-based) commits checkpoint version ``i + 1``: the committed version therefore
says how many iterations are done, which is how a rerun resumes and how raising
``num_epochs`` extends a finished run (PBG's ``IterationManager``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field


class Iteration(BaseModel):
    """One (epoch, edge path, edge chunk) step of a training run (all indexes 0-based)."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0, description="Position in the whole run; commits version index + 1.")
    epoch_idx: int = Field(ge=0, description="Epoch of this iteration.")
    num_epochs: int = Field(ge=1, description="Epochs in the run.")
    edge_path_idx: int = Field(ge=0, description="Index of the edge path trained.")
    num_edge_paths: int = Field(ge=1, description="Edge paths per epoch.")
    edge_path: str = Field(description="The edge path trained.")
    edge_chunk_idx: int = Field(ge=0, description="Chunk of every bucket trained.")
    num_edge_chunks: int = Field(ge=1, description="Chunks each bucket is split into.")

    @property
    def version(self) -> int:
        """The checkpoint version this iteration commits."""
        return self.index + 1

    @property
    def label(self) -> str:
        """Human name, 1-based: ``epoch 3/10, path 1/1, chunk 2/4``."""
        return (
            f"epoch {self.epoch_idx + 1}/{self.num_epochs}, "
            f"path {self.edge_path_idx + 1}/{self.num_edge_paths}, "
            f"chunk {self.edge_chunk_idx + 1}/{self.num_edge_chunks}"
        )

    def metadata(self) -> dict[str, int | str]:
        """PBG's ``iteration/*`` checkpoint attributes."""
        return {
            "num_epochs": self.num_epochs,
            "epoch_idx": self.epoch_idx,
            "num_edge_paths": self.num_edge_paths,
            "edge_path_idx": self.edge_path_idx,
            "edge_path": self.edge_path,
            "num_edge_chunks": self.num_edge_chunks,
            "edge_chunk_idx": self.edge_chunk_idx,
        }


def compute_num_edge_chunks(
    configured: int | None, edges_in_first_bucket: Sequence[int], max_edges_per_chunk: int
) -> int:
    """PBG's rule: the configured count, else ``ceil(max bucket (0,0) size / max_edges_per_chunk)``.

    Args:
        configured: ``num_edge_chunks`` from the config, or None for automatic.
        edges_in_first_bucket: Edge count of bucket (0, 0) in every edge path.
        max_edges_per_chunk: The config's ``max_edges_per_chunk``.

    Returns:
        At least 1.
    """
    if configured is not None:
        return configured
    largest = max(edges_in_first_bucket, default=0)
    return max(1, math.ceil(largest / max_edges_per_chunk))


def build_iterations(num_epochs: int, edge_paths: Sequence[str], num_edge_chunks: int) -> list[Iteration]:
    """Every iteration of a run, in training order (epochs, then paths, then chunks)."""
    out: list[Iteration] = []
    for epoch in range(num_epochs):
        for path_idx, path in enumerate(edge_paths):
            for chunk in range(num_edge_chunks):
                out.append(
                    Iteration(
                        index=len(out),
                        epoch_idx=epoch,
                        num_epochs=num_epochs,
                        edge_path_idx=path_idx,
                        num_edge_paths=len(edge_paths),
                        edge_path=path,
                        edge_chunk_idx=chunk,
                        num_edge_chunks=num_edge_chunks,
                    )
                )
    return out


def should_preserve(iteration: Iteration, interval: int | None) -> int | None:
    """The epoch snapshot to keep after committing ``iteration``, or None.

    PBG keeps ``epoch_{N}`` after finishing epoch N when N % interval == 0, i.e.
    when the *next* iteration starts an epoch that is a multiple of the interval.
    """
    if not interval:
        return None
    last_of_epoch = (
        iteration.edge_path_idx == iteration.num_edge_paths - 1
        and iteration.edge_chunk_idx == iteration.num_edge_chunks - 1
    )
    finished = iteration.epoch_idx + 1
    if last_of_epoch and finished % interval == 0:
        return finished
    return None
