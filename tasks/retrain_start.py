"""What a retraining run starts from, checked against the records before the run writes anything.

A run starts from the run ``latest.json`` promotes (or a newer passing one,
:func:`storage.latest_run.starting_run`) and from the import generation that run trained (its
``retrain.json``): the generations after it are the new data. Each of those records may have
lost what it names since (a run directory deleted, an import replaced, a holdout removed); each
such loss is an error naming the record, what it names and the ways out, raised before anything
is imported or written, never a quiet fall-back to "first run" or "no holdout".
"""

from __future__ import annotations

from typing import Any

from pbg_core.config import ConfigSchema
from storage.errors import DataNotFound
from storage.fs import reads, urls
from storage.importing.manifest import MANIFEST, generation_history, read_manifest
from storage.latest_run import LATEST_FILE, starting_run
from storage.retrain_state import read_state
from tasks.arrivals import has_import


def base_generation(config: ConfigSchema, from_previous: bool, run_key: str, storage: dict[str, Any]) -> int | None:
    """The newest import generation the run this one starts from trained; None: it starts from nothing.

    Raises:
        DataNotFound: ``latest.json`` names a lost run, or that generation is not in the manifest.
    """
    root = config.checkpoint_path
    previous = starting_run(root, run_key, storage) if from_previous else None
    if previous is None:
        return None
    state = read_state(previous.url, storage)
    if state is None:  # a run from before incoming imports: it trained every generation there is now
        history = generation_history(read_manifest(config.entity_path, storage))
        return max(int(entry.get("generation", 0)) for entry in history)
    check_base(config, state.generation, f"{previous.name} (the run this one starts from)", storage)
    return state.generation


def check_base(config: ConfigSchema, base: int | None, who: str, storage: dict[str, Any]) -> None:
    """Raise DataNotFound unless the import still holds generation ``base`` (a model's rows are its entities').

    Raises:
        DataNotFound: naming the manifest (or the entity_path without an import), ``who`` and the generations.
    """
    if base is None or base < 0:
        return
    manifest = read_manifest(config.entity_path, storage)
    if manifest is None and not has_import(config.entity_path, storage):
        where, have = config.entity_path, "holds no import"
    else:
        generations = sorted({int(entry.get("generation", 0)) for entry in generation_history(manifest)})
        if base in generations:
            return
        where, have = urls.join_url(config.entity_path, MANIFEST), f"lists generation(s) {generations}"
    raise DataNotFound(
        where,
        f"{have}, but {who} trained import generation {base} (its retrain.json): the import was replaced "
        "or removed since, and that model's rows belong to the entities it had. Restore the import, or "
        f"start over by deleting {urls.join_url(config.checkpoint_path, LATEST_FILE)} (nothing was "
        "imported or written)",
    )


def check_still_there(holdouts: list[str], storage: dict[str, Any]) -> None:
    """Raise DataNotFound for the first holdout an earlier attempt split that is gone since."""
    for holdout in holdouts:
        if not reads.exists(holdout, storage):
            raise DataNotFound(
                holdout,
                "this run's holdout is gone since its first attempt split it: its edges are no longer in "
                "the edge path, so the quality gate would not see them; restore it (nothing was written)",
            )


__all__ = ["base_generation", "check_base", "check_still_there"]
