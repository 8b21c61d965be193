"""pbg_core.evaluation.sampling: the seeded edge sample, the candidate config and its checks."""

from __future__ import annotations

import pytest
import torch

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.errors import ConfigError
from pbg_core.evaluation.sampling import (
    candidate_config,
    check_candidates,
    describe_sample,
    ranked_entity_types,
    sample_edge_positions,
)

COUNTS = [5, 0, 30, 15]  # edges per bucket; one empty bucket


def test_the_sample_has_num_distinct_edges_in_range_per_bucket() -> None:
    positions = sample_edge_positions(COUNTS, 20, seed=7)
    assert sum(len(rows) for rows in positions) == 20
    for rows, count in zip(positions, COUNTS, strict=True):
        assert rows.tolist() == sorted(set(rows.tolist()))
        assert all(0 <= row < count for row in rows.tolist())


@pytest.mark.parametrize("num", [10, 40])  # 40: the randperm branch (at least half of the 50 edges)
def test_every_edge_is_equally_likely_whichever_bucket_it_is_in(num: int) -> None:
    draws = 4000
    hits = torch.zeros(sum(COUNTS))
    starts = [sum(COUNTS[:i]) for i in range(len(COUNTS))]
    for seed in range(draws):
        for start, rows in zip(starts, sample_edge_positions(COUNTS, num, seed), strict=True):
            hits[start + rows] += 1
    expected = draws * num / sum(COUNTS)
    # Each edge's count is Binomial(draws, num / 50): its standard deviation is at most sqrt(draws) / 2 = 32.
    assert float((hits - expected).abs().max()) < 4 * (draws**0.5) / 2
    # So each bucket's share is its size's: the 30-edge bucket gets twice the 15-edge one's.
    shares = [float(hits[s : s + n].sum()) for s, n in zip(starts, COUNTS, strict=True)]
    assert shares[2] / shares[3] == pytest.approx(2.0, rel=0.05)


def test_the_same_seed_gives_the_same_sample_and_another_seed_another() -> None:
    first, again, other = (sample_edge_positions(COUNTS, 12, seed) for seed in (3, 3, 4))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_a_sample_larger_than_the_edges_is_every_edge() -> None:
    positions = sample_edge_positions(COUNTS, 1000, seed=0)
    assert [rows.tolist() for rows in positions] == [list(range(n)) for n in COUNTS]


def test_a_sample_of_none_is_refused() -> None:
    with pytest.raises(ValueError, match="num must be >= 1, got 0"):
        sample_edge_positions(COUNTS, 0, seed=0)


def two_type_config(**overrides: object) -> ConfigSchema:
    return parse_config(
        {
            "entity_path": "e",
            "edge_paths": ["p"],
            "checkpoint_path": "c",
            "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}, "tag": {"num_partitions": 1}},
            "relations": [
                {"name": "likes", "lhs": "user", "rhs": "item", "all_negs": True},
                {"name": "tagged", "lhs": "item", "rhs": "item"},
            ],
            "dimension": 8,
            "num_batch_negs": 50,
            "seed": 1,
            **overrides,
        }
    )


COUNTS_BY_KEY = {("user", 0): 500, ("user", 1): 480, ("item", 0): 900, ("tag", 0): 3}


def test_candidates_up_to_the_smallest_ranked_partition_are_allowed() -> None:
    check_candidates(480, two_type_config(), COUNTS_BY_KEY)  # tag (3 entities) is in no relation


def test_more_candidates_than_a_ranked_partition_holds_names_it_and_the_range() -> None:
    wanted = r"--candidates 481 is not allowed: give 1 to 480 \(entity type 'user' partition 1 has 480 entities"
    with pytest.raises(ConfigError, match=wanted):
        check_candidates(481, two_type_config(), COUNTS_BY_KEY)
    with pytest.raises(ConfigError, match="--candidates 0 is not allowed: give 1 to 480"):
        check_candidates(0, two_type_config(), COUNTS_BY_KEY)


def test_a_side_without_negatives_is_not_ranked_so_its_size_does_not_bound_k() -> None:
    config = two_type_config(disable_lhs_negs=True)
    assert ranked_entity_types(config) == ["item"]
    check_candidates(900, config, COUNTS_BY_KEY)


def test_the_candidate_config_has_k_uniform_negatives_only_and_the_sample_seed() -> None:
    config = candidate_config(two_type_config(), 64, seed=9)
    assert (config.num_batch_negs, config.num_uniform_negs, config.seed) == (0, 64, 9)
    assert [relation.all_negs for relation in config.relations] == [False, False]


def test_the_sample_line_says_what_was_ranked() -> None:
    line = describe_sample(10_000, 685_000, 1000, 0)
    assert line == "ranked 10,000 of 685,000 test edges against 1,000 uniformly sampled candidates per side (seed 0)"
    assert describe_sample(5, 9, None, 3).endswith("against the config's negatives (seed 3)")
