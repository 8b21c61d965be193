"""What arrived for a retraining run: new edge lists imported as a generation, holdouts split off.

A retraining run with ``incoming`` set (:mod:`tasks.retrain_options`) calls :func:`receive`:

1. the files the ``inputs`` pattern (or directory) lists, minus those any generation of the
   import manifest lists (:mod:`storage.importing.manifest`), are imported in one
   ``pbg import --append`` (a plain import when nothing is imported yet): file ``x.tsv`` of
   generation N goes to ``{edges_dir}/gen{N:04d}-x_partitioned``;
2. the generations newer than the one the starting run trained are this run's new data; the
   edge paths among them under ``edges_dir`` get their holdout split off (:mod:`storage.holdout`),
   which a retry repeats harmlessly;
3. the run trains the config's edge paths plus every generation's edge paths that still exist.

Nothing here decides whether to train; :class:`Received` says what is new. Plain functions (the
task is :func:`tasks.retrain.receive_arrivals`): they join the importer and the edge stores, which
the storage package keeps apart (its importer never loads torch).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from storage.errors import DataNotFound
from storage.fs import reads, urls
from storage.fs.urls import StorageOptions
from storage.holdout import holdout_path_of, split_holdout
from storage.importing.append import partition_counts_on_disk
from storage.importing.importer import import_edges
from storage.importing.manifest import generation_history, read_manifest
from storage.run_dirs import has_glob

logger = logging.getLogger(__name__)

_SUFFIXES = re.compile(r"(\.(tsv|csv|txt|parquet|gz|bz2))+$", re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Received:
    """The import after :func:`receive`: what this run imported and what is new to it.

    Attributes:
        imported: Files imported now (empty if nothing arrived, or on a retry).
        generation: The import's newest generation.
        new_generations: Generations newer than the starting run's (all, without one).
        holdouts: Holdout edge paths of the new generations' edge paths under ``edges_dir``.
        edge_paths: Every generation's edge paths that exist, in generation order.
    """

    imported: list[str]
    generation: int
    new_generations: list[int]
    holdouts: list[str] = field(default_factory=list)
    edge_paths: list[str] = field(default_factory=list)

    @property
    def nothing_new(self) -> bool:
        """Nothing arrived since the run this one starts from."""
        return not self.new_generations


def list_files(pattern: str, storage_options: StorageOptions = None) -> list[str]:
    """Files matching a glob pattern, or directly in a directory; sorted URLs (scheme kept).

    A missing directory lists nothing (no files arrived yet).
    """
    filesystem, path = urls.resolve(pattern, storage_options)
    with urls.translate_errors(pattern):
        if has_glob(pattern):
            found = filesystem.glob(path, detail=True)
        else:
            try:
                found = {entry["name"]: entry for entry in filesystem.ls(path, detail=True)}
            except FileNotFoundError:
                logger.warning("incoming directory %s does not exist (yet): nothing arrived", pattern)
                return []
    protocol = pattern.split("://", 1)[0] if "://" in pattern else None
    # An S3 "folder" marker (the key "in/", zero bytes) lists as a file named like the folder.
    markers = {path.rstrip("/")}
    files = sorted(
        p
        for p, info in found.items()
        if info.get("type") == "file" and not _hidden(p) and not p.endswith("/") and p.rstrip("/") not in markers
    )
    return [f"{protocol}://{p}" if protocol and protocol != "file" else p for p in files]


def place(path: str) -> str:
    """A path's identity: URLs as written (without a trailing /), local paths absolute."""
    path = path.rstrip("/")
    if "://" in path and not path.startswith("file://"):
        return path
    return os.path.abspath(path.removeprefix("file://"))


def _hidden(path: str) -> bool:
    """Temporary and hidden files (``.x``, ``_x``): an upload still in progress, or a marker."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


def edge_path_for(edges_dir: str, generation: int, url: str, taken: set[str]) -> str:
    """``{edges_dir}/gen{N:04d}-{file stem}_partitioned``, made unique among ``taken``."""
    stem = _UNSAFE.sub("_", _SUFFIXES.sub("", url.rstrip("/").rsplit("/", 1)[-1])) or "edges"
    base = f"gen{generation:04d}-{stem}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return urls.join_url(edges_dir, f"{name}_partitioned")


def receive(
    config: Any, incoming: Any, base_generation: int | None, seed: int, import_options: dict[str, Any]
) -> Received:
    """Import what arrived, split the new generations' holdouts; see the module docstring.

    Args:
        config: The resolved config (``entity_path``, entity types, storage options).
        incoming: The run's ``retrain.incoming`` options (``inputs``, ``edges_dir``, ``holdout_fraction``).
        base_generation: The newest generation the starting run trained; None: every generation is new.
        seed: Seed of the import's shuffles and of the holdout hash.
        import_options: ``import_edges`` keyword arguments (columns, delimiter, policies).

    Raises:
        ConfigError, BadDataError, DataNotFound: from the import (nothing imported then).
    """
    so = config.storage_options_for_fs()
    manifest = read_manifest(config.entity_path, so)
    history = generation_history(manifest) if manifest is not None else []
    done = {place(url) for entry in history for url in entry.get("inputs") or []}
    arrived = [url for url in list_files(incoming.inputs, so) if place(url) not in done]
    if arrived:
        history = _import(config, incoming, arrived, history, seed, import_options)
    generations = [int(entry.get("generation", 0)) for entry in history]
    newest = max(generations, default=-1)
    live = {id(entry): [p for p in entry.get("edge_paths") or [] if _exists(p, so)] for entry in history}
    # A generation whose edge paths were all deleted (a bad day dropped by hand) is not new data.
    new = [
        g
        for e, g in zip(history, generations, strict=True)
        if live[id(e)] and (base_generation is None or g > base_generation)
    ]
    holdouts, empty = [], set()
    for entry, generation in zip(history, generations, strict=True):
        if generation not in new:
            continue
        for path in live[id(entry)]:
            if path.startswith(incoming.edges_dir.rstrip("/") + "/"):
                # One seed for every generation: the same edge is held out wherever it repeats.
                split = split_holdout(path, incoming.holdout_fraction, seed, so)
                holdouts.append(holdout_path_of(path))
                if split.kept == 0:
                    empty.add(path)
    paths = [p for entry in history for p in live[id(entry)] if p not in empty]
    if empty:
        logger.warning("every edge of %s is held out (a very small file): not trained", sorted(empty))
    return Received(arrived, newest, new, holdouts, list(dict.fromkeys(paths)))


def _import(
    config: Any,
    incoming: Any,
    arrived: list[str],
    history: list[dict[str, Any]],
    seed: int,
    import_options: dict[str, Any],
) -> list[dict[str, Any]]:
    """Import ``arrived`` as the next generation; the manifest's history after it."""
    so = config.storage_options_for_fs()
    append = bool(history) or _has_import(config.entity_path, so)
    generation = len(history) if append else 0
    if append and not history:
        generation = 1  # an import without a manifest (e.g. PBG's) is generation 0
    taken: set[str] = set()
    paths = [edge_path_for(incoming.edges_dir, generation, url, taken) for url in arrived]
    logger.info("importing %d new file(s) as generation %d: %s", len(arrived), generation, ", ".join(arrived))
    target = config.model_copy(update={"edge_paths": paths})
    import_edges(target, arrived, seed=seed, append=append, **import_options)
    manifest = read_manifest(config.entity_path, so)
    return generation_history(manifest)


def _has_import(entity_path: str, storage_options: StorageOptions) -> bool:
    """Whether ``entity_path`` holds an import (perhaps PBG's, without a manifest)."""
    try:
        return bool(partition_counts_on_disk(entity_path, storage_options))
    except DataNotFound:
        return False


def _exists(path: str, storage_options: StorageOptions) -> bool:
    if reads.exists(path, storage_options):
        return True
    logger.warning("edge path %s of the import manifest no longer exists: not trained", path)
    return False


__all__ = ["Received", "edge_path_for", "list_files", "place", "receive"]
