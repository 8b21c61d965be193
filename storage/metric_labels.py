"""The names of the three MRRs a run reports, and what each one measures, in one line each.

A training run's summary can show three different MRRs of the same model, measured on different
edges against different negatives (docs/quality.md, "Three MRRs"); they are not comparable, so
each is named for what it measures wherever it appears (iteration tables, the run summary, the
quality gate). Pure: the definitions are built from the config's own settings.
"""

from __future__ import annotations

from pbg_core.config import ConfigSchema

IN_TRAINING = "in-training MRR (sampled)"
IN_TRAINING_HITS = "in-training Hits@10"
HOLDOUT = "holdout MRR (gate, raw)"
VALIDATION = "validation MRR"

# The iteration table's columns: a bucket's in-training figures before and after it trained.
MRR_BEFORE = "in-training MRR before"
MRR_AFTER = "in-training MRR after"
HITS10_BEFORE = "in-training Hits@10 before"
HITS10_AFTER = "in-training Hits@10 after"


def in_training_definition(config: ConfigSchema) -> str:
    """What the in-training MRR measures under ``config`` (one line)."""
    if config.eval_fraction <= 0:
        return f"{IN_TRAINING}: not measured (eval_fraction is 0)."
    batch = config.eval_num_batch_negs if config.eval_num_batch_negs is not None else config.num_batch_negs
    uniform = config.eval_num_uniform_negs if config.eval_num_uniform_negs is not None else config.num_uniform_negs
    return (
        f"{IN_TRAINING}: the {config.eval_fraction:.0%} of each bucket held out of training, each edge ranked "
        f"against {_negatives(config, batch, uniform)}, raw (not filtered); it follows training and is "
        "not comparable with the holdout or validation MRR."
    )


def holdout_definition(config: ConfigSchema) -> str:
    """What the quality gate's holdout MRR measures under ``config`` (one line)."""
    return (
        f"{HOLDOUT}: the new data's held-out edges, never trained, ranked as `pbg eval` ranks, against "
        f"{_negatives(config, config.num_batch_negs, config.num_uniform_negs)}; raw: known true edges "
        "are not filtered out of the negatives."
    )


def validation_definition(config: ConfigSchema) -> str:
    """What the validation MRR measures under ``config`` (one line; no validation: says so)."""
    section = config.validation
    if section is None:
        return f"{VALIDATION}: not measured (the config has no validation section)."
    edges = f"a seeded sample of {section.sample_edges}" if section.sample_edges else "every edge"
    against = f"{section.candidates} uniform candidates of its partition" if section.candidates else "every entity"
    known = "filter_paths" if section.filter_paths is not None else "edge_paths and the validation edges"
    return (
        f"{VALIDATION}: {edges} of `{section.edge_path}` (never trained) ranked against {against}, "
        f"filtered: the true edges of {known} are removed from the negatives."
    )


def _negatives(config: ConfigSchema, batch: int, uniform: int) -> str:
    sampled = f"{batch:,} batch + {uniform:,} uniform sampled negatives"
    every = [r.name for r in config.relations if r.all_negs]
    if not every:
        return sampled
    if len(every) == len(config.relations):
        return "every entity of its partition (all_negs)"
    return f"{sampled} (every entity of the partition for relations with all_negs)"
