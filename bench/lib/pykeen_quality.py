"""PyKEEN 1.11's best cheap ComplEx recipe on UMLS, Kinships or Nations (run by bench.quality_recipe
in PyKEEN's own virtualenv).

Not imported by anything: ``PYKEEN_VENV/bin/python bench/lib/pykeen_quality.py SET DATA_DIR`` first
checks that PyKEEN's bundled splits of SET hold the same triples, line for line, as
``DATA_DIR/{train,valid,test}.txt`` (the repo's data/kg/SET) and refuses otherwise with one line
naming both files and the first differing line (exit 3; ``--check-only`` stops there). Then it
trains PyKEEN's ComplEx on its own dataset class with the recipe of issue 33:

- 100 complex dimensions (our ``dimension`` 200 floats), inverse triples;
- LCWA training with cross-entropy over all entities;
- N3: ``PowerSumRegularizer`` with p=3 (not ``LpRegularizer``), weight 1e-2, on entities and relations;
- entity and relation initializers ``normal_`` with std 1e-3 (PyKEEN's default is std 1);
- 100 epochs; optimizer, learning rate and batch size as given (defaults: the ones that reproduce
  the issue's figures, see docs/benchmarks.md);

and ranks the test split filtered against train, valid and test (PyKEEN's pipeline filters the
evaluated triples and train, plus valid with ``filter_validation_when_testing``, its default). It
prints one JSON line: versions, settings, MRR, Hits@1, Hits@10 (both sides, PyKEEN's realistic
rank: ties count at their mean position), training, evaluation and whole-script seconds, the
script's CPU seconds (every thread), and the sha256 of each checked file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

SPLITS = ("train", "valid", "test")
DATASETS = {"umls": "UMLS", "kinships": "Kinships", "nations": "Nations"}
# Settings that reproduce the figures (mean of 3 seeds; measured, see docs/benchmarks.md).
DEFAULTS = {"optimizer": "adagrad", "lr": 0.1, "batch_size": 256}


def read_triples(path: Path) -> list[tuple[str, ...]]:
    """The ``head<TAB>relation<TAB>tail`` rows of one split file, blank lines skipped."""
    rows = (line.rstrip("\r\n") for line in path.read_text(encoding="utf-8").splitlines())
    return [tuple(row.split("\t")) for row in rows if row.strip()]


def first_difference(ours: list[tuple[str, ...]], theirs: list[tuple[str, ...]]) -> str | None:
    """Where two triple lists first differ (1-based line), or None when they are equal."""
    for line, (a, b) in enumerate(zip(ours, theirs, strict=False), start=1):
        if a != b:
            return f"line {line}: {'/'.join(a)} vs {'/'.join(b)}"
    if len(ours) != len(theirs):
        return f"{len(ours)} triples vs {len(theirs)}"
    return None


def check_splits(name: str, data: Path) -> dict[str, str]:
    """sha256 of each bundled split once it is known to equal ours.

    Raises:
        SystemExit: (code 3) naming the first split file whose triples differ, or a missing file.
    """
    import pykeen.datasets as datasets

    module = getattr(datasets, name)
    prefix = name.upper()
    bundled = {
        "train": Path(getattr(module, f"{prefix}_TRAIN_PATH")),
        "valid": Path(getattr(module, f"{prefix}_VALIDATE_PATH")),
        "test": Path(getattr(module, f"{prefix}_TEST_PATH")),
    }
    digests = {}
    for split in SPLITS:
        ours, theirs = data / f"{split}.txt", bundled[split]
        for path in (ours, theirs):
            if not path.is_file():
                raise SystemExit(_refusal(f"{path} does not exist"))
        difference = first_difference(read_triples(ours), read_triples(theirs))
        if difference is not None:
            raise SystemExit(_refusal(f"{ours} differs from PyKEEN's {theirs} ({difference}); the sets must match"))
        digests[split] = hashlib.sha256(theirs.read_bytes()).hexdigest()
    return digests


def _refusal(message: str) -> int:
    print(f"pykeen_quality: {message}", file=sys.stderr)
    return 3


def train_and_rank(args: argparse.Namespace) -> dict[str, object]:
    """Run PyKEEN's pipeline with the recipe; the metrics and seconds it reports."""
    import functools

    import torch
    from pykeen.pipeline import pipeline

    start = functools.partial(torch.nn.init.normal_, std=args.init_std)
    result = pipeline(
        dataset=DATASETS[args.set],
        dataset_kwargs={"create_inverse_triples": True},
        model="ComplEx",
        model_kwargs={
            "embedding_dim": args.dim,
            "entity_initializer": start,
            "relation_initializer": start,
            "regularizer": "powersum",
            "regularizer_kwargs": {"p": 3.0, "weight": args.reg_weight},
        },
        training_loop="lcwa",
        loss="crossentropy",
        optimizer=args.optimizer,
        optimizer_kwargs={"lr": args.lr},
        training_kwargs={"num_epochs": args.epochs, "batch_size": args.batch_size, "use_tqdm": False},
        evaluation_kwargs={"use_tqdm": False, "batch_size": args.eval_batch_size},
        random_seed=args.seed,
        device="cpu",
    )
    metrics = result.metric_results
    return {
        "mrr": float(metrics.get_metric("both.realistic.inverse_harmonic_mean_rank")),
        "hits_at_1": float(metrics.get_metric("both.realistic.hits_at_1")),
        "hits_at_10": float(metrics.get_metric("both.realistic.hits_at_10")),
        "train_s": float(result.train_seconds),
        "eval_s": float(result.evaluate_seconds),
        "final_loss": float(result.losses[-1]) if result.losses else None,
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="pykeen_quality.py", description=__doc__.split("\n")[0])
    parser.add_argument("set", choices=sorted(DATASETS))
    parser.add_argument("data", type=Path, help="the repo's data/kg/<set> directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-only", action="store_true", help="compare the splits and stop")
    parser.add_argument("--optimizer", default=DEFAULTS["optimizer"], help="a PyKEEN optimizer name")
    parser.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--dim", type=int, default=100, help="complex dimensions")
    parser.add_argument("--reg-weight", type=float, default=1e-2, help="N3 (PowerSumRegularizer p=3) weight")
    parser.add_argument("--init-std", type=float, default=1e-3)
    parser.add_argument("--eval-batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Check the splits, then (unless --check-only) train, rank and print the JSON line."""
    started = time.perf_counter()
    args = parse_args(argv)
    digests = check_splits(DATASETS[args.set].lower(), args.data)
    record: dict[str, object] = {"set": args.set, "seed": args.seed, "splits_sha256": digests}
    if not args.check_only:
        import pykeen
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)

        settings = {k: getattr(args, k) for k in ("optimizer", "lr", "batch_size", "epochs", "dim")}
        settings.update(reg_weight=args.reg_weight, init_std=args.init_std, threads=torch.get_num_threads())
        record.update(pykeen=pykeen.get_version(), torch=torch.__version__, settings=settings)
        record.update(train_and_rank(args))
    record["total_s"] = time.perf_counter() - started
    record["cpu_s"] = time.process_time()  # every thread of this process: comparable on a loaded machine
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
