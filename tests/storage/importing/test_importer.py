"""Tests of the TSV importer: counts, partitions, offsets, round trips, errors, atomicity."""

from __future__ import annotations

import bz2
import gzip
import json
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import store_io
from store_io import StorePath

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.errors import ConfigError, UsageError
from pbg_core.types import Bucket
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound
from storage.importing import write as write_pass
from storage.importing.importer import EntityIndex, import_edges


def make_config(
    root: StorePath, entities: dict[str, int], relations: list[tuple[str, str, str]], **extra: Any
) -> ConfigSchema:
    num_paths = extra.pop("num_edge_paths", 1)
    raw = {
        "entities": {name: {"num_partitions": parts} for name, parts in entities.items()},
        "relations": [{"name": n, "lhs": lhs, "rhs": rhs} for n, lhs, rhs in relations],
        "dimension": 4,
        "entity_path": str(root / "entities"),
        "edge_paths": [str(root / f"edges{i}") for i in range(num_paths)],
        "checkpoint_path": str(root / "ckpt"),
        **extra,
    }
    return parse_config(raw)


def write_tsv(path: StorePath, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def read_back(config: ConfigSchema, edge_path_idx: int = 0) -> list[tuple[str, str, str, float | None]]:
    """Every stored edge of one edge path mapped back to (lhs name, rel name, rhs name, weight)."""
    entity_store = EntityStore(config.entity_path)
    rel_names = entity_store.load_dynamic_relation_names()
    edge_store = EdgeStore(config.edge_paths[edge_path_idx])
    nparts = {name: e.num_partitions for name, e in config.entities.items()}
    names: dict[tuple[str, int], list[str]] = {}

    def name_of(entity: str, part: int, offset: int) -> str:
        if (entity, part) not in names:
            names[entity, part] = entity_store.load_names(entity, part)
        return names[entity, part][offset]

    out = []
    for bucket in edge_store.list_buckets():
        edges = edge_store.load(bucket)
        for i in range(len(edges)):
            rel = int(edges.rel[i])
            relation = config.relations[0 if config.dynamic_relations else rel]
            lhs_part = bucket.lhs if nparts[relation.lhs] > 1 else 0
            rhs_part = bucket.rhs if nparts[relation.rhs] > 1 else 0
            lhs = name_of(relation.lhs, lhs_part, int(edges.lhs.tensor[i]))
            rhs = name_of(relation.rhs, rhs_part, int(edges.rhs.tensor[i]))
            weight = None if edges.weight is None else float(edges.weight[i])
            out.append((lhs, rel_names[rel], rhs, weight))
    return out


def all_files(root: StorePath) -> list[str]:
    """Files and directories below ``root``, relative (S3 has no directories: they are implied by keys)."""
    files = store_io.all_files(str(root))
    dirs = {f.rsplit("/", i)[0] for f in files for i in range(1, f.count("/") + 1)}
    if not root.is_s3:
        dirs |= {str(p.relative_to(str(root))) for p in Path(str(root)).rglob("*") if p.is_dir()}
    return sorted(set(files) | dirs)


# -- partitioning -------------------------------------------------------------------


def test_entity_index_splits_contiguously_like_pbg() -> None:
    index = EntityIndex(["a", "b", "c", "d", "e"], num_partitions=3)
    # starts: ceil(0*5/3)=0, ceil(5/3)=2, ceil(10/3)=4, 5
    assert [index.part_names(p) for p in range(3)] == [["a", "b"], ["c", "d"], ["e"]]
    assert [index.locate(n) for n in "abcde"] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    assert index.locate("zzz") is None


def test_entity_index_is_exact_where_pbg_floats_round_wrong() -> None:
    # PBG: floor(3/11*55) = floor(14.999999999999998) = 14, but partition 14 is empty.
    names = [f"n{i}" for i in range(11)]
    index = EntityIndex(names, num_partitions=55)
    # Partition p starts at ceil(p/5): name i sits alone in partition 5*i.
    assert index.locate("n3") == (15, 0)
    assert index.part_names(15) == ["n3"] and index.part_names(14) == []
    assert sum(len(index.part_names(p)) for p in range(55)) == 11


# -- round trips ----------------------------------------------------------------------


def test_import_hand_checked_counts_partitions_and_offsets(root: StorePath) -> None:
    config = make_config(root, {"user": 2}, [("follows", "user", "user")])
    src = write_tsv(root / "in.tsv", ["a b", "b c", "c a", "d e", "a e"])
    report = import_edges(config, [src], lhs_col=0, rhs_col=1, seed=7)

    # First-seen order a, b, c, d, e; shuffled by the seeded generator, then split 3 + 2.
    first_seen = ["a", "b", "c", "d", "e"]
    shuffled = [first_seen[i] for i in np.random.default_rng(7).permutation(5)]
    store = EntityStore(config.entity_path)
    assert store.load_names("user", 0) == shuffled[:3]
    assert store.load_names("user", 1) == shuffled[3:]
    assert (store.load_count("user", 0), store.load_count("user", 1)) == (3, 2)
    assert store.load_dynamic_relation_names() == ["follows"]
    assert not (root / "entities" / "dynamic_rel_count.txt").exists()

    where = {name: (i // 3, i % 3) for i, name in enumerate(shuffled)}  # (partition, offset)
    expected: dict[Bucket, list[tuple[int, int]]] = {}
    for lhs, rhs in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("a", "e")]:
        bucket = Bucket(where[lhs][0], where[rhs][0])
        expected.setdefault(bucket, []).append((where[lhs][1], where[rhs][1]))
    edge_store = EdgeStore(config.edge_paths[0])
    assert edge_store.list_buckets() == [Bucket(0, 0), Bucket(0, 1), Bucket(1, 0), Bucket(1, 1)]
    for bucket in edge_store.list_buckets():
        edges = edge_store.load(bucket)
        got = list(zip(edges.lhs.tensor.tolist(), edges.rhs.tensor.tolist(), strict=True))
        assert got == expected.get(bucket, []), bucket  # input order kept inside a bucket
        assert edges.rel.tolist() == [0] * len(got) and edges.weight is None

    assert report.edges_read == 5 and report.edges_written == [5]
    assert report.entity_counts == {"user": 5} and report.relation_count == 1
    assert report.skipped == {"unknown_relation": 0, "unknown_entity": 0, "blank_line": 0, "malformed_line": 0}
    assert not any(".pbg-import" in f for f in all_files(root))


def test_round_trip_string_ids_rel_column_two_types_and_two_inputs(root: StorePath) -> None:
    config = make_config(
        root,
        {"user": 3, "item": 1},
        [("buys", "user", "item"), ("likes", "user", "item"), ("knows", "user", "user")],
        num_edge_paths=2,
    )
    first = [f"user{i % 7}\tbuys\titem{i % 4}" for i in range(10)] + [f"user{i}\tknows\tuser{i + 1}" for i in range(6)]
    second = [f"user{i % 5}\tlikes\titem{i % 3}" for i in range(8)] + ["user1\tunknown_rel\titem1"]
    inputs = [write_tsv(root / "a.tsv", first), write_tsv(root / "b.tsv", second)]
    report = import_edges(config, inputs, lhs_col=0, rel_col=1, rhs_col=2, delimiter="\t", seed=3)

    for idx, lines in enumerate([first, second]):
        want = Counter(tuple(line.split("\t")) for line in lines if "unknown_rel" not in line)
        got = Counter((lhs, rel, rhs) for lhs, rel, rhs, _ in read_back(config, idx))
        assert got == want
        # Full 3 x 3 grid: the rhs takes the most partitions of its types (item 1, user 3), as PBG.
        assert EdgeStore(config.edge_paths[idx]).list_buckets() == [Bucket(l, r) for l in range(3) for r in range(3)]
    store = EntityStore(config.entity_path)
    user_names = [n for p in range(3) for n in store.load_names("user", p)]
    assert sorted(user_names) == [f"user{i}" for i in range(7)]
    assert [store.load_count("user", p) for p in range(3)] == [3, 2, 2]  # starts 0, ceil(7/3)=3, ceil(14/3)=5
    assert sorted(store.load_names("item", 0)) == ["item0", "item1", "item2", "item3"]
    assert report.skipped["unknown_relation"] == 1
    assert report.unknown_relations == {"unknown_rel": 1}
    assert "relation names not in the config (edges skipped): 'unknown_rel' (1)" in str(report)
    assert report.edges_written == [16, 8] and report.edges_read == 25


def test_weights_are_float32_and_flushes_keep_order(root: StorePath, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_pass, "CHUNK_EDGES", 2)  # many appends per bucket
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    lines = [f"x{i} 0.{i}5 x{i + 1}" for i in range(7)]
    src = write_tsv(root / "w.tsv", lines)
    import_edges(config, [src], lhs_col=0, rhs_col=2, weight_col=1, seed=0)
    got = read_back(config)
    assert [(lhs, rhs) for lhs, _, rhs, _ in got] == [(f"x{i}", f"x{i + 1}") for i in range(7)]
    assert [w for *_, w in got] == [float(np.float32(f"0.{i}5")) for i in range(7)]
    assert EdgeStore(config.edge_paths[0]).load(Bucket(0, 0)).weight.dtype.is_floating_point


def test_dynamic_relations_collected_filtered_and_written(root: StorePath) -> None:
    config = make_config(root, {"e": 2}, [("all", "e", "e")], dynamic_relations=True, global_emb=False)
    lines = ["a r1 b", "b r2 c", "c r1 a", "a r3 c", "b r2 a", "c r1 b"]  # r3 seen once
    src = write_tsv(root / "d.tsv", lines)
    report = import_edges(config, [src], lhs_col=0, rel_col=1, rhs_col=2, relation_type_min_count=2, seed=11)

    # Relations are shuffled first (first-seen order r1, r2), then the entities.
    rng = np.random.default_rng(11)
    expected_rels = [["r1", "r2"][i] for i in rng.permutation(2)]
    expected_entities = [["a", "b", "c"][i] for i in rng.permutation(3)]
    store = EntityStore(config.entity_path)
    assert store.load_dynamic_relation_names() == expected_rels
    assert store.load_dynamic_relation_count() == 2
    assert store.load_names("e", 0) + store.load_names("e", 1) == expected_entities
    got = Counter((lhs, rel, rhs) for lhs, rel, rhs, _ in read_back(config))
    assert got == Counter(tuple(line.split()) for line in lines if "r3" not in line)
    assert report.skipped["unknown_relation"] == 1 and report.relation_count == 2


def test_entity_min_count_drops_rare_entities_and_their_edges(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    src = write_tsv(root / "m.tsv", ["a b", "b a", "a rare", "b a"])
    report = import_edges(config, [src], lhs_col=0, rhs_col=1, entity_min_count=2, seed=1)
    assert sorted(EntityStore(config.entity_path).load_names("n", 0)) == ["a", "b"]
    assert report.skipped["unknown_entity"] == 1 and report.edges_written == [3]
    assert Counter(read_back(config)) == Counter([("a", "r", "b", None), ("b", "r", "a", None), ("b", "r", "a", None)])


def test_same_seed_same_partitions_other_seed_differs(root: StorePath) -> None:
    lines = [f"u{i} u{(i * 7) % 40}" for i in range(40)]

    def names_for(seed: int, sub: str) -> list[list[str]]:
        sub_root = root / sub
        sub_root.mkdir()
        config = make_config(sub_root, {"u": 2}, [("r", "u", "u")])
        import_edges(config, [write_tsv(sub_root / "in.tsv", lines)], lhs_col=0, rhs_col=1, seed=seed)
        return [EntityStore(config.entity_path).load_names("u", p) for p in range(2)]

    first = names_for(5, "a")
    assert first == names_for(5, "b")
    assert first != names_for(6, "c")


def test_blank_lines_skipped_and_every_bucket_exists(root: StorePath) -> None:
    config = make_config(root, {"n": 3}, [("r", "n", "n")], num_edge_paths=2)
    first = write_tsv(root / "1.tsv", ["a b", "", "   ", "b c"])
    second = write_tsv(root / "2.tsv", ["c a"])
    report = import_edges(config, [first, second], lhs_col=0, rhs_col=1, seed=0)
    assert report.skipped["blank_line"] == 2
    for path in config.edge_paths:
        store = EdgeStore(path)
        assert store.list_buckets() == [Bucket(l, r) for l in range(3) for r in range(3)]
    second_store = EdgeStore(config.edge_paths[1])
    assert sum(second_store.num_edges(b) for b in second_store.list_buckets()) == 1


def test_progress_callback(root: StorePath, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_pass, "CHUNK_EDGES", 2)
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    calls: list[tuple[str, int]] = []
    src = write_tsv(root / "p.tsv", ["a b", "b c", "", "c d", "d e", "e f"])
    import_edges(config, [src], lhs_col=0, rhs_col=1, seed=0, progress=lambda phase, n: calls.append((phase, n)))
    # Counting reports lines read (blank included) per parse batch; writing reports edges per spill chunk.
    assert calls == [("counting", 6), ("writing", 2), ("writing", 4), ("writing", 5)]


# -- errors and atomicity ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "kwargs", "fragments"),
    [
        (["a b c", "a b c", "a b"], {"rel_col": 2}, ["line 3", "expected at least 3 columns", "found 2"]),
        (["a b 1.5", "a b heavy"], {"weight_col": 2}, ["line 2", "finite number as weight", "'heavy'"]),
        (["a b nan"], {"weight_col": 2}, ["line 1", "finite number"]),
        ([], {}, ["line 1", "no edges"]),
    ],
)
def test_malformed_input_names_file_and_line_and_writes_nothing(
    root: StorePath, lines: list[str], kwargs: dict[str, int], fragments: list[str]
) -> None:
    config = make_config(root, {"n": 2}, [("r", "n", "n")])
    src = write_tsv(root / "bad.tsv", lines)
    before = all_files(root)
    with pytest.raises(BadDataError) as err:
        import_edges(config, [src], lhs_col=0, rhs_col=1, seed=0, **kwargs)
    message = str(err.value)
    assert src in message
    for fragment in fragments:
        assert fragment in message
    assert all_files(root) == before


def test_second_input_malformed_writes_nothing(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")], num_edge_paths=2)
    good = write_tsv(root / "good.tsv", ["a b"] * 3)
    bad = write_tsv(root / "bad.tsv", ["a b", "lonely"])
    with pytest.raises(BadDataError, match=r"bad\.tsv: line 2"):
        import_edges(config, [good, bad], lhs_col=0, rhs_col=1)
    assert all_files(root) == ["bad.tsv", "good.tsv"]


def test_failure_while_writing_removes_everything_created(root: StorePath) -> None:
    config = make_config(root, {"n": 2}, [("r", "n", "n")], num_edge_paths=2)
    (root / "edges0" / "keep.txt").write_text("mine")
    inputs = [write_tsv(root / f"{i}.tsv", ["a b", "b c", "c a"]) for i in range(2)]

    def fail_in_second_input(phase: str, lines: int) -> None:
        if phase == "writing" and lines == 6:
            raise KeyboardInterrupt  # e.g. Ctrl-C half way through the second edge path

    with pytest.raises(KeyboardInterrupt):
        import_edges(config, inputs, lhs_col=0, rhs_col=1, progress=fail_in_second_input)
    assert all_files(root) == ["0.tsv", "1.tsv", "edges0", "edges0/keep.txt"]


def test_failure_removes_nested_directories_it_created(root: StorePath) -> None:
    # PBG's examples nest edge paths inside the entity path: data/fb15k and data/fb15k/train.
    config = make_config(root, {"n": 1}, [("r", "n", "n")], num_edge_paths=2)
    data = root / "data" / "fb15k"
    config = config.model_copy(
        update={"entity_path": str(data), "edge_paths": [str(data / "train"), str(data / "valid" / "part")]}
    )
    inputs = [write_tsv(root / f"{i}.tsv", ["a b", "b c"]) for i in range(2)]

    def fail_late(phase: str, lines: int) -> None:
        if phase == "writing" and lines == 4:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        import_edges(config, inputs, lhs_col=0, rhs_col=1, progress=fail_late)
    assert all_files(root) == ["0.tsv", "1.tsv"]


def test_missing_input_and_bad_arguments(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    missing = str(root / "nope.tsv")
    with pytest.raises(DataNotFound, match="nope.tsv"):
        import_edges(config, [missing], lhs_col=0, rhs_col=1)
    src = write_tsv(root / "ok.tsv", ["a b"])
    with pytest.raises(UsageError, match="got 2 input"):
        import_edges(config, [src, src], lhs_col=0, rhs_col=1)
    with pytest.raises(UsageError, match="lhs_col must be .* got -1"):
        import_edges(config, [src], lhs_col=-1, rhs_col=1)
    dynamic = make_config(root, {"n": 1}, [("r", "n", "n")], dynamic_relations=True, global_emb=False)
    with pytest.raises(UsageError, match=r"rel_col \(--rel-col\) is required with dynamic_relations=True"):
        import_edges(dynamic, [src], lhs_col=0, rhs_col=1)
    assert all_files(root) == ["ok.tsv"]


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_a_compressed_input_is_decompressed_wherever_it_is_stored(
    root: StorePath, suffix: str, compress: Callable[[bytes], bytes]
) -> None:
    # A remote input is read from a read-cache entry without the suffix: the URL decides.
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    packed = root / f"edges.tsv{suffix}"
    store_io.put_bytes(str(packed), compress(b"a b\nb c\nc a\n"))
    import_edges(config, [str(packed)], lhs_col=0, rhs_col=1)
    assert sorted(read_back(config)) == [("a", "r", "b", None), ("b", "r", "c", None), ("c", "r", "a", None)]


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_a_truncated_compressed_input_is_bad_data_naming_it(
    root: StorePath, suffix: str, compress: Callable[[bytes], bytes]
) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    rng = random.Random(0)
    whole = compress("".join(f"a{rng.randrange(999)} b{rng.randrange(999)}\n" for _ in range(5000)).encode())
    cut = root / f"cut.tsv{suffix}"
    store_io.put_bytes(str(cut), whole[: len(whole) // 2])
    with pytest.raises(BadDataError, match=rf"cut\.tsv\{suffix}: truncated or corrupt"):
        import_edges(config, [str(cut)], lhs_col=0, rhs_col=1)
    assert all_files(root) == [f"cut.tsv{suffix}"]


def test_reimport_replaces_previous_output(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    import_edges(config, [write_tsv(root / "1.tsv", ["a b", "b c"])], lhs_col=0, rhs_col=1, seed=0)
    import_edges(config, [write_tsv(root / "2.tsv", ["x y"])], lhs_col=0, rhs_col=1, seed=0)
    assert read_back(config) == [("x", "r", "y", None)]
    names = json.loads((root / "entities" / "entity_names_n_0.json").read_text())
    assert sorted(names) == ["x", "y"]


def test_unknown_entity_type_in_relations_is_config_error(tmp_path: Path) -> None:
    class Config:  # parse_config rejects this already; the importer must not rely on it
        entities = {"n": type("E", (), {"num_partitions": 1})()}
        relations = [type("R", (), {"name": "r", "lhs": "n", "rhs": "ghost"})()]
        edge_paths = [str(tmp_path / "edges")]
        entity_path = str(tmp_path / "entities")
        dynamic_relations = False

        def storage_options_for_fs(self) -> None:
            return None

    with pytest.raises(ConfigError, match="ghost"):
        import_edges(Config(), [str(tmp_path / "unused.tsv")], lhs_col=0, rhs_col=1)
    assert list(tmp_path.iterdir()) == []


def loaded_after(modules: str) -> list[str]:
    """Which of torch and Prefect a fresh interpreter has loaded after importing ``modules``."""
    found = "sorted(m for m in ('torch', 'prefect') if m in sys.modules)"
    code = f"import json, sys\nimport {modules}\nprint(json.dumps({found}))"
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def test_the_import_path_does_not_load_torch_or_prefect() -> None:
    # `pbg import` starts in about 0.5 s because neither is loaded (torch alone: ~1.5 s, ~300 MB).
    modules = "flows.cli, flows.progress_bar, storage.config_loader, storage.importing.importer, tasks.import_progress"
    assert loaded_after(modules) == []
    assert loaded_after("flows.cli, storage.exporting.exporter") == ["torch"]  # pbg export: no Prefect


def test_unknown_relations_error_names_file_line_and_the_expected_names(root: StorePath) -> None:
    config = make_config(root, {"n": 2}, [("likes", "n", "n"), ("knows", "n", "n")])
    lines = [f"a{i}\tlikes\tb{i}" for i in range(50)] + ["a1\tlkes\tb2"] + [f"c{i}\tknows\td{i}" for i in range(50)]
    src = write_tsv(root / "typo.tsv", lines)
    before = all_files(root)
    with pytest.raises(BadDataError) as err:
        import_edges(config, [src], lhs_col=0, rel_col=1, rhs_col=2, seed=0, unknown_relations="error")
    message = str(err.value)
    for fragment in (src, "line 51", "relation 'lkes' in column 1 is not in the config", "'knows', 'likes'"):
        assert fragment in message
    assert all_files(root) == before
    report = import_edges(
        config, [src], lhs_col=0, rel_col=1, rhs_col=2, seed=0, unknown_relations="error", skip_bad_lines=True
    )
    assert report.skipped["malformed_line"] == 1 and report.skipped["unknown_relation"] == 0
    assert report.bad_lines == [
        f"{src}: line 51: relation 'lkes' in column 1 is not in the config "
        f"(expected one of 'knows', 'likes'): 'a1\\tlkes\\tb2'"
    ]
    assert sum(report.edges_written) == 100


def test_unknown_relations_skip_is_the_default_and_other_values_are_refused(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("likes", "n", "n")])
    src = write_tsv(root / "g.tsv", ["a\tlikes\tb", "a\tnope\tb", "b\tnope\tc"])
    report = import_edges(config, [src], lhs_col=0, rel_col=1, rhs_col=2, seed=0)
    assert report.skipped["unknown_relation"] == 2 and report.unknown_relations == {"nope": 2}
    with pytest.raises(ValueError, match=r"unknown_relations must be one of \['skip', 'error'\], got 'fail'"):
        import_edges(config, [src], lhs_col=0, rel_col=1, rhs_col=2, seed=0, unknown_relations="fail")


def test_every_edge_skipped_is_an_error_that_writes_nothing(root: StorePath) -> None:
    """Every relation name unknown to the config: it used to write empty buckets and succeed."""
    config = make_config(root, {"n": 1}, [("likes", "n", "n")])
    import_edges(config, [write_tsv(root / "good.tsv", ["a\tlikes\tb"])], lhs_col=0, rel_col=1, rhs_col=2, seed=0)
    before = read_back(config)
    src = write_tsv(root / "bad.tsv", ["a\tfollows\tb", "b\tfollows\tc", "c\tblocks\ta", ""])
    with pytest.raises(BadDataError) as raised:
        import_edges(config, [src], lhs_col=0, rel_col=1, rhs_col=2, seed=0)
    assert str(raised.value) == (
        f"{src}: read 3 edges and every one was skipped (3 skipped: relation name not in the config "
        "(seen: 'follows' (2), 'blocks' (1); the config has 'likes'); 1 skipped: blank line); nothing was "
        "written (the output of an earlier import, if any, is kept)"
    )
    assert read_back(config) == before


def test_every_edge_filtered_by_entity_min_count_is_an_error(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    src = write_tsv(root / "g.tsv", ["a b", "c d"])
    with pytest.raises(
        BadDataError,
        match=r"read 2 edges and every one was skipped \(2 skipped: entity seen "
        r"fewer than entity_min_count=2 times\)",
    ):
        import_edges(config, [src], lhs_col=0, rhs_col=1, seed=0, entity_min_count=2)
    assert all_files(root) == ["g.tsv"]


def test_an_input_directory_is_named_as_a_directory(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    write_tsv(root / "inputs" / "part-0.tsv", ["a b"])
    with pytest.raises(DataNotFound, match=r"inputs: input edge list is a directory, expected a file"):
        import_edges(config, [str(root / "inputs")], lhs_col=0, rhs_col=1)
