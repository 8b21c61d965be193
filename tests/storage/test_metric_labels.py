"""storage.metric_labels: each MRR's definition follows the config's own settings."""

from __future__ import annotations

from typing import Any

from pbg_core.config import parse_config
from storage import metric_labels


def config(**extra: Any) -> Any:
    relations = extra.pop("relations", [{"name": "r", "lhs": "n", "rhs": "n"}])
    return parse_config(
        {
            "entity_path": "/e",
            "edge_paths": ["/d"],
            "checkpoint_path": "/c",
            "entities": {"n": {"num_partitions": 1}},
            "relations": relations,
            "dimension": 4,
        }
        | extra
    )


def test_in_training_follows_eval_fraction_and_eval_negatives() -> None:
    assert metric_labels.in_training_definition(config()) == (
        "in-training MRR (sampled): the 5% of each bucket held out of training, each edge ranked against "
        "1,000 batch + 1,000 uniform sampled negatives, raw (not filtered); it follows training and is not "
        "comparable with the holdout or validation MRR."
    )
    unset = config(eval_fraction=0.1, eval_num_batch_negs=None, eval_num_uniform_negs=None)
    assert "the 10% of each bucket" in metric_labels.in_training_definition(unset)
    assert "50 batch + 50 uniform sampled negatives" in metric_labels.in_training_definition(unset)  # training's
    off = metric_labels.in_training_definition(config(eval_fraction=0))
    assert off == "in-training MRR (sampled): not measured (eval_fraction is 0)."


def test_all_negs_is_named() -> None:
    every = config(relations=[{"name": "r", "lhs": "n", "rhs": "n", "all_negs": True}])
    assert "every entity of its partition (all_negs)" in metric_labels.in_training_definition(every)
    mixed = config(
        relations=[{"name": "r", "lhs": "n", "rhs": "n", "all_negs": True}, {"name": "s", "lhs": "n", "rhs": "n"}]
    )
    assert "for relations with all_negs" in metric_labels.holdout_definition(mixed)


def test_the_holdout_says_raw_with_the_training_negatives() -> None:
    text = metric_labels.holdout_definition(config())
    assert text.startswith("holdout MRR (gate, raw): the new data's held-out edges, never trained")
    assert "50 batch + 50 uniform sampled negatives" in text and "not filtered" in text


def test_validation_names_its_edges_candidates_and_filter() -> None:
    assert "not measured" in metric_labels.validation_definition(config())
    full = metric_labels.validation_definition(config(validation={"edge_path": "/v"}))
    assert full == (
        "validation MRR: every edge of `/v` (never trained) ranked against every entity, filtered: the true "
        "edges of edge_paths and the validation edges are removed from the negatives."
    )
    sampled = config(validation={"edge_path": "/v", "sample_edges": 500, "candidates": 1000, "filter_paths": ["/d"]})
    text = metric_labels.validation_definition(sampled)
    assert "a seeded sample of 500 of `/v`" in text and "1000 uniform candidates" in text and "of filter_paths" in text


def test_every_name_is_ascii() -> None:
    names = [v for k, v in vars(metric_labels).items() if k.isupper() and isinstance(v, str)]
    assert len(names) == 8 and all(name.isascii() for name in names)
