"""The typed training config: PBG's ``ConfigSchema`` as frozen pydantic models.

Field names and defaults are PBG's (its ``ConfigSchema``, ``EntitySchema`` and
``RelationSchema``; docs/formats.md, "Config files"), so PBG config files load
unchanged, plus ``seed``. Every field carries its help text as a description:
Prefect renders it in the deployment's parameter form, and ``model_json_schema()``
exposes it to any other tool. Choice fields are ``Literal`` strings so the JSON
schema lists the allowed values; any case is accepted on input (PBG matches enums
through ``.upper()``) and normalised to the canonical spelling.

:func:`parse_config` is the entry point for untrusted input (files, CLI): legacy
mixedCase keys, PBG's ``-p key=value`` overrides, and one :class:`ConfigError`
listing every problem with its dotted field path. Constructing :class:`ConfigSchema`
directly (e.g. Prefect validating a flow parameter) runs the same checks but
reports them as a pydantic ``ValidationError``. The raw-dict helpers (legacy keys,
overrides, error lines) live in :mod:`pbg_core.config.parsing`.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pbg_core.config.parsing import Schemas, apply_override, error_lines, normalise_keys
from pbg_core.config.storage_options import StorageOptions
from pbg_core.errors import ConfigError, UnknownNameError

Operator = Literal["none", "translation", "diagonal", "linear", "affine", "complex_diagonal"]
Comparator = Literal["dot", "cos", "l2", "squared_l2"]
LossFn = Literal["ranking", "logistic", "softmax"]
Regularizer = Literal["N3"]
BucketOrder = Literal["random", "affinity", "inside_out", "outside_in"]

_UNSUPPORTED = "not supported by pbg-flow (single machine, CPU)"
# Validation context key: parse_config runs cross-field checks itself so it can
# merge them with field errors; direct construction leaves it unset.
_DEFER_CROSS_FIELD = "pbg_defer_cross_field"

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _canonical_choice(value: object, choices: tuple[str, ...]) -> object:
    """Map ``value`` to the canonical spelling of a choice, ignoring case."""
    if not isinstance(value, str):
        return value  # pydantic reports the wrong type
    for choice in choices:
        if choice.lower() == value.strip().lower():
            return choice
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1)
    hint = f" (did you mean {lowered[close[0]]!r}?)" if close else ""
    detail = f"{value!r} is not one of {', '.join(choices)}{hint}"
    raise PydanticCustomError("not_a_choice", "{detail}", {"detail": detail})


def _choice_validator(*fields: str) -> Any:
    """A before-validator making the Literal ``fields`` case-insensitive."""

    def canonical(cls: type[BaseModel], value: object, info: ValidationInfo) -> object:
        assert info.field_name is not None  # a field validator always knows its field
        return _canonical_choice(value, get_args(cls.model_fields[info.field_name].annotation))

    return field_validator(*fields, mode="before")(canonical)


def _is_number_field(annotation: object) -> bool:
    """Whether a field annotation (``int``, ``float | None``, ...) is numeric and not ``bool``."""
    options = set(get_args(annotation)) or {annotation}
    return bool(options & {int, float}) and bool not in options


def _refuse_bools(cls: type[BaseModel], value: object, info: ValidationInfo) -> object:
    """Refuse ``true``/``false`` for a numeric field: pydantic would take them as 1 and 0.

    ``"dimension": true`` is a mistake, not a dimension of 1 (a JSON or YAML boolean never
    stands for a number in a PBG config).
    """
    field = cls.model_fields.get(info.field_name or "")
    if isinstance(value, bool) and field is not None and _is_number_field(field.annotation):
        kind = "an integer" if int in (set(get_args(field.annotation)) or {field.annotation}) else "a number"
        raise PydanticCustomError("bool_not_number", "expected {kind}, got a boolean", {"kind": kind})
    return value


_NO_BOOL_NUMBERS = field_validator("*", mode="before")(_refuse_bools)


class EntitySchema(BaseModel):
    """One entity type: how it is partitioned and embedded."""

    model_config = _FROZEN
    _no_bool_numbers = _NO_BOOL_NUMBERS

    num_partitions: int = Field(ge=1, description="Number of partitions of this entity type; 1 means unpartitioned.")
    featurized: bool = Field(
        False, description="Entities are bags of features, each embedded as the mean of its features."
    )
    dimension: int | None = Field(
        None, gt=0, description="Embedding dimension of this type; None uses the global dimension."
    )


class RelationSchema(BaseModel):
    """One relation type: which entity types it links and how it is scored."""

    model_config = _FROZEN
    _no_bool_numbers = _NO_BOOL_NUMBERS

    name: str = Field(min_length=1, description="Label of the relation type, used in logs and exports.")
    lhs: str = Field(description="Entity type of the left-hand side (a key of entities).")
    rhs: str = Field(description="Entity type of the right-hand side (a key of entities).")
    weight: float = Field(
        1.0, gt=0, description="Multiplier of this relation's loss (dynamic mode uses relations[0] only)."
    )
    operator: Operator = Field(
        "none", description="Transformation applied to the right-hand side embedding before comparing."
    )
    all_negs: bool = Field(
        False,
        description="Use every entity of the partition as a negative (overrides other negative modes).",
    )

    _choices = _choice_validator("operator")


class ConfigSchema(BaseModel):
    """A whole PBG training config (field names and defaults as in PBG)."""

    model_config = _FROZEN
    _no_bool_numbers = _NO_BOOL_NUMBERS

    # Model
    entities: dict[str, EntitySchema] = Field(
        min_length=1, description="Entity types, by name; relations refer to them by these keys."
    )
    relations: list[RelationSchema] = Field(
        min_length=1, description="Relation types; edge files refer to a relation by its index here."
    )
    dimension: int = Field(gt=0, description="Default embedding dimension of every entity type.")
    init_scale: float = Field(1e-3, gt=0, description="Standard deviation of the initial embeddings.")
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
    checkpoint_preservation_interval: int | None = Field(
        None, ge=1, description="Keep a snapshot of the checkpoint every this many epochs; None: never."
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
    # Distributed (accepted for PBG compatibility; only single-machine CPU values are allowed)
    num_machines: int = Field(1, ge=1, description="Trainer machines; only 1 is supported (single machine).")
    num_partition_servers: int = Field(
        -1, ge=-1, description="PBG partition servers (-1: local, 0: none); values > 0 are not supported."
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

    _choices = _choice_validator("comparator", "loss_fn", "regularizer", "bucket_order")

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> ConfigSchema:
        if info.context and info.context.get(_DEFER_CROSS_FIELD):
            return self
        problems = [p.message for p in cross_field_problems(self)]
        if problems:
            raise PydanticCustomError(
                "cross_field", "{summary}", {"summary": "; ".join(problems), "problems": problems}
            )
        _warn_about(self)
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


_SCHEMAS = Schemas(ConfigSchema, EntitySchema, RelationSchema)


class Problem(NamedTuple):
    """A cross-field problem: the top-level fields involved and the message line."""

    fields: frozenset[str]
    message: str


def cross_field_problems(config: ConfigSchema) -> list[Problem]:
    """Every cross-field rule ``config`` breaks: PBG's post-init checks, plus the modes we refuse."""
    return [
        *_relation_problems(config),
        *_mode_problems(config),
        *_partition_problems(config),
        *_unsupported_problems(config),
    ]


def _p(fields: str, message: str) -> Problem:
    return Problem(frozenset(fields.split()), message)


def _relation_problems(config: ConfigSchema) -> list[Problem]:
    known = ", ".join(config.entities)
    problems = []
    for i, rel in enumerate(config.relations):
        for side in ("lhs", "rhs"):
            entity = getattr(rel, side)
            if entity not in config.entities:
                problems.append(
                    _p(
                        "relations entities",
                        f"relations[{i}].{side}: {entity!r} is not an entity type; known: {known}",
                    )
                )
        if rel.operator == "complex_diagonal":
            for entity in dict.fromkeys([rel.lhs, rel.rhs]):
                dim = config.entity_dimension(entity) if entity in config.entities else 0
                if dim % 2:
                    problems.append(
                        _p(
                            "relations entities dimension",
                            f"relations[{i}].operator: 'complex_diagonal' needs an even dimension, "
                            f"but entity type {entity!r} has dimension {dim}",
                        )
                    )
        if config.regularization_coef > 0 and rel.operator in ("linear", "affine"):
            problems.append(
                _p(
                    "relations regularization_coef",
                    f"relations[{i}].operator: {rel.operator!r} cannot be regularized "
                    f"(regularization_coef={config.regularization_coef}); use none, translation, "
                    "diagonal or complex_diagonal, or set regularization_coef=0",
                )
            )
    return problems


def _mode_problems(config: ConfigSchema) -> list[Problem]:
    problems = []
    if config.dynamic_relations and len(config.relations) != 1:
        problems.append(
            _p(
                "relations dynamic_relations",
                f"relations: dynamic_relations=True needs exactly one relation entry, got {len(config.relations)}",
            )
        )
    if config.dynamic_relations and config.global_emb:
        problems.append(
            _p(
                "global_emb dynamic_relations",
                "global_emb: True is not allowed with dynamic_relations=True; set global_emb=False",
            )
        )
    if config.disable_lhs_negs and config.disable_rhs_negs:
        problems.append(
            _p(
                "disable_lhs_negs disable_rhs_negs",
                "disable_lhs_negs, disable_rhs_negs: both are True, which leaves no negatives; at most one may be True",
            )
        )
    if config.num_batch_negs > 0 and config.batch_size % config.num_batch_negs:
        problems.append(
            _p(
                "batch_size num_batch_negs",
                f"batch_size: {config.batch_size} must be a multiple of num_batch_negs ({config.num_batch_negs})",
            )
        )
    return problems


def _partition_problems(config: ConfigSchema) -> list[Problem]:
    problems = []
    for name, entity in config.entities.items():
        if entity.featurized and entity.num_partitions != 1:
            problems.append(
                _p(
                    "entities",
                    f"entities.{name}.num_partitions: {entity.num_partitions} is not allowed for a "
                    "featurized entity type; allowed: 1",
                )
            )
    for side in ("lhs", "rhs"):
        # PBG: types with 1 partition are unpartitioned; the others on a side must agree.
        counts = {
            t: config.entities[t].num_partitions
            for t in dict.fromkeys(getattr(r, side) for r in config.relations)
            if t in config.entities and config.entities[t].num_partitions > 1
        }
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{t}={n}" for t, n in counts.items())
            problems.append(
                _p(
                    "entities relations",
                    f"entities: partitioned entity types on the {side} side must share one "
                    f"num_partitions; got {listed}",
                )
            )
    return problems


def _unsupported_problems(config: ConfigSchema) -> list[Problem]:
    problems = []
    if config.num_machines > 1:
        problems.append(_p("num_machines", f"num_machines: {config.num_machines} is {_UNSUPPORTED}; allowed: 1"))
    if config.num_gpus > 0:
        problems.append(_p("num_gpus", f"num_gpus: {config.num_gpus} is {_UNSUPPORTED}; allowed: 0"))
    if config.num_partition_servers > 0:
        problems.append(
            _p(
                "num_partition_servers",
                f"num_partition_servers: {config.num_partition_servers} is {_UNSUPPORTED}; allowed: -1, 0",
            )
        )
    return problems


def _warn_about(config: ConfigSchema) -> None:
    """Warnings PBG gives for legal but dubious settings."""
    if config.loss_fn == "logistic" and config.comparator == "cos":
        warnings.warn(
            "loss_fn='logistic' with comparator='cos' is not recommended: cosine scores lie in "
            "[-1, 1], so the logistic loss cannot get close to 0; consider comparator='dot'",
            UserWarning,
            stacklevel=3,
        )
    if config.background_io:
        # FutureWarning, not DeprecationWarning: it is meant for end users and shown by default.
        warnings.warn("background_io is deprecated and ignored", FutureWarning, stacklevel=3)


def config_to_json(config: ConfigSchema) -> dict[str, Any]:
    """The config as JSON-safe data with every field; ``parse_config`` turns it back into ``config``.

    Secrets of ``storage_options`` come out as ``"**********"`` (this is what config.json,
    checkpoint attributes and logs hold), so they alone do not round-trip; use
    :func:`config_to_raw` to re-parse a config with its credentials.
    """
    return config.model_dump(mode="json")


def config_to_raw(config: ConfigSchema) -> dict[str, Any]:
    """The config as a dict for :func:`parse_config` that keeps its secrets (as ``SecretStr``).

    Not JSON-safe on purpose: use it to re-validate a config in memory (e.g. with
    overrides), never to write or log one.
    """
    return config.model_dump(mode="python")


def parse_config(raw: Mapping[str, Any], overrides: Sequence[str] = (), source: str | None = None) -> ConfigSchema:
    """Validate a PBG-style config dict, applying ``-p key=value`` overrides first.

    Args:
        raw: The config as returned by ``get_torchbiggraph_config()`` or read from
            JSON/YAML. Legacy mixedCase keys are accepted. Not modified.
        overrides: PBG ``-p`` overrides such as ``"num_epochs=10"``,
            ``"relations.0.all_negs=true"``, ``"entities.all.num_partitions=4"``
            or ``"edge_paths=a,b"``.
        source: Where ``raw`` came from, quoted in the error.

    Returns:
        The validated config.

    Raises:
        ConfigError: listing every problem, one line each with its dotted path.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError([f"config: expected a mapping of field names, got {type(raw).__name__}"], source)
    problems: list[str] = []
    data = normalise_keys(raw, _SCHEMAS, problems)
    for override in overrides:
        problems.extend(apply_override(data, override, ConfigSchema))
    config, dropped = _validate_fields(data, problems)
    if config is not None:
        problems.extend(p.message for p in cross_field_problems(config) if not p.fields & dropped)
    if problems:
        raise ConfigError(problems, source)
    assert config is not None
    _warn_about(config)
    return config


def _validate_fields(data: dict[str, Any], problems: list[str]) -> tuple[ConfigSchema | None, frozenset[str]]:
    """Field-level validation; on errors, retry without the bad optional fields.

    The retry lets cross-field rules still be reported together with the field
    errors; rules touching a dropped field are skipped (its default would mislead).
    """
    context = {_DEFER_CROSS_FIELD: True}
    try:
        return ConfigSchema.model_validate(data, context=context), frozenset()
    except ValidationError as exc:
        problems.extend(error_lines(exc, _SCHEMAS))
        bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
    fields = ConfigSchema.model_fields
    if any(k in fields and fields[k].is_required() for k in bad) or not bad:
        return None, frozenset(bad)
    trimmed = {k: v for k, v in data.items() if k not in bad}
    try:
        return ConfigSchema.model_validate(trimmed, context=context), frozenset(bad)
    except ValidationError:
        return None, frozenset(bad)
