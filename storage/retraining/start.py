"""What a retraining run starts from, checked against the records before the run writes anything.

A run starts from the run ``latest.json`` promotes (or a newer passing one,
:func:`storage.retraining.latest.starting_run`) and from the import generation that run trained (its
``retrain.json``): the generations after it are the new data. Each of those records may have
lost what it names since (a run directory deleted, an import replaced, a holdout removed); each
such loss is an error naming the record, what it names and the ways out, raised before anything
is imported or written, never a quiet fall-back to "first run" or "no holdout".
"""

from __future__ import annotations

from storage import layout
from storage.errors import DataNotFound
from storage.fs import reads, urls
from storage.fs.urls import StorageOptions
from storage.retraining.generations import ImportedData
from storage.retraining.latest import starting_run
from storage.retraining.state import read_state


def base_generation(
    root: str, imported: ImportedData, from_previous: bool, run_key: str, storage: StorageOptions = None
) -> int | None:
    """The newest import generation the run this one starts from trained; None: it starts from nothing.

    Args:
        root: The root of the run directories (the config's ``checkpoint_path``).
        imported: What ``entity_path`` holds now.
        from_previous: ``retrain.init_from_previous``.
        run_key: This run's directory name.
        storage: Filesystem options.

    Raises:
        DataNotFound: ``latest.json`` names a lost run, or that generation is not in the manifest.
    """
    previous = starting_run(root, run_key, storage) if from_previous else None
    if previous is None:
        return None
    state = read_state(previous.url, storage)
    if state is None:  # a run from before incoming imports: it trained every generation there is now
        return max((g.number for g in imported.generations), default=0)
    check_base(root, imported, state.generation, f"{previous.name} (the run this one starts from)")
    return state.generation


def check_base(root: str, imported: ImportedData, base: int | None, who: str) -> None:
    """Raise DataNotFound unless the import still holds generation ``base`` (a model's rows are its entities').

    Raises:
        DataNotFound: naming the manifest (or the entity_path without an import), ``who`` and the generations.
    """
    if base is None:
        return
    generations = imported.numbers()
    if base in generations:
        return
    if not generations:
        where, have = imported.entity_path, "holds no import"
    else:
        where, have = imported.manifest_url, f"lists generation(s) {generations}"
    raise DataNotFound(
        where,
        f"{have}, but {who} trained import generation {base} (its retrain.json): the import was replaced "
        "or removed since, and that model's rows belong to the entities it had. Restore the import, or "
        f"start over by deleting {urls.join_url(root, layout.LATEST_FILE)} (nothing was "
        "imported or written)",
    )


def check_still_there(holdouts: list[str], storage: StorageOptions = None) -> None:
    """Raise DataNotFound for the first holdout an earlier attempt split that is gone since."""
    for holdout in holdouts:
        if not reads.exists(holdout, storage):
            raise DataNotFound(
                holdout,
                "this run's holdout is gone since its first attempt split it: its edges are no longer in "
                "the edge path, so the quality gate would not see them; restore it (nothing was written)",
            )


__all__ = ["base_generation", "check_base", "check_still_there"]
