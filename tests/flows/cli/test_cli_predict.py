"""``pbg predict`` and ``pbg score`` through the real ``pbg`` command, a subprocess each (tests/flows/_cli.py).

On the trained UMLS test model (tests/flows/cli/_trained_models.py): ``--json`` is the Model's
answer, and no Prefect module is imported on the way; ``--output`` writes TSV or Parquet, refuses
an existing file (byte-identical disk) and replaces it with ``--force``; a query file with its
answers, ``--filtered``, gives answer ranks whose metrics are ``pbg eval --filtered``'s; a query
file on S3 (the moto server) answers as the same file on local disk. A few bad inputs run here by
default, each one line with a byte-identical disk; every one of them, a name of the other entity
type (on the two-type model), a Ctrl-C while the output is written and the real ``pbg eval
--filtered`` command run with ``PBG_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _answer_cases import BAD_CASES, bad_cases, expected_line
from _cli import PBG, cli_environment, run_pbg
from _trained_models import TrainedModel, eval_means, rank_means
from disk_state import changes, tree_state

from bench.lib.s3_server import S3Server
from storage.trained import Model

DEFAULT_BAD_CASES = ["unknown entity", "k 0"]  # the others: in this process by default (test_answers.py)


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


def test_json_is_the_models_answer_and_no_prefect_module_is_imported(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path
) -> None:
    argv = ("predict", str(umls_model.config), "--tail", "disease_or_syndrome", "--relation", "treats", "--json")
    # Python's own record of every module the process imports, on stderr.
    done = ok(run_pbg({**cli_env, "PYTHONPROFILEIMPORTTIME": "1"}, tmp_path, *argv))
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"torch", "storage.trained", "flows.cli.answers"} <= imported
    assert {name for name in imported if name.split(".")[0] in ("prefect", "dask", "distributed")} == set()
    got = json.loads(done.stdout)
    answers = Model.load(str(umls_model.config)).predict(tail="disease_or_syndrome", relation="treats")
    assert (got["head"], got["relation"], got["tail"], got["target"], got["version"]) == (
        None,
        "treats",
        "disease_or_syndrome",
        "head",
        5,
    )
    assert got["answers"] == [{"rank": a.rank, "entity": a.entity, "score": a.score} for a in answers]
    assert [a["rank"] for a in got["answers"]] == list(range(1, 11))


def test_outputs_are_tsv_or_parquet_and_replaced_with_force_only(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path
) -> None:
    queries = ("--queries", str(umls_model.test_tsv), "-l", "0", "--rel-col", "1", "-k", "3")
    heads, relations, _ = (list(column) for column in zip(*umls_model.test_edges, strict=True))
    expected = Model.load(str(umls_model.config)).predict(heads=heads, relations=relations, k=3)
    ok(run_pbg(cli_env, tmp_path, "predict", str(umls_model.config), *queries, "--output", "top.tsv"))
    lines = (tmp_path / "top.tsv").read_text().splitlines()
    assert lines[0] == "query\thead\trelation\ttail\trank\tscore" and len(lines) == 1 + 3 * len(heads)
    assert [line.split("\t")[:5] for line in lines[1:]] == [
        [str(q), h, r, t, str(k)]
        for q, h, r, t, k in zip(*(expected.column(n).to_pylist() for n in expected.column_names[:5]), strict=True)
    ]
    parquet = ("--output", "top.parquet")
    ok(run_pbg(cli_env, tmp_path, "predict", str(umls_model.config), *queries, *parquet))
    assert pq.read_table(tmp_path / "top.parquet").equals(expected)
    before = tree_state(tmp_path)
    again = run_pbg(cli_env, tmp_path, "predict", str(umls_model.config), *queries, "-k", "2", *parquet)
    assert again.returncode == 1 and again.stderr.splitlines() == [
        "pbg predict: error: top.parquet: refusing to overwrite prediction output(s) top.parquet; give --force to "
        "replace it"
    ]
    assert changes(before, tree_state(tmp_path)) == []
    ok(run_pbg(cli_env, tmp_path, "predict", str(umls_model.config), *queries, "-k", "2", *parquet, "--force"))
    replaced = Model.load(str(umls_model.config)).predict(heads=heads, relations=relations, k=2)
    assert pq.read_table(tmp_path / "top.parquet").equals(replaced)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["top.parquet", "top.tsv"]


def predicted_ranks(
    cli_env: dict[str, str], model: TrainedModel, work: Path, queries: str, *options: str, targets: str = "tail head"
) -> dict[str, list[int]]:
    """Each query's answer rank among the tails and among the heads (``targets``), by ``pbg predict --queries``."""
    ranks = {}
    for target in targets.split():
        out = f"{target}s.parquet"
        columns = ("-l", "0", "--rel-col", "1", "-r", "2", "--target", target, "-k", "1", "--output", out)
        ok(run_pbg(cli_env, work, "predict", str(model.config), "--queries", queries, *columns, *options))
        ranks[target] = pq.read_table(work / out).column("answer_rank").to_pylist()
    return ranks


def test_filtered_tail_ranks_give_pbg_evals_filtered_metrics(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path
) -> None:
    # Both sides, raw and filtered, in this process: tests/flows/cli/test_answers.py. Here the
    # tails, against evaluation of the tail side only (the heads' negatives disabled).
    ranks = predicted_ranks(cli_env, umls_model, tmp_path, str(umls_model.test_tsv), "--filtered", targets="tail")
    got = rank_means(ranks["tail"], ranks["tail"])
    paths = umls_model.raw["edge_paths"]
    expected = eval_means({**umls_model.raw, "disable_lhs_negs": True}, paths[1], paths)
    assert got["count"] == expected["count"] == len(umls_model.test_edges)
    assert got["pos_rank"] == pytest.approx(expected["pos_rank"], abs=1e-9)
    assert abs(got["mrr"] - expected["mrr"]) <= 1e-6


def test_a_query_file_on_s3(
    cli_env: dict[str, str], s3_server: S3Server, s3_bucket: str, umls_model: TrainedModel, tmp_path: Path
) -> None:
    import fsspec

    url = f"s3://{s3_bucket}/queries/test.tsv"
    with fsspec.open(url, "wb") as remote:
        remote.write(umls_model.test_tsv.read_bytes())
    env = cli_environment(Path(cli_env["PREFECT_HOME"]))  # with the server's AWS_* variables
    remote_ranks = predicted_ranks(env, umls_model, tmp_path, url, targets="tail")
    heads, relations, tails = (list(column) for column in zip(*umls_model.test_edges, strict=True))
    table = Model.load(str(umls_model.config)).predict(heads=heads, relations=relations, answers=tails, k=1)
    assert remote_ranks["tail"] == table.column("answer_rank").to_pylist()


def check_bad_case(cli_env: dict[str, str], model: TrainedModel, work: Path, case: str) -> None:
    argv, code, expected = bad_cases(model, work)[case]
    before = tree_state(model.root), tree_state(work)
    done = run_pbg(cli_env, work, *map(str, argv))
    assert done.returncode == code and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert code == 2 or len(lines) == 1, lines
    assert lines[-1].startswith(expected_line(argv, expected)), lines[-1]
    assert (changes(before[0], tree_state(model.root)), changes(before[1], tree_state(work))) == ([], [])


@pytest.mark.parametrize("case", DEFAULT_BAD_CASES)
def test_bad_input_is_one_line_and_changes_nothing(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path, case: str
) -> None:
    check_bad_case(cli_env, umls_model, tmp_path, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [case for case in BAD_CASES if case not in DEFAULT_BAD_CASES])
def test_every_other_bad_input_too(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path, case: str
) -> None:
    check_bad_case(cli_env, umls_model, tmp_path, case)


@pytest.mark.slow
def test_a_name_of_the_other_entity_type_is_one_line_too(
    cli_env: dict[str, str], drug_model: TrainedModel, tmp_path: Path
) -> None:
    before = tree_state(drug_model.root)
    argv = ("predict", str(drug_model.config), "--head", "diabetes", "--relation", "treats", "--output", "out.tsv")
    done = run_pbg(cli_env, tmp_path, *argv)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "pbg predict: error: 'diabetes' is of type 'disease'; relation 'treats' takes a 'drug' as head"
    ]
    assert changes(before, tree_state(drug_model.root)) == [] and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_while_the_output_is_written_leaves_nothing(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path
) -> None:
    model = Model.load(str(umls_model.config))
    names = [name for part, _ in model.embeddings("all") for name in part]
    rows = [f"{head}\t{relation}\n" for head in names for relation in model.relations]
    (tmp_path / "all.tsv").write_text("".join(rows * 3))  # 18,630 queries x 135: ~2.5M rows to write
    before = tree_state(tmp_path)
    argv = [PBG, "predict", str(umls_model.config), "--queries", "all.tsv", "-l", "0", "--rel-col", "1", "-k", "135"]
    process = subprocess.Popen(
        [*argv, "--output", "all.tsv.gz", "-v"], cwd=tmp_path, env=cli_env, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("pbg predict: ranked"):
            break  # the output is being written now
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130, rest
    assert (
        rest.strip().splitlines()[-1].startswith("pbg predict: interrupted by SIGINT; run it again with: pbg predict")
    )
    assert changes(before, tree_state(tmp_path)) == []


@pytest.mark.slow
def test_pbg_evals_own_command_gives_the_same_filtered_mrr(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path
) -> None:
    paths: list[Any] = umls_model.raw["edge_paths"]
    filters = [word for path in paths for word in ("--filter-path", path)]
    overrides = ["-p", f"edge_paths={paths[1]}", "-p", "relations.0.all_negs=true", "-p", "num_uniform_negs=0"]
    done = ok(run_pbg(cli_env, tmp_path, "eval", str(umls_model.config), *overrides, "--filtered", *filters, "--json"))
    metrics = json.loads(done.stdout.splitlines()[-1])
    ranks = predicted_ranks(cli_env, umls_model, tmp_path, str(umls_model.test_tsv), "--filtered")
    got = rank_means(ranks["tail"], ranks["head"])
    assert abs(got["mrr"] - metrics["mrr"]) <= 1e-6 and got["count"] == metrics["count"]
