"""The typed training config: PBG's ``ConfigSchema`` as a frozen pydantic model, and its cross-field rules.

Field names and defaults are PBG's (its ``ConfigSchema``;
docs/formats.md, "Config files"), so PBG config files load unchanged, plus ``seed``. Every field carries its help
text as a description: Prefect renders it in the deployment's parameter form, and
``model_json_schema()`` exposes it to any other tool. The sections (entity and relation
types) are in :mod:`pbg_core.config.sections`, the shared field validators in
:mod:`pbg_core.config.validators`, the cross-field rules in :mod:`pbg_core.config.rules`.

:func:`pbg_core.config.validation.parse_config` is the entry point for untrusted input
(files, CLI) and reports every problem at once in a :class:`ConfigError`. Constructing
:class:`ConfigSchema` directly (e.g. Prefect validating a flow parameter) runs the same
checks but reports them as a pydantic ``ValidationError``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from pbg_core.config.quality_sections import EarlyStoppingSchema, ValidationSchema
from pbg_core.config.rules import Problem, cross_field_problems, warn_about
from pbg_core.config.sections import EntitySchema, RelationSchema
from pbg_core.config.storage_options import StorageOptions
from pbg_core.config.validators import (
    FROZEN,
    NO_BOOL_NUMBERS,
    BucketOrder,
    Comparator,
    LossFn,
    NewEntityInit,
    OperatorInit,
    Regularizer,
    SharedMerge,
    choice_validator,
)
from pbg_core.errors import UnknownNameError

# Validation context key: parse_config runs cross-field checks itself so it can
# merge them with field errors; direct construction leaves it unset.
DEFER_CROSS_FIELD = "pbg_defer_cross_field"


class ConfigSchema(BaseModel):
    """A whole PBG training config (field names and defaults as in PBG)."""

    model_config = FROZEN
    _no_bool_numbers = NO_BOOL_NUMBERS

    # Model
    entities: dict[str, EntitySchema] = Field(
        min_length=1, description="Entity types, by name; relations refer to them by these keys."
    )
    relations: list[RelationSchema] = Field(
        min_length=1, description="Relation types; edge files refer to a relation by its index here."
    )
    dimension: int = Field(gt=0, description="Default embedding dimension of every entity type.")
    init_scale: float = Field(1e-3, gt=0, description="Standard deviation of the initial embeddings.")
    operator_init: OperatorInit = Field(
        "identity",
        description="How relation operators' parameters start: identity (PBG's: diagonal 1, translation 0, "
        "linear and affine the identity matrix and 0, complex_diagonal 1 + 0i; draws no random number) or "
        "normal (every operator parameter drawn from N(0, operator_init_scale^2), seeded). New field.",
    )
    operator_init_scale: float | None = Field(
        None,
        gt=0,
        description="Standard deviation of operator_init=normal; None uses init_scale. Ignored (with a warning) "
        "with operator_init=identity. New field.",
    )
    max_norm: float | None = Field(
        None, gt=0, description="Renormalise embeddings to at most this norm when looked up; None: off."
    )
    global_emb: bool = Field(
        True,
        description="Add a learned per-entity-type vector to every embedding (not with dynamic_relations).",
    )
    comparator: Comparator = Field("cos", description="How two embeddings are compared into a score.")
    bias: bool = Field(False, description="Use dimension 0 of the embeddings as a bias added to the score.")
    loss_fn: LossFn = Field("ranking", description="Loss function over positive and negative scores.")
    margin: float = Field(0.1, description="Margin of the ranking loss.")
    regularization_coef: float = Field(0.0, ge=0, description="Weight of the regularizer; 0 disables it.")
    regularizer: Regularizer = Field("N3", description="Regularizer applied when regularization_coef > 0.")
    # Data
    entity_path: str = Field(description="Directory (or URL) of entity counts/names and dynamic relation files.")
    edge_paths: list[str] = Field(
        description="Directories (or URLs) of bucketed edge files, trained in this order each epoch."
    )
    checkpoint_path: str = Field(
        description="Directory (or URL) for checkpoints; training resumes from the checkpoint found there."
    )
    init_path: str | None = Field(None, description="Checkpoint directory of initial embeddings and model.")
    init_new_entities: NewEntityInit = Field(
        "random",
        description="Rows init_path lacks (entities added by `pbg import --append`): random (init_scale, as a "
        "fresh model) or neighbor_mean (the mean of their neighbors that init_path trained, over the edges; "
        "random where none). New field.",
    )
    checkpoint_preservation_interval: int | None = Field(
        None, ge=1, description="Keep a snapshot of the checkpoint every this many epochs; None: never."
    )
    progress_interval: float = Field(
        1800.0,
        ge=0,
        description=(
            "Seconds of training a kill may lose at most (or the bucket in flight, if longer): bucket progress "
            "is saved when this much has passed since the last save, or after every bucket whose partitions "
            "are small (64 MiB or less); 0: after every bucket. Each save rewrites the resident partitions "
            "trained since the last one."
        ),
    )
    # Training
    num_epochs: int = Field(1, ge=0, description="Number of passes over all edges.")
    num_edge_chunks: int | None = Field(
        None,
        ge=1,
        description="Split each bucket into this many chunks; None: derived from max_edges_per_chunk.",
    )
    max_edges_per_chunk: int = Field(
        1_000_000_000, ge=1, description="Largest edge chunk, used only to derive num_edge_chunks."
    )
    bucket_order: BucketOrder = Field("inside_out", description="Order in which buckets are trained in a pass.")
    resident_partitions: int | None = Field(
        None,
        ge=1,
        description="Partitions (of every partitioned entity type) kept in memory between buckets, besides "
        "the 2 loading or being written; None: as many as fit in the memory available (at least a "
        "bucket's, at most all). A value above the partition count keeps all of them. New field.",
    )
    workers: int | None = Field(
        None,
        ge=1,
        description="HOGWILD worker processes; None means the CPU cores usable by this process "
        "(its CPU affinity, unlike PBG's os.cpu_count()).",
    )
    batch_size: int = Field(1000, ge=1, description="Edges per training batch; a multiple of num_batch_negs.")
    num_batch_negs: int = Field(
        50, ge=0, description="Negatives per positive taken from the same batch (also the chunk size)."
    )
    num_uniform_negs: int = Field(
        50, ge=0, description="Negatives per chunk sampled uniformly from the current partition."
    )
    disable_lhs_negs: bool = Field(False, description="Do not corrupt the left-hand side to make negatives.")
    disable_rhs_negs: bool = Field(False, description="Do not corrupt the right-hand side to make negatives.")
    lr: float = Field(1e-2, ge=0, description="Adagrad learning rate of the embeddings.")
    relation_lr: float | None = Field(
        None, ge=0, description="Learning rate of operators and global embeddings; None uses lr."
    )
    eval_fraction: float = Field(
        0.05, ge=0, le=1, description="Fraction of each bucket held out to evaluate during training; 0: off."
    )
    eval_num_batch_negs: int | None = Field(
        1000, ge=0, description="num_batch_negs during evaluation inside training; None keeps it."
    )
    eval_num_uniform_negs: int | None = Field(
        1000, ge=0, description="num_uniform_negs during evaluation inside training; None keeps it."
    )
    # Expert
    background_io: bool = Field(False, description="Deprecated and ignored (kept for PBG compatibility).")
    verbose: int = Field(0, ge=0, description="Verbosity; 1 also logs the whole config.")
    hogwild_delay: float = Field(
        2.0, ge=0, description="Seconds by which HOGWILD workers after the first start late in epoch 1."
    )
    dynamic_relations: bool = Field(
        False, description="Dynamic-relations mode: one relation entry, relation ids read from the edges."
    )
    # Distributed
    num_machines: int = Field(
        1,
        ge=1,
        description="Trainer machines. Above 1: each a Dask worker training one bucket at a time with its "
        "own `workers` HOGWILD processes; partitions move through the checkpoint's storage (docs/distributed.md).",
    )
    dask_address: str | None = Field(
        None,
        description="Scheduler of the Dask cluster to train on when num_machines > 1: tcp://host:8786, or "
        "tls://host:8786 with Dask's TLS settings (docs/distributed.md); "
        "None: a local cluster of num_machines worker processes on this machine. New field.",
    )
    shared_paths: bool = Field(
        False,
        description="With a dask_address: the local paths of this config are on a filesystem every worker "
        "mounts at the same place (NFS, Lustre); otherwise they are refused (use s3:// URLs). New field.",
    )
    distributed_shared_merge: SharedMerge = Field(
        "delta",
        description="How a machine's bucket joins the shared parameters: delta (added, as PBG's parameter "
        "server) or average (mean with the flow's copy); docs/distributed.md has both measured. New field.",
    )
    num_partition_servers: int = Field(
        -1,
        ge=-1,
        description="PBG partition servers (-1: local, 0: none, partitions through the checkpoint's storage, "
        "which is what a distributed run does); values > 0 are not supported.",
    )
    distributed_init_method: str | None = Field(
        None, description="torch.distributed init URI (PBG compatibility; unused on one machine)."
    )
    distributed_tree_init_order: bool = Field(
        True, description="PBG's distributed first-pass rule (PBG compatibility; unused on one machine)."
    )
    num_gpus: int = Field(0, ge=0, description="GPUs to train on; only 0 is supported (CPU training).")
    num_groups_for_partition_server: int = Field(
        16, ge=1, description="Process groups for partition-server traffic (PBG compatibility; unused)."
    )
    num_groups_per_sharded_partition_server: int = Field(
        1, ge=1, description="Process groups per sharded partition server (PBG compatibility; unused)."
    )
    partition_shard_size: int = Field(
        250, ge=1, description="Shard size in MiB for sharded partition servers (PBG compatibility; unused)."
    )
    half_precision: bool = Field(
        False, description="fp16 comparator inputs on GPU (PBG compatibility; no effect on CPU)."
    )
    # New in pbg-flow
    seed: int | None = Field(
        None,
        ge=0,
        description="Random seed; the same seed and workers=1 give bit-identical checkpoints. None: unseeded.",
    )
    storage_options: StorageOptions | None = Field(
        None,
        description="fsspec options for every path and URL of the run (edges, entities, checkpoints, "
        "init_path, import and export files). Prefer the standard environment variables "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION, "
        "AWS_ENDPOINT_URL and AWS_PROFILE: they apply to every value not set here. Credentials "
        "given here (key, secret, token, and any *secret*/*token*/*password*/*credential* key) "
        "are masked as '**********' in config.json, logs and flow run parameters; a masked value "
        "read back is ignored, never used as a credential.",
    )
    # Validation and early stopping (pbg_core/config/quality_sections.py; docs/quality.md)
    validation: ValidationSchema | None = Field(
        None,
        description="Rank a validation edge path (filtered MRR) every few epochs and keep the best version "
        "under best.json; None: no validation, as PBG.",
    )
    early_stopping: EarlyStoppingSchema | None = Field(
        None, description="Stop training when the validation metric stops improving (needs validation); None: off."
    )

    _choices = choice_validator(
        "comparator",
        "loss_fn",
        "regularizer",
        "bucket_order",
        "distributed_shared_merge",
        "init_new_entities",
        "operator_init",
    )

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> ConfigSchema:
        if info.context and info.context.get(DEFER_CROSS_FIELD):
            return self
        problems = [p.message for p in cross_field_problems(self)]
        if problems:
            raise PydanticCustomError(
                "cross_field", "{summary}", {"summary": "; ".join(problems), "problems": problems}
            )
        warn_about(self)
        return self

    def entity_dimension(self, entity: str) -> int:
        """The embedding dimension of entity type ``entity`` (its own or the global one).

        Raises:
            UnknownNameError: ``entity`` is not a key of ``entities``.
        """
        try:
            own = self.entities[entity].dimension
        except KeyError:
            raise UnknownNameError(f"unknown entity type {entity!r}; known: {', '.join(self.entities)}") from None
        return own if own is not None else self.dimension

    def storage_options_for_fs(self) -> dict[str, Any]:
        """The real fsspec keyword arguments of every store of this run (secrets in clear).

        The one place configs hand credentials to storage: pass the result straight to
        a store, never log or serialize it. Values not set (and masked secrets read back
        from a saved config) are left out, so the ``AWS_*`` environment supplies them.
        """
        return self.storage_options.to_fsspec() if self.storage_options is not None else {}


__all__ = ["DEFER_CROSS_FIELD", "ConfigSchema", "Problem", "cross_field_problems", "warn_about"]
