"""``pbg eval``'s sampled-evaluation options, checked before the Prefect server starts.

The flow checks the same again (a deployment's run has no command line); here a bad value
fails in a second with one line, instead of after the server and the workers started.
"""

from __future__ import annotations

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from pbg_core.evaluation.sampling import check_candidates
from pbg_core.session.build import build_topology
from storage.edges import EdgeStore
from storage.entities import EntityStore


def check_sampling(config: ConfigSchema, candidates: int | None) -> None:
    """Refuse sampling a config without edges, or more candidates than a ranked partition has.

    Raises:
        ConfigError: naming the option and the allowed values.
        DataNotFound: an entity count or bucket file is missing.
    """
    options = config.storage_options_for_fs()
    topology = build_topology(config)
    if candidates is not None:
        entities = EntityStore(config.entity_path, options)
        keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
        check_candidates(candidates, config, {key: entities.load_count(*key) for key in keys})
    stores = [EdgeStore(path, options) for path in config.edge_paths]
    if not any(store.num_edges(bucket) for store in stores for bucket in topology.buckets()):
        raise ConfigError(
            [
                f"--sample-edges/--candidates: edge_paths {list(config.edge_paths)} hold no edges; "
                "give a config whose edge_paths are the (imported) test edges"
            ]
        )
