"""Whether a search space fits the config it tunes: :func:`check_space`, before any trial runs.

Every problem of every param comes back at once, in one :class:`SearchSpaceError`, each line
starting with the param's field path (docs/tuning.md, "Search space"):

- an unknown field (the closest names suggested), resolved against the config models' own
  fields, the config's entity names and relation indexes: a field added to the schema is
  tunable without a change here;
- a field the study owns: paths (any ``*_path``/``*_paths`` field), the seed, where and how a trial
  runs, storage options, the validation section, and the fields that never change the trained
  model (:data:`STUDY_OWNED`);
- a field fixed by the imported data (:data:`DATA_SHAPE`) and, when ``init_path`` is set, one that
  changes the shape of its checkpoint (:data:`CHECKPOINT_SHAPE`);
- a section, list or mapping instead of a single value, or a param type the field cannot take
  (a float range over an integer field, a range over a choice or boolean field);
- an empty or inverted range: ``low >= high``, ``step`` larger than the range, ``log`` with
  ``low <= 0`` or with a step, no choices, a choice given twice;
- a value the field refuses: each end of a range and each choice is applied to the base config
  with the ``-p`` override machinery and validated by :func:`parse_config`, so the field's own
  validator and the cross-field rules speak; two choices the field reads as the same value.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, get_args, get_origin

from pydantic import BaseModel

from pbg_core.config.schema import ConfigSchema
from pbg_core.config.search_space import CategoricalParam, FloatParam, IntParam, SearchSpace, override_text
from pbg_core.config.validation import config_to_raw, parse_config
from pbg_core.errors import ConfigError, SearchSpaceError

_PATH = "a path: every trial trains on the base config's data, in its own checkpoint directory"
_PLACEMENT = "where and how trials run is the study's (pbg tune --parallel)"
_NO_EFFECT = "it does not change the trained model"
_PBG_ONLY = "a PBG-compatibility field with no effect here"

STUDY_OWNED: dict[str, str] = {
    "seed": "each trial's seed is the base config's seed plus the trial's number",
    "workers": "the study shares the machine's cores among the trials it runs at once",
    "num_machines": _PLACEMENT,
    "dask_address": _PLACEMENT,
    "shared_paths": _PLACEMENT,
    "storage_options": "every trial uses the base config's filesystem options and credentials",
    "validation": "every trial is measured on the base config's validation, by the space's metric",
    "verbose": _NO_EFFECT,
    "checkpoint_preservation_interval": _NO_EFFECT,
    "progress_interval": _NO_EFFECT,
    "resident_partitions": _NO_EFFECT,
    "eval_num_batch_negs": _NO_EFFECT,
    "eval_num_uniform_negs": _NO_EFFECT,
    "relations.*.name": "a label in logs and exports; " + _NO_EFFECT,
    "background_io": _PBG_ONLY,
    "num_partition_servers": _PBG_ONLY,
    "distributed_init_method": _PBG_ONLY,
    "distributed_tree_init_order": _PBG_ONLY,
    "num_gpus": _PBG_ONLY,
    "num_groups_for_partition_server": _PBG_ONLY,
    "num_groups_per_sharded_partition_server": _PBG_ONLY,
    "partition_shard_size": _PBG_ONLY,
    "half_precision": _PBG_ONLY,
}
"""Fields no trial may change (``*`` stands for an entity name or a relation index), and why."""

# Owned with everything below them (an entry of the table above names the field itself only).
_OWNED_SECTIONS = frozenset({"storage_options", "validation"})

DATA_SHAPE: dict[str, str] = {
    "entities": "the entity types",
    "relations": "the relation types and their count",
    "entities.*.num_partitions": "the partitions its edge buckets were imported into",
    "entities.*.featurized": "whether its entities are bags of features",
    "dynamic_relations": "how the edge files name relations",
    "relations.*.lhs": "the entity type of the relation's left-hand side",
    "relations.*.rhs": "the entity type of the relation's right-hand side",
}
"""Fields the imported data fixes, and what of the data they describe."""

CHECKPOINT_SHAPE: dict[str, str] = {
    "dimension": "the shape of init_path's embeddings",
    "entities.*.dimension": "the shape of init_path's embeddings",
    "relations.*.operator": "the shape of init_path's relation parameters",
    "global_emb": "whether init_path's global embeddings exist",
    "bias": "what dimension 0 of init_path's embeddings means",
}
"""Fields that change a checkpoint's shape: refused when the base config sets ``init_path``."""


class _Field(NamedTuple):
    """A resolved param path: its pattern (``entities.*.dimension``) and the field's annotation."""

    pattern: str
    annotation: Any


NO_VALIDATION = (
    "validation: not set; a tuning study measures every trial on the validation edges: add a validation "
    "section (docs/quality.md, 'Validation and early stopping')"
)


def require_validation(config: ConfigSchema, source: str | None = None) -> None:
    """Refuse to tune a config without a ``validation`` section (nothing to measure trials by).

    Raises:
        ConfigError: one line naming ``validation`` and ``source`` (the config file).
    """
    if config.validation is None:
        raise ConfigError([NO_VALIDATION], source)


def check_space(space: SearchSpace, config: ConfigSchema, source: str | None = None) -> None:
    """Refuse a search space that does not fit ``config``, listing every problem at once.

    Args:
        space: The parsed space (:func:`pbg_core.config.search_space.parse_space`).
        config: The base config every trial starts from.
        source: The space file, named in the error.

    Raises:
        SearchSpaceError: one line per problem, each starting with the param's field path.
    """
    raw = config_to_raw(config)
    problems: list[str] = []
    for path, param in space.params.items():
        problems.extend(_param_problems(path, param, config, raw))
    if problems:
        raise SearchSpaceError(problems, source)


def _param_problems(
    path: str, param: FloatParam | IntParam | CategoricalParam, config: ConfigSchema, raw: dict[str, Any]
) -> list[str]:
    field = _resolve(path, config)
    if isinstance(field, str):
        return [field]
    fixed = _fixed_reason(field.pattern, field.annotation, config)
    if fixed is not None:
        return [f"{path}: {fixed}"]
    kind = _kind_problem(path, param, field.annotation)
    problems = _range_problems(path, param)
    if kind is not None:
        return [kind, *problems]
    return problems + _value_problems(path, param, raw)


def _resolve(path: str, config: ConfigSchema) -> _Field | str:
    """The field ``path`` names in ``config`` (walking its models, lists and mappings), or why none."""
    parts = path.split(".")
    model: type[BaseModel] | None = type(config)
    container: tuple[type, Any] | None = None
    value: Any = config
    annotation: Any = None
    pattern: list[str] = []
    for depth, part in enumerate(parts):
        here, parent = ".".join(parts[: depth + 1]), ".".join(parts[:depth])
        if container is not None:
            if container[0] is list:
                items: Sequence[Any] = value or []
                if not (part.isdigit() and int(part) < len(items)):
                    return f"{here}: no entry {part!r}; allowed indexes: 0..{len(items) - 1}"
                value = items[int(part)]
            else:
                keys: Mapping[str, Any] = value or {}
                if part not in keys:
                    return f"{here}: no entry {part!r}{_close(part, list(keys))}"
                value = keys[part]
            annotation = container[1]
            pattern.append("*")
        elif model is not None:
            if part not in model.model_fields:
                return f"{here}: unknown field{_close(part, list(model.model_fields))}"
            annotation = model.model_fields[part].annotation
            value = getattr(value, part, None)
            pattern.append(part)
            if depth == 0 and part in _OWNED_SECTIONS:
                return _Field(part, annotation)  # below it, free keys -p accepts: owned all the same
        else:
            return f"{here}: {parent} is a single value, it has no field {part!r}"
        model, container = _inside(annotation)
    return _Field(".".join(pattern), annotation)


def _close(name: str, known: list[str]) -> str:
    """`` (did you mean 'x'?)``, or the known names when few and none is close (as -p says)."""
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f"; known: {', '.join(known)}" if len(known) <= 8 else ""


def _without_none(annotation: Any) -> Any:
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if type(None) in get_args(annotation) and len(args) == 1 else annotation


def _inside(annotation: Any) -> tuple[type[BaseModel] | None, tuple[type, Any] | None]:
    """What a path walks into below a field: a model's fields, or a list's or mapping's entries."""
    base = _without_none(annotation)
    if isinstance(base, type) and issubclass(base, BaseModel):
        return base, None
    if get_origin(base) in (list, dict):
        return None, (get_origin(base), get_args(base)[-1])
    return None, None


def _is_path(name: str, annotation: Any) -> bool:
    """Whether a field holds a path or URL, or a list of them: named ``*_path``/``*_paths``, of strings."""
    base = _without_none(annotation)
    strings = base is str or (get_origin(base) is list and get_args(base) == (str,))
    return strings and name.endswith(("_path", "_paths"))


def _fixed_reason(pattern: str, annotation: Any, config: ConfigSchema) -> str | None:
    """Why no trial may change the field ``pattern``, or None when it is tunable."""
    parts = pattern.split(".")
    if _is_path(parts[-1], annotation):
        return f"not tunable: {_PATH}"
    if pattern in STUDY_OWNED or parts[0] in _OWNED_SECTIONS:
        return f"not tunable: {STUDY_OWNED[pattern if pattern in STUDY_OWNED else parts[0]]}"
    if pattern in DATA_SHAPE:
        return f"fixed by the imported data ({DATA_SHAPE[pattern]}); trials cannot differ in it"
    if pattern in CHECKPOINT_SHAPE and config.init_path is not None:
        return f"changes {CHECKPOINT_SHAPE[pattern]} mid-study; drop it or unset init_path"
    return None


def _kind_problem(path: str, param: FloatParam | IntParam | CategoricalParam, annotation: Any) -> str | None:
    """Why the field cannot take this type of param (a section, a choice field ranged over), or None."""
    base = _without_none(annotation)
    model, container = _inside(annotation)
    if model is not None:
        fields = ", ".join(model.model_fields)
        return f"{path}: a section, not a single value; tune one of its fields ({fields})"
    if container is not None:
        return f"{path}: a {container[0].__name__} of values, not a single value; only single values are tuned"
    if isinstance(param, CategoricalParam):
        return None
    if get_origin(base) is Literal:
        return f"{path}: one of {', '.join(map(str, get_args(base)))}; use type: categorical with choices from them"
    if base is bool:
        return f"{path}: true or false; use type: categorical with choices [true, false]"
    if base is int and isinstance(param, FloatParam):
        return f"{path}: an integer field; use type: int (or categorical)"
    if base not in (int, float):
        return f"{path}: not a number; use type: categorical"
    return None


def _range_problems(path: str, param: FloatParam | IntParam | CategoricalParam) -> list[str]:
    """An empty or inverted range, a step or log scale it cannot have, no or repeated choices."""
    if isinstance(param, CategoricalParam):
        if not param.choices:
            return [f"{path}: no choices; give at least one"]
        return []
    low, high = param.low, param.high
    problems = []
    if low >= high:
        problems.append(f"{path}: low {low} >= high {high}: the range is empty or inverted; give low < high")
    step = param.step if isinstance(param, FloatParam) else (param.step if param.step != 1 else None)
    if step is not None and low < high and step > high - low:
        problems.append(f"{path}: step {step} is larger than the range {low}..{high}")
    if param.log and low <= 0:
        problems.append(f"{path}: log scale needs low > 0, got {low}")
    if param.log and step is not None:
        problems.append(f"{path}: log and step {step} together: a log scale takes no step; drop one")
    return problems


def _value_problems(path: str, param: FloatParam | IntParam | CategoricalParam, raw: dict[str, Any]) -> list[str]:
    """What the config says of each end or choice applied to it, and choices that read the same."""
    if isinstance(param, CategoricalParam):
        tried = [(f"choice {c!r}", c) for c in param.choices]
    else:
        tried = [(f"low {param.low!r}", param.low), ("high " + repr(param.high), param.high)]
    problems: list[str] = []
    given: set[str] = set()
    read_as: dict[Any, Any] = {}
    for label, value in tried:
        key = json.dumps(value)  # 1, 1.0 and true are three choices here, and the field decides
        if isinstance(param, CategoricalParam) and key in given:
            problems.append(f"{path}: {label} is given twice; keep one")
            continue
        given.add(key)
        text = override_text(value)
        if "=" in text:
            problems.append(f"{path}: {label} contains '=', which a -p override cannot carry")
            continue
        try:
            applied = _applied_value(raw, path, text)
        except ConfigError as error:
            problems.extend(f"{path}: {label}: {_after_path(line, path)}" for line in error.problems)
            continue
        if isinstance(param, CategoricalParam) and applied in read_as:
            problems.append(f"{path}: choices {read_as[applied]!r} and {value!r} both read as {applied!r}; keep one")
        read_as.setdefault(applied, value)
    return problems


def _applied_value(raw: dict[str, Any], path: str, text: str) -> Any:
    """The field's value in the base config with ``path=text`` applied, as ``-p`` applies it.

    Raises:
        ConfigError: the field or a cross-field rule refuses it.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the base config's own warnings were given when it was read
        config = parse_config(raw, [f"{path}={text}"])
    node: Any = config
    for part in path.split("."):
        node = (
            getattr(node, part) if isinstance(node, BaseModel) else node[int(part) if isinstance(node, list) else part]
        )
    return node


def _after_path(line: str, path: str) -> str:
    """A config error line without its leading field path when that is ``path`` (said already)."""
    bracketed = ".".join(f"[{p}]" if p.isdigit() else p for p in path.split(".")).replace(".[", "[")
    for prefix in (f"{path}: ", f"{bracketed}: "):
        if line.startswith(prefix):
            return line[len(prefix) :]
    return line
