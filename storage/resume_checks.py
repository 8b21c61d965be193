"""Checks of the checkpoints a run starts from: its own committed version and ``init_path``.

Run by ``plan-training`` before any training (and by ``open-eval-session`` on the checkpoint
it evaluates, and :meth:`storage.trained.model.Model.load` on the one it loads), so that a wrong start fails in one line
instead of training from scratch or ending in a shape error deep in a bucket:

- ``init_path`` must be a checkpoint directory: missing, or holding no files of its
  committed version, is an error (PBG, and this project until now, silently trained from
  random embeddings).
- The config a checkpoint was trained with (the ``config/json`` attribute of its model
  file, which PBG writes too; else its ``config.json``) is compared with the run's config:

  * fields that define parameter shapes or which parameters exist (entity types and their
    partition counts, embedding dimensions, the relations' count, sides and operators,
    ``dynamic_relations``, ``global_emb``) must be equal, else :class:`ShapeError` naming the
    field, the checkpoint's value and the config's. PBG loads with ``strict=True``, so a
    changed operator whose parameter has another name was silently re-initialised there;
  * fields that change what is optimised without changing a shape (``loss_fn``,
    ``comparator``, ``bias``, ``margin``, ``regularizer``, ``regularization_coef``,
    ``max_norm``) may change (fine-tuning with another loss is legitimate), but each
    difference is logged as a warning naming the old and the new value. PBG continues
    without a word;
  * a trained model loaded for answers (``Model.load``, label ``"loaded checkpoint"``) must
    also score as it was trained: a difference in ``comparator``, ``bias`` or ``max_norm``
    (:data:`SCORING_FIELDS`) is refused with the shape-defining ones, and the fields left
    (the loss, learning rate, paths, ...) change no answer, so nothing is warned.
"""

from __future__ import annotations

import json
from typing import Any

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.errors import ShapeError
from storage import layout
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError, DataNotFound
from storage.fs import reads
from storage.fs.urls import StorageOptions

# Changing these changes the loss, not the parameters: warned about on resume.
WARNED_FIELDS = ("loss_fn", "comparator", "bias", "margin", "regularizer", "regularization_coef", "max_norm")
# Of those, the ones that change how a trained model scores an edge: refused for a loaded model.
SCORING_FIELDS = ("comparator", "bias", "max_norm")
LOADED = "loaded checkpoint"  # the label of a model loaded for answers


def check_init_path(store: CheckpointStore) -> None:
    """Refuse an ``init_path`` that is not a checkpoint directory.

    Raises:
        DataNotFound: the directory does not exist, or holds no file of its committed
            version (version 0, PBG's name for "no checkpoint_version.txt", included).
    """
    if not reads.exists(store.url, store.storage_options):
        raise DataNotFound(
            store.url, f"init_path does not exist; expected a checkpoint directory ({layout.CHECKPOINT_FILES})"
        )
    version = store.read_version()
    versions = store.list_versions()
    if version not in versions:
        found = f"files of versions {versions}" if versions else "no checkpoint files"
        raise DataNotFound(
            store.url,
            f"init_path holds no checkpoint of version {version} (the version its "
            f"checkpoint_version.txt names, 0 when missing; found {found}); expected its "
            "model.v<N>.h5 and embeddings_<type>_<part>.v<N>.h5 files",
        )


def check_not_a_file(url: str, storage_options: StorageOptions, field: str) -> None:
    """Refuse a ``field`` path (``entity_path``, ``checkpoint_path``, ``init_path``) that names a file.

    Raises:
        BadDataError: naming the path, that it is a file, and the directory expected there.
    """
    if reads.exists(url, storage_options) and not reads.isdir(url, storage_options):
        raise BadDataError(url, layout.file_not_directory(field))


def trained_config(store: CheckpointStore, version: int) -> dict[str, Any] | None:
    """The config ``version`` of ``store`` was trained with, or None when nothing records it.

    The model file's ``config/json`` attribute is the config of that very version; the
    directory's ``config.json`` (rewritten at every start) is the fallback.
    """
    text = store.load_metadata(version).config_json if store.has_model(version) else ""
    if text:
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError:
            raise BadDataError(
                store.file_url(layout.model_file(version)), "attribute config/json is not valid JSON"
            ) from None
        return loaded if isinstance(loaded, dict) else None
    try:
        return store.load_config()
    except DataNotFound:
        return None


_REMEDIES = {
    "checkpoint_path": "resume with the checkpoint's values, or train into a new checkpoint_path",
    "init_path": "use an init_path trained with the same values, or none",
    "evaluated checkpoint": "evaluate with the config the checkpoint was trained with (its config.json)",
    LOADED: "load it with the config it was trained with (without overrides of these fields), or load its "
    "checkpoint directory itself",
}


def check_fits(store: CheckpointStore, version: int, config: ConfigSchema, logger: Any, label: str) -> None:
    """Refuse shape-changing config differences from ``version`` of ``store``; warn about the rest.

    Args:
        store: The checkpoint (the run's own, or init_path's).
        version: Its committed version (0: nothing to check unless a ``model.v0.h5`` is there).
        config: The run's config.
        logger: Where warnings go (the run logger).
        label: How messages name the checkpoint: ``"checkpoint_path"``, ``"init_path"``,
            ``"evaluated checkpoint"`` or ``"loaded checkpoint"`` (each has its own advice).

    Raises:
        ShapeError: a field that shapes the parameters differs (for a loaded model, also one that
            changes its scores); one line naming every such field.
    """
    if version == 0 and not store.has_model(0):  # nothing committed (an init_path may hold PBG's v0 files)
        return
    stored = trained_config(store, version)
    if stored is None:
        return
    where = f"{label} {store.url} version {version}"
    current = config_to_json(config)
    refused = shape_differences(stored, current)
    defines = "the model's parameters"
    if label == LOADED:
        refused += [_difference(name, stored[name], current[name]) for name in _differing(stored, current)]
        defines = "the model's parameters and how it scores"
    if refused:
        raise ShapeError(f"{where} was trained with {'; '.join(refused)}: these define {defines} and cannot change; "
                         f"{_REMEDIES[label]}")  # fmt: skip
    if label == LOADED:
        return  # the fields left change no answer
    for name in WARNED_FIELDS:
        if name in stored and stored[name] != current[name]:
            logger.warning(
                "%s was trained with %s=%s, this config has %s=%s: continuing with %s=%s",
                where,
                name,
                json.dumps(stored[name]),
                name,
                json.dumps(current[name]),
                name,
                json.dumps(current[name]),
            )


def _differing(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The :data:`SCORING_FIELDS` the checkpoint records with another value than ``current``."""
    return [name for name in SCORING_FIELDS if name in stored and stored[name] != current[name]]


def _difference(field: str, old: Any, new: Any) -> str:
    """``"<field> <stored value> (this config: <value>)"``."""
    return f"{field} {json.dumps(old)} (this config: {json.dumps(new)})"


def shape_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"<field> <stored value> (this config: <value>)"`` for each shape-defining difference."""
    found: list[str] = []

    def differ(field: str, old: Any, new: Any) -> None:
        if old != new:
            found.append(_difference(field, old, new))

    for name in ("dimension", "dynamic_relations", "global_emb"):
        if name in stored:
            differ(name, stored[name], current[name])
    old_entities, new_entities = stored.get("entities") or {}, current["entities"]
    differ("entity types", sorted(old_entities), sorted(new_entities))
    for name in sorted(set(old_entities) & set(new_entities)):
        for key in ("num_partitions", "dimension", "featurized"):
            if key in old_entities[name]:
                differ(f"entities.{name}.{key}", old_entities[name][key], new_entities[name].get(key))
    old_relations, new_relations = stored.get("relations") or [], current["relations"]
    differ("number of relations", len(old_relations), len(new_relations))
    for i, (old, new) in enumerate(zip(old_relations, new_relations, strict=False)):  # a count change is reported above
        for key in ("lhs", "rhs", "operator"):
            if key in old:
                # Operator names are case-insensitive in configs (PBG matches them through .upper()).
                value = old[key].lower() if key == "operator" and isinstance(old[key], str) else old[key]
                differ(f"relations[{i}].{key}", value, new[key])
    return found
