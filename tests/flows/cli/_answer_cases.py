"""Every bad input of ``pbg predict`` and ``pbg score`` on the UMLS test model, with what the command must say.

:func:`bad_cases` writes the bad query files into a work directory and gives, per case of the
issue's "Bad input" list that reaches these commands, the command line, its exit status (1; 2 for
options refused before anything is loaded) and the start of its error line. The in-process
tests (test_answers.py) and the real-command tests (test_cli_predict.py) both run them.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from _trained_models import TrainedModel

BAD_QUERIES = "steroid\tinteracts_with\nclinical_atribute\tisa\nlipid\taffects\nmystery\tisa\n"


def bad_cases(model: TrainedModel, work: Path) -> dict[str, tuple[list[object], int, str]]:
    """Name -> (argv, exit status, the start of the error line) of every refusal on the UMLS model.

    Long because it is one table of the 25 cases, each read whole where it stands.
    """
    (work / "bad.tsv").write_text(BAD_QUERIES)
    (work / "bad_relation.tsv").write_text("steroid\tinteracts_with\nlipid\ttreat\n")
    (work / "empty.tsv").write_text("\n\n")
    (work / "blank_lines.tsv").write_text("\n\nsteroid\tisa\n\nclinical_atribute\tisa\n")
    (work / "short.tsv").write_text("\n\nsteroid\tisa\n\nlipid\n")
    whole = gzip.compress("".join(f"{head}\tisa\n" for head, _, _ in model.test_edges).encode())
    (work / "cut.tsv.gz").write_bytes(whole[: len(whole) // 2])
    (work / "exists.tsv").write_text("keep me\n")
    config, ckpt = model.config, model.checkpoint
    one = [config, "--head", "antibiotic", "--relation", "treats"]
    query = [config, "--queries", work / "bad.tsv", "-l", 0, "--rel-col", 1]
    return {
        "unknown entity": (
            ["predict", *query],
            1,
            f"{work}/bad.tsv: line 2: unknown head 'clinical_atribute' of type 'all' (closest: 'clinical_attribute'",
        ),
        "unknown relation": (
            ["predict", config, "--queries", work / "bad_relation.tsv", "-l", 0, "--rel-col", 1],
            1,
            f"{work}/bad_relation.tsv: line 2: unknown relation 'treat' (closest: 'treats'",
        ),
        "k 0": (
            ["predict", *one, "-k", 0],
            2,
            "pbg predict: error: argument -k: '0' is not allowed; give a whole number >= 1",
        ),
        "k above the count": (
            ["predict", *one, "-k", 136],
            1,
            "k=136: entity type 'all' has 135 entities; give 1..135",
        ),
        "absent version": (
            ["predict", *one, "--version", 9],
            1,
            f"{ckpt}: no checkpoint version 9 to load; versions present: 5 (latest committed: 5)",
        ),
        "shapes differ": (
            ["predict", *one, "-p", "dimension=32"],
            1,
            f"loaded checkpoint {ckpt} version 5 was trained with dimension 16 (this config: 32)",
        ),
        "output exists": (
            ["predict", *one, "--output", work / "exists.tsv"],
            1,
            f"{work}/exists.tsv: refusing to overwrite prediction output(s) {work}/exists.tsv; give --force",
        ),
        "output is an input": (
            ["predict", *query, "--output", work / "bad.tsv"],
            1,
            f"{work}/bad.tsv: --output names {work}/bad.tsv, the query file {work}/bad.tsv this prediction reads",
        ),
        "bad column": (
            ["predict", *query, "-r", 7],
            1,
            f"{work}/bad.tsv: line 1: expected at least 8 columns (-l 0, -r 7, --rel-col 1, 0-based) but found 2",
        ),
        "truncated file": (
            ["predict", config, "--queries", work / "cut.tsv.gz", "-l", 0, "--rel-col", 1],
            1,
            f"{work}/cut.tsv.gz: truncated or corrupt compressed file",
        ),
        "no rows": (
            ["predict", config, "--queries", work / "empty.tsv", "-l", 0, "--rel-col", 1],
            1,
            f"{work}/empty.tsv: no queries: the file has no line, or blank ones only",
        ),
        "blank lines, a bad name": (  # lines as an editor numbers them, blank ones counted
            ["predict", config, "--queries", work / "blank_lines.tsv", "-l", 0, "--rel-col", 1],
            1,
            f"{work}/blank_lines.tsv: line 5: unknown head 'clinical_atribute'",
        ),
        "blank lines, a short line": (
            ["predict", config, "--queries", work / "short.tsv", "-l", 0, "--rel-col", 1],
            1,
            f"{work}/short.tsv: line 5: expected at least 2 columns (-l 0, --rel-col 1, 0-based) but found 1",
        ),
        "no edges to score": (
            ["score", config, work / "empty.tsv", "-l", 0, "-r", 2, "--rel-col", 1],
            1,
            f"{work}/empty.tsv: no edges to score: the file has no line, or blank ones only",
        ),
        "an output compressed as is not written": (
            ["predict", *one, "--output", work / "out.tsv.zst"],
            1,
            f"{work}/out.tsv.zst: .zst is not a compression answers are written in; give Parquet (.parquet, .pq), "
            "CSV (.csv) or TSV (any other name), text compressed by .gz or .bz2 after its suffix",
        ),
        "a compressed Parquet output": (
            ["score", config, work / "bad.tsv", "-l", 0, "-r", 0, "--rel-col", 1, "--output", work / "o.parquet.gz"],
            1,
            f"{work}/o.parquet.gz: a Parquet file compresses its own columns: name it .parquet or .pq",
        ),
        "an output in /proc": (
            ["predict", *one, "--output", "/proc/answers.tsv"],
            1,
            "/proc/answers.tsv: the directory /proc is not writable: its filesystem has no size (as /proc, /sys)",
        ),
        "no relation (dynamic)": (
            ["predict", config, "--head", "antibiotic"],
            1,
            "the model has dynamic relations, so there is no default one: give --relation NAME; its relations: isa,",
        ),
        "head and tail": (["predict", *one, "--tail", "lipid"], 2, "argument --tail: not allowed with argument --head"),
        "no query": (["predict", config], 2, "one of the arguments --head --tail --queries is required"),
        "json of a file": (["predict", *query, "--json"], 2, "--json prints a single query's answers"),
        "filter path alone": (["predict", *one, "--filter-path", "x"], 2, "--filter-path is given without --filtered"),
        "head column missing": (
            ["predict", config, "--queries", work / "bad.tsv", "--rel-col", 1],
            2,
            "--queries ranks tails (--target tail): give -l/--lhs-col, the column of each query's head",
        ),
        "score without -r": (
            ["score", config, work / "bad.tsv", "-l", 0],
            2,
            "the following arguments are required: -r/--rhs-col",
        ),
        "score of an unknown tail": (
            ["score", config, work / "bad.tsv", "-l", 0, "--rel-col", 1, "-r", 0],
            1,
            f"{work}/bad.tsv: line 2: unknown head 'clinical_atribute'",
        ),
    }


BAD_CASES = [  # the keys of bad_cases, for parametrize
    "unknown entity",
    "unknown relation",
    "k 0",
    "k above the count",
    "absent version",
    "shapes differ",
    "output exists",
    "output is an input",
    "bad column",
    "truncated file",
    "no rows",
    "blank lines, a bad name",
    "blank lines, a short line",
    "no edges to score",
    "an output compressed as is not written",
    "a compressed Parquet output",
    "an output in /proc",
    "no relation (dynamic)",
    "head and tail",
    "no query",
    "json of a file",
    "filter path alone",
    "head column missing",
    "score without -r",
    "score of an unknown tail",
]


def expected_line(argv: list[object], expected: str) -> str:
    """The whole start of the error line: ``pbg COMMAND: error: ...``."""
    return expected if expected.startswith("pbg ") else f"pbg {argv[0]}: error: {expected}"


__all__ = ["BAD_CASES", "bad_cases", "expected_line"]
