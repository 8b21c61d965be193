"""Inputs of bench/livejournal.py: PBG's LiveJournal config as files, and the free-space check.

The config is PBG's ``torchbiggraph/examples/configs/livejournal_config.py`` (one entity type
``user_id``, one relation ``follow`` with operator ``none``, dimension 1024, ``global_emb`` False,
lr 0.001, ``hogwild_delay`` 2; left at PBG's defaults: comparator cos, ranking loss, margin 0.1,
batch 1000, 50 batch + 50 uniform negatives, bucket order inside_out) with these changes,
each recorded in the JSON: 8 partitions instead of 1, one epoch instead of 30, paths relative
to the run directory, and ``eval_fraction`` 0 unless ``--pbg-eval-fraction`` keeps PBG's 0.05
(held-out evaluation inside training is not what is measured here, and it costs time on both
sides). Both tools read the same file; only keys PBG 1.0.0 knows go into it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

PARTITIONS = 8
DIMENSION = 1024


def config_dict(edge_paths: list[str], eval_fraction: float, hogwild_delay: float, workers: int | None) -> dict:
    """PBG's LiveJournal config with this benchmark's changes (see the module docstring)."""
    config: dict[str, object] = {
        "entity_path": "entities",
        "edge_paths": edge_paths,
        "checkpoint_path": "checkpoints",
        "entities": {"user_id": {"num_partitions": PARTITIONS}},
        "relations": [{"name": "follow", "lhs": "user_id", "rhs": "user_id", "operator": "none"}],
        "dimension": DIMENSION,
        "global_emb": False,
        "num_epochs": 1,
        "lr": 0.001,
        "hogwild_delay": hogwild_delay,
        "comparator": "cos",
        "loss_fn": "ranking",
        "margin": 0.1,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "bucket_order": "inside_out",
        "eval_fraction": eval_fraction,
    }
    if workers is not None:
        config["workers"] = workers
    return config


def write_config(path: Path, config: dict) -> None:
    """``get_torchbiggraph_config()`` returning ``config``, rewritten only when it changes."""
    text = (
        '"""Written by bench/livejournal.py: PBG\'s livejournal_config.py with 8 partitions, 1 epoch,\n'
        'relative paths and the eval_fraction of the run (see bench/lj_setup.py)."""\n\n\n'
        f"def get_torchbiggraph_config():\n    return {config!r}\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def checkpoint_version_bytes(nodes: int) -> int:
    """One checkpoint version: every embedding row plus its row-Adagrad state, float32."""
    return nodes * (DIMENSION + 1) * 4


def bytes_needed(nodes: int, edges: int, have_graph: bool, have_import: bool) -> dict[str, int]:
    """Disk the run may still need, by item (estimates, rounded up; see the README entry).

    - TSV: at most 16 bytes per edge (two ids of up to 7 digits, a tab, a newline);
    - imported edges: 24 bytes per edge (measured: lhs, rhs and relation, int64), plus as much
      again for the importer's staging;
    - our checkpoint: two versions' worth of every partition (the one being written, and the
      committed one or, in a first epoch, the last save point's saves in the progress area,
      deleted only once the pass's last bucket has saved everything under the version's names),
      plus two partitions in flight;
    - PBG's run writes into its own checkpoint directory after ours is removed, so it needs
      at most one version, which the two above already cover.
    """
    version = checkpoint_version_bytes(nodes)
    return {
        "tsv": 0 if have_graph else 16 * edges,
        "imported_edges": 0 if have_import else 2 * 24 * edges,
        "checkpoint_two_versions": 2 * version,
        "partitions_in_flight": 2 * version // PARTITIONS,
    }


def check_free_space(directory: Path, needed: dict[str, int]) -> str | None:
    """None if ``directory``'s file system has room for ``sum(needed)``, else the one-line refusal."""
    directory.mkdir(parents=True, exist_ok=True)
    free, total = shutil.disk_usage(directory).free, sum(needed.values())
    if free >= total:
        return None
    return (
        f"livejournal: not enough disk under {directory}: {total / 1e9:.1f} GB needed "
        f"({', '.join(f'{k} {v / 1e9:.1f} GB' for k, v in needed.items())}), {free / 1e9:.1f} GB free"
    )
