"""What arrived for a retraining run: new edge lists imported as a generation, holdouts split off.

A retraining run with ``incoming`` set (:mod:`storage.retraining.options`) calls :func:`receive`
(from the task :func:`tasks.retrain.receive_arrivals`, which hands it the import's generations and
the way to import more, :mod:`storage.retraining.generations`):

1. the files the ``inputs`` pattern (or directory) lists, minus those received before (known by
   their place under the inbox and their content, :mod:`storage.retraining.received`: recorded in the run
   directories' ``retrain.json``, or named by the import manifest's generations), are imported in
   one ``pbg import --append`` (a plain import when nothing is imported yet): file ``x.tsv`` of
   generation N goes to ``{edges_dir}/gen{N:04d}-x_partitioned``;
2. the generations newer than the one the starting run trained are this run's new data; the
   edge paths among them under ``edges_dir`` get their holdout split off (:mod:`storage.retraining.holdout`),
   which a retry repeats harmlessly; a holdout an earlier run split that is gone since is an error;
3. the run trains the config's edge paths plus the generations' edge paths under ``edges_dir``
   that still exist (``edge_paths``), a generation directory found by its name in today's
   ``edges_dir`` (the manifest recorded where it was, and the project may have moved). A
   generation imported elsewhere (``pbg import train.txt valid.txt test.txt`` by hand, recorded
   as generation 0) is listed apart (``outside``): only the config's ``edge_paths`` patterns
   decide which of its paths are trained, so a validation or test split is never trained
   because an import recorded it.

Nothing here decides whether to train; :class:`Received` says what is new.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage import layout
from storage.errors import DataNotFound
from storage.fs import globs, reads, urls
from storage.fs.identity import FileIdentity
from storage.fs.urls import StorageOptions
from storage.retraining.generations import Generation, ImportedData, ImportFiles
from storage.retraining.holdout import holdout_path_of, split_holdout
from storage.retraining.options import IncomingOptions
from storage.retraining.received import (
    OldPath,
    ReceivedFile,
    RunRecords,
    identify_arrival,
    inbox_root,
    judge,
    merge,
    old_records,
)

logger = logging.getLogger(__name__)

_SUFFIXES = re.compile(r"(\.(tsv|csv|txt|parquet|gz|bz2))+$", re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Received:
    """The import after :func:`receive`: what this run imported and what is new to it.

    Attributes:
        imported: Files imported now (empty if nothing arrived, or on a retry).
        generation: The import's newest generation (None: nothing imported yet).
        new_generations: Generations newer than the starting run's (all, without one).
        holdouts: Holdout edge paths of the new generations' edge paths under ``edges_dir``.
        edge_paths: The generations' edge paths under ``edges_dir`` that exist and hold an edge
            to train, in generation order: what the run trains besides the config's own.
        received_files: Every file received so far, this run's included
            (:meth:`storage.retraining.received.ReceivedFile.to_json`): ``retrain.json``'s ``received_files``.
    """

    imported: list[str]
    generation: int | None
    new_generations: list[int]
    holdouts: list[str] = field(default_factory=list)
    edge_paths: list[str] = field(default_factory=list)
    received_files: list[dict[str, Any]] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)  # generations' edge paths not under edges_dir
    held: int | None = None  # edges in the new generations' holdouts (None: not counted, a retry)

    @property
    def nothing_new(self) -> bool:
        """Nothing arrived since the run this one starts from."""
        return not self.new_generations


def list_files(pattern: str, storage_options: StorageOptions = None) -> list[str]:
    """Files matching a glob pattern, or directly in a directory; sorted, in the pattern's form
    (:mod:`storage.fs.globs`). A missing directory lists nothing (no files arrived yet)."""
    if globs.has_glob(pattern):
        found = globs.glob(pattern, "file", storage_options)
    else:
        filesystem, path = urls.resolve(pattern, storage_options)
        with urls.translate_errors(pattern):
            try:
                listed = filesystem.ls(path, detail=True)
            except FileNotFoundError:
                logger.warning("incoming directory %s does not exist (yet): nothing arrived", pattern)
                return []
        found = sorted(globs.in_form_of(pattern, e["name"].rstrip("/")) for e in listed if e.get("type") == "file")
    # An S3 "folder" marker (the key "in/", zero bytes) lists as a file named like the folder.
    folder = pattern.rstrip("/")
    return [p for p in found if not _hidden(p) and p != folder]


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
    """``{edges_dir}/gen{N:04d}-{file stem}_partitioned``, the stem made unique among ``taken`` (one generation's)."""
    base = _UNSAFE.sub("_", _SUFFIXES.sub("", url.rstrip("/").rsplit("/", 1)[-1])) or "edges"
    stem, n = base, 1
    while stem in taken:
        n += 1
        stem = f"{base}-{n}"
    taken.add(stem)
    return urls.join_url(edges_dir, layout.generation_edge_dir(generation, stem))


def receive(
    incoming: IncomingOptions,
    imported: ImportedData,
    import_files: ImportFiles,
    base_generation: int | None,
    seed: int,
    storage_options: StorageOptions = None,
    earlier: RunRecords | None = None,
    before_write: Callable[[], None] | None = None,
) -> Received:
    """Import what arrived, split the new generations' holdouts; see the module docstring.

    Args:
        incoming: The run's ``retrain.incoming`` options (``inputs``, ``edges_dir``, ``holdout_fraction``).
        imported: What ``entity_path`` holds now (its generations).
        import_files: Imports the files that arrived as the next generation (the columns and
            policies of ``incoming`` applied by the caller).
        base_generation: The newest generation the starting run trained; None: every generation is new.
        seed: Seed of the holdout hash.
        storage_options: Filesystem options of the inbox, the edge paths and the holdouts.
        earlier: What the run directories recorded (:func:`storage.retraining.received.recorded_in_runs`):
            the files received and the holdouts split; None: nothing.
        before_write: Called once, after every check and before the first write (the import,
            or a holdout split); not called when nothing is new.

    Raises:
        DataNotFound: a new generation's holdout, split by an earlier run, is gone (before
            anything is imported).
        ConfigError, BadDataError, DataNotFound: from the import (nothing imported then).
    """
    so, edges_dir = storage_options, incoming.edges_dir
    earlier = earlier or RunRecords([], {})
    history = list(imported.generations)
    root = inbox_root(incoming.inputs)
    found, gone = old_records(history, root, earlier.received, so)
    known = merge(earlier.received, found)
    where = {entry.number: _live_paths(entry, edges_dir, so) for entry in history}
    _check_holdouts(where, base_generation, edges_dir, earlier.holdouts, so)  # before any write
    arrived = _arrivals(incoming.inputs, root, known, gone, so)
    records = known
    if before_write is not None and (arrived or any(where.get(g) for g in where if _is_new(g, base_generation))):
        before_write()
    if arrived:
        history = _import(imported, import_files, edges_dir, [url for url, _ in arrived])
        entry = history[-1]
        records = merge(known, [ReceivedFile(i, entry.number, entry.imported_at, t) for _, (i, t) in arrived])
    live = {g.number: where[g.number] if g.number in where else _live_paths(g, edges_dir, so) for g in history}
    # A generation whose edge paths were all deleted (a bad day dropped by hand) is not new data.
    new = [g for g, paths in live.items() if paths and _is_new(g, base_generation)]
    holdouts, empty, held = _split_new(live, new, incoming, seed, so)
    paths = list(dict.fromkeys(p for paths in live.values() for p in paths if p not in empty))
    ours, outside = [p for p in paths if _under(p, edges_dir)], [p for p in paths if not _under(p, edges_dir)]
    received = [r.to_json() for r in records]
    return Received([url for url, _ in arrived], max(live, default=None), new, holdouts, ours, received, outside, held)


def _split_new(
    where: dict[int, list[str]], new: list[int], incoming: IncomingOptions, seed: int, storage_options: StorageOptions
) -> tuple[list[str], set[str], int]:
    """Split the holdouts of the new generations' edge paths under ``edges_dir``: the holdouts, the
    edge paths left with no edge (every edge held out: not trained), and the edges held out."""
    holdouts, empty, held = [], set(), 0
    for generation in new:
        for path in where[generation]:
            if _under(path, incoming.edges_dir):
                # One seed for every generation: the same edge is held out wherever it repeats.
                split = split_holdout(path, incoming.holdout_fraction, seed, storage_options)
                holdouts.append(holdout_path_of(path))
                held += split.held
                if split.kept == 0:
                    empty.add(path)
    if empty:
        logger.warning("every edge of %s is held out (a very small file): not trained", sorted(empty))
    return holdouts, empty, held


def _is_new(generation: int, base_generation: int | None) -> bool:
    return base_generation is None or generation > base_generation


def _arrivals(
    inputs: str, root: str, known: list[ReceivedFile], gone: list[OldPath], storage_options: StorageOptions
) -> list[tuple[str, tuple[FileIdentity, float | None]]]:
    """The files of the inbox not received before (:func:`storage.retraining.received.judge`), each with its identity."""
    accepted: list[tuple[str, tuple[FileIdentity, float | None]]] = []
    for url in list_files(inputs, storage_options):
        identity, mtime = identify_arrival(url, root, known, storage_options)
        # Two new files with the same bytes in one batch: the second is a duplicate of the first.
        pending = [ReceivedFile(ident, None) for _, (ident, _) in accepted]
        verdict = judge(identity, [*known, *pending], gone)
        if verdict.kind != "new":
            log = logger.info if verdict.kind in ("received", "old path") else logger.warning
            log("%s", verdict.describe(identity))
        if verdict.is_new:
            accepted.append((url, (identity, mtime)))
    return accepted


def _live_paths(entry: Generation, edges_dir: str, storage_options: StorageOptions) -> list[str]:
    """The generation's edge paths where they are now: a generation directory (``gen0003-x_partitioned``)
    in today's ``edges_dir`` (the project may have moved or been copied since the import recorded
    it), else where recorded; missing ones are left out (a bad day dropped by hand)."""
    live = []
    for path in entry.edge_paths:
        name = path.rstrip("/").rpartition("/")[2]
        here = urls.join_url(edges_dir, name)
        if layout.GENERATION_DIR_RE.match(name) and reads.exists(here, storage_options):
            live.append(here)
        elif reads.exists(path, storage_options):
            live.append(path)
        else:
            logger.warning("edge path %s of the import manifest no longer exists: not trained", path)
    return live


def _check_holdouts(
    where: dict[int, list[str]],
    base_generation: int | None,
    edges_dir: str,
    split_by: dict[str, str],
    storage_options: StorageOptions,
) -> None:
    """Refuse a new generation whose holdout an earlier run split off and that is gone since.

    Its held-out edges left the edge path when it was split: without the holdout they are lost to
    the gate, which would measure the new data on fewer edges or on none.

    Args:
        where: Each generation's edge paths as they are now.
        base_generation: The newest generation the starting run trained (None: all are new).
        edges_dir: ``retrain.incoming.edges_dir``.
        split_by: Holdout directory name -> the run whose ``retrain.json`` lists it.
        storage_options: Filesystem options.

    Raises:
        DataNotFound: naming the holdout, its edge path, the run that split it and the ways out.
    """
    for generation, paths in where.items():
        for path in paths if _is_new(generation, base_generation) else []:
            holdout = holdout_path_of(path)
            name = holdout.rpartition("/")[2]
            if _under(path, edges_dir) and name in split_by and not reads.exists(holdout, storage_options):
                raise DataNotFound(
                    holdout,
                    f"the holdout of {path} (import generation {generation}) is gone, though "
                    f"{split_by[name]}'s retrain.json records splitting it: its edges are no longer in the "
                    "edge path, so the quality gate would not see them. Restore it, or drop that day by "
                    "deleting the edge path too (nothing was imported or written)",
                )


def _under(path: str, directory: str) -> bool:
    return place(path).startswith(place(directory) + "/")


def _import(imported: ImportedData, import_files: ImportFiles, edges_dir: str, arrived: list[str]) -> list[Generation]:
    """Import ``arrived`` as the next generation; the manifest's generations after it."""
    history = imported.generations
    append = bool(history) or imported.holds_import
    # An import without a manifest (e.g. PBG's) is generation 0.
    generation = (len(history) or 1) if append else 0
    taken: set[str] = set()
    paths = [edge_path_for(edges_dir, generation, url, taken) for url in arrived]
    logger.info("importing %d new file(s) as generation %d: %s", len(arrived), generation, ", ".join(arrived))
    return list(import_files(arrived, paths, append).generations)


__all__ = ["Received", "edge_path_for", "list_files", "place", "receive"]
