"""``init_path`` after a plain re-import, through the real command line (``PBG_SLOW_TESTS=1``, about a minute).

``pbg import`` a graph of two entity types in two partitions, ``pbg train`` it, ``pbg export``
it; change the input (edges removed and added) and ``pbg import`` it again without
``--append`` (every entity reshuffled); ``pbg train`` a new checkpoint with ``init_path`` set
to the first one and ``lr = 0``, so its committed version holds exactly the rows it started
from, and compare them by name. Resuming the first checkpoint on the new import is refused
in one line and changes no byte, and so is ``pbg eval`` of it; its ``pbg export`` still names
every row as trained.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state

pytestmark = pytest.mark.slow

CONFIG = {
    "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 2}},
    "relations": [{"name": "bought", "lhs": "user", "rhs": "item"}, {"name": "follows", "lhs": "user", "rhs": "user"}],
    "dimension": 8,
    "entity_path": "data",
    "edge_paths": ["edges"],
    "checkpoint_path": "run0",
    "num_epochs": 2,
    "workers": 1,
    "seed": 0,
    "eval_fraction": 0,
    "global_emb": False,  # the export adds a type's global embedding to each row: rows alone here
}
IMPORT = ("-l", "0", "--rel-col", "1", "-r", "2")


def write_edges(path: Path, changed: bool) -> None:
    rng = random.Random(0)
    edges = [(f"u{rng.randrange(80)}", "bought", f"i{rng.randrange(40)}") for _ in range(500)]
    edges += [(f"u{rng.randrange(80)}", "follows", f"u{rng.randrange(80)}") for _ in range(300)]
    if changed:  # u3 and i5 gone with their edges; u500, u501, i600 new
        edges = [e for e in edges[40:] if "u3" not in (e[0], e[2]) and e[2] != "i5"]
        edges += [("u500", "bought", "i7"), ("u1", "follows", "u501"), ("u9", "bought", "i600")]
    path.write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges))


def exported(env: dict[str, str], root: Path, name: str, *params: str) -> dict[str, list[str]]:
    done = run_pbg(env, root, "export", "config.json", *params, "--entities-output", f"{name}.tsv",
                   "--relation-types-output", f"{name}-rel.tsv")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {line.split("\t")[0]: line.split("\t")[1:] for line in (root / f"{name}.tsv").read_text().splitlines()}


def test_a_reimported_graph_starts_from_its_entities_trained_rows_through_the_cli(tmp_path: Path) -> None:
    env = cli_environment(tmp_path / "prefect-home")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    write_edges(tmp_path / "edges.tsv", changed=False)
    assert run_pbg(env, tmp_path, "import", "config.json", "edges.tsv", *IMPORT).returncode == 0
    trained = run_pbg(env, tmp_path, "train", "config.json")
    assert trained.returncode == 0, trained.stderr
    old = exported(env, tmp_path, "run0")
    names_before = (tmp_path / "data" / "entity_names_user_0.json").read_text()

    write_edges(tmp_path / "edges.tsv", changed=True)
    again = run_pbg(env, tmp_path, "import", "config.json", "edges.tsv", *IMPORT, "-p", "seed=1")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "data" / "entity_names_user_0.json").read_text() != names_before  # reshuffled

    before = tree_state(tmp_path / "run0"), tree_state(tmp_path / "data")
    resumed = run_pbg(env, tmp_path, "train", "config.json", "-p", "num_epochs=3")
    assert resumed.returncode == 1 and "Traceback" not in resumed.stderr
    assert "version 2 was trained on other names" in resumed.stderr and "entity type 'user':" in resumed.stderr
    assert "init_path=" in resumed.stderr
    assert changes(before[0], tree_state(tmp_path / "run0")) == []
    assert changes(before[1], tree_state(tmp_path / "data")) == []

    # The readers: export still names every row as trained; eval would rank other entities' rows.
    assert exported(env, tmp_path, "run0-again") == old
    before = tree_state(tmp_path / "run0"), tree_state(tmp_path / "data")
    evaluated = run_pbg(env, tmp_path, "eval", "config.json")
    assert evaluated.returncode == 1 and "Traceback" not in evaluated.stderr
    errors = [line for line in evaluated.stderr.splitlines() if line.startswith("pbg eval: error:")]
    assert len(errors) == 1 and "was trained on other names" in errors[0] and "names moved" in errors[0]
    assert changes(before[0], tree_state(tmp_path / "run0")) == []
    assert changes(before[1], tree_state(tmp_path / "data")) == []

    frozen = ("-p", "checkpoint_path=run1", "-p", "init_path=run0", "-p", "lr=0", "-p", "relation_lr=0")
    started = run_pbg(env, tmp_path, "train", "config.json", *frozen, "-p", "num_epochs=1")
    assert started.returncode == 0, started.stderr
    new = exported(env, tmp_path, "run1", "-p", "checkpoint_path=run1")
    both = set(old) & set(new)
    line = next(line for line in (started.stdout + started.stderr).splitlines() if "remapped init_path by name" in line)
    assert f"{len(both):,} of {len(new):,} entities kept their trained rows, 3 new (random), 2 dropped" in line
    assert set(new) - set(old) == {"u500", "u501", "i600"} and set(old) - set(new) == {"u3", "i5"}
    assert [name for name in sorted(both) if new[name] != old[name]] == []
