"""Speed benchmark, config B: ComplEx (complex_diagonal) with dynamic relations, FB15k-like.

Shaped like PBG's ``fb15k_config`` (dimension 400, softmax, 1000 uniform negatives, lr 0.1) minus
its N3 regularizer, which PBG 1.0.0 does not have. Loaded unchanged by ``torchbiggraph_train``
(PyPI 1.0.0) and by our ``pbg train``; paths are relative to each tool's working directory (see
bench.speed). Only keys that PBG 1.0.0 knows belong here; ``seed`` goes through ``-p``.
"""


def get_torchbiggraph_config():
    return {
        "entity_path": "entities",
        "edge_paths": ["edges"],
        "checkpoint_path": "checkpoints",
        "entities": {"all": {"num_partitions": 1}},
        "relations": [{"name": "all_edges", "lhs": "all", "rhs": "all", "operator": "complex_diagonal"}],
        "dynamic_relations": True,
        "dimension": 400,
        "global_emb": False,
        "comparator": "dot",
        "loss_fn": "softmax",
        "lr": 0.1,
        "num_epochs": 1,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 1000,
        "workers": 2,
        "eval_fraction": 0.0,
        # See speed_a.py: PBG 1.0.0's epoch-0 sleep in worker 1 would count as compute time.
        "hogwild_delay": 0,
    }
