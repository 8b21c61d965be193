"""Speed benchmark, config C: the UMLS demo's ComplEx model on a 110k-entity synthetic KG.

The model fields are those of examples/umls/config.py (complex_diagonal operator, dot
comparator, dynamic relations, dimension 200, softmax loss, 100 uniform negatives on top of
PBG's default 50 batch negatives and batch size 1000, lr 0.1, 2 HOGWILD workers, no global
embeddings, no held-out evaluation, 1 partition) minus its ``regularization_coef``: PBG 1.0.0
has no N3 regularizer and rejects the key, so bench.speed adds it to our side only
(``-p regularization_coef=1e-3``) for a second run that measures N3's cost.

The graph is bench.lib.graphs.kg's default (110k entities, 22 relations, 257k train edges).
Loaded unchanged by ``torchbiggraph_train`` (PyPI 1.0.0) and by our ``pbg train``; paths are
relative to each tool's working directory (see bench.speed). Only keys that PBG 1.0.0 knows
belong here; ``seed`` goes through ``-p``.
"""


def get_torchbiggraph_config():
    return {
        "entity_path": "entities",
        "edge_paths": ["edges"],
        "checkpoint_path": "checkpoints",
        "entities": {"all": {"num_partitions": 1}},
        "relations": [{"name": "all_edges", "lhs": "all", "rhs": "all", "operator": "complex_diagonal"}],
        "dynamic_relations": True,
        "dimension": 200,
        "global_emb": False,
        "comparator": "dot",
        "loss_fn": "softmax",
        "num_uniform_negs": 100,
        "lr": 0.1,
        "num_epochs": 3,
        "workers": 2,
        "eval_fraction": 0.0,
        # See speed_a.py: PBG 1.0.0's epoch-0 sleep in worker 1 would count as compute time.
        "hogwild_delay": 0,
    }
