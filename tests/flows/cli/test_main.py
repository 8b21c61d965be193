"""The ``pbg`` console script as users run it: a subprocess per command.

Commands that run a flow (train, eval) pay Prefect's ephemeral start-up in every process,
so this module runs only a handful of them; one PREFECT_HOME is shared so that its SQLite
migrations run once.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _cli import cli_environment, run_pbg


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect_home"))


def cli_config() -> dict[str, Any]:
    """A JSON config with relative paths (resolved against the command's cwd)."""
    return {
        "entity_path": "data",
        "edge_paths": ["data/train", "data/test"],
        "checkpoint_path": "model",
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal"}],
        "dimension": 8,
        "comparator": "dot",
        "loss_fn": "softmax",
        "lr": 0.1,
        "num_epochs": 2,
        "batch_size": 100,
        "num_batch_negs": 20,
        "num_uniform_negs": 20,
        "eval_fraction": 0.0,
        "workers": 1,
        "hogwild_delay": 0.0,
        "seed": 0,
    }


def import_planted(cli_env: dict[str, str], root: Path, graph: Any) -> subprocess.CompletedProcess[str]:
    """``pbg import config.json`` of the planted graph's train and test TSV files in ``root``."""
    files = [str(graph.root / "train.tsv"), str(graph.root / "test.tsv")]
    return run_pbg(cli_env, root, "import", "config.json", *files, "--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2")


@pytest.fixture(scope="module")
def imported(cli_env: dict[str, str], graph: Any, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """``pbg import`` of the planted graph's TSV files into a fresh working directory."""
    root = tmp_path_factory.mktemp("cli")
    config = cli_config()
    (root / "config.json").write_text(json.dumps(config))
    done = import_planted(cli_env, root, graph)
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(root=root, config=config, stdout=done.stdout, stderr=done.stderr)


def test_import_writes_the_pbg_layout(imported: SimpleNamespace) -> None:
    data = imported.root / "data"
    assert (data / "entity_count_node_0.txt").read_text().strip() == "200"
    assert sorted(json.loads((data / "entity_names_node_0.json").read_text())) == sorted(f"n{i}" for i in range(200))
    assert (data / "train" / "edges_0_0.h5").is_file() and (data / "test" / "edges_0_0.h5").is_file()
    assert "imported 2,000 of 2,000 edges" in imported.stdout


def test_import_prints_no_prefect_api_warnings(imported: SimpleNamespace) -> None:
    assert "UserWarning" not in imported.stderr


def test_import_is_reproducible_with_the_configs_seed(
    imported: SimpleNamespace, cli_env: dict[str, str], graph: Any, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(imported.config))
    done = import_planted(cli_env, tmp_path, graph)
    assert done.returncode == 0, done.stderr
    names = "entity_names_node_0.json"
    assert (tmp_path / "data" / names).read_text() == (imported.root / "data" / names).read_text()


def test_config_errors_name_the_field_and_the_allowed_values(
    imported: SimpleNamespace, cli_env: dict[str, str]
) -> None:
    done = run_pbg(cli_env, imported.root, "train", "config.json", "-p", "loss_fn=softmaxx", "-p", "num_epoch=3")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "loss_fn" in done.stderr and "softmaxx" in done.stderr
    for allowed in ("ranking", "logistic", "softmax"):
        assert allowed in done.stderr
    # Every problem is reported at once; the unknown key gets the closest known name.
    assert "num_epoch" in done.stderr and "num_epochs" in done.stderr
    assert not (imported.root / "model").exists()


@pytest.fixture(scope="module")
def trained_cli(imported: SimpleNamespace, cli_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Credentials as -p overrides (fsspec's local filesystem ignores them): none may leak.
    return run_pbg(
        cli_env,
        imported.root,
        "train",
        "config.json",
        "-p",
        "edge_paths=data/train",
        "-p",
        f"storage_options.key={PLANTED_KEY}",
        "-p",
        f"storage_options.secret={PLANTED_SECRET}",
    )


PLANTED_KEY, PLANTED_SECRET = "AKIAPLANTEDCLIKEY", "planted-cli-s3cr3t-0b7d"


def test_train_output_and_checkpoint_hold_no_credential(
    imported: SimpleNamespace, trained_cli: subprocess.CompletedProcess[str]
) -> None:
    assert trained_cli.returncode == 0, trained_cli.stderr
    for text in (trained_cli.stdout, trained_cli.stderr):
        assert PLANTED_KEY not in text and PLANTED_SECRET not in text
    for path in (imported.root / "model").rglob("*"):
        if path.is_file():
            assert PLANTED_SECRET.encode() not in path.read_bytes() and PLANTED_KEY.encode() not in path.read_bytes()
    saved = json.loads((imported.root / "model" / "config.json").read_text())
    assert saved["storage_options"]["secret"] == "**********"


def test_eval_of_the_saved_config_json_ignores_its_masked_credentials(
    imported: SimpleNamespace, cli_env: dict[str, str], trained_cli: subprocess.CompletedProcess[str]
) -> None:
    assert trained_cli.returncode == 0, trained_cli.stderr
    done = run_pbg(cli_env, imported.root, "eval", "model/config.json", "-p", "edge_paths=data/test", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["count"] == 400
    assert "storage_options.secret holds the mask" in done.stderr  # dropped, not used


def test_config_errors_never_echo_a_credential(imported: SimpleNamespace, cli_env: dict[str, str]) -> None:
    done = run_pbg(
        cli_env,
        imported.root,
        "train",
        "config.json",
        "-p",
        f"storage_options.key={PLANTED_KEY}",
        "-p",
        f"storage_options.anon={PLANTED_SECRET}",
        "-p",
        f"={PLANTED_SECRET}",
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "storage_options.anon: input should be a valid boolean" in done.stderr
    assert "override '=<value>': expected key=value" in done.stderr
    assert PLANTED_KEY not in done.stderr + done.stdout and PLANTED_SECRET not in done.stderr + done.stdout


def test_train_commits_the_last_version(
    imported: SimpleNamespace, trained_cli: subprocess.CompletedProcess[str]
) -> None:
    assert trained_cli.returncode == 0, trained_cli.stderr
    assert "model is at version 2" in trained_cli.stdout
    model = imported.root / "model"
    assert (model / "checkpoint_version.txt").read_text() == "2\n"
    assert {p.name for p in model.glob("*.h5")} == {"embeddings_node_0.v2.h5", "model.v2.h5"}
    assert json.loads((model / "config.json").read_text())["edge_paths"] == ["data/train"]


def test_every_run_and_task_of_a_cli_training_reaches_the_database(
    cli_env: dict[str, str], trained_cli: subprocess.CompletedProcess[str]
) -> None:
    """The embedded server flushes its task-run and event queues before the command exits."""
    assert trained_cli.returncode == 0, trained_cli.stderr
    with sqlite3.connect(Path(cli_env["PREFECT_HOME"]) / "prefect.db") as db:
        (parent_id,) = db.execute(
            "SELECT fr.id FROM flow_run fr JOIN flow f ON f.id = fr.flow_id WHERE f.name = 'pbg' "
            "AND fr.state_type = 'COMPLETED' ORDER BY fr.created DESC LIMIT 1"
        ).fetchone()
        subflows = db.execute(
            "SELECT fr.id, fr.name, fr.state_type FROM flow_run fr JOIN task_run tr ON tr.id = fr.parent_task_run_id "
            "WHERE tr.flow_run_id = ? ORDER BY fr.name",
            (parent_id,),
        ).fetchall()
        assert [(name, state) for _, name, state in subflows] == [
            ("epoch 1/2, path 1/1, chunk 1/1", "COMPLETED"),
            ("epoch 2/2, path 1/1, chunk 1/1", "COMPLETED"),
        ]
        for version, (subflow_id, name, _) in enumerate(subflows, start=1):
            tasks = db.execute("SELECT name, state_type FROM task_run WHERE flow_run_id = ?", (subflow_id,)).fetchall()
            # schedule, swap, load, train, save progress, write, switch, preserve, remove
            assert len(tasks) == 9 and {state for _, state in tasks} == {"COMPLETED"}, (name, tasks)
            assert {"train bucket (HOGWILD)", f"switch to v{version}"} <= {task for task, _ in tasks}
        # Events are not stored by default (PBG_KEEP_EVENTS=1 stores them): tests/flows/prefect_host/test_local_server.py
        (events,) = db.execute(
            "SELECT count(*) FROM events WHERE event LIKE 'prefect.task-run.%' AND resource_id = ?",
            (f"prefect.flow-run.{subflows[0][0]}",),
        ).fetchone()
        assert events == 0


def test_eval_json_is_the_last_stdout_line(
    imported: SimpleNamespace, cli_env: dict[str, str], trained_cli: subprocess.CompletedProcess[str]
) -> None:
    assert trained_cli.returncode == 0, trained_cli.stderr
    done = run_pbg(cli_env, imported.root, "eval", "config.json", "-p", "edge_paths=data/test", "--json")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(metrics) == {"mrr", "r1", "r10", "r50", "pos_rank", "auc", "count", "loss"}
    assert metrics["count"] == 400
    assert 0 < metrics["mrr"] <= 1 and 0 <= metrics["r1"] <= metrics["r10"] <= metrics["r50"] <= 1


@pytest.mark.slow
def test_sampled_eval_prints_what_it_ranked_and_json_has_the_sample(
    imported: SimpleNamespace, cli_env: dict[str, str], trained_cli: subprocess.CompletedProcess[str]
) -> None:
    assert trained_cli.returncode == 0, trained_cli.stderr
    args = ("eval", "config.json", "-p", "edge_paths=data/test", "--sample-edges", "100", "--candidates", "50")
    done = run_pbg(cli_env, imported.root, *args, "--filtered", "--json")
    assert done.returncode == 0, done.stderr
    stats, sampled, last = done.stdout.strip().splitlines()[-3:]
    assert stats.startswith("Stats: ") and stats.endswith("count: 100") and "candidates" not in stats
    assert sampled == "ranked 100 of 400 test edges against 50 uniformly sampled candidates per side (seed 0)"
    metrics = json.loads(last)
    assert (metrics["count"], metrics["total_edges"], metrics["sample_edges"]) == (100, 400, 100)
    assert (metrics["candidates"], metrics["sample_seed"]) == (50, 0)


EXPORT_ARGS = (
    "export",
    "config.json",
    "--entities-output",
    "out/entities.tsv",
    "--relation-types-output",
    "out/relation_types.tsv",
)


@pytest.fixture(scope="module")
def exported(
    imported: SimpleNamespace, cli_env: dict[str, str], trained_cli: subprocess.CompletedProcess[str]
) -> SimpleNamespace:
    """``pbg export`` run twice into the same outputs, with the first output's bytes in between."""
    assert trained_cli.returncode == 0, trained_cli.stderr
    first = run_pbg(cli_env, imported.root, *EXPORT_ARGS)
    assert first.returncode == 0, first.stderr
    written = (imported.root / "out" / "entities.tsv").read_bytes()
    second = run_pbg(cli_env, imported.root, *EXPORT_ARGS)
    return SimpleNamespace(first=first, second=second, written=written)


def test_export_writes_the_checkpoint_as_tsv(
    imported: SimpleNamespace, exported: SimpleNamespace, h5_datasets: Any
) -> None:
    root = imported.root
    lines = exported.written.decode().splitlines()
    names = json.loads((root / "data" / "entity_names_node_0.json").read_text())
    assert [line.split("\t")[0] for line in lines] == names
    values = np.array([[float(v) for v in line.split("\t")[1:]] for line in lines])
    embeddings = h5_datasets(root / "model" / "embeddings_node_0.v2.h5")["embeddings"]
    model = h5_datasets(root / "model" / "model.v2.h5")
    expected = embeddings + model["model/entities/node/global_embedding"]  # PBG adds global_emb
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-8)

    relation_lines = (root / "out" / "relation_types.tsv").read_text().splitlines()
    assert len(relation_lines) == 1
    fields = relation_lines[0].split("\t")
    assert fields[:5] == ["linked", "rhs", "diagonal", "diagonal", "8"]
    np.testing.assert_allclose(
        [float(v) for v in fields[5:]], model["model/relations/0/operator/rhs/diagonal"], rtol=0, atol=1e-8
    )


def test_export_refuses_to_overwrite(imported: SimpleNamespace, exported: SimpleNamespace) -> None:
    assert exported.second.returncode == 1
    assert "refusing to overwrite" in exported.second.stderr and "entities.tsv" in exported.second.stderr
    assert (imported.root / "out" / "entities.tsv").read_bytes() == exported.written


def test_export_refusal_is_a_clean_error_message(exported: SimpleNamespace) -> None:
    assert "Traceback" not in exported.second.stderr
    assert "pbg export: error: " in exported.second.stderr


@pytest.mark.parametrize(
    ("args", "env_api", "expected"),
    [
        ([], False, "PREFECT_API_URL is not set"),
        (["--limit", "0"], True, "--limit 0 is not allowed"),
        (["--retrain-keep-last", "0"], True, "--retrain-keep-last 0 is not allowed"),
    ],
)
def test_serve_refuses_what_cannot_work(
    cli_env: dict[str, str], tmp_path: Path, args: list[str], env_api: bool, expected: str
) -> None:
    env = {**cli_env, "PREFECT_API_URL": "http://127.0.0.1:9/api"} if env_api else cli_env
    done = run_pbg(env, tmp_path, "serve", *args)
    assert done.returncode == 2
    assert expected in done.stderr


def test_export_npy_per_entity_type_matches_the_tsv(
    imported: SimpleNamespace, exported: SimpleNamespace, cli_env: dict[str, str]
) -> None:
    done = run_pbg(cli_env, imported.root, "export", "config.json", "--format", "npy", "--output", "out-npy")
    assert done.returncode == 0, done.stderr
    assert "exported version 2" in done.stdout
    vectors = np.load(imported.root / "out-npy" / "node.npy")
    names = json.loads((imported.root / "out-npy" / "node.names.json").read_text())
    rows = {
        line.split("\t")[0]: [float(v) for v in line.split("\t")[1:]] for line in exported.written.decode().splitlines()
    }
    assert names == list(rows)
    np.testing.assert_allclose(vectors, np.array([rows[name] for name in names]), rtol=0, atol=1e-8)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--format", "npy"], "needs both --format (tsv, npy, h5) and --output DIR"),
        (["--entities-output", "e.tsv", "--format", "h5", "--output", "o"], "not both"),
        (["--entities-output", "e.tsv"], "needs both --entities-output and --relation-types-output"),
        ([], "give --entities-output F --relation-types-output F, or --format"),
    ],
)
def test_export_usage_errors_say_what_to_give(
    imported: SimpleNamespace, cli_env: dict[str, str], args: list[str], expected: str
) -> None:
    done = run_pbg(cli_env, imported.root, "export", "config.json", *args)
    assert done.returncode == 2 and expected in done.stderr, done.stderr


def test_import_unknown_relations_error_is_a_clean_message(cli_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**cli_config(), "edge_paths": ["data/train"]}))
    (tmp_path / "typo.tsv").write_text("n1\tlinked\tn2\nn3\tlinkde\tn4\n")
    args = ["import", "config.json", "typo.tsv", "--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2"]
    done = run_pbg(cli_env, tmp_path, *args, "--unknown-relations", "error")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert (
        "typo.tsv: line 2: relation 'linkde' in column 1 is not in the config (expected one of 'linked')" in done.stderr
    )
    assert not (tmp_path / "data").exists()
    done = run_pbg(cli_env, tmp_path, *args)  # the default: skipped, counted and named
    assert done.returncode == 0, done.stderr
    assert "relation names not in the config (edges skipped): 'linkde' (1)" in done.stdout
