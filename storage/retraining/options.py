"""The ``retrain`` parameter of the ``pbg-retrain`` flow: scheduled retraining, its imports and its gate.

Every field has a description: Prefect shows them in the deployment's run form, and ``pbg retrain``
prints them as its options' help (:mod:`flows.cli.parser`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from storage.edge_columns import Column, EdgeColumns


class IncomingOptions(EdgeColumns):
    """New edge lists to import at the start of each run (``pbg import --append`` of what arrived).

    Read as :class:`~storage.edge_columns.EdgeColumns` says (``pbg import``'s own reading
    options), from where ``inputs`` names, into ``edges_dir``, with ``holdout_fraction`` held out.
    """

    inputs: str = Field(
        min_length=1,
        description="Where new edge lists arrive: a glob pattern (incoming/*.tsv, s3://bucket/in/*.parquet) "
        "or a directory/prefix (every file directly in it). Files the import manifest lists are skipped.",
    )
    edges_dir: str = Field(
        min_length=1,
        description="Directory (or URL) for the edge paths of imported files: gen{N}-{file stem}_partitioned, "
        "and their holdouts gen{N}-{file stem}_holdout.",
    )
    # The columns of both ends default to PBG's (0 and 1): an incoming edge list is named once, in
    # the deployment, not per command as pbg import's flags are.
    lhs_col: Column = Field(0, description=EdgeColumns.model_fields["lhs_col"].description)
    rhs_col: Column = Field(1, description=EdgeColumns.model_fields["rhs_col"].description)
    holdout_fraction: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Fraction of each imported file's edges held out from training: the quality gate "
        "evaluates the previous and the new model on them.",
    )


class RetrainOptions(BaseModel):
    """Scheduled retraining: one checkpoint directory per flow run under ``checkpoint_path``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_last: int = Field(
        3,
        ge=1,
        description="Complete run directories whose gate passed to keep under checkpoint_path; older ones, "
        "and runs whose gate failed, are deleted after a run is promoted (the run latest.json names, a run "
        "still training or being initialised from, and an incomplete one are kept).",
    )
    init_from_previous: bool = Field(
        True,
        description="Start from the newest earlier run's committed checkpoint (embeddings, model and "
        "optimizer state) whose gate passed; off, or with no earlier run: the config's init_path.",
    )
    epochs: int | None = Field(
        None,
        ge=1,
        description="Epochs of each retraining run (a few, from the previous run); None: the config's num_epochs.",
    )
    incoming: IncomingOptions | None = Field(
        None, description="Import new edge lists at the start of each run (None: train the config's edge paths)."
    )
    on_no_new_data: Literal["skip", "fail"] = Field(
        "skip",
        description="With incoming: when nothing new arrived since the run started from, skip training "
        "(the run completes, latest.json unchanged) or fail the run.",
    )
    min_mrr: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Gate: promote (latest.json) only if the trained model's MRR on the new edges' holdout "
        "is at least this.",
    )
    max_mrr_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Gate: promote only if the MRR on the holdout is at most this below the previous run's "
        "MRR on the same holdout (new entities started as this run starts them).",
    )

    @model_validator(mode="after")
    def _gate_needs_holdout(self) -> RetrainOptions:
        if self.incoming is None and (self.min_mrr is not None or self.max_mrr_drop is not None):
            given = [name for name in ("min_mrr", "max_mrr_drop") if getattr(self, name) is not None]
            raise ValueError(
                f"retrain.{given[0]}: a quality gate evaluates on a holdout of the edges imported by the run; "
                "set retrain.incoming (inputs, edges_dir) too"
            )
        return self

    @property
    def gated(self) -> bool:
        """Whether a quality gate decides promotion."""
        return self.min_mrr is not None or self.max_mrr_drop is not None


__all__ = ["IncomingOptions", "RetrainOptions"]
