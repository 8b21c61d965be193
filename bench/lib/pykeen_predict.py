"""PyKEEN 1.11's ``predict_target`` on UMLS: its time per query (run by bench.predict in PyKEEN's own virtualenv).

Not imported by anything: ``PYKEEN_VENV/bin/python bench/lib/pykeen_predict.py DATA_DIR QUERIES``
loads ``DATA_DIR/{train,test}.txt`` (``head<TAB>relation<TAB>tail``) as PyKEEN triples
factories, trains a quick ComplEx (``--epochs``, ``--dim``; the question is time per query,
not quality), then asks ``predict_target`` for the tails of the first ``QUERIES`` test rows'
``(head, relation)``, one call per query as a user would, and prints one JSON line: the
version, training seconds, and the per-query seconds of every call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    """Train, time the queries, print the JSON line."""
    parser = argparse.ArgumentParser(prog="pykeen_predict.py", description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("queries", type=int)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args(argv)

    import pykeen
    import torch
    from pykeen.pipeline import pipeline
    from pykeen.predict import predict_target
    from pykeen.triples import TriplesFactory

    torch.manual_seed(0)
    train = TriplesFactory.from_path(args.data / "train.txt")
    test = TriplesFactory.from_path(
        args.data / "test.txt", entity_to_id=train.entity_to_id, relation_to_id=train.relation_to_id
    )
    started = time.perf_counter()
    result = pipeline(
        training=train,
        testing=test,
        model="ComplEx",
        model_kwargs={"embedding_dim": args.dim},
        training_kwargs={"num_epochs": args.epochs, "use_tqdm": False},
        evaluator_kwargs={"batch_size": 256},
        random_seed=0,
        device="cpu",
    )
    train_s = time.perf_counter() - started
    rows = [line.split("\t") for line in (args.data / "test.txt").read_text().splitlines() if line.strip()]
    seconds = []
    first: list[str] = []
    for head, relation, _ in rows[: args.queries]:
        started = time.perf_counter()
        pack = predict_target(model=result.model, head=head, relation=relation, triples_factory=train)
        top = pack.df.head(args.k)
        seconds.append(time.perf_counter() - started)
        if not first:
            first = [str(name) for name in top["tail_label"]]
    print(json.dumps({"pykeen": pykeen.get_version(), "train_s": train_s, "query_s": seconds, "first_top": first}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
