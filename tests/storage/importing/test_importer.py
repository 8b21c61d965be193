"""Tests of the importer's results: counts, partitions, offsets, round trips, seeds, compressed inputs.

Its errors, bad input and atomicity are in ``test_importer_errors.py``.
"""

from __future__ import annotations

import bz2
import gzip
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
import store_io
from import_cases import all_files, make_config, read_back, write_tsv
from store_io import StorePath

from pbg_core.types import Bucket
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.importing import write as write_pass
from storage.importing.importer import EntityIndex, import_edges
from storage.importing.options import ImportOptions


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


def test_import_hand_checked_counts_partitions_and_offsets(root: StorePath) -> None:
    config = make_config(root, {"user": 2}, [("follows", "user", "user")])
    src = write_tsv(root / "in.tsv", ["a b", "b c", "c a", "d e", "a e"])
    report = import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=1), seed=7)

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
    report = import_edges(config, inputs, ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, delimiter="\t"), seed=3)

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
    import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=2, weight_col=1), seed=0)
    got = read_back(config)
    assert [(lhs, rhs) for lhs, _, rhs, _ in got] == [(f"x{i}", f"x{i + 1}") for i in range(7)]
    assert [w for *_, w in got] == [float(np.float32(f"0.{i}5")) for i in range(7)]
    assert EdgeStore(config.edge_paths[0]).load(Bucket(0, 0)).weight.dtype.is_floating_point


def test_dynamic_relations_collected_filtered_and_written(root: StorePath) -> None:
    config = make_config(root, {"e": 2}, [("all", "e", "e")], dynamic_relations=True, global_emb=False)
    lines = ["a r1 b", "b r2 c", "c r1 a", "a r3 c", "b r2 a", "c r1 b"]  # r3 seen once
    src = write_tsv(root / "d.tsv", lines)
    report = import_edges(
        config, [src], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, relation_type_min_count=2), seed=11
    )

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
    report = import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=1, entity_min_count=2), seed=1)
    assert sorted(EntityStore(config.entity_path).load_names("n", 0)) == ["a", "b"]
    assert report.skipped["unknown_entity"] == 1 and report.edges_written == [3]
    assert Counter(read_back(config)) == Counter([("a", "r", "b", None), ("b", "r", "a", None), ("b", "r", "a", None)])


def test_same_seed_same_partitions_other_seed_differs(root: StorePath) -> None:
    lines = [f"u{i} u{(i * 7) % 40}" for i in range(40)]

    def names_for(seed: int, sub: str) -> list[list[str]]:
        sub_root = root / sub
        sub_root.mkdir()
        config = make_config(sub_root, {"u": 2}, [("r", "u", "u")])
        import_edges(config, [write_tsv(sub_root / "in.tsv", lines)], ImportOptions(lhs_col=0, rhs_col=1), seed=seed)
        return [EntityStore(config.entity_path).load_names("u", p) for p in range(2)]

    first = names_for(5, "a")
    assert first == names_for(5, "b")
    assert first != names_for(6, "c")


def test_blank_lines_skipped_and_every_bucket_exists(root: StorePath) -> None:
    config = make_config(root, {"n": 3}, [("r", "n", "n")], num_edge_paths=2)
    first = write_tsv(root / "1.tsv", ["a b", "", "   ", "b c"])
    second = write_tsv(root / "2.tsv", ["c a"])
    report = import_edges(config, [first, second], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
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
    import_edges(
        config, [src], ImportOptions(lhs_col=0, rhs_col=1), seed=0, progress=lambda phase, n: calls.append((phase, n))
    )
    # Counting reports lines read (blank included) per parse batch; writing reports edges per spill chunk.
    assert calls == [("counting", 6), ("writing", 2), ("writing", 4), ("writing", 5)]


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_a_compressed_input_is_decompressed_wherever_it_is_stored(
    root: StorePath, suffix: str, compress: Callable[[bytes], bytes]
) -> None:
    # A remote input is read from a read-cache entry without the suffix: the URL decides.
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    packed = root / f"edges.tsv{suffix}"
    store_io.put_bytes(str(packed), compress(b"a b\nb c\nc a\n"))
    import_edges(config, [str(packed)], ImportOptions(lhs_col=0, rhs_col=1))
    assert sorted(read_back(config)) == [("a", "r", "b", None), ("b", "r", "c", None), ("c", "r", "a", None)]


def test_reimport_replaces_previous_output(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    import_edges(config, [write_tsv(root / "1.tsv", ["a b", "b c"])], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    import_edges(config, [write_tsv(root / "2.tsv", ["x y"])], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    assert read_back(config) == [("x", "r", "y", None)]
    names = json.loads((root / "entities" / "entity_names_n_0.json").read_text())
    assert sorted(names) == ["x", "y"]


def loaded_after(modules: str) -> list[str]:
    """Which of torch and Prefect a fresh interpreter has loaded after importing ``modules``."""
    found = "sorted(m for m in ('torch', 'prefect') if m in sys.modules)"
    code = f"import json, sys\nimport {modules}\nprint(json.dumps({found}))"
    return json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def test_the_import_path_does_not_load_torch_or_prefect() -> None:
    # `pbg import` starts in about 0.5 s because neither is loaded (torch alone: ~1.5 s, ~300 MB).
    modules = "flows.cli, flows.cli.progress_bar, storage.config_loader, storage.importing.importer, storage.importing.progress"
    assert loaded_after(modules) == []
    assert loaded_after("flows.cli, storage.exporting.exporter") == ["torch"]  # pbg export: no Prefect
