"""flows.cli.preflight: the checks ``pbg train``/``pbg eval`` make before any server or worker starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.cli.preflight import (
    CheckpointNotWritable,
    check_local_inputs,
    check_urls,
    config_urls,
    load_checked_config,
)
from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from pbg_core.session.memory_plan import MemoryPlanError
from storage.disk_space import NoSpaceForCheckpoint
from storage.errors import BadDataError, DataNotFound, FilesystemUnavailable


@pytest.fixture(autouse=True)
def prefect_harness() -> Iterator[None]:
    """No Prefect server here (overrides the directory's session fixture): nothing runs a flow."""
    yield


@pytest.fixture
def config(graph: Any, config_for: Callable[..., dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    return config_for(graph, tmp_path / "run" / "ckpt")


def test_a_valid_config_passes_and_leaves_nothing_behind(config: dict[str, Any], tmp_path: Path) -> None:
    check_local_inputs(parse_config(config), training=True)
    assert list(tmp_path.iterdir()) == []  # no checkpoint directory, no write probe left


@pytest.mark.parametrize(
    "changes, error, words",
    [
        ({"edge_paths": []}, ConfigError, "edge_paths: [] is empty"),
        ({"edge_paths": ["{tmp}/nope"]}, DataNotFound, "edge path does not exist"),
        ({"edge_paths": ["{tmp}/file"]}, DataNotFound, "is a file, not a directory"),
        ({"entities": {"node": {"num_partitions": 2}}}, DataNotFound, "edges_0_1.h5"),
        ({"entity_path": "{tmp}/nope"}, DataNotFound, "entity_path is not a directory"),
        ({"init_path": "{tmp}/gone"}, DataNotFound, "init_path does not exist"),
        ({"init_path": "{tmp}/file"}, BadDataError, "init_path is a file, expected a checkpoint directory"),
        ({"entity_path": "{tmp}/file"}, BadDataError, "entity_path is a file, expected the entity directory"),
        ({"checkpoint_path": "{tmp}/file"}, BadDataError, "checkpoint_path is a file, expected a checkpoint dir"),
        ({"checkpoint_path": "{tmp}/file/ckpt"}, CheckpointNotWritable, "is a file"),
        ({"checkpoint_path": "/proc/pbg-ckpt"}, CheckpointNotWritable, "cannot create the checkpoint directory"),
    ],
)
def test_each_missing_input_is_one_error_naming_it(
    config: dict[str, Any], tmp_path: Path, changes: dict[str, Any], error: type[Exception], words: str
) -> None:
    (tmp_path / "file").write_text("x")
    raw = json.loads(json.dumps({**config, **changes}).replace("{tmp}", str(tmp_path)))
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        check_local_inputs(parse_config(raw), training=True)


def test_eval_needs_a_committed_checkpoint_but_no_writable_one(config: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match="no committed checkpoint to evaluate"):
        check_local_inputs(parse_config({**config, "checkpoint_path": "/proc/pbg-ckpt"}), training=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadDataError, match="checkpoint_path is a file, expected a checkpoint directory"):
        check_local_inputs(parse_config({**config, "checkpoint_path": str(tmp_path / "file")}), training=False)


def commit_files(checkpoint: Path, version: int) -> None:
    """``version`` of the planted graph's checkpoint, committed with all its files (as training writes them)."""
    import torch

    from pbg_core.ports import CheckpointMetadata
    from storage.checkpoints import CheckpointStore

    store, meta = CheckpointStore(str(checkpoint)), CheckpointMetadata(config_json="")
    store.save_embeddings("node", 0, version, torch.zeros(200, 16), None, meta)
    store.save_model(version, {}, {}, None, meta)
    store.write_version(version)


def test_a_pointer_ahead_of_its_files_is_refused_before_the_server(config: dict[str, Any]) -> None:
    """Names only here (nothing imported while they are all there); the message is the storage check's."""
    from storage.version_check import IncompleteVersionError

    commit_files(Path(config["checkpoint_path"]), 2)
    for training in (True, False):
        check_local_inputs(parse_config(config), training=training)  # complete: passes
    (Path(config["checkpoint_path"]) / "checkpoint_version.txt").write_text("3\n")
    for training in (True, False):
        with pytest.raises(IncompleteVersionError) as raised:
            check_local_inputs(parse_config(config), training=training)
        assert str(raised.value) == (
            f"{config['checkpoint_path']}: checkpoint_version.txt says 3 but version 3's files are missing (2 of 2: "
            "embeddings_node_0.v3.h5, model.v3.h5): found complete version 2; nothing was removed; restore "
            "version 3's files, or write 2 into checkpoint_version.txt to go on from version 2"
        )


def test_remote_inputs_are_left_to_the_flow(config: dict[str, Any]) -> None:
    remote = {
        **config,
        "edge_paths": ["s3://bucket/none"],
        "entity_path": "s3://bucket/none",
        "checkpoint_path": "s3://bucket/ckpt",
    }
    check_local_inputs(parse_config(remote), training=True)  # no network: nothing is probed


def test_loading_imports_neither_fsspec_nor_prefect_nor_torch(config: dict[str, Any], tmp_path: Path) -> None:
    # Whatever the check imports delays the server's start: run it in a fresh interpreter.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code = (
        "import sys; from flows.cli.preflight import load_checked_config; "
        f"load_checked_config({str(path)!r}, [], training=True); "
        "print(sorted(m for m in ('fsspec', 'prefect', 'torch', 'yaml') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
    assert load_checked_config(str(path), ["num_epochs=7"], training=True).num_epochs == 7


def test_each_command_checks_the_urls_it_uses(config: dict[str, Any]) -> None:
    parsed = parse_config({**config, "init_path": "hdfs://nn/init", "edge_paths": ["e0", "gs://b/e1"]})
    assert [field for field, _ in config_urls(parsed)] == [
        "entity_path",
        "edge_paths[0]",
        "edge_paths[1]",
        "checkpoint_path",
        "init_path",
    ]
    assert config_urls(parsed, ("checkpoint_path", "edge_paths"))[1:] == [
        ("edge_paths[0]", "e0"),
        ("edge_paths[1]", "gs://b/e1"),
    ]
    check_urls([("entity_path", "/local/dir"), ("checkpoint_path", "s3://bucket/ckpt")])
    with pytest.raises(FilesystemUnavailable, match=r"^foo://x/e: --filter-path's URL scheme 'foo://' is unknown"):
        check_urls([("edge_paths[0]", "/local"), ("--filter-path", "foo://x/e")])


def test_partitions_too_big_for_memory_are_refused(config: dict[str, Any], graph: Any, tmp_path: Path) -> None:
    entities = tmp_path / "entities"
    shutil.copytree(graph.entity_path, entities)
    (entities / "entity_count_node_0.txt").write_text("100000000000\n")
    raw = {**config, "entity_path": str(entities), "edge_paths": [str(entities / Path(graph.train_path).name)]}
    with pytest.raises(MemoryPlanError, match=r"^memory: 1 partition\(s\) need .* use num_partitions >= \d+ for"):
        check_local_inputs(parse_config(raw), training=True)
    commit_files(Path(config["checkpoint_path"]), 1)
    check_local_inputs(parse_config(raw), training=False)  # evaluation is not planned here


def test_a_disk_without_room_for_the_next_version_is_refused(
    config: dict[str, Any], small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(1 << 20)
    # d=1000: 200 rows x 4004 B = 0.8 MB a version, twice that with the bucket progress: 1.6 MB > 1 MiB
    raw = {**config, "dimension": 1000, "checkpoint_path": str(disk / "ckpt")}
    with pytest.raises(NoSpaceForCheckpoint) as caught:
        check_local_inputs(parse_config(raw), training=True)
    message = str(caught.value)
    assert message.startswith(f"{disk / 'ckpt'}: not enough disk space for checkpoint version 1 and its bucket")
    assert "no version is committed yet" in message
    commit_files(disk / "ckpt", 3)  # 13 KB
    with pytest.raises(NoSpaceForCheckpoint, match="for checkpoint version 4 .* the committed version 3 is intact"):
        check_local_inputs(parse_config(raw), training=True)
    check_local_inputs(parse_config({**raw, "dimension": 100}), training=True)  # 2 x 81 KB fits


def test_pbg_train_on_a_full_disk_fails_in_one_line_before_the_server(
    config: dict[str, Any], small_disk: Callable[[int], Path], tmp_path: Path
) -> None:
    disk = small_disk(1 << 20)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "dimension": 1000, "checkpoint_path": str(disk / "ckpt")}))
    server_log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PBG_"))}
    env.update(PBG_SERVER_LOG=str(server_log), PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    pbg = str(Path(sys.executable).with_name("pbg"))
    done = subprocess.run([pbg, "train", str(path)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert line.startswith(f"pbg train: error: {disk / 'ckpt'}: not enough disk space for checkpoint version 1")
    assert not server_log.exists()


@pytest.mark.slow
def test_the_disk_check_asks_for_what_a_version_takes(
    graph_2x2: Any, config_for: Callable[..., dict[str, Any]], small_disk: Callable[[int], Path], tmp_path: Path
) -> None:
    """With one block less than the check asks for, pbg train is refused before anything is written; with
    exactly that room it trains a version (progress saves, links, stats and all), and it asked for less
    than twice what the version added to the disk, plus 1 MiB."""
    from _cli import cli_environment, run_pbg
    from disk_state import changes, tree_state

    from flows.cli.preflight import next_version_bytes
    from pbg_core.session.build import build_topology
    from pbg_core.session.memory_plan import model_bytes

    disk = small_disk(16 << 20)
    raw = config_for(graph_2x2, disk / "ckpt", num_epochs=1, dimension=2000)  # 0.8 MB a partition
    (tmp_path / "config.json").write_text(json.dumps(raw))
    config = parse_config(raw)
    keys = [(e, p) for e, entity in config.entities.items() for p in range(entity.num_partitions)]
    counts = {key: int(Path(graph_2x2.entity_path, f"entity_count_{key[0]}_{key[1]}.txt").read_text()) for key in keys}
    needed = next_version_bytes(config, build_topology(config), counts, model_bytes(config, 0), str(disk / "ckpt"))
    env = cli_environment(tmp_path / "home")

    def leave(room: int) -> int:
        (disk / "ballast").unlink(missing_ok=True)
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "ballast").write_bytes(b"\0" * ((free - room) // 4096 * 4096))
        return os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize

    assert leave(needed - 4096) < needed
    before = tree_state(disk)
    refused = run_pbg(env, tmp_path, "train", "config.json")
    assert refused.returncode == 1 and f"{needed} bytes" in refused.stderr.splitlines()[-1], refused.stderr
    assert changes(before, tree_state(disk)) == []
    free_before = leave(needed)
    done = run_pbg(env, tmp_path, "train", "config.json")
    assert done.returncode == 0, done.stderr
    added = free_before - os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    assert 0 < added <= needed < 2 * added + (1 << 20), (added, needed)


def in_small_shm(code: str, size: str = "16m") -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` in a private mount namespace whose /dev/shm is a ``size`` tmpfs (as docker --shm-size)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a private /dev/shm needs root and unshare(1)")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.strip()}")
    script = f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec {sys.executable} -c "$0"'
    return subprocess.run(["unshare", "-m", "sh", "-c", script, code], capture_output=True, text=True, timeout=120)


def test_a_small_dev_shm_is_refused_before_training(config: dict[str, Any], graph: Any, tmp_path: Path) -> None:
    entities = tmp_path / "entities"
    shutil.copytree(graph.entity_path, entities)
    (entities / "entity_count_node_0.txt").write_text("5000000\n")  # 5M rows x (d + 1) x 4 B: far over 16 MiB
    raw = {**config, "entity_path": str(entities), "edge_paths": [str(entities / Path(graph.train_path).name)]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    code = (
        "import json; from flows.cli.preflight import check_local_inputs; from pbg_core.config import parse_config\n"
        f"try:\n    check_local_inputs(parse_config(json.load(open({str(path)!r}))), training=True)\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\nelse:\n    print('passed')"
    )
    done = in_small_shm(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MemoryPlanError memory: 1 partition(s) need"), done.stdout
    assert "0.02 GB free in /dev/shm (shared memory" in done.stdout and "--shm-size" in done.stdout
    assert "use num_partitions >= " in done.stdout
    assert in_small_shm(code, size="4g").stdout.strip() == "passed"  # the same run with room in /dev/shm
