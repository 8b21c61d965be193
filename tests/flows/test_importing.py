"""The ``pbg-import`` flow under the Prefect test harness: files, report, progress artifact."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

from flows.importing import inputs_label, pbg_import
from pbg_core.config import parse_config

pytestmark = pytest.mark.integration


def test_the_import_flow_writes_the_layout_and_reports(graph: Any, config_for: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = config_for(graph, tmp_path / "ckpt")
    config.update(entity_path=str(data), edge_paths=[str(data / "train_partitioned")])
    tsv = tmp_path / "train.tsv"
    lines = (graph.root / "train.tsv").read_text().splitlines()
    tsv.write_text("\n".join(lines[:100] + ["n1\tlinked"] + lines[100:]) + "\n")  # one malformed line

    state = pbg_import(
        inputs=[str(tsv)],
        lhs_col=0,
        rhs_col=2,
        rel_col=1,
        config=parse_config(config),
        skip_bad_lines=True,
        return_state=True,
    )
    assert state.is_completed()
    report = state.result()
    assert report["edges_written"] == [graph.num_train_edges]
    assert report["skipped"]["malformed_line"] == 1
    assert report["bad_lines"][0].startswith(f"{tsv}: line 101")
    assert (data / "train_partitioned" / "edges_0_0.h5").exists()
    assert (data / "entity_count_node_0.txt").read_text().strip() == "200"

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]))
        )
        run_name = client.read_flow_run(state.state_details.flow_run_id).name
    assert [a.data for a in artifacts if a.type == "progress"] == [100.0]
    assert [a.description for a in artifacts if a.type == "progress"] == [
        "100%: importing 1 input(s) into " + str(data)
    ]
    # its subject (the checkpoint directory), its inputs' label (not the list's repr "['...']": a path
    # past 80 characters, as a longer temporary directory makes it, shows as "..." and its end), when
    label = re.escape(inputs_label([str(tsv)]))
    assert re.fullmatch(rf"import ckpt: {label}, \d{{4}}-\d\d-\d\d \d\d:\d\d UTC", run_name), run_name


def failed_import(graph: Any, config_for: Any, tmp_path: Path, text: str, **options: Any) -> tuple[Any, Path, Path]:
    """(final state, input file, entity dir) of a ``pbg-import`` run over ``text``."""
    data = tmp_path / "data"
    config = config_for(graph, tmp_path / "ckpt")
    config.update(entity_path=str(data), edge_paths=[str(data / "train_partitioned")])
    tsv = tmp_path / "input.tsv"
    tsv.write_text(text)
    state = pbg_import(
        inputs=[str(tsv)], lhs_col=0, rhs_col=2, rel_col=1, config=parse_config(config), return_state=True, **options
    )
    return state, tsv, data


def test_a_malformed_line_fails_the_flow_naming_file_and_line(graph: Any, config_for: Any, tmp_path: Path) -> None:
    state, tsv, data = failed_import(graph, config_for, tmp_path, "n1\tlinked\tn2\nn3\tlinked\n")
    assert state.is_failed()
    assert f"{tsv}: line 2" in str(state.message) or f"{tsv}:2" in str(state.message), state.message
    assert not data.exists() or not any(data.rglob("*.h5"))  # nothing partial left behind


def test_unknown_relations_error_fails_the_flow_naming_the_line(graph: Any, config_for: Any, tmp_path: Path) -> None:
    state, tsv, data = failed_import(
        graph, config_for, tmp_path, "n1\tlinked\tn2\nn3\tlinkde\tn4\n", unknown_relations="error"
    )
    assert state.is_failed()
    assert f"{tsv}: line 2: relation 'linkde' in column 1 is not in the config" in str(state.message), state.message
    assert not data.exists() or not any(data.rglob("*.h5"))


def test_the_flow_is_refused_while_another_import_holds_the_entity_path(
    graph: Any, config_for: Any, tmp_path: Path
) -> None:
    from disk_state import changes, tree_state

    from storage.entity_lease import importing

    (tmp_path / "data").mkdir()
    with importing(str(tmp_path / "data"), "pbg import config.json other.tsv"):
        before = tree_state(tmp_path / "data")
        state, _, data = failed_import(graph, config_for, tmp_path, "n1\tlinked\tn2\n")
        assert state.is_failed()
        assert "is being imported into by run 'pbg import config.json other.tsv' (pid" in str(state.message)
        assert changes(before, tree_state(data)) == []
    state, _, _ = failed_import(graph, config_for, tmp_path, "n1\tlinked\tn2\n")
    assert state.is_completed() and not (tmp_path / "data" / "import_lease.json").exists()


def test_the_flow_names_its_run_in_its_lease(
    graph: Any, config_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import threading

    pause = tmp_path / "paused"
    monkeypatch.setenv("PBG_PAUSE_AT", "import-lease-held")
    monkeypatch.setenv("PBG_PAUSE_FILE", str(pause))
    states: list[Any] = []
    thread = threading.Thread(
        target=lambda: states.append(failed_import(graph, config_for, tmp_path, "n1\tlinked\tn2\n")[0])
    )
    thread.start()
    while not pause.exists():
        assert thread.is_alive()
        thread.join(0.05)
    holder = json.loads((tmp_path / "data" / "import_lease.json").read_text())
    pause.unlink()
    thread.join()
    assert states[0].is_completed()
    assert (
        holder["run"].startswith("pbg-import flow run import ")
        and str(states[0].state_details.flow_run_id) in holder["run"]
    )


def test_inputs_read_as_a_command_line_lists_them_and_long_lists_are_shortened() -> None:
    assert inputs_label(["a.tsv", "b.tsv"]) == "a.tsv, b.tsv"
    many = [f"s3://bucket/graphs/train_{i}.tsv.gz" for i in range(9)]
    assert inputs_label(many) == f"{many[0]}, {many[1]} and 7 more"
    assert len(inputs_label(many)) <= 80
    assert inputs_label(["x" * 100 + ".tsv"]) == "..." + ("x" * 100 + ".tsv")[-77:]
    assert inputs_label([]) == "(no inputs)"


def test_the_flow_parameters_are_the_import_options_and_the_ui_shows_their_descriptions() -> None:
    """The flat parameters (deployed names) are ImportOptions' fields: same names, defaults and descriptions."""
    from prefect.utilities.callables import parameter_schema_from_entrypoint

    from storage.importing.options import ImportOptions

    schema = parameter_schema_from_entrypoint("flows/importing.py:pbg_import").model_dump()["properties"]
    assert set(schema) - set(ImportOptions.model_fields) == {"inputs", "config", "config_url", "overrides"}
    for name, field in ImportOptions.model_fields.items():
        assert " ".join(schema[name]["description"].split()) == field.description, name
        assert schema[name].get("default") == (None if field.is_required() else field.default), name
    assert schema["unknown_relations"]["enum"] == ["skip", "error"]
    assert schema["entity_min_count"]["minimum"] == schema["relation_type_min_count"]["minimum"] == 1
