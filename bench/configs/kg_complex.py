"""Quality benchmark config: ComplEx-N3 on the small knowledge graphs of data/kg (README setup).

complex_diagonal operator, dot comparator, dynamic relations, dimension 200, softmax loss,
100 uniform negatives, lr 0.1, N3 coefficient 1e-3, 50 epochs, 2 HOGWILD workers, no global
embeddings, no held-out evaluation during training, 1 partition. Paths are relative:
bench.quality runs every command in bench/work/quality/<set>/, and overrides
``edge_paths`` (train for training, test for evaluation) and ``checkpoint_path`` (one per seed)
with ``-p``. ``seed`` is pbg-flow-only and is passed with ``-p`` too.
"""


def get_torchbiggraph_config():
    return {
        "entity_path": "entities",
        # The importer's outputs, in the order of its inputs: train.txt, valid.txt, test.txt.
        "edge_paths": ["edges/train", "edges/valid", "edges/test"],
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
        "regularization_coef": 1e-3,
        "num_epochs": 50,
        "workers": 2,
        "eval_fraction": 0.0,
    }
