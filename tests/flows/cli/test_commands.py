"""``pbg import``/``export``/``serve``: what each refuses before any work, in one line, through the real CLI.

``serve --config-url`` is read and validated first, ``--cron`` as Prefect validates it, and
PREFECT_API_URL must answer as a Prefect API; every URL a command uses must have a filesystem
that loads here; ``export`` refuses outputs that are one file or an input, and a disk that
cannot hold them (checked first, and named if it fills up anyway). Every refusal leaves the
files on disk byte-identical (tests/disk_state.py). The full-disk cases mount a small tmpfs:
they need root and are skipped, saying so, elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state

from bench.lib.s3_server import free_port
from flows.cli.commands import config_url_problem, cron_problem
from pbg_core.ports import CheckpointMetadata
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("htp://host/config.json", "htp://host/config.json: --config-url's URL scheme 'htp://' is unknown: no file"),
        ("{root}/config.py", "file type '.py' is not served; allowed: .json, .yaml, .yml"),
        ("{root}/config.txt", "file type '.txt' is not served; allowed: .json, .yaml, .yml"),
        ("s3://bucket", "file type '(none)' is not served"),
        ("{root}/missing.json", "--config-url: {root}/missing.json: config file does not exist"),
        ("{root}/bad.json", "--config-url: 5 problems with the config in {root}/bad.json:"),
    ],
)
def test_a_config_url_that_no_run_could_read_is_named_with_what_is_allowed(
    tmp_path: Path, url: str, expected: str
) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"entities": {"n": {"num_partitions": 1}}}))
    problem = config_url_problem(url.format(root=tmp_path), [])
    assert problem is not None and expected.format(root=tmp_path) in problem, problem


def test_a_valid_config_url_with_its_overrides_passes(
    make_config: Callable[..., dict[str, Any]], write_config: Callable[[dict[str, Any], str], Path]
) -> None:
    url = str(write_config(make_config(), "config.yaml"))
    assert config_url_problem(url, ["num_epochs=2"]) is None
    assert "num_epochs" in str(config_url_problem(url, ["num_epochs=zero"]))


def test_serve_with_a_bad_config_url_stops_before_anything_starts(tmp_path: Path) -> None:
    # Nothing listens on the API URL: the old command got that far and failed with ConnectError.
    env = {**cli_environment(tmp_path / "prefect"), "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}
    done = run_pbg(env, tmp_path, "serve", "--config-url", "htp://host/config.json")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pbg serve: error: htp://host/config.json: --config-url's URL scheme 'htp://' is unknown: no filesystem is "
        "registered for it; give a local path or a URL of a scheme fsspec knows (file://, s3://, gs://, az://, hdfs://, ...)"
    ]


# -- pbg export: outputs that are one file, an input, or that the disk cannot hold ------------------------
NODES = 1000  # entity "node", one partition, dimension 16: names n0..n999
DIM = 16


def export_project(root: Path, value: float | None = None) -> Path:
    """A committed checkpoint (version 1) of ``NODES`` x ``DIM`` embeddings and its config, in ``root``.

    Written with the stores, no training: seeded N(0, 0.5) values, or every value ``value``.
    """
    names = [f"n{i}" for i in range(NODES)]
    EntityStore(str(root / "data")).save_names("node", 0, names)
    if value is None:
        embeddings = torch.randn(NODES, DIM, generator=torch.Generator().manual_seed(0)) * 0.5
    else:
        embeddings = torch.full((NODES, DIM), value)
    store = CheckpointStore(str(root / "ckpt"))
    store.save_embeddings("node", 0, 1, embeddings, None, CheckpointMetadata(config_json="{}"))
    store.save_model(1, {}, {}, None, CheckpointMetadata(config_json="{}"))  # operator "none": no parameters
    store.write_version(1)
    config = {
        "entity_path": "data",
        "edge_paths": ["data/edges"],
        "checkpoint_path": "ckpt",
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "r", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": DIM,
    }
    (root / "config.json").write_text(json.dumps(config))
    return root


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def one_error_line(done: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The command's one line on stderr (after checking its status, and that no internals show)."""
    output = done.stdout + done.stderr
    assert done.returncode == status, output
    for internal in ("Traceback", "HDF5", "h5py", "Errno", "errno"):
        assert internal not in output, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return export_project((tmp_path / "project").resolve())


EXPORT_LAYOUTS = {  # how each layout is asked for, and the output the refusal names (the largest)
    "tsv": (("--format", "tsv", "--output", "{out}"), "{out}/node.tsv"),
    "npy": (("--format", "npy", "--output", "{out}"), "{out}/node.npy"),
    "h5": (("--format", "h5", "--output", "{out}"), "{out}/node.h5"),
    "pbg": (
        ("--entities-output", "{out}/entities.tsv", "--relation-types-output", "{out}/relations.tsv"),
        "{out}/entities.tsv",
    ),
}


@pytest.mark.parametrize("layout", EXPORT_LAYOUTS)
def test_an_export_a_disk_cannot_hold_is_refused_before_writing(
    project: Path, small_disk: Callable[..., Path], layout: str
) -> None:
    disk = small_disk(64 << 10)  # each layout needs 64 KiB or more for 1000 x 16
    args, named = (part.format(out=disk / "out") for part in EXPORT_LAYOUTS[layout][0]), EXPORT_LAYOUTS[layout][1]
    before = tree_state(project)
    done = run_pbg(cli_environment(project.parent / "home"), project, "export", "config.json", *args)
    line = one_error_line(done)
    assert line.startswith(
        f"pbg export: error: {named.format(out=disk / 'out')}: not enough disk space for the export: about "
    )
    assert f"on the filesystem of {disk}, 65,536 bytes (64.0 KiB) free; nothing was written" in line
    assert tree_state(disk) == {} and not (disk / "out").exists()
    assert changes(before, tree_state(project)) == []


@pytest.mark.parametrize("layout", ["tsv", "pbg", "h5"])
def test_a_disk_that_fills_up_during_an_export_is_named_and_left_clean(
    tmp_path: Path, small_disk: Callable[..., Path], layout: str
) -> None:
    """TSV: values of -123456 take 18 bytes each, the estimate's 13 fit the disk and the text does not;
    HDF5: the disk has bytes but no inode left for the file (ENOSPC from HDF5's own create)."""
    if layout == "h5":
        project = export_project((tmp_path / "project").resolve())
        disk = small_disk(1 << 20, inodes=2)
        (disk / "out").mkdir()  # the root and this: no inode left
        ran_out = "the filesystem ran out of inodes (it can hold no more files)"
    else:
        project = export_project((tmp_path / "project").resolve(), value=-123456.0)
        disk = small_disk(240 << 10)  # estimated 211,890 bytes (fits), written 291,890
        ran_out = "the disk filled up"
    args, named = (part.format(out=disk / "out") for part in EXPORT_LAYOUTS[layout][0]), EXPORT_LAYOUTS[layout][1]
    before = tree_state(project)
    done = run_pbg(cli_environment(tmp_path / "home"), project, "export", "config.json", *args)
    line = one_error_line(done)
    assert line.startswith(
        f"pbg export: error: {named.format(out=disk / 'out')}: {ran_out} while writing the export: about "
    )
    assert "written, " in line and "the partial files are removed" in line
    assert tree_state(disk) == {} and (disk / "out").exists() == (layout == "h5")  # only what existed is left
    assert changes(before, tree_state(project)) == []


@pytest.mark.parametrize(
    ("entities", "relations", "words"),
    [
        (
            "x.tsv",
            "x.tsv",
            "--entities-output and --relation-types-output name the same file {root}/x.tsv ('x.tsv' for both)",
        ),
        ("x.tsv", "./x.tsv", "--entities-output and --relation-types-output name the same file {root}/x.tsv"),
        ("x.tsv", "{root}/x.tsv", "--entities-output and --relation-types-output name the same file {root}/x.tsv"),
        ("x.tsv", "{link}/x.tsv", "--entities-output and --relation-types-output name the same file {root}/x.tsv"),
        ("x.tsv", "config.json", "--relation-types-output names {root}/config.json, the config this export reads"),
        (
            "ckpt/embeddings_node_0.v1.h5",
            "r.tsv",
            "--entities-output names {root}/ckpt/embeddings_node_0.v1.h5, a file of checkpoint_path ckpt that this "
            "export reads",
        ),
    ],
)
def test_one_file_for_two_outputs_or_an_input_is_refused(
    project: Path, entities: str, relations: str, words: str
) -> None:
    link = project.parent / "links" / "project"  # another spelling of the project directory
    link.parent.mkdir()
    link.symlink_to(project)
    before = tree_state(project)
    spelled = {"root": project, "link": link}
    done = run_pbg(
        cli_environment(project.parent / "home"),
        project,
        "export",
        "config.json",
        "--entities-output",
        entities.format(**spelled),
        "--relation-types-output",
        relations.format(**spelled),
    )
    assert words.format(**spelled) in one_error_line(done)
    assert changes(before, tree_state(project)) == []


# -- URL schemes whose filesystem cannot load, PREFECT_API_URL, --cron: refused before any work ---------
@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_import_export_and_serve_name_a_url_scheme_that_cannot_be_used(project: Path) -> None:
    env = {**cli_environment(project.parent / "home"), "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}
    commands = {
        ("import", "config.json", "train.tsv", "gs://bucket/more.tsv", "-l", "0", "-r", "1"): (
            "gs://bucket/more.tsv: input 2's URL scheme 'gs://' cannot be used here: the Python package 'gcsfs' "
            "is not installed (pip install gcsfs;"
        ),
        ("export", "config.json", "-p", "checkpoint_path=hdfs://nn:8020/ckpt", "--format", "h5", "--output", "o"): (
            "hdfs://nn:8020/ckpt: checkpoint_path's URL scheme 'hdfs://' cannot be used here: "
        ),
        ("serve", "--config-url", "foo://x/config.json"): (
            "foo://x/config.json: --config-url's URL scheme 'foo://' is unknown: no filesystem is registered for it"
        ),
    }
    (project / "train.tsv").write_text("n1\tn2\n")
    before = tree_state(project)
    for args, words in commands.items():
        done = run_pbg(env, project, *args)
        assert words in one_error_line(done, 2 if args[0] == "serve" else 1)
    assert changes(before, tree_state(project)) == []


def test_serve_names_a_prefect_api_url_where_no_prefect_api_answers(project: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/api"
    not_prefect = subprocess.Popen(  # a real HTTP server that is no Prefect API: GET /api/health is a 404
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port := free_port())],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        answers = {
            nobody: f"pbg serve: error: PREFECT_API_URL={nobody}: nothing answers there",
            f"http://127.0.0.1:{port}/api": "something answers there, but not a Prefect API (GET /health: HTTP 404)",
        }
        for url, words in answers.items():
            env = {**cli_environment(project.parent / "home"), "PREFECT_API_URL": url}
            done = run_pbg(env, project, "serve", "--config-url", "config.json")
            assert words in one_error_line(done)
    finally:
        not_prefect.terminate()
        not_prefect.wait(timeout=30)


def test_export_and_import_need_no_prefect_api(project: Path) -> None:
    """They run no flow: a PREFECT_API_URL where nothing answers changes nothing for them."""
    env = {**cli_environment(project.parent / "home"), "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}
    (project / "train.tsv").write_text("n1\tr\tn2\nn2\tr\tn3\n")
    (project / "import.json").write_text(
        json.dumps(
            {
                **json.loads((project / "config.json").read_text()),
                "entity_path": "imported",
                "edge_paths": ["imported/edges"],
            }
        )
    )
    assert run_pbg(env, project, "import", "import.json", "train.tsv", "-l", "0", "-r", "2").returncode == 0
    done = run_pbg(env, project, "export", "config.json", "--format", "npy", "--output", "out")
    assert done.returncode == 0, done.stderr
    assert (project / "out" / "node.npy").is_file()


def test_serve_checks_cron_as_prefect_does_before_anything_is_deployed(project: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    env = {**cli_environment(project.parent / "home"), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    refused = {
        "61 * * * *": "--cron '61 * * * *' is not a cron expression Prefect accepts ([61 * * * *] is not acceptable, out of range); give 5 fields",
        "0 3 * *": "--cron '0 3 * *' is not a cron expression Prefect accepts (Exactly 5, 6 or 7 columns",
    }
    for number, (expression, words) in enumerate(refused.items()):
        done = run_pbg(
            env, project, "serve", "--name", f"cron-{number}", "--cron", expression, "--config-url", "config.json"
        )
        assert words in one_error_line(done, 2)
    with get_client(sync_client=True) as client:
        assert not [d for d in client.read_deployments() if d.name.startswith("cron-")]


def test_cron_expressions_are_what_prefect_accepts() -> None:
    for accepted in ("0 3 * * *", "*/30 * * * *", "0 4 * * 1-5", "@daily"):
        assert cron_problem(accepted) is None
    assert "(Random and Hashed expressions are unsupported" in str(cron_problem("R 3 * * *"))
    assert "(Hashed definitions must include hash_id)" in str(cron_problem("H 3 * * *"))
