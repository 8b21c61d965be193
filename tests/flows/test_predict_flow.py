"""The ``pbg-predict`` flow on the test harness: its output is ``Model.predict``'s, published whole;
an existing output is refused without ``force`` (the disk byte-identical); a bad query file, or an
interrupt between files, leaves nothing; the table artifact shows the first rows, the counts, the
version and the output.

On the session's trained planted graph (:func:`conftest.trained`): two query files of test edges
in a directory, ranked for their tails with each edge's tail as the answer.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from disk_state import changes, tree_state
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

from flows.predict import pbg_predict
from flows.prefect_host import interrupts
from pbg_core.config import parse_config
from pbg_core.errors import UnknownNameError
from storage.edge_lists.parse import Columns
from storage.errors import OutputExistsError
from storage.trained import Model
from storage.trained.answer_files import read_rows
from tasks import predict as predict_tasks

K = 5


@pytest.fixture
def queries(tmp_path: Path, graph: Any) -> Path:
    """``queries/a.tsv`` and ``queries/b.tsv``: 30 and 20 seeded test edges (head, relation, tail)."""
    lines = Path(graph.root, "test.tsv").read_text().splitlines()
    chosen = random.Random(7).sample(lines, 50)
    folder = tmp_path / "queries"
    folder.mkdir()
    (folder / "a.tsv").write_text("\n".join(chosen[:30]) + "\n")
    (folder / "b.tsv").write_text("\n".join(chosen[30:]) + "\n")
    return folder


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runs' staging directories go under the test's own cache directory."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PBG_CACHE_DIR", str(path))
    return path


def run(trained: Any, queries: Path | str, output: Path, **options: Any) -> Any:
    """A ``pbg-predict`` run's final state."""
    return pbg_predict(
        queries=str(queries),
        output=str(output),
        config=parse_config(trained.config),
        lhs_col=0,
        rel_col=1,
        rhs_col=2,
        k=K,
        return_state=True,
        **options,
    )


def expected(trained: Any, files: list[Path]) -> Any:
    """``Model.predict`` of every query of ``files``, read in order."""
    rows = read_rows([str(f) for f in files], Columns(lhs=0, rhs=2, rel=1, weight=None), None, None)
    model = Model.load(parse_config(trained.config))
    return model.predict(heads=rows.lhs, relations=rows.rel, answers=rows.rhs, k=K)


def test_the_output_is_model_predict_of_every_file_and_the_artifact_shows_it(
    trained: Any, queries: Path, tmp_path: Path, cache_dir: Path
) -> None:
    output = tmp_path / "out" / "top.parquet"
    state = run(trained, queries, output)
    assert state.is_completed(), state.message
    table = pq.read_table(output)
    want = expected(trained, [queries / "a.tsv", queries / "b.tsv"])
    assert table.equals(want)
    assert table.column("query").to_pylist()[-1] == 49  # counted over both files
    summary = state.result()
    assert summary["version"] == trained.result["version"] and summary["queries"] == 50
    assert summary["rows"] == 50 * K and summary["files"] == 2
    assert not any(cache_dir.glob("predict-*"))  # the parts are gone

    with get_client(sync_client=True) as client:
        flow_run_id = state.state_details.flow_run_id
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
        name = client.read_flow_run(flow_run_id).name
    [artifact] = [a for a in artifacts if a.type == "table"]
    assert artifact.key == "pbg-predictions-top-parquet"
    assert f"version {summary['version']}" in artifact.description and str(output) in artifact.description
    assert "50 queries of 2 file(s), 250 rows" in artifact.description
    shown = want.slice(0, predict_tasks.SHOWN_ROWS).to_pylist()
    assert [row["tail"] for row in _rows(artifact.data)] == [row["tail"] for row in shown]
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"
    shown = rf"predict [^:]+: \.\.\..*/queries -> {re.escape(str(output))}, {when}"  # the queries' end shown
    assert re.fullmatch(shown, name), name


def _rows(data: Any) -> list[dict[str, Any]]:
    import json

    return json.loads(data) if isinstance(data, str) else data


def test_an_existing_output_is_refused_without_force_and_replaced_whole_with_it(
    trained: Any, queries: Path, tmp_path: Path
) -> None:
    output = tmp_path / "top.tsv"
    output.write_text("an earlier prediction\n")
    before = tree_state(tmp_path)
    state = run(trained, queries / "a.tsv", output)
    assert state.is_failed()
    with pytest.raises(OutputExistsError, match="refusing to overwrite .*give force=true"):
        state.result()
    assert changes(before, tree_state(tmp_path)) == []

    assert run(trained, queries / "a.tsv", output, force=True).is_completed()
    lines = output.read_text().splitlines()
    assert lines[0].split("\t")[:4] == ["query", "head", "relation", "tail"] and len(lines) == 1 + 30 * K


def test_a_bad_name_in_the_second_file_fails_the_run_naming_it_and_writes_nothing(
    trained: Any, queries: Path, tmp_path: Path
) -> None:
    (queries / "b.tsv").write_text("n1\tlinked\tn2\n\nnobody\tlinked\tn3\n")  # a blank line counted
    output = tmp_path / "top.tsv"
    before = tree_state(tmp_path)
    state = run(trained, queries, output)
    assert state.is_failed()
    with pytest.raises(UnknownNameError, match=r"b\.tsv: line 3: unknown head 'nobody'"):
        state.result()
    assert changes(before, tree_state(tmp_path)) == []  # no output, no part, no staging directory


def test_an_interrupt_between_files_leaves_the_earlier_output_as_it_was(
    trained: Any, queries: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "top.tsv"
    output.write_text("an earlier prediction\n")
    before = tree_state(tmp_path)
    real = Model.predict
    calls: list[int] = []

    def interrupted(self: Model, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C while the second file is ranked
            raise KeyboardInterrupt
        return real(self, **kwargs)

    monkeypatch.setattr(Model, "predict", interrupted)
    monkeypatch.setattr(interrupts, "_stop", interrupts._Stop())  # this process's stop state, for this test only
    state = run(trained, queries, output, force=True)
    assert state.is_cancelled() and state.message == "interrupted by SIGINT"
    assert changes(before, tree_state(tmp_path)) == []


def test_a_query_nothing_can_answer_is_refused_before_the_model_loads(
    trained: Any, queries: Path, tmp_path: Path
) -> None:
    state = pbg_predict(
        queries=str(queries),
        output=str(tmp_path / "x.tsv"),
        config=parse_config(trained.config),
        rhs_col=2,
        return_state=True,
    )
    assert state.is_failed()
    with pytest.raises(Exception, match="target 'tail' ranks the tails: give lhs_col"):
        state.result()
