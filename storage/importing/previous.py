"""What earlier imports recorded, and whether this one repeats one of them (nothing to do then).

This import's :class:`Fingerprint` is computed from its inputs' stable identities
(:func:`storage.fs.identity.identify`, relative to the import root) and the options that shape
its output (:mod:`storage.importing.manifest`). :func:`repeated` finds the record it repeats: a
record of the current format with the same fingerprint, or one of the earlier format whose hash,
recomputed from the URLs as it spelled them and the current files' bytes, matches (the same
content and options, moved or not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pbg_core.session.partitions import PartitionTopology
from storage.entities import EntityStore
from storage.errors import OutputExistsError, StorageError
from storage.fs import reads
from storage.fs.identity import FileIdentity, identify
from storage.importing.edge_paths import edge_path_key
from storage.importing.manifest import FINGERPRINT_VERSION, fingerprint, import_root, legacy_fingerprints, place_below
from storage.importing.report import ImportReport
from storage.importing.write import EdgeTarget

_REPORT_FIELDS = {f.name for f in dataclasses.fields(ImportReport)}


@dataclass(frozen=True)
class Fingerprint:
    """This import's fingerprint and the identities of its inputs, in order."""

    value: str
    files: list[FileIdentity]


def shaping(config: Any, edge_paths: Sequence[Any]) -> dict[str, Any]:
    """The config fields that shape an import's output, with ``edge_paths`` as given."""
    return {
        "edge_paths": list(edge_paths),
        "dynamic_relations": config.dynamic_relations,
        "entities": {name: e.num_partitions for name, e in config.entities.items()},
        "relations": [[r.name, r.lhs, r.rhs] for r in config.relations],
    }


def this_fingerprint(config: Any, inputs: Sequence[str], options: dict[str, Any]) -> Fingerprint | None:
    """The import's fingerprint; None when the inputs cannot be read (the import then says why).

    Edge paths count by their place under the import root (by stable identity when outside it).
    """
    so = config.storage_options_for_fs()
    root = import_root(config.entity_path)
    try:
        files = [identify(url, root or ".", so) for url in inputs]
        places = [place_below(path, root, so) or edge_path_key(path, so) for path in config.edge_paths]
    except (StorageError, OSError):
        return None
    return Fingerprint(fingerprint(files, {**options, **shaping(config, places)}), files)


def repeated(
    records: list[dict[str, Any]], this: Fingerprint | None, config: Any, inputs: Sequence[str], options: dict[str, Any]
) -> dict[str, Any] | None:
    """The newest of ``records`` that this import repeats (see the module docstring), or None."""
    if this is None:
        return None
    same = [
        r for r in records if r.get("fingerprint_version") == FINGERPRINT_VERSION and r.get("fingerprint") == this.value
    ]
    legacy = [
        r
        for r in records
        if r.get("fingerprint_version") is None
        and r.get("fingerprint")
        and isinstance(r.get("inputs"), list)
        and len(r["inputs"]) == len(inputs)
        and isinstance(r.get("edge_paths"), list)
    ]
    if legacy:
        try:
            prints = legacy_fingerprints(
                [[str(u) for u in r["inputs"]] for r in legacy],
                [{**options, **shaping(config, r["edge_paths"])} for r in legacy],
                inputs,
                config.storage_options_for_fs(),
            )
        except (StorageError, OSError):
            prints = []
        same += [r for r, print_ in zip(legacy, prints, strict=False) if print_ == r["fingerprint"]]
    return max(same, key=lambda r: int(r.get("generation", 0)), default=None)


def unchanged_report(previous: dict[str, Any]) -> ImportReport:
    """The report of the import ``previous`` records, marked as unchanged since then."""
    report = ImportReport(**{k: v for k, v in (previous.get("report") or {}).items() if k in _REPORT_FIELDS})
    report.unchanged_since = previous.get("imported_at") or "an earlier run"
    return report


def refuse_replacing_appends(config: Any, previous: dict[str, Any] | None) -> None:
    """A plain import over an import that appends have grown would give every name a new place.

    Raises:
        OutputExistsError: ``previous`` records appends (``force`` skips this check: it reads no manifest).
    """
    appends = [g for g in (previous or {}).get("generations") or [] if g.get("append")]
    if appends:
        numbers = [int(g.get("generation", 0)) for g in appends]
        which = f"generation {numbers[0]}" if len(numbers) == 1 else f"generations {min(numbers)}-{max(numbers)}"
        raise OutputExistsError(
            config.entity_path,
            f"holds an import grown by {len(appends)} append(s) ({which}); a plain import "
            "would replace it and move every entity, so models trained on it would no longer fit. "
            "Use --append to add edges, another entity_path for a new import, or --force to replace it",
        )


def outputs_complete(config: Any) -> bool:
    """Every entity count file and every bucket file of every edge path is there."""
    so = config.storage_options_for_fs()
    entities = EntityStore(config.entity_path, so)
    if not all(
        entities.has_count(name, part) for name, e in config.entities.items() for part in range(e.num_partitions)
    ):
        return False
    topology = PartitionTopology.build(
        {name: e.num_partitions for name, e in config.entities.items()},
        [(r.lhs, r.rhs) for r in config.relations],
    )
    return all(
        reads.exists(EdgeTarget(path, so).bucket_url(bucket), so)
        for path in config.edge_paths
        for bucket in topology.buckets()
    )
