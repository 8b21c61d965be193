"""Seeded knowledge graph with planted structure a model can learn, as data/kg's TSV layout.

bench.lib.graphs.kg draws heads and tails independently, so an embedding can learn nothing but
popularity there. This one plants what real knowledge graphs have: entity types and relations
that connect them consistently. Written as ``<out>/{train,valid,test}.txt`` with lines
``e<id><TAB>rel<k><TAB>e<id>`` (the layout of data/kg, imported with ``--lhs-col 0 --rel-col 1
--rhs-col 2``), plus ``<out>/train.txt.json`` (parameters and summary, the cache key).

Structure (defaults: 40,000 entities, 40 relations, 400,000 train edges, 1% valid, 1% test):
- entities are split at random into ``clusters`` types, each type into ``groups`` groups of equal
  size (40 x 40 groups of 25 entities);
- a *base* relation is a partial map from ``domain`` types to distinct types plus a permutation
  of group indices: a head of type ``c`` in group ``g`` points at a tail of type ``map[c]`` in group
  ``perm[g]``;
- *compositions* ``b . a`` (the maps and permutations composed, where a's image meets b's domain)
  and *inverses* (map and permutation inverted) are relations of their own, drawn the same way;
- within a group, entities are Zipf-popular (``(j+1)^-alpha``), as heads and as tails;
- a ``noise`` share of the edges has a tail drawn uniformly from every entity;
- relation sizes are Zipf with exponent ``rel_alpha``; no self-loops, no duplicate triples; valid
  and test name only entities and relations that train has.

So a model that learns the types and the group maps ranks a true tail among the ~25 entities of
its group (minus the filtered ones), about 1,600 times fewer than all: learnable, not trivial. The
summary's ``oracle_test_mrr`` (:func:`oracle_mrr`: the generator's own ranking) is the ceiling.

Run: ``python -m bench.lib.graphs.planted_kg --out DIR`` (cached by parameters).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.lib.graphs.powerlaw import cached_summary, save_summary, write_tsv, zipf_probabilities

SPLITS = ("train", "valid", "test")
_OVERSAMPLE = 1.15  # candidate edges per kept edge: self-loops and duplicates are dropped


@dataclass(frozen=True)
class PlantedShape:
    """Parameters of one planted knowledge graph (all of them go into the cache key)."""

    entities: int = 40_000
    clusters: int = 40
    groups: int = 40
    base_relations: int = 28
    compositions: int = 6
    inverses: int = 6
    domain: int = 6
    train_edges: int = 400_000
    held_out: float = 0.01
    noise: float = 0.05
    alpha: float = 0.6
    rel_alpha: float = 0.5
    seed: int = 0

    @property
    def relations(self) -> int:
        """Every relation: base, compositions, inverses."""
        return self.base_relations + self.compositions + self.inverses

    @property
    def group_size(self) -> int:
        """Entities per group."""
        return self.entities // (self.clusters * self.groups)


@dataclass(frozen=True)
class Relation:
    """One planted relation: type map (-1 where undefined) and group permutation."""

    kind: str  # base | composition | inverse
    type_map: np.ndarray
    group_perm: np.ndarray
    parts: tuple[int, ...] = ()  # the base relations it is made of


def check_shape(shape: PlantedShape) -> None:
    """Raises ValueError naming the first parameter out of range."""
    positive = ("entities", "clusters", "groups", "base_relations", "domain", "train_edges")
    for name in positive:
        if getattr(shape, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(shape, name)}")
    if shape.entities % (shape.clusters * shape.groups):
        raise ValueError(f"entities ({shape.entities}) must be a multiple of clusters x groups")
    if shape.domain > shape.clusters:
        raise ValueError(f"domain ({shape.domain}) must be <= clusters ({shape.clusters})")
    if shape.inverses > shape.base_relations:
        raise ValueError(f"inverses ({shape.inverses}) must be <= base_relations ({shape.base_relations})")
    for name in ("held_out", "noise"):
        if not 0 <= getattr(shape, name) < 1:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(shape, name)}")


def _base(shape: PlantedShape, rng: np.random.Generator) -> Relation:
    type_map = np.full(shape.clusters, -1, dtype=np.int64)
    sources = rng.choice(shape.clusters, shape.domain, replace=False)
    type_map[sources] = rng.choice(shape.clusters, shape.domain, replace=False)
    return Relation("base", type_map, rng.permutation(shape.groups))


def _compose(first: Relation, second: Relation) -> np.ndarray:
    """Type map of ``second . first`` (-1 where either is undefined)."""
    mapped = first.type_map
    return np.where(mapped >= 0, second.type_map[np.maximum(mapped, 0)], -1)


def plant_relations(shape: PlantedShape, rng: np.random.Generator) -> list[Relation]:
    """Base relations, then compositions of base pairs whose maps meet, then inverses of bases.

    Raises:
        ValueError: If fewer base pairs compose than ``compositions`` asks for.
    """
    bases = [_base(shape, rng) for _ in range(shape.base_relations)]
    pairs = [(a, b) for a in range(len(bases)) for b in range(len(bases)) if a != b]
    meeting = [(a, b) for a, b in pairs if (_compose(bases[a], bases[b]) >= 0).any()]
    if len(meeting) < shape.compositions:
        raise ValueError(f"only {len(meeting)} base pairs compose; lower compositions or raise domain")
    chosen = rng.choice(len(meeting), shape.compositions, replace=False)
    relations = list(bases)
    for index in chosen:
        a, b = meeting[int(index)]
        perm = bases[b].group_perm[bases[a].group_perm]
        relations.append(Relation("composition", _compose(bases[a], bases[b]), perm, (a, b)))
    for a in rng.choice(len(bases), shape.inverses, replace=False):
        base = bases[int(a)]
        inverse = np.full(shape.clusters, -1, dtype=np.int64)
        defined = np.flatnonzero(base.type_map >= 0)
        inverse[base.type_map[defined]] = defined
        relations.append(Relation("inverse", inverse, np.argsort(base.group_perm), (int(a),)))
    return relations


def _zipf_draw(rng: np.random.Generator, probabilities: np.ndarray, count: int) -> np.ndarray:
    cumulative = np.cumsum(probabilities)
    cumulative[-1] = 1.0
    return np.minimum(np.searchsorted(cumulative, rng.random(count), side="right"), len(probabilities) - 1)


def _draw_edges(shape: PlantedShape, relations: list[Relation], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` candidate (head slot, rel, tail slot) rows, a ``noise`` share with a uniform tail."""
    rels = _zipf_draw(rng, zipf_probabilities(len(relations), shape.rel_alpha), count)
    within = zipf_probabilities(shape.group_size, shape.alpha)
    per_type = shape.groups * shape.group_size
    heads, tails = np.empty(count, np.int64), np.empty(count, np.int64)
    for k, relation in enumerate(relations):
        rows = np.flatnonzero(rels == k)
        sources = np.flatnonzero(relation.type_map >= 0)
        source = sources[rng.integers(len(sources), size=len(rows))]
        group = rng.integers(shape.groups, size=len(rows))
        heads[rows] = source * per_type + group * shape.group_size + _zipf_draw(rng, within, len(rows))
        target, target_group = relation.type_map[source], relation.group_perm[group]
        tails[rows] = target * per_type + target_group * shape.group_size + _zipf_draw(rng, within, len(rows))
    noisy = rng.random(count) < shape.noise
    tails[noisy] = rng.integers(shape.entities, size=int(noisy.sum()))
    return np.stack([heads, rels.astype(np.int64), tails], axis=1)


@dataclass(frozen=True)
class PlantedGraph:
    """The splits (int64 ``(n, 3)`` arrays of (head, rel, tail) entity ids) and what was planted."""

    splits: dict[str, np.ndarray]
    relations: list[Relation]
    entity_of_slot: np.ndarray  # slot = type * groups * group_size + group * group_size + position

    def type_and_group(self, shape: PlantedShape, entities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planted type and group of each entity id."""
        slot = np.argsort(self.entity_of_slot)[entities]
        per_type = shape.groups * shape.group_size
        return slot // per_type, (slot % per_type) // shape.group_size


def generate_planted(shape: PlantedShape) -> PlantedGraph:
    """Draw the train, valid and test splits with their planted structure.

    Raises:
        ValueError: If a parameter is out of range (see :func:`check_shape`) or too few distinct
            triples were drawn to fill the splits.
    """
    check_shape(shape)
    rng = np.random.default_rng(shape.seed)
    relations = plant_relations(shape, rng)
    held = round(shape.train_edges * shape.held_out)
    slots = _draw_edges(shape, relations, int((shape.train_edges + 2 * held) * _OVERSAMPLE) + 100, rng)
    entity_of_slot = rng.permutation(shape.entities)
    rows = np.stack([entity_of_slot[slots[:, 0]], slots[:, 1], entity_of_slot[slots[:, 2]]], axis=1)
    rows = rows[rows[:, 0] != rows[:, 2]]
    _, first = np.unique(rows, axis=0, return_index=True)
    rows = rows[np.sort(first)]
    if len(rows) < shape.train_edges + 2 * held:
        raise ValueError(f"only {len(rows)} distinct triples drawn; lower train_edges or alpha")
    train, rest = rows[: shape.train_edges], rows[shape.train_edges :]
    known = np.zeros(shape.entities, dtype=bool)
    known[train[:, [0, 2]].ravel()] = True
    has_rel = np.zeros(len(relations), dtype=bool)
    has_rel[train[:, 1]] = True
    rest = rest[known[rest[:, 0]] & known[rest[:, 2]] & has_rel[rest[:, 1]]]
    if len(rest) < 2 * held:
        raise ValueError(f"only {len(rest)} held-out triples drawn for 2 x {held}; lower held_out")
    splits = {"train": train[rng.permutation(len(train))], "valid": rest[:held], "test": rest[held : 2 * held]}
    return PlantedGraph(splits, relations, entity_of_slot)


def _planted_group(shape: PlantedShape, relation: Relation, slot: int, side: int) -> int | None:
    """First slot of the group the generator draws the answer from, given the anchor's slot (None: no group)."""
    per_type = shape.groups * shape.group_size
    kind, group = slot // per_type, (slot % per_type) // shape.group_size
    if side == 0:  # tail of (head, rel): heads come from the relation's domain
        target, target_group = int(relation.type_map[kind]), int(relation.group_perm[group])
    else:  # head of (rel, tail): the map is injective, so at most one source type
        sources = np.flatnonzero(relation.type_map == kind)
        if not len(sources):
            return None
        target, target_group = int(sources[0]), int(np.argsort(relation.group_perm)[group])
    return target * per_type + target_group * shape.group_size


def oracle_mrr(shape: PlantedShape, graph: PlantedGraph, split: str = "test") -> float:
    """Filtered MRR (both sides, filtering every split) of the generator's own ranking on ``split``.

    The generator's most likely answers are the members of the planted group in popularity order;
    every other entity is equally unlikely (noise), so an answer outside the group ranks at its
    mean position among them. No model can beat this but by chance: it is the graph's ceiling.
    """
    slot_of = np.argsort(graph.entity_of_slot)
    known: dict[tuple[int, int, int], set[int]] = defaultdict(set)
    for rows in graph.splits.values():
        for head, rel, tail in rows.tolist():
            known[(0, head, rel)].add(tail)
            known[(1, tail, rel)].add(head)
    reciprocal = []
    for head, rel, tail in graph.splits[split].tolist():
        for side, anchor, answer in ((0, head, tail), (1, tail, head)):
            start = _planted_group(shape, graph.relations[rel], int(slot_of[anchor]), side)
            others = [int(slot_of[e]) for e in known[(side, anchor, rel)] if e != answer]
            filtered = {o - start for o in others if start is not None and 0 <= o - start < shape.group_size}
            position = None if start is None else int(slot_of[answer]) - start
            if position is not None and 0 <= position < shape.group_size:
                rank = 1 + sum(1 for p in range(position) if p not in filtered)
            else:
                rank = shape.group_size - len(filtered) + 1 + (shape.entities - shape.group_size - 1) / 2
            reciprocal.append(1.0 / rank)
    return float(np.mean(reciprocal))


def planted_summary(shape: PlantedShape, graph: PlantedGraph) -> dict[str, object]:
    """Sizes, relation kinds, degree figures of the train split, and the test split's oracle MRR."""
    splits = graph.splits
    train = splits["train"]
    degree = np.bincount(train[:, [0, 2]].ravel(), minlength=shape.entities)
    return {
        **{f"{name}_edges": len(rows) for name, rows in splits.items()},
        "entities": shape.entities,
        "entities_in_train": int(np.count_nonzero(degree)),
        "relations": shape.relations,
        "relation_kinds": {"base": shape.base_relations, "composition": shape.compositions, "inverse": shape.inverses},
        "group_size": shape.group_size,
        "max_degree": int(degree.max()),
        "median_degree": float(np.median(degree[degree > 0])),
        "oracle_test_mrr": round(oracle_mrr(shape, graph), 4),
    }


def ensure_planted(out: Path, shape: PlantedShape) -> dict[str, object]:
    """Write ``out/{train,valid,test}.txt`` unless cached with this shape; return the summary."""
    params = asdict(shape)
    cached = cached_summary(out / "train.txt", params)
    if cached is not None and all((out / f"{split}.txt").exists() for split in SPLITS):
        return cached
    graph = generate_planted(shape)
    for split in ("valid", "test", "train"):  # train last: it carries the cache record
        write_tsv(out / f"{split}.txt", *graph.splits[split].T, node_prefix="e", rel_prefix="rel")
    summary = planted_summary(shape, graph)
    save_summary(out / "train.txt", params, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Write the planted graph (or find it cached) and print its summary as JSON."""
    defaults = PlantedShape()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", type=Path, required=True, help="directory for train.txt, valid.txt, test.txt")
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    print(json.dumps(ensure_planted(out, PlantedShape(**args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
