"""Speed benchmark, config A: one entity type, one relation, plain dot-product ranking model.

A PBG-format config (``get_torchbiggraph_config``) that both ``torchbiggraph_train`` (PyPI 1.0.0)
and our ``pbg train`` load unchanged. Paths are relative: bench.speed runs each tool in its own
working directory, so the one file serves both sides. Only keys that PBG 1.0.0 knows belong here
(its loader rejects unknown keys); pbg-flow-only keys such as ``seed`` go through ``-p``.
"""


def get_torchbiggraph_config():
    return {
        "entity_path": "entities",
        "edge_paths": ["edges"],
        "checkpoint_path": "checkpoints",
        "entities": {"node": {"num_partitions": 1}},
        # The generator names its single relation "r0"; a non-dynamic importer keeps only edges
        # whose relation name is in this list.
        "relations": [{"name": "r0", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": 100,
        "global_emb": False,
        "comparator": "dot",
        "loss_fn": "ranking",
        "num_epochs": 3,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "workers": 2,
        "eval_fraction": 0.0,
        # PBG 1.0.0 sleeps this long in HOGWILD worker 1 during epoch 0 (train.py passes the
        # worker index as "rank"), which would count as PBG compute time; 0 on both sides.
        "hogwild_delay": 0,
    }
