"""What a tuning study decides around its trials: how many run at once, each trial's config, the best files.

- :func:`load_space`: the search-space file, read and checked against the base config before any
  trial (every problem one line, naming the file); a config without ``validation`` is refused.
- :func:`plan_slots`: trials run in threads of this process, at most ``--parallel``, at most one
  per core, and as many as the memory plan of one trial (:mod:`pbg_core.session.memory_plan`:
  its partitions, model and edges; the process's fixed overhead counted once, every HOGWILD
  child beyond the first worker counted per trial) fits in the memory available; each trial's
  ``workers`` is the cores divided among the trials at once.
- :func:`earlier_validations`: what a resumed trial's directory validated already, replayed to its new trial.
- :func:`trial_config`: the base config with the trial's values, its own checkpoint directory,
  seed ``base seed + trial number`` (a resumed trial's: that of the trial whose directory it
  continues) and its workers.
- :func:`write_best_files`: ``best_config.json`` (the base config with the best values,
  ``checkpoint_path`` = ``<study_dir>/best``, credentials masked as in every config.json this
  project writes) and ``best_trial.json``, both written atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from pbg_core.config import ConfigSchema, config_to_json, config_to_raw, parse_config
from pbg_core.config.search_space import SearchSpace
from pbg_core.config.space_checks import check_space, require_validation
from pbg_core.evaluation.early_stopping import comparable
from pbg_core.parallel.worker_boot import default_num_workers
from pbg_core.session.build import build_topology
from pbg_core.session.memory_plan import FIXED_OVERHEAD_BYTES, GIB, largest_chunk, plan_memory, run_sizes
from storage.best_version import read_best
from storage.checkpoints import CheckpointStore
from storage.config_loader import load_search_space
from storage.fs.atomic import write_text_atomic
from storage.host_memory import memory_available
from storage.layout import BEST_CONFIG_FILE, BEST_DIR, BEST_TRIAL_FILE
from storage.validation_log import ValidationLog
from tasks._policies import plain_task
from tasks.runs import get_run
from tasks.tune_study import TrialTicket
from tasks.validation_steps import validation_setup

# Each HOGWILD child beyond a trial's first worker imports torch again (memory_plan.py measures ~370 MiB).
CHILD_BYTES = 3 * GIB // 8


@plain_task(name="load-space", task_run_name="load the search space")
def load_space(space_url: str, config: ConfigSchema, config_source: str | None = None) -> SearchSpace:
    """The search space of ``space_url``, checked against ``config`` (which must have a validation section).

    Call it before any trial's thread starts: the check silences pydantic's warnings process-wide.

    Raises:
        ConfigError: the config has no validation section.
        SearchSpaceError: the file cannot be read as a space, or does not fit ``config``.
        DataNotFound: no such file.
    """
    require_validation(config, config_source)
    space = load_search_space(space_url, config.storage_options_for_fs())
    check_space(space, config, source=space_url)
    return space


def study_config(config: ConfigSchema, space: SearchSpace) -> ConfigSchema:
    """``config`` measured by the study's metric (``validation.metric``)."""
    return parse_config(config_to_raw(config), [f"validation.metric={space.metric}"])


def trial_result(config: ConfigSchema) -> tuple[float | None, int]:
    """A finished trial's best validation value (``best.json``; None without one) and the epochs it trained."""
    options = config.storage_options_for_fs()
    best = read_best(config.checkpoint_path, options)
    rows = ValidationLog(config.checkpoint_path, options).read()
    return (best.value if best is not None else None), max((row.epoch for row in rows), default=0)


def earlier_validations(config: ConfigSchema) -> list[float]:
    """The metric of each validation of the committed versions in ``config``'s checkpoint, by version
    (a resumed trial's, from its interrupted run); [] for a new directory."""
    options = config.storage_options_for_fs()
    committed = CheckpointStore(config.checkpoint_path, options).read_version()
    rows = comparable(ValidationLog(config.checkpoint_path, options).read(), validation_setup(config), committed)
    metric = config.validation.metric if config.validation is not None else "mrr"
    return [row.value(metric) for row in rows]


@dataclass(frozen=True)
class Slots:
    """Trials at once, each trial's workers, and why (for the log)."""

    trials: int
    workers: int
    why: str


@plain_task(name="plan-trial-slots", task_run_name="plan the trials at once")
def plan_slots(run: str, parallel: int) -> Slots:
    """Trials at once: ``parallel``, at most the cores, at most what one trial's memory plan allows."""
    config, stores = get_run(run).config, get_run(run).stores
    cores = default_num_workers()
    slots = max(1, min(parallel, cores))
    why = [f"--parallel {parallel}", f"{cores} cores"]
    available = memory_available()
    if available is not None:
        topology = build_topology(config)
        keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
        counts = {key: stores.entities.load_count(*key) for key in keys}
        num_dynamic = stores.entities.load_dynamic_relation_count() if config.dynamic_relations else 0
        chunk = largest_chunk(stores.edges, topology.buckets(), config.num_edge_chunks, config.max_edges_per_chunk)
        sizes = run_sizes(config, topology, counts, num_dynamic, chunk)
        plan = plan_memory(sizes, available, config.resident_partitions)  # one trial must fit: else its line
        own = plan.total_bytes - FIXED_OVERHEAD_BYTES

        def fits(n: int) -> bool:
            children = max(1, cores // n) - 1
            return FIXED_OVERHEAD_BYTES + n * (own + children * CHILD_BYTES) <= available.num_bytes

        slots = max([n for n in range(1, slots + 1) if fits(n)], default=1)
        why.append(f"{available.num_bytes / 1e9:.2f} GB available ({available.source})")
    return Slots(trials=slots, workers=max(1, cores // slots), why=", ".join(why))


def trial_config(base: ConfigSchema, ticket: TrialTicket, workers: int) -> ConfigSchema:
    """The config trial ``ticket`` trains: ``base`` with the trial's overrides in its own directory, seed
    ``base seed + the number of the trial that first trained there``, and ``workers``.

    Raises:
        ConfigError: the trial's values make an invalid config (the field named).
    """
    seed = (base.seed if base.seed is not None else 0) + ticket.seed_trial
    own = [f"checkpoint_path={ticket.checkpoint_dir}", f"seed={seed}", f"workers={workers}"]
    return parse_config(config_to_raw(base), [*ticket.overrides, *own], source=f"trial {ticket.number}")


def write_best_files(base: ConfigSchema, best: dict[str, Any], study_dir: str) -> tuple[str, str]:
    """``best_config.json`` and ``best_trial.json`` in ``study_dir``; returns their paths.

    Raises:
        ConfigError: the best values no longer make a valid config of ``base`` (not after a trial used them).
    """
    best_dir = os.path.join(os.path.abspath(study_dir), BEST_DIR)
    config = parse_config(config_to_raw(base), [*best["overrides"], f"checkpoint_path={best_dir}"])
    config_path = os.path.join(study_dir, BEST_CONFIG_FILE)
    trial_path = os.path.join(study_dir, BEST_TRIAL_FILE)
    write_text_atomic(config_path, json.dumps(config_to_json(config), indent=4) + "\n")
    trial = {key: best[key] for key in ("number", "params", "metric", "value", "checkpoint_dir")}
    write_text_atomic(trial_path, json.dumps(trial, indent=2, sort_keys=True) + "\n")
    return config_path, trial_path
