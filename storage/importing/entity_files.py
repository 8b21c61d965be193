"""An import's entity files: each partition's names (by offset) and count, and the relation names."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from storage import layout
from storage.entities import EntityStore
from storage.fs import atomic, urls
from storage.importing.count import NameCounter
from storage.importing.partition import Assignment


def names_json(names: pa.Array) -> str:
    """``json.dumps(names, indent=4)``, byte for byte, without a Python object per name when possible.

    Names made only of printable ASCII other than ``"`` and ``\\`` need no escaping and are
    joined directly; any other name sends the whole list through :func:`json.dumps`.
    """
    if len(names) == 0:
        return "[]"
    plain = pc.all(pc.match_substring_regex(names, r"^[\x20-\x21\x23-\x5b\x5d-\x7e]*$")).as_py()
    if not plain:
        return json.dumps(names.to_pylist(), indent=4)
    return '[\n    "' + '",\n    "'.join(names.to_pylist()) + '"\n]'


def write_entity_files(
    store: EntityStore, counter: NameCounter, entities: dict[str, Assignment], relation_names: list[str], dynamic: bool
) -> None:
    """Every partition's names file (names by offset) and count file, and the relation names files."""
    for name, assignment in entities.items():
        names = counter.entities[name].names()
        for part in range(assignment.num_partitions):
            ids = assignment.part_ids(part)
            # Written directly (not EntityStore.save_names): same bytes, a fraction of the time.
            part_names = names.take(pa.array(ids, type=pa.int64()))
            text = names_json(part_names.combine_chunks() if isinstance(part_names, pa.ChunkedArray) else part_names)
            atomic.write_text_atomic(
                urls.join_url(store.url, layout.entity_names_file(name, part)), text, store.storage_options
            )
            store.save_count(name, part, len(ids))
    if dynamic:
        store.save_dynamic_relation_count(len(relation_names))
    # Always written, also in standard mode (PBG fix #212): export checks names against it.
    store.save_dynamic_relation_names(relation_names)
