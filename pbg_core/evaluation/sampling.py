"""Sampled evaluation: a seeded uniform sample of test edges, ranked against K sampled candidates.

Ranking every test edge against every entity costs (edges x entities x 2 sides) scores,
out of reach for graphs of millions of entities. Sampled evaluation ranks a uniform sample
of the edges, each side against ``K`` candidates drawn uniformly from the entities of the
side's partition (the same population as PBG's uniform negatives), which is offline
evaluation with no batch negatives and ``K`` uniform ones (:func:`candidate_config`),
with two differences the ranking needs:

- the candidates of a chunk are distinct (drawn without replacement, so ``K`` equal to the
  partition's entity count is every entity, exactly full ranking);
- a candidate equal to the edge's own entity is not a negative, and with filtering a
  candidate forming a known true edge is not either: both are masked like ``all_negs``'
  masked negatives (:func:`pbg_core.evaluation.candidates.mask_candidates`, in the
  workers, which never see the config: hence its own module).

Sampled MRR is higher than full-ranking MRR (fewer entities can outrank the positive):
the two are not comparable.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import torch

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from pbg_core.evaluation.candidates import distinct_draw
from pbg_core.types import LongTensorType, PartitionKey


def sample_edge_positions(counts: Sequence[int], num: int, seed: int) -> list[LongTensorType]:
    """A seeded uniform sample of ``num`` edges, without replacement, across several edge lists.

    The lists (every bucket of every evaluated edge path, in a fixed order) are treated as
    one concatenation, so each edge is equally likely and each list gets its share in
    proportion to its size; only the counts are needed, never the edges.

    Args:
        counts: Edges per list.
        num: Edges to sample; all of them if it is at least the total.
        seed: Seed of the draw: the same counts, ``num`` and seed give the same sample.

    Returns:
        Per list, the sorted positions of its sampled edges.
    """
    if num < 1:
        raise ValueError(f"num must be >= 1, got {num}")
    bounds = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int64)
    picked = distinct_draw(int(bounds[-1]), num, torch.Generator().manual_seed(seed))
    which = torch.searchsorted(bounds, picked, right=True) - 1
    return [picked[which == index] - bounds[index] for index in range(len(counts))]


def candidate_config(config: ConfigSchema, candidates: int, seed: int) -> ConfigSchema:
    """``config`` as sampled evaluation runs it: ``candidates`` uniform negatives, no others.

    No batch negatives and no ``all_negs``; the seed (of the candidate draws) is ``seed``.
    """
    relations = [relation.model_copy(update={"all_negs": False}) for relation in config.relations]
    update = {"relations": relations, "num_batch_negs": 0, "num_uniform_negs": candidates, "seed": seed}
    return config.model_copy(update=update)


def ranked_entity_types(config: ConfigSchema) -> list[str]:
    """The entity types whose sides are ranked (a side with negatives disabled is not)."""
    types = []
    for relation in config.relations:
        if not config.disable_lhs_negs:
            types.append(relation.lhs)
        if not config.disable_rhs_negs:
            types.append(relation.rhs)
    return list(dict.fromkeys(types))


def check_candidates(candidates: int, config: ConfigSchema, counts: Mapping[PartitionKey, int]) -> None:
    """Refuse ``candidates`` below 1 or above the entity count of a ranked partition.

    A larger K is refused rather than clamped: sampled metrics depend on K, and a run
    whose partitions were ranked against different numbers of candidates would average
    incomparable ranks while reporting one K.

    Args:
        candidates: K of ``--candidates``.
        config: The evaluated config.
        counts: Entity count per (entity type, partition).

    Raises:
        ConfigError: naming the option, the smallest partition and the allowed values.
    """
    types = ranked_entity_types(config)
    ranked = {key: count for key, count in counts.items() if key[0] in types}
    if not ranked:
        raise ConfigError(["--candidates: no side of any relation is ranked (disable_lhs_negs and disable_rhs_negs)"])
    (entity, part), smallest = min(ranked.items(), key=lambda item: (item[1], item[0]))
    if candidates < 1 or candidates > smallest:
        raise ConfigError(
            [
                f"--candidates {candidates} is not allowed: give 1 to {smallest:,} (entity type {entity!r} "
                f"partition {part} has {smallest:,} entities, the fewest of the ranked partitions)"
            ]
        )


def describe_sample(ranked: int, total: int, candidates: int | None, seed: int) -> str:
    """One line saying what a sampled evaluation ranked, for the command's output."""
    against = (
        f"against {candidates:,} uniformly sampled candidates per side"
        if candidates is not None
        else "against the config's negatives"
    )
    return f"ranked {ranked:,} of {total:,} test edges {against} (seed {seed})"
