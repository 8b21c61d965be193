"""UMLS link prediction (ComplEx-N3), the setup of data/kg/README.md.

A PBG-format config: `torchbiggraph_train` reads it too. Paths are relative to
the repository root; `examples/umls/run_demo.sh` runs the whole demo.
"""


def get_torchbiggraph_config():
    return dict(
        entity_path="demo-out/umls/data",
        edge_paths=[
            "demo-out/umls/data/train_partitioned",
            "demo-out/umls/data/valid_partitioned",
            "demo-out/umls/data/test_partitioned",
        ],
        checkpoint_path="demo-out/umls/model",
        entities={"all": {"num_partitions": 1}},
        relations=[{"name": "all_edges", "lhs": "all", "rhs": "all", "operator": "complex_diagonal"}],
        dynamic_relations=True,
        dimension=200,
        global_emb=False,
        comparator="dot",
        num_epochs=50,
        num_uniform_negs=100,
        loss_fn="softmax",
        lr=0.1,
        regularization_coef=1e-3,
        # 5 % of each bucket's edges held out (PBG's default): the UI's tables and summary
        # show MRR and Hits@10 while training. `pbg eval` ranks every edge of its paths.
        eval_fraction=0.05,
        workers=2,
    )
