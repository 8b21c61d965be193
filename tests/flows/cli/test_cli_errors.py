"""Every error a user can cause, through the real ``pbg`` console script: one line, no traceback.

Each case runs ``pbg`` as a subprocess (the venv's console script, ``PYTHONPATH`` at this
tree) and must end with its exit status, no ``Traceback`` on stdout or stderr, and a
message naming the bad file, field or value. The cases run three at a time.

- Config errors and missing inputs must fail before the command starts its embedded
  Prefect server: ``PBG_SERVER_LOG`` names a file the server's start creates
  (:func:`flows.prefect_host.local_server.start_local_server`), and it must not exist afterwards.
- Errors raised inside a flow run reach the session's Prefect test server
  (``PREFECT_API_URL``): the console shows our line only, the run's logs in the API keep
  Prefect's full traceback.
- ``--debug`` / ``PBG_DEBUG=1`` show the traceback.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.edgelist import EdgeList
from pbg_core.types import Bucket
from storage.edges import EdgeStore

PBG = str(Path(sys.executable).with_name("pbg"))
TREE = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Case:
    """One command a user might get wrong, and what its one line must name."""

    name: str
    args: tuple[str, ...]
    names: tuple[str, ...]  # substrings the output must contain (file, field, value, what is allowed)
    status: int = 1
    flow: bool = False  # reaches a flow run: runs against the session's Prefect server
    env: dict[str, str] = field(default_factory=dict)
    debug: bool = False  # a traceback is expected

    @property
    def preflight(self) -> bool:
        """Whether it must fail before any server starts (every case that never reaches a flow)."""
        return not self.flow and self.args[0] in ("train", "eval")


def _cases() -> list[Case]:
    """Every user-error case, one per line.

    Long because it is one table: a case per line reads better than the table cut in pieces.
    """
    ok = ("train", "config.json")
    imp = ("import", "config.json")
    cols = ("-l", "0", "-r", "2", "--rel-col", "1")
    return [
        # -- the config file --------------------------------------------------------------------
        Case("missing config", ("train", "nope.json"), ("nope.json", "does not exist")),
        Case("config is a directory", ("train", "folder.json"), ("folder.json", "directory")),
        Case("config type", ("train", "config.txt"), ("config.txt", "'.txt'", "allowed: .py, .json")),
        Case("bad JSON", ("train", "bad.json"), ("bad.json", "not valid JSON", "line 1, column 9")),
        Case("bad YAML", ("train", "bad.yaml"), ("bad.yaml", "not valid YAML", "line 2")),
        Case("bad .py", ("train", "syntax.py"), ("syntax.py", "SyntaxError")),
        Case(".py raises", ("train", "raises.py"), ("raises.py", "RuntimeError: boom")),
        Case("not a mapping", ("train", "list.json"), ("list.json", "expected a mapping", "list")),
        Case("unknown key", ("train", "unknown.json"), ("unknown.json", "num_epoch", "did you mean 'num_epochs'")),
        Case("wrong type", (*ok, "-p", "num_epochs=abc"), ("config.json", "num_epochs", "'abc'", "not an integer")),
        Case("bad enum", (*ok, "-p", "comparator=foo"), ("comparator", "'foo'", "dot, cos, l2, squared_l2")),
        Case("bad operator", (*ok, "-p", "relations.0.operator=rot"), ("relations[0].operator", "'rot'", "diagonal")),
        Case("bad operator_init", (*ok, "-p", "operator_init=bogus"), ("operator_init", "'bogus'", "identity, normal")),
        Case("bad -p syntax", (*ok, "-p", "num_epochs"), ("'num_epochs'", "expected key=value")),
        Case("bad -p index", (*ok, "-p", "relations.3.lhs=x"), ("relations.3", "allowed indexes: 0..0")),
        Case("empty edge_paths", (*ok, "-p", "edge_paths="), ("edge_paths", "empty", "at least one")),
        Case(
            "machines without partitions",
            (*ok, "-p", "num_machines=2"),
            ("num_machines: 2", "needs partitioned entity types", "num_partitions >= 4"),
        ),
        # -- inputs of train / eval -------------------------------------------------------------
        Case("missing edge path", (*ok, "-p", "edge_paths=data/nope"), ("data/nope", "does not exist", "pbg import")),
        Case("edge path is a file", (*ok, "-p", "edge_paths=train.tsv"), ("train.tsv", "is a file")),
        Case("missing bucket", (*ok, "-p", "entities.node.num_partitions=2"), ("edges_0_1.h5", "2x2 grid")),
        Case("missing entities", (*ok, "-p", "entity_path=nowhere"), ("nowhere", "entity_path")),
        Case("missing init_path", (*ok, "-p", "init_path=gone"), ("gone", "init_path does not exist")),
        Case("checkpoint under a file", (*ok, "-p", "checkpoint_path=train.tsv/ckpt"), ("train.tsv", "is a file")),
        Case(
            "checkpoint not writable",
            (*ok, "-p", "checkpoint_path=/proc/pbg-ckpt"),
            ("/proc/pbg-ckpt", "cannot create"),
        ),
        Case("eval before train", ("eval", "config.json"), ("ckpt", "no committed checkpoint", "train first")),
        Case(
            "partitions too big for memory",
            ("train", "huge.json"),
            ("memory: 1 partition(s) need", "GB is available (", "use num_partitions >= ", "entity type(s) node"),
        ),
        Case(
            "missing filter path",
            ("eval", "config.json", "--filtered", "--filter-path", "data/gone"),
            ("data/gone", "edge path does not exist", "--filter-path"),
        ),
        # -- pbg eval's sampled evaluation (trained.json: a trained 200-node graph) ------------------
        Case(
            "zero sampled edges", ("eval", "trained.json", "--sample-edges", "0"), ("--sample-edges", "'0'", ">= 1"), 2
        ),
        Case("zero candidates", ("eval", "trained.json", "--candidates", "0"), ("--candidates", "'0'", ">= 1"), 2),
        Case(
            "more candidates than entities",
            ("eval", "trained.json", "--candidates", "201"),
            ("--candidates 201", "give 1 to 200", "entity type 'node' partition 0 has 200 entities"),
        ),
        Case(
            "candidates without edges",
            ("eval", "no_edges.json", "--sample-edges", "10", "--candidates", "5"),
            ("--sample-edges/--candidates", "no_edges", "hold no edges"),
        ),
        Case(
            "no server at PREFECT_API_URL",
            ok,
            ("PREFECT_API_URL=http://127.0.0.1:9/api", "nothing answers there", "unset PREFECT_API_URL"),
            env={"PREFECT_API_URL": "http://127.0.0.1:9/api"},
        ),
        Case(
            "eval: no server at PREFECT_API_URL",
            ("eval", "trained.json"),
            ("PREFECT_API_URL=http://127.0.0.1:9/api", "nothing answers there", "unset PREFECT_API_URL"),
            env={"PREFECT_API_URL": "http://127.0.0.1:9/api"},
        ),
        # -- URL schemes whose filesystem cannot load (tests/storage/fs/test_urls.py has each kind) --
        Case("config's scheme", ("train", "foo://x/config.json"), ("the config's URL scheme 'foo://' is unknown",)),
        Case(
            "hdfs checkpoint_path",
            (*ok, "-p", "checkpoint_path=hdfs://namenode:8020/ckpt"),
            ("hdfs://namenode:8020/ckpt: checkpoint_path's URL scheme 'hdfs://' cannot be used here",),
        ),
        Case(
            "unknown edge path scheme",
            ("eval", "trained.json", "-p", "edge_paths=data/x,foo://b/edges"),
            ("foo://b/edges: edge_paths[1]'s URL scheme 'foo://' is unknown", "give a local path or a URL"),
        ),
        # -- pbg import -------------------------------------------------------------------------
        Case("truncated .gz", (*imp, "cut.tsv.gz", *cols), ("cut.tsv.gz", "truncated or corrupt")),
        Case("truncated .bz2", (*imp, "cut.tsv.bz2", *cols), ("cut.tsv.bz2", "truncated or corrupt")),
        Case(
            "dynamic without --rel-col",
            ("import", "dynamic.json", "train.tsv", "-l", "0", "-r", "2"),
            ("--rel-col", "dynamic_relations"),
        ),
        Case("two inputs, one edge path", (*imp, "train.tsv", "train.tsv", *cols), ("2 input(s)", "edge_paths has 1")),
        Case(
            "negative column",
            (*imp, "train.tsv", "--lhs-col", "-1", "-r", "2"),
            ("--lhs-col", "-1", "0-based"),
            status=2,
        ),
        Case("column name for text", (*imp, "train.tsv", "-l", "src", "-r", "2"), ("lhs_col='src'", "Parquet")),
        Case("short line", (*imp, "short.tsv", *cols), ("short.tsv", "line 2", "found 2")),
        Case("bad weight", (*imp, "weight.tsv", *cols, "--weight-col", "3"), ("weight.tsv", "line 1", "'heavy'")),
        Case("missing input", (*imp, "nothere.tsv", *cols), ("nothere.tsv", "does not exist")),
        Case(
            "output below a file",
            ("import", "outside.json", "train.tsv", *cols),
            ("train.tsv/data", "entity_path", "is a file"),
        ),
        Case(
            "zero min count",
            (*imp, "train.tsv", *cols, "--entity-min-count", "0"),
            ("--entity-min-count", "'0'"),
            status=2,
        ),
        # -- errors raised inside a flow run ----------------------------------------------------
        Case(
            "bad entity count", ("train", "bad_count.json"), ("entity_count_node_0.txt", "'xyz", "integer"), flow=True
        ),
        # -- tracebacks on request --------------------------------------------------------------
        Case("--debug", ("train", "nope.json", "--debug"), ("nope.json",), debug=True),
        Case(
            "PBG_DEBUG in a flow",
            ("train", "bad_count_debug.json"),
            ("entity_count_node_0.txt",),
            flow=True,
            env={"PBG_DEBUG": "1"},
            debug=True,
        ),
    ]


CASES = _cases()


def _write_inputs(root: Path, graph: Any, config_for: Callable[..., dict[str, Any]], trained: Any) -> None:
    """The configs and files every case reads, in ``root`` (the commands' working directory)."""
    rng = random.Random(0)
    lines = "".join(f"n{rng.randrange(200)}\tlinked\tn{rng.randrange(200)}\n" for _ in range(20_000)).encode()
    (root / "cut.tsv.gz").write_bytes(gzip.compress(lines)[:20_000])
    (root / "cut.tsv.bz2").write_bytes(bz2.compress(lines)[:20_000])
    shutil.copy(graph.root / "train.tsv", root / "train.tsv")
    (root / "short.tsv").write_text("n1\tlinked\tn2\nn1\tlinked\n")
    (root / "weight.tsv").write_text("n1\tlinked\tn2\theavy\n")
    config = config_for(graph, "ckpt", edge_paths=[graph.train_path])

    def save(name: str, **changes: Any) -> None:
        (root / name).write_text(json.dumps({**config, **changes}))

    save("config.json")
    (root / "trained.json").write_text(json.dumps(trained.config))
    EdgeStore(str(root / "no_edges")).save(Bucket(0, 0), EdgeList.from_tensors(*[torch.empty(0, dtype=torch.long)] * 3))
    (root / "no_edges.json").write_text(json.dumps({**trained.config, "edge_paths": [str(root / "no_edges")]}))
    save("unknown.json", num_epoch=3)
    save("outside.json", entity_path="train.tsv/data", edge_paths=["train.tsv/data/edges"])
    save(
        "dynamic.json", dynamic_relations=True, global_emb=False, relations=[{**config["relations"][0], "name": "all"}]
    )
    (root / "folder.json").mkdir()
    (root / "config.txt").write_text("{}")
    (root / "bad.json").write_text('{"a": 1,')
    (root / "bad.yaml").write_text("a: [1,\n")
    (root / "syntax.py").write_text("def get_torchbiggraph_config(:\n")
    (root / "raises.py").write_text("def get_torchbiggraph_config():\n    raise RuntimeError('boom')\n")
    (root / "list.json").write_text("[1, 2]")
    huge = root / "huge"  # 10^11 entities: no memory holds one partition of them
    shutil.copytree(graph.entity_path, huge)
    (huge / "entity_count_node_0.txt").write_text("100000000000\n")
    save("huge.json", entity_path=str(huge), edge_paths=[str(huge / Path(graph.train_path).name)])
    # Inputs whose files exist but whose content is bad: found by the flow, not before it.
    # Each flow run starts torch and Prefect (seconds): two cases only.
    data = root / "bad_count"
    shutil.copytree(graph.entity_path, data)
    (data / "entity_count_node_0.txt").write_text("xyz\n")
    inputs = {"entity_path": str(data), "edge_paths": [str(data / Path(graph.train_path).name)]}
    save("bad_count.json", **inputs, checkpoint_path="ckpt_bad_count")
    save("bad_count_debug.json", **inputs, checkpoint_path="ckpt_bad_count_debug")  # its own lease


@dataclass(frozen=True)
class Outcome:
    """A finished case: its process and whether the embedded server was started."""

    done: subprocess.CompletedProcess[str]
    server_started: bool

    @property
    def output(self) -> str:
        return self.done.stdout + self.done.stderr


# The import cases share config.json's entity_path: two at once would (rightly) meet its lease.
_IMPORTS = threading.Lock()


def _run(case: Case, root: Path, base_env: dict[str, str], api_url: str) -> Outcome:
    with _IMPORTS if case.args[0] == "import" else contextlib.nullcontext():
        return _run_one(case, root, base_env, api_url)


def _run_one(case: Case, root: Path, base_env: dict[str, str], api_url: str) -> Outcome:
    server_log = root / f"server-{case.name.replace(' ', '_').replace('/', '_')}.log"
    env = {**base_env, **case.env, "PBG_SERVER_LOG": str(server_log)}
    if case.flow:
        env["PREFECT_API_URL"] = api_url
    done = subprocess.run(
        [PBG, *case.args], cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return Outcome(done=done, server_started=server_log.exists())


@pytest.fixture(scope="module")
def outcomes(
    prefect_harness: None,
    graph: Any,
    trained: Any,
    config_for: Callable[..., dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Outcome]:
    """Every case's outcome (three commands at a time)."""
    from prefect.settings import PREFECT_API_URL

    root = tmp_path_factory.mktemp("cli_errors")
    _write_inputs(root, graph, config_for, trained)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PBG_"))}
    env["PYTHONPATH"] = str(TREE)
    env["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect_home"))
    api_url = str(PREFECT_API_URL.value())
    with ThreadPoolExecutor(max_workers=3) as pool:
        # The flow cases first: each takes seconds, the others overlap them.
        futures = {
            case.name: pool.submit(_run, case, root, env, api_url) for case in sorted(CASES, key=lambda c: not c.flow)
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_user_error_is_one_line_naming_what_is_wrong(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.name]
    assert outcome.done.returncode == case.status, outcome.output
    if case.debug:
        # One traceback for one error: Prefect's copy of a flow's stays in the run's logs.
        assert outcome.done.stderr.count("Traceback (most recent call last)") == 1, outcome.output
    else:
        assert "Traceback" not in outcome.output
        errors = [line for line in outcome.done.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1, outcome.output
    for name in case.names:
        assert name in outcome.done.stderr, (name, outcome.output)


@pytest.mark.parametrize("case", [c for c in CASES if c.preflight], ids=[c.name for c in CASES if c.preflight])
def test_config_errors_and_missing_inputs_fail_before_the_server_starts(
    case: Case, outcomes: dict[str, Outcome]
) -> None:
    assert not outcomes[case.name].server_started


def test_flow_errors_keep_their_traceback_in_the_runs_logs(outcomes: dict[str, Outcome]) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterLevel

    assert outcomes["bad entity count"].done.returncode == 1
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(level=LogFilterLevel(ge_=40)), limit=200)
    failures = [
        log.message
        for log in logs
        if "Encountered exception during execution" in log.message and "entity_count_node_0.txt" in log.message
    ]
    assert failures and all("Traceback (most recent call last)" in message for message in failures)
