"""Prepare the starts of the rows ``init_path`` lacks (``init_new_entities: neighbor_mean``).

Runs before the training session opens, only while nothing is committed (a committed version
already holds every row), after ``start-by-name`` (:mod:`tasks.by_name`): where a re-import moved
the names, the new entities are those its remapped start lists as never trained. The means are computed from the run's edge paths and the init
checkpoint (:mod:`pbg_core.session.neighbor_means`) and written into the checkpoint directory
(:mod:`storage.new_rows`), where every process that reads a partition from ``init_path`` finds
them. A retry of the same run with the same ``init_path`` version and edge paths reuses the file.
"""

from __future__ import annotations

from typing import Any

import torch

from pbg_core.config import ConfigSchema
from pbg_core.session.neighbor_means import graph_shape, neighbor_means
from pbg_core.training.optimizers import RowAdagrad, state_from_bytes
from storage.remap.start import InitByName, digests_json
from tasks._policies import run_logger, storage_task
from tasks.by_name import run_keys
from tasks.runs import get_run


def starts_new_rows(config: ConfigSchema, committed_version: int) -> bool:
    """Whether the run starts rows ``init_path`` lacks at their neighbors' mean: asked for, nothing committed."""
    return committed_version == 0 and config.init_path is not None and config.init_new_entities == "neighbor_mean"


@storage_task(name="prepare-new-rows", task_run_name="start new entities at their neighbors' mean")
def prepare_new_rows(run: str) -> dict[str, Any]:
    """Write the neighbor means of the new rows; returns counts per (type, partition) as ``"type/part"``.

    Args:
        run: The run's handle (:mod:`tasks.runs`); its config has ``init_path`` set and
            ``init_new_entities: neighbor_mean``, and nothing is committed in its checkpoint.
    """
    logger = run_logger()
    config, stores = get_run(run).config, get_run(run).stores
    assert stores.init is not None and stores.new_rows is not None  # the flow calls this only with an init_path
    keys, dynamic = run_keys(config), config.dynamic_relations
    names = stores.names_now(keys, dynamic)
    init = stores.init_rows(names, keys, dynamic)  # remapped by name where the names moved (tasks/by_name.py)
    assert init is not None  # stores.init is set
    init_version = init.read_version()
    source = {
        "init_path": stores.init.url,
        "version": init_version,
        "edge_paths": list(config.edge_paths),
        "names": digests_json(names),  # the rows' layout: another import, other means
    }
    if stores.new_rows.source() == source:
        logger.info("new rows already prepared from %s version %d: reusing them", stores.init.url, init_version)
        return {"reused": True}
    fresh = init.fresh_rows() if isinstance(init, InitByName) else {}
    shape = graph_shape(config, stores.entities, init, fresh)
    new_rows = shape.new_rows()
    if not new_rows:
        logger.info("init_path %s holds every row: no new entities to start", stores.init.url)
        stores.new_rows.remove()
        return {"new_rows": 0}

    def load_old(key: tuple[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
        embeddings, optim = init.load_embeddings(key[0], key[1], init_version)
        sums = torch.zeros(len(embeddings))
        if optim is not None:
            RowAdagrad.load_state_dict(state_from_bytes(optim), sums)  # left at 0 when it has none of that shape
        return embeddings, sums

    rows = neighbor_means(shape, stores.edges, load_old)
    stores.new_rows.save(rows, source)
    new = sum(len(offsets) for offsets in new_rows.values())
    given = sum(len(offsets) for offsets, _, _ in rows.values())
    logger.info("%d of %d new entities start as the mean of their trained neighbors (the rest at random)", given, new)
    return {"new_rows": new, "neighbor_mean": given}
