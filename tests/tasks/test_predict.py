"""The ``pbg-predict`` tasks through their bodies (``task.fn()``): which files a query entry names (local and
S3), a part per file and its retry, the publication and its refusals, the query spec's checks.

The model: the planted graph of ``tests/conftest.py`` (unpartitioned), one committed version with
seeded rows and parameters, written as a run commits it (what is checked, the tasks' plumbing,
does not depend on training; tests/flows/test_predict_flow.py runs the flow on a trained model).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.parquet as pq
import pytest
import torch
from disk_state import changes, tree_state

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.errors import UsageError
from pbg_core.model.embedder import build_model
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.parts import ModelState, config_json_text
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.errors import DataNotFound, OutputExistsError
from storage.outputs import OutputsOverlap
from storage.trained.answer_files import UnwritableFormat
from tasks.predict import (
    QuerySpec,
    check_output,
    close_model,
    get_model,
    list_query_files,
    open_model,
    predict_file,
    publish_predictions,
)

SPEC = QuerySpec(target="tail", lhs_col=0, rel_col=1, rhs_col=2, k=3)


@pytest.fixture(scope="module")
def config(graph: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> ConfigSchema:
    """The planted graph's config with version 1 committed: seeded rows and parameters."""
    from pbg_core.config import parse_config

    config = parse_config(config_for(graph, tmp_path_factory.mktemp("model") / "ckpt"))
    store = CheckpointStore(config.checkpoint_path, None)
    metadata = CheckpointMetadata(config_json_text(config_to_json(config)))
    generator = torch.Generator().manual_seed(5)
    count = EntityStore(config.entity_path, None).load_count("node", 0)
    store.save_embeddings("node", 0, 1, torch.randn(count, config.dimension, generator=generator), None, metadata)
    model = build_model(config, 0)
    ModelState(model, None).save(store, 1, metadata)
    store.save_config(config_to_json(config))
    store.write_version(1)
    return config


@pytest.fixture
def model(config: ConfigSchema) -> Iterator[str]:
    """An open model's handle."""
    handle = open_model.fn(config, None)
    yield handle
    close_model.fn(handle)


def write(url: str, text: str) -> None:
    with fsspec.open(url, "w") as out:
        out.write(text)


def queries(graph: Any, count: int, seed: int) -> str:
    """``count`` seeded test edges as query lines (head, relation, tail)."""
    lines = Path(graph.root, "test.tsv").read_text().splitlines()
    return "\n".join(random.Random(seed).sample(lines, count)) + "\n"


def test_open_model_pins_the_version_and_close_forgets_it(config: ConfigSchema) -> None:
    handle = open_model.fn(config, None)
    assert get_model(handle).version == 1
    close_model.fn(handle)
    close_model.fn(handle)  # idempotent
    with pytest.raises(LookupError, match="is not open in this process"):
        get_model(handle)


def test_query_entries_name_files_directories_prefixes_and_patterns(model: str, store_root: str) -> None:
    for name in ("b.tsv", "a.tsv", "notes.txt"):
        write(f"{store_root}/in/{name}", "n1\tlinked\tn2\n")
    folder = [f"{store_root}/in/{name}" for name in ("a.tsv", "b.tsv", "notes.txt")]
    assert list_query_files.fn(model, [f"{store_root}/in"]) == folder
    assert list_query_files.fn(model, [f"{store_root}/in/"]) == folder
    assert list_query_files.fn(model, [f"{store_root}/in/b.tsv", f"{store_root}/in/*.tsv"]) == folder[1::-1]
    with pytest.raises(DataNotFound, match="does not exist; give a query file"):
        list_query_files.fn(model, [f"{store_root}/in/c.tsv"])
    with pytest.raises(DataNotFound, match="holds no query file"):
        list_query_files.fn(model, [f"{store_root}/in/*.parquet"])


def test_a_retried_file_replaces_its_part_whole(model: str, graph: Any, tmp_path: Path) -> None:
    source = tmp_path / "q.tsv"
    source.write_text(queries(graph, 12, 1))
    part = tmp_path / "staging" / "part-00001.parquet"
    first = predict_file.fn(model, str(source), SPEC, str(part), 30)
    table = pq.read_table(part)
    assert first == {"file": str(source), "queries": 12, "rows": 36, "part": str(part)}
    assert table.column("query").to_pylist()[::3] == list(range(30, 42))  # numbered after earlier files' queries
    again = predict_file.fn(model, str(source), SPEC, str(part), 30)
    assert again == first and pq.read_table(part).equals(table)
    assert sorted(p.name for p in part.parent.iterdir()) == [part.name]  # no temporary file left
    lines = source.read_text().splitlines()
    want = get_model(model).predict(
        heads=[line.split("\t")[0] for line in lines],
        relations="linked",
        answers=[line.split("\t")[2] for line in lines],
        k=3,
    )
    assert table.drop(["query"]).equals(want.drop(["query"]))


def test_publishing_twice_is_refused_without_force_and_gives_the_same_file_with_it(
    model: str, graph: Any, store_root: str, tmp_path: Path
) -> None:
    parts = []
    for index, seed in enumerate((2, 3)):
        source = tmp_path / f"q{index}.tsv"
        source.write_text(queries(graph, 5, seed))
        part = tmp_path / "staging" / f"part-{index}.parquet"
        parts.append(predict_file.fn(model, str(source), SPEC, str(part), 5 * index))
    output = f"{store_root}/out/top.tsv"
    summary = publish_predictions.fn(model, parts, output, False)
    assert (summary["queries"], summary["rows"], summary["files"], summary["version"]) == (10, 30, 2, 1)
    with fsspec.open(output, "rb") as published:
        content = published.read()
    assert content.decode().splitlines()[0].startswith("query\thead\trelation\ttail\trank\tscore")
    assert len(content.decode().splitlines()) == 31 and len(summary["first_rows"]) == 20

    with pytest.raises(OutputExistsError, match="refusing to overwrite.*give force=true"):
        publish_predictions.fn(model, parts, output, False)
    assert publish_predictions.fn(model, parts, output, True) == summary  # a retry with force: the same file
    with fsspec.open(output, "rb") as published:
        assert published.read() == content


def test_an_output_that_is_an_input_or_exists_is_refused_before_ranking(model: str, tmp_path: Path) -> None:
    source = tmp_path / "q.tsv"
    source.write_text("n1\tlinked\tn2\n")
    existing = tmp_path / "old.tsv"
    existing.write_text("old\n")
    before = tree_state(tmp_path)
    with pytest.raises(OutputsOverlap, match="the query file"):
        check_output.fn(model, str(source), [str(source)], None, True)
    with pytest.raises(OutputExistsError, match="give force=true"):
        check_output.fn(model, str(existing), [str(source)], None, False)
    with pytest.raises(OutputExistsError, match="is a directory"):
        check_output.fn(model, str(tmp_path), [str(source)], None, True)
    with pytest.raises(UnwritableFormat, match=r"top\.tsv\.zst: \.zst is not a compression answers are written in"):
        check_output.fn(model, str(tmp_path / "top.tsv.zst"), [str(source)], None, True)
    check_output.fn(model, str(existing), [str(source)], None, True)
    assert changes(before, tree_state(tmp_path)) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (QuerySpec(target="tail", rhs_col=2), "target 'tail' ranks the tails: give lhs_col"),
        (QuerySpec(target="head", lhs_col=0), "target 'head' ranks the heads: give rhs_col"),
        (QuerySpec(lhs_col=0, rel_col=1, relation="linked"), "give relation .* or rel_col .*, not both"),
        (QuerySpec(lhs_col=0, filter_paths=["x"]), "filter_paths is given without filtered=true"),
    ],
)
def test_a_query_spec_nothing_can_answer_is_refused(spec: QuerySpec, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        spec.check()


def test_a_bad_name_is_placed_by_file_and_line(model: str, tmp_path: Path) -> None:
    source = tmp_path / "q.tsv"
    source.write_text("n1\tlinked\tn2\n\nn3\tlinked\tn4\nnobody\tlinked\tn5\n")
    part = tmp_path / "staging" / "part.parquet"
    with pytest.raises(Exception, match=rf"{source}: line 4: unknown head 'nobody'"):
        predict_file.fn(model, str(source), SPEC, str(part), 0)
    assert not part.exists() and not part.parent.exists()
