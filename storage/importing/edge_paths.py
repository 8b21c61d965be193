"""The edge paths an import writes: never one an earlier generation wrote, never one from two inputs.

Input i of an import goes to ``config.edge_paths[i]``. Two rules keep edges from being lost
(each checked before anything is written, comparing edge paths by stable identity,
:func:`edge_path_key`: ``data/x``, ``./data/x/`` and ``file:///abs/data/x`` are one path):

- **One edge path, one input.** Two inputs given the same edge path are refused, naming both;
  with ``--force`` both are written into it, in input order (:func:`input_groups`).
- **An append writes new edge paths.** An edge path that an earlier generation of the manifest
  wrote (or that holds bucket files no generation records) is refused, naming the generation
  and its edges on disk; with ``--force`` its edges are replaced: the report says so and the
  manifest records it (:func:`mark_replaced`).

After the files are in place, :func:`edges_on_disk` reads back what every bucket file holds (the
datasets' lengths: a few small reads per file), so the report counts what is on disk.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import h5py

from storage import hdf5, layout
from storage.errors import OutputExistsError
from storage.fs import reads, urls

_HEADER_BLOCK = 1 << 16  # remote bucket files: read in 64 KiB ranges (an HDF5 header fits in one)


def edge_path_key(url: str, storage_options: Any = None) -> str:
    """``url``'s stable identity: its filesystem and normalised absolute path (``file:///abs/x``, ``s3://b/x``)."""
    filesystem, path = urls.resolve(url, storage_options)
    protocol = filesystem.protocol if isinstance(filesystem.protocol, str) else filesystem.protocol[0]
    if protocol == "local":
        protocol = "file"
    return f"{protocol}://{posixpath.normpath('/' + path.lstrip('/') if protocol == 'file' else path)}"


@dataclass(frozen=True)
class Replacement:
    """An edge path an earlier generation wrote, replaced by this import (``--force``)."""

    edge_path: str  # as the config names it now
    generation: int | None  # None: files no generation of the manifest records
    edges: int  # what its bucket files held


def input_groups(edge_paths: Sequence[str], storage_options: Any = None) -> list[tuple[str, list[int]]]:
    """Each distinct edge path (first spelling) with the inputs written into it, in order."""
    groups: dict[str, tuple[str, list[int]]] = {}
    for i, path in enumerate(edge_paths):
        groups.setdefault(edge_path_key(path, storage_options), (path, []))[1].append(i)
    return list(groups.values())


def check_edge_paths(
    config: Any, inputs: Sequence[str], history: list[dict[str, Any]], append: bool, force: bool
) -> list[Replacement]:
    """Refuse an import that would overwrite edges it should not (module docstring); what ``--force`` replaces.

    ``history``: the generations before this import (:func:`storage.importing.manifest.generation_history`).

    Raises:
        OutputExistsError: two inputs share an edge path, or an append's edge path holds an earlier
            generation's edges; naming the path, the inputs or the generation, and what to do.
    """
    so = config.storage_options_for_fs()
    for path, members in input_groups(config.edge_paths, so):
        if len(members) > 1 and not force:
            first, second = members[:2]
            raise OutputExistsError(
                path,
                f"is the edge path of two inputs, {inputs[first]} (edge_paths[{first}]) and {inputs[second]} "
                f"(edge_paths[{second}]): the second would replace the first's edges. Give each input its own "
                "edge path (-p 'edge_paths=[...]'), or --force to write both into it",
            )
    if not append:
        return []  # a plain import replaces the whole import, its edge paths included
    return [
        _replaced(path, history, so, force) for path, _ in input_groups(config.edge_paths, so) if _holds_edges(path, so)
    ]


def _replaced(path: str, history: list[dict[str, Any]], so: Any, force: bool) -> Replacement:
    key = edge_path_key(path, so)
    writer = next(
        (g for g in reversed(history) for p in g.get("edge_paths") or [] if edge_path_key(p, so) == key), None
    )
    generation = None if writer is None else int(writer.get("generation", 0))
    replacement = Replacement(path, generation, edges_on_disk(path, so))
    if not force:
        by = "an import this entity_path's manifest does not record" if writer is None else _described(writer)
        raise OutputExistsError(
            path,
            f"already holds {replacement.edges:,} edges, written by {by}; an append never replaces them. Give the "
            "append new edge paths (-p 'edge_paths=[\"...\"]'), or --force to replace these edges",
        )
    return replacement


def _described(entry: dict[str, Any]) -> str:
    when = f", imported {entry['imported_at']}" if entry.get("imported_at") else ""
    kind = "append" if entry.get("append") else "import"
    return f"generation {int(entry.get('generation', 0))} (the {kind}{when})"


def _holds_edges(path: str, so: Any) -> bool:
    return any(layout.parse_edge_file(name) is not None for name in reads.listdir(path, so))


def mark_replaced(history: list[dict[str, Any]], replaced: Sequence[Replacement], generation: int, so: Any) -> None:
    """In ``history``, move each replaced edge path of an earlier generation to its ``replaced`` list.

    A generation's ``edge_paths`` then list where its edges are now; ``replaced`` keeps
    ``{"edge_path", "by_generation"}`` for each path a later ``--force`` import wrote over.
    """
    keys = {edge_path_key(r.edge_path, so) for r in replaced}
    for entry in history:
        paths = list(entry.get("edge_paths") or [])
        places = entry.get("edge_path_places")
        kept = [i for i, p in enumerate(paths) if edge_path_key(p, so) not in keys]
        if len(kept) == len(paths):
            continue
        gone = [paths[i] for i in range(len(paths)) if i not in kept]
        entry["edge_paths"] = [paths[i] for i in kept]
        if isinstance(places, list) and len(places) == len(paths):
            entry["edge_path_places"] = [places[i] for i in kept]
        entry["replaced"] = [
            *(entry.get("replaced") or []),
            *({"edge_path": p, "by_generation": generation} for p in gone),
        ]


def edges_on_disk(path: str, storage_options: Any = None) -> int:
    """The edges the bucket files of edge path ``path`` hold (the length of each file's ``lhs``)."""
    filesystem, base = urls.resolve(path, storage_options)
    names = [name for name in reads.listdir(path, storage_options) if layout.parse_edge_file(name) is not None]

    def length(name: str) -> int:
        url = urls.join_url(path, name)
        with urls.translate_errors(url):
            if urls.is_local(filesystem):
                with h5py.File(posixpath.join(base, name), "r") as hf:
                    return int(hf["lhs"].shape[0])
            remote = f"{base.rstrip('/')}/{name}"
            with (
                filesystem.open(remote, "rb", block_size=_HEADER_BLOCK) as handle,
                hdf5.collection_paused(),  # h5py reads through fsspec's thread: see there
                h5py.File(handle, "r") as hf,
            ):
                return int(hf["lhs"].shape[0])

    if urls.is_local(filesystem):
        return sum(map(length, names))
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="pbg-import-count") as pool:
        return sum(pool.map(length, names))
