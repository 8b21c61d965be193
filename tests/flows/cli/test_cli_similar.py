"""``pbg similar`` through the real ``pbg`` command (a subprocess each), and its index line in this process.

On the trained UMLS test model (tests/flows/cli/_trained_models.py, one type ``all`` of 135
entities): ``--json`` and ``--output`` (TSV, Parquet) are ``Model.similar``'s answer, with no Prefect
module imported; a names file by column; an existing output refused (byte-identical disk) and
replaced with ``--force``; each bad input one line with its exit status, no traceback, nothing
written (two of them by default, every one with ``PBG_SLOW_TESTS=1``: each is a command's start-up). ``--approximate`` on a type above the exact-search limit (lowered here, in this process,
on a copy of the model) builds the index once, prints its kind, its search width and recall@10, and
stores it beside the version, where the next command finds it (IVF-Flat here: HNSW is not tried, as
which of two timed searches is faster is not a test's to decide; the kinds are tested in
tests/storage/trained/test_similarity_index.py).
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli_environment, run_pbg
from _trained_models import TrainedModel
from disk_state import changes, tree_state

from flows.cli.main import COMMANDS
from flows.cli.parser import build_parser
from flows.cli.user_errors import report
from pbg_core.errors import PbgError
from storage.trained import Model, model, similarity_index
from storage.trained.similarity import SimilarEntities
from storage.trained.similarity_index import FLAT_MAX_ROWS

NAMES = ["antibiotic", "lipid", "steroid"]


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


def test_json_and_outputs_are_the_models_answer(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path
) -> None:
    config = str(umls_model.config)
    done = ok(
        run_pbg({**cli_env, "PYTHONPROFILEIMPORTTIME": "1"}, tmp_path, "similar", config, "--entity", "lipid", "--json")
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "flows.cli.similar" in imported and not {n for n in imported if n.split(".")[0] in ("prefect", "faiss")}
    got = json.loads(done.stdout)
    answers = Model.load(config).similar("lipid")
    assert (got["entity"], got["entity_type"], got["version"], got["k"], got["search"]) == (
        "lipid",
        "all",
        5,
        10,
        "exact",
    )
    assert got["neighbours"] == [{"rank": a.rank, "entity": a.entity, "score": a.score} for a in answers]
    assert "lipid" not in [a.entity for a in answers]  # never its own neighbour
    (tmp_path / "names.tsv").write_text("".join(f"x\t{name}\n" for name in NAMES))
    names = ("--names", "names.tsv", "-l", "1", "-k", "4")
    ok(run_pbg(cli_env, tmp_path, "similar", config, *names, "--output", "near.tsv"))
    expected = Model.load(config).similar(NAMES, k=4)
    lines = (tmp_path / "near.tsv").read_text().splitlines()
    assert lines[0] == "query\tentity\tentity_type\trank\tneighbour\tscore" and len(lines) == 1 + 4 * len(NAMES)
    assert [line.split("\t")[:5] for line in lines[1:]] == [
        [str(q), e, t, str(r), n] for q, e, t, r, n, _ in zip(*(c.to_pylist() for c in expected.columns), strict=True)
    ]
    before = tree_state(tmp_path)
    again = run_pbg(cli_env, tmp_path, "similar", config, *names[:-1], "2", "--output", "near.tsv")
    assert again.returncode == 1 and again.stderr.splitlines() == [
        "pbg similar: error: near.tsv: refusing to overwrite similarity output(s) near.tsv; give --force to replace it"
    ]
    assert changes(before, tree_state(tmp_path)) == []
    ok(run_pbg(cli_env, tmp_path, "similar", config, *names[:-1], "2", "--output", "near.tsv", "--force"))
    replaced = Model.load(config).similar(NAMES, k=2)
    lines = (tmp_path / "near.tsv").read_text().splitlines()
    assert [line.split("\t")[4] for line in lines[1:]] == replaced.column("neighbour").to_pylist()


BAD = {  # argv after CONFIG -> (exit status, the error line)
    "unknown entity": (
        ["--entity", "lipid", "--entity", "steriod"],
        1,
        "pbg similar: error: unknown entity 'steriod' of type 'all' (closest: 'steroid')",
    ),
    "unknown in a file": (
        ["--names", "bad.tsv"],
        1,
        "pbg similar: error: bad.tsv: line 2: unknown entity 'steriod' of type 'all' (closest: 'steroid')",
    ),
    "k 0": (["--entity", "lipid", "-k", "0"], 2, "argument -k: '0' is not allowed; give a whole number >= 1"),
    "k above the count": (
        ["--entity", "lipid", "-k", "135"],
        1,
        "pbg similar: error: k=135: entity type 'all' has 135 entities, so at most 134 neighbours of one (an entity "
        "is not its own); give 1..134",
    ),
    "unknown type": (
        ["--entity", "lipid", "--entity-type", "drug"],
        1,
        "pbg similar: error: entity type 'drug' is not one of ['all']",
    ),
    "absent version": (["--entity", "lipid", "--version", "9"], 1, "pbg similar: error: "),
    "json of several": (["--entity", "lipid", "--entity", "steroid", "--json"], 2, "--json prints one entity's"),
    "column without a file": (["--entity", "lipid", "-l", "1"], 2, "-l/--lhs-col go(es) with --names FILE..."),
    "force without output": (["--entity", "lipid", "--force"], 2, "--force replaces --output FILE"),
    "entity and names": (["--entity", "lipid", "--names", "bad.tsv"], 2, "argument --names: not allowed with"),
}


DEFAULT_BAD = ["unknown in a file", "k 0"]  # each command loads torch and the model: the others are slow tests


def check_bad(cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path, case: str) -> None:
    (tmp_path / "bad.tsv").write_text("lipid\nsteriod\n")
    argv, code, expected = BAD[case]
    output = [] if case == "force without output" else ["--output", "out.tsv"]
    before = tree_state(umls_model.root), tree_state(tmp_path)
    done = run_pbg(cli_env, tmp_path, "similar", str(umls_model.config), *argv, *output)
    assert done.returncode == code and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert code == 2 or len(lines) == 1, lines
    assert expected in lines[-1] and lines[-1].startswith("pbg similar: error: "), lines[-1]
    assert (changes(before[0], tree_state(umls_model.root)), changes(before[1], tree_state(tmp_path))) == ([], [])


@pytest.mark.parametrize("case", DEFAULT_BAD)
def test_bad_input_is_one_line_and_writes_nothing(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path, case: str
) -> None:
    check_bad(cli_env, umls_model, tmp_path, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [case for case in BAD if case not in DEFAULT_BAD])
def test_every_other_bad_input_too(
    cli_env: dict[str, str], umls_model: TrainedModel, tmp_path: Path, case: str
) -> None:
    check_bad(cli_env, umls_model, tmp_path, case)


def test_the_help_names_the_size_above_which_an_index_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["similar", "--help"])
    assert f"search a type of more than {FLAT_MAX_ROWS:,} entities through" in " ".join(capsys.readouterr().out.split())


@pytest.fixture
def storage_logs_at_info() -> Iterator[None]:
    """The storage logger at INFO, as `pbg` sets it (flows/cli/main.py), through setLevel both ways:
    it also clears logging's cache of enabled levels, which a plain attribute left stale."""
    logger = logging.getLogger("storage")
    previous = logger.level
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(previous)


@pytest.mark.usefixtures("storage_logs_at_info")
def test_an_index_is_built_once_printed_and_stored_beside_its_version(
    umls_model: TrainedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "umls"
    shutil.copytree(umls_model.root, root)  # the session's model stays as it is
    config = root / "config.json"
    config.write_text(config.read_text().replace(str(umls_model.root), str(root)))
    # The exact-search limit (FLAT_MAX_ROWS) lowered to below UMLS's 135: the index is built.
    monkeypatch.setattr(model, "SimilarEntities", functools.partial(SimilarEntities, flat_max_rows=100))
    monkeypatch.setattr(similarity_index, "HNSW_BELOW_SPEEDUP", 0.0)  # IVF-Flat kept: it reaches the target

    def pbg(*argv: str) -> tuple[int, str, str]:
        args = build_parser().parse_args(["similar", str(config), *argv])
        try:
            code = COMMANDS["similar"](args)
        except PbgError as exc:
            code = report("similar", exc, debug=False)
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = pbg("--entity", "lipid", "--approximate", "--json")
    assert code == 0, err
    line = json.loads(out)["search"]
    assert line.startswith("IVF-Flat index of 135 rows of 'all' (v5, inner_product), nlist 3, nprobe ")
    progress = err.splitlines()
    assert ": recall@10 " in line and progress[-1] == f"pbg similar: {line}", err
    # The build says it has begun, and what it kept, while it runs (a 1M-entity build takes minutes).
    assert progress[0].startswith("pbg similar: similarity index of 'all': building it once for version 5 (135 "), err
    assert any(p.startswith("pbg similar: similarity index built in ") for p in progress[1:-1]), err
    assert [p.name for p in (root / "model").glob("similar_*")] == ["similar_all.v5.h5"]
    before = tree_state(root)
    code, out, err = pbg("--entity", "lipid", "-k", "5", "--approximate")
    assert code == 0 and err.splitlines()[-1] == f"pbg similar: {line}"  # the stored index, found again
    assert not any("building" in p for p in err.splitlines()), err
    assert out.splitlines()[0].endswith(f"by version 5 of {root / 'model'} (approximate)")
    assert changes(before, tree_state(root)) == []
    shown = [line.split() for line in out.splitlines()[2:]]  # under the heading and the header
    answers = Model.load(str(config)).similar("lipid", k=5, approximate=True)  # the stored index again
    assert [(int(r), n) for r, n, _ in shown] == [(a.rank, a.entity) for a in answers]


def test_approximate_on_a_type_searched_exactly_says_exact(
    umls_model: TrainedModel, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(
        ["similar", str(umls_model.config), "--entity", "lipid", "-k", "3", "--approximate"]
    )
    before = tree_state(umls_model.root)
    assert COMMANDS["similar"](args) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"pbg similar: entity type 'all' searched exactly: an index is built only for more than {FLAT_MAX_ROWS:,} entities"
    ]
    assert out.splitlines()[0] == (
        f"the 3 entities nearest to lipid (all) by version 5 of {umls_model.checkpoint} (exact)"
    )
    assert changes(before, tree_state(umls_model.root)) == []


def test_a_names_file_is_refused_in_its_own_terms(
    umls_model: TrainedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No names, a column by its option, a bad name on its physical line: each one line, nothing written."""
    (tmp_path / "empty.tsv").write_text("\n\n")
    (tmp_path / "names.tsv").write_text("\nlipid\n\nsteriod\n")
    cases = {
        ("empty.tsv",): f"{tmp_path}/empty.tsv: no names: the file has no line, or blank ones only",
        (
            "names.tsv",
            "-l",
            "3",
        ): f"{tmp_path}/names.tsv: line 2: expected at least 4 columns (-l 3, 0-based) but found 1",
        ("names.tsv",): f"{tmp_path}/names.tsv: line 4: unknown entity 'steriod' of type 'all' (closest: 'steroid')",
    }
    before = tree_state(tmp_path)
    for (name, *options), expected in cases.items():
        argv = ["similar", str(umls_model.config), "--names", str(tmp_path / name), *options]
        argv += ["--output", str(tmp_path / "out" / "near.tsv")]
        try:
            code = COMMANDS["similar"](build_parser().parse_args(argv))
        except PbgError as exc:
            code = report("similar", exc, debug=False)
        out, err = capsys.readouterr()
        assert code == 1 and out == "" and err.splitlines()[0].startswith(f"pbg similar: error: {expected}"), err
        assert len(err.splitlines()) == 1
    assert changes(before, tree_state(tmp_path)) == []
