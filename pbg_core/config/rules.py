"""The cross-field rules of a config: PBG's post-init checks, plus the modes pbg-flow refuses.

Each rule returns :class:`Problem` lines naming the top-level fields involved, so
:func:`pbg_core.config.validation.parse_config` can leave out problems of fields that already
failed on their own. :func:`warn_about` gives PBG's warnings for legal but dubious settings, and ours.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

from pbg_core.config.cluster_rules import config_problems

# A ConfigSchema: typed Any because pbg_core.config.schema imports this module (no import circle,
# not even under TYPE_CHECKING).
ConfigSchema = Any

_UNSUPPORTED = "not supported by pbg-flow (CPU training; partitions move through storage)"


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
        *_distributed_problems(config),
        *_validation_problems(config),
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


def _distributed_problems(config: ConfigSchema) -> list[Problem]:
    return [_p(fields, message) for fields, message in config_problems(config)]


def _unsupported_problems(config: ConfigSchema) -> list[Problem]:
    problems = []
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


def _validation_problems(config: ConfigSchema) -> list[Problem]:
    """The validation section's rules (pbg_core/config/quality_sections.py): each line names its field."""
    validation = config.validation
    if validation is None:
        if config.early_stopping is None:
            return []
        return [_p("early_stopping validation", "early_stopping: needs a validation section (validation.edge_path)")]
    problems = []
    if config.num_machines > 1:
        problems.append(
            _p(
                "validation num_machines",
                f"validation: not supported with num_machines={config.num_machines} (training on a cluster); "
                "allowed: num_machines=1",
            )
        )
    return problems


def warn_about(config: ConfigSchema) -> None:
    """Warnings for legal but dubious settings: PBG's, and a field set that its setting ignores."""
    if config.loss_fn == "logistic" and config.comparator == "cos":
        warnings.warn(
            "loss_fn='logistic' with comparator='cos' is not recommended: cosine scores lie in "
            "[-1, 1], so the logistic loss cannot get close to 0; consider comparator='dot'",
            UserWarning,
            stacklevel=3,
        )
    if config.operator_init == "identity" and config.operator_init_scale is not None:
        warnings.warn(
            f"operator_init_scale={config.operator_init_scale} is ignored with operator_init='identity' "
            "(relation operators start at PBG's identity); set operator_init='normal' to use it",
            UserWarning,
            stacklevel=3,
        )
    if config.background_io:
        # FutureWarning, not DeprecationWarning: it is meant for end users and shown by default.
        warnings.warn("background_io is deprecated and ignored", FutureWarning, stacklevel=3)
