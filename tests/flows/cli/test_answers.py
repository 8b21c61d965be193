"""``pbg predict`` and ``pbg score`` as command functions in this process (flows.cli.answers).

What they print and write is the Model's answer (storage.trained): the readable table, the JSON of
a single query, the TSV/CSV/Parquet files and the scores; a query file's answer ranks give
``pbg eval``'s metrics; and every bad input of the issue is one line naming it (exit status 1, or 2
for options argparse or the command refuses before loading anything), with the files on disk
byte-identical. The models are tests/flows/cli/_trained_models.py's, trained once per session.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from _answer_cases import BAD_CASES, bad_cases, expected_line
from _trained_models import DISEASES, DRUGS, TrainedModel, eval_means, rank_means
from disk_state import changes, tree_state

from flows.cli.main import COMMANDS
from flows.cli.parser import build_parser
from flows.cli.user_errors import report
from pbg_core.config import parse_config
from pbg_core.errors import PbgError
from storage.checkpoint_names import DIGEST_ATTR, read_digest
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.trained import Model


@dataclass(frozen=True)
class Done:
    """A command's exit status, stdout and stderr."""

    code: int
    out: str
    err: str

    def error(self) -> str:
        """The one line of a failure (stderr holds nothing else, and no traceback)."""
        lines = self.err.strip().splitlines()
        assert self.code == 1 and len(lines) == 1 and "Traceback" not in self.err, self.err
        return lines[0]


@pytest.fixture
def pbg(capsys: pytest.CaptureFixture[str]) -> Callable[..., Done]:
    """``pbg(*argv)``: parse and run a command as ``pbg`` does, an error reported in its line."""

    def run(*argv: object) -> Done:
        try:
            args = build_parser().parse_args([str(arg) for arg in argv])
        except SystemExit as stop:
            code = int(stop.code or 0)
        else:
            try:
                code = COMMANDS[args.command](args)
            except PbgError as exc:
                code = report(args.command, exc, debug=False)
        captured = capsys.readouterr()
        return Done(code, captured.out, captured.err)

    return run


def text(values: pa.Array | pa.ChunkedArray) -> list[str]:
    """Values as pyarrow writes them (a float32 in its shortest exact text)."""
    return pa.compute.cast(values, pa.string()).to_pylist()


def test_a_single_query_prints_the_models_top_list(umls_model: TrainedModel, pbg: Callable[..., Done]) -> None:
    done = pbg("predict", umls_model.config, "--tail", "disease_or_syndrome", "--relation", "treats", "-k", 5)
    expected = Model.load(str(umls_model.config)).predict(tails=["disease_or_syndrome"], relations="treats", k=5)
    lines = done.out.splitlines()
    assert done.code == 0 and done.err == ""
    assert lines[0] == (f"top 5 heads of (?, treats, disease_or_syndrome) by version 5 of {umls_model.checkpoint}")
    assert lines[1].split() == ["rank", "head", "score"]
    assert [line.split() for line in lines[2:]] == [
        list(row) for row in zip(text(expected["rank"]), text(expected["head"]), text(expected["score"]), strict=True)
    ]


def test_a_filtered_query_left_with_fewer_than_k_says_how_many_it_shows(
    drug_model: TrainedModel, pbg: Callable[..., Done]
) -> None:
    k = len(DISEASES)  # every disease: the known ones are left out
    answers = Model.load(str(drug_model.config)).predict(head="aspirin", relation="treats", k=k, filtered=True)
    assert 0 < len(answers) < k
    done = pbg("predict", drug_model.config, "--head", "aspirin", "--relation", "treats", "-k", k, "--filtered")
    lines = done.out.splitlines()
    assert done.code == 0 and lines[0] == (
        f"top {len(answers)} tails ({k} asked; the rest are known edges) of (aspirin, treats, ?) by version 5 of "
        f"{drug_model.checkpoint}, known edges left out"
    )
    assert [line.split()[1] for line in lines[2:]] == [a.entity for a in answers]


def test_the_commands_help_reads_the_same_where_the_options_are_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    def help_of(command: str) -> str:
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        return " ".join(capsys.readouterr().out.split())

    helps = {command: help_of(command) for command in ("predict", "score", "similar")}
    delimiter = "column separator (default: tab if the file's first line has one, else a space; ',' for .csv)"
    assert all(delimiter in text for text in helps.values())
    assert "or not at all, a missing directory created; without it, TSV on stdout" in helps["score"]
    assert "default: stdout" not in helps["score"]


def test_json_is_a_single_querys_answers(umls_model: TrainedModel, pbg: Callable[..., Done]) -> None:
    done = pbg("predict", umls_model.config, "--head", "antibiotic", "--relation", "treats", "-k", 3, "--json")
    answers = Model.load(str(umls_model.config)).predict(head="antibiotic", relation="treats", k=3)
    assert done.code == 0 and len(done.out.splitlines()) == 1
    assert json.loads(done.out) == {
        "checkpoint": str(umls_model.checkpoint),
        "version": 5,
        "head": "antibiotic",
        "relation": "treats",
        "tail": None,
        "target": "tail",
        "k": 3,
        "filtered": False,
        "answers": [{"rank": a.rank, "entity": a.entity, "score": a.score} for a in answers],
    }


@pytest.mark.parametrize("name", ["top.tsv", "top.csv", "top.parquet", "top.tsv.gz"])
def test_an_output_file_holds_the_models_table(
    umls_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path, name: str
) -> None:
    out = tmp_path / name
    done = pbg(
        "predict",
        umls_model.config,
        "--queries",
        umls_model.test_tsv,
        "-l",
        0,
        "--rel-col",
        1,
        "-k",
        4,
        "--output",
        out,
    )
    heads, relations, _ = zip(*umls_model.test_edges, strict=True)
    expected = Model.load(str(umls_model.config)).predict(heads=list(heads), relations=list(relations), k=4)
    assert done.code == 0 and done.out.startswith(f"predicted {len(heads)} queries ({len(heads) * 4} rows)")
    if name.endswith(".parquet"):
        assert pq.read_table(out).equals(expected)
        return
    data = gzip.decompress(out.read_bytes()) if name.endswith(".gz") else out.read_bytes()
    delimiter = "," if name.endswith(".csv") else "\t"
    options = pa_csv.ConvertOptions(column_types=expected.schema)
    read = pa_csv.read_csv(
        pa.BufferReader(data), parse_options=pa_csv.ParseOptions(delimiter=delimiter), convert_options=options
    )
    assert read.equals(expected)
    assert sorted(path.name for path in tmp_path.iterdir()) == [name]  # no staging file left


def test_an_existing_output_is_replaced_with_force_only(
    umls_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path
) -> None:
    out = tmp_path / "top.tsv"
    out.write_text("an older result\n")
    argv = ("predict", umls_model.config, "--head", "antibiotic", "--relation", "treats", "--output", out)
    before = tree_state(tmp_path)
    assert pbg(*argv).error() == (
        f"pbg predict: error: {out}: refusing to overwrite prediction output(s) {out}; give --force to replace it"
    )
    assert changes(before, tree_state(tmp_path)) == []
    assert pbg(*argv, "--force").code == 0
    assert out.read_text().splitlines()[0] == "query\thead\trelation\ttail\trank\tscore"
    assert len(out.read_text().splitlines()) == 11


@pytest.mark.parametrize("filtered", [False, True], ids=["raw", "filtered"])
def test_a_query_files_answer_ranks_give_pbg_evals_metrics(
    umls_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path, filtered: bool
) -> None:
    ranks = {}
    for target in ("tail", "head"):
        out = tmp_path / f"{target}s.parquet"
        columns = ("-l", 0, "--rel-col", 1, "-r", 2, "--target", target, "-k", 1, "--output", out)
        done = pbg("predict", umls_model.config, "--queries", umls_model.test_tsv, *columns, *["--filtered"] * filtered)
        assert done.code == 0, done.err
        table = pq.read_table(out)
        assert table.column("query").to_pylist() == list(range(len(umls_model.test_edges)))
        # One partition: the rank among every entity is the rank within the answer's partition.
        assert table.column("answer_rank").equals(table.column("answer_partition_rank"))
        ranks[target] = table.column("answer_rank").to_pylist()
    filters = umls_model.raw["edge_paths"] if filtered else None
    expected = eval_means(umls_model.raw, umls_model.raw["edge_paths"][1], filters)
    got = rank_means(ranks["tail"], ranks["head"])
    assert got["count"] == expected["count"] == len(umls_model.test_edges)
    assert got["pos_rank"] == pytest.approx(expected["pos_rank"], abs=1e-9)
    assert abs(got["mrr"] - expected["mrr"]) <= 1e-6
    assert (got["r1"], got["r10"]) == pytest.approx((expected["r1"], expected["r10"]), abs=1e-9)


def test_score_writes_each_rows_score_beside_it(
    umls_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path
) -> None:
    heads, relations, tails = (list(column) for column in zip(*umls_model.test_edges, strict=True))
    expected = Model.load(str(umls_model.config)).score(heads, relations, tails)
    done = pbg("score", umls_model.config, umls_model.test_tsv, "-l", 0, "--rel-col", 1, "-r", 2)
    lines = [line.split("\t") for line in done.out.splitlines()]
    assert done.code == 0 and lines[0] == ["head", "relation", "tail", "score", "reverse_score"]
    assert lines[1:] == [list(row) for row in zip(*(text(column) for column in expected.columns), strict=True)]
    out = tmp_path / "scores.parquet"
    assert (
        pbg("score", umls_model.config, umls_model.test_tsv, "-l", 0, "--rel-col", 1, "-r", 2, "--output", out).code
        == 0
    )
    assert pq.read_table(out).equals(expected)


def test_several_standard_relations_need_one_named_and_every_partition_is_ranked(
    drug_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path
) -> None:
    (tmp_path / "q.tsv").write_text("aspirin\tdiabetes\n")
    before = tree_state(drug_model.root)
    refused = "the model has 2 relations, so there is no default one: give {}; its relations: treats, interacts"
    line = pbg("predict", drug_model.config, "--tail", "diabetes").error()
    assert line == "pbg predict: error: " + refused.format("--relation NAME")
    line = pbg("score", drug_model.config, tmp_path / "q.tsv", "-l", 0, "-r", 1).error()
    assert line == "pbg score: error: " + refused.format("--relation NAME or --rel-col COL")
    assert changes(before, tree_state(drug_model.root)) == []
    argv = ("predict", drug_model.config, "--tail", "diabetes", "--relation", "treats", "-k", len(DRUGS), "--json")
    got = json.loads(pbg(*argv).out)
    answers = Model.load(str(drug_model.config)).predict(tail="diabetes", relation="treats", k=len(DRUGS))
    assert got["answers"] == [{"rank": a.rank, "entity": a.entity, "score": a.score} for a in answers]
    assert sorted(answer["entity"] for answer in got["answers"]) == sorted(DRUGS)  # both partitions ranked


def test_a_version_below_1_is_refused_by_the_option_parser(drug_model: TrainedModel, pbg: Callable[..., Done]) -> None:
    for version in ("0", "-1", "x"):
        done = pbg("predict", drug_model.config, "--tail", "diabetes", "--relation", "treats", "--version", version)
        assert done.code == 2 and done.out == ""
        line = f"pbg predict: error: argument --version: {version!r} is not allowed; give a whole number >= 1"
        assert done.err.strip().startswith(line) and done.err.count("\n") == 1, done.err


def test_an_override_changing_the_scores_is_refused(drug_model: TrainedModel, pbg: Callable[..., Done]) -> None:
    before = tree_state(drug_model.root)
    query = ("--head", "aspirin", "--relation", "treats")
    for override, named in (("comparator=cos", 'comparator "dot" (this config: "cos")'), ("bias=true", "bias false")):
        line = pbg("predict", drug_model.config, *query, "-p", override).error()
        assert line.startswith(f"pbg predict: error: loaded checkpoint {drug_model.checkpoint} version "), line
        assert named in line and "and cannot change; load it with the config it was trained with" in line
    assert pbg("predict", drug_model.config, *query, "-p", "lr=0.5", "-p", "num_epochs=1").code == 0
    assert changes(before, tree_state(drug_model.root)) == []


def test_a_partition_file_of_another_type_is_refused(
    drug_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path
) -> None:
    copy = tmp_path / "model"
    shutil.copytree(drug_model.checkpoint, copy)
    version = (copy / "checkpoint_version.txt").read_text().strip()
    drug = copy / f"embeddings_drug_1.v{version}.h5"
    digest = read_digest(str(drug))  # the drug partition's names record is kept: its rows are the disease's
    shutil.copyfile(copy / f"embeddings_disease_0.v{version}.h5", drug)
    with h5py.File(drug, "r+") as hf:
        hf.attrs[DIGEST_ATTR] = digest
    before = tree_state(tmp_path)
    for argv in (
        ("predict", copy, "--tail", "diabetes", "--relation", "treats"),
        ("similar", copy, "--entity", "aspirin"),
    ):
        line = pbg(*argv).error()
        assert line.startswith(f"pbg {argv[0]}: error: {copy}/embeddings_drug_1.v{version}.h5: stored embeddings have "
                               "shape ("), line  # fmt: skip
        assert "expected (" in line and "names of entity type 'drug' partition 1 (listed in " in line, line
    assert changes(before, tree_state(tmp_path)) == []


# -- bad input: one line naming it, the allowed values, nothing written ---------------------------------
@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_line_and_changes_nothing(
    umls_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path, case: str
) -> None:
    argv, code, expected = bad_cases(umls_model, tmp_path)[case]
    before = tree_state(umls_model.root), tree_state(tmp_path)
    done = pbg(*argv)
    assert done.code == code and done.out == "" and "Traceback" not in done.err, done.err
    line = done.err.strip().splitlines()[-1]
    if code == 1:
        assert len(done.err.strip().splitlines()) == 1
    assert line.startswith(expected_line(argv, expected)), line
    assert (changes(before[0], tree_state(umls_model.root)), changes(before[1], tree_state(tmp_path))) == ([], [])


def test_a_name_of_the_other_entity_type_is_named_as_such(drug_model: TrainedModel, pbg: Callable[..., Done]) -> None:
    before = tree_state(drug_model.root)
    done = pbg("predict", drug_model.config, "--head", "diabetes", "--relation", "treats")
    assert (
        done.error() == "pbg predict: error: 'diabetes' is of type 'disease'; relation 'treats' takes a 'drug' as head"
    )
    assert changes(before, tree_state(drug_model.root)) == []


def test_names_moved_since_training_are_refused_for_filtered_predictions_only(
    drug_model: TrainedModel, pbg: Callable[..., Done], tmp_path: Path
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(drug_model.root, root)
    raw = {
        **drug_model.raw,
        "entity_path": str(root / "data"),
        "edge_paths": [str(root / "data" / "train"), str(root / "data" / "test")],
        "checkpoint_path": str(root / "model"),
    }
    (root / "config.json").write_text(json.dumps(raw))
    inputs = [str(root / "train.tsv"), str(root / "test.tsv")]
    import_edges(parse_config(raw), inputs, ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, force=True), seed=5)
    argv = ("predict", root / "config.json", "--head", "aspirin", "--relation", "treats", "-k", 3)
    assert pbg(*argv).code == 0  # names in and out are the checkpoint's own
    before = tree_state(root)
    line = pbg(*argv, "--filtered").error()
    assert line.startswith(f"pbg predict: error: checkpoint_path {root / 'model'} version 5 was trained on other names")
    assert "a filtered prediction would rank each moved row as another entity's" in line
    assert changes(before, tree_state(root)) == []
