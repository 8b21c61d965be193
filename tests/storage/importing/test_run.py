"""Tests of the streaming import engine: fast vs slow path, batch sizes, bad input, formats, file sizes."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.types import Bucket
from storage.edge_lists.parse import Columns, ReadSpec
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.errors import BadDataError
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.importing.run import run_import


def config_for(root: Path, parts: int = 2, relations: int = 3) -> ConfigSchema:
    return parse_config(
        {
            "entities": {"n": {"num_partitions": parts}},
            "relations": [{"name": f"r{i}", "lhs": "n", "rhs": "n"} for i in range(relations)],
            "dimension": 4,
            "entity_path": str(root / "ent"),
            "edge_paths": [str(root / "edges")],
            "checkpoint_path": str(root / "ckpt"),
        }
    )


def graph_lines(num: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    lhs, rhs, rel = rng.integers(0, 300, num), rng.integers(0, 300, num), rng.integers(0, 3, num)
    return [f"n{a}\tr{r}\tn{b}" for a, r, b in zip(lhs, rel, rhs, strict=True)]


def write(path: Path, lines: list[str], suffix: str = "\n") -> str:
    path.write_bytes("".join(line + suffix for line in lines).encode())
    return str(path)


def snapshot(config: ConfigSchema) -> tuple[list[list[str]], dict[tuple[int, int], list[list[int]]]]:
    """Entity names per partition and edge columns per bucket."""
    names = [EntityStore(config.entity_path).load_names("n", p) for p in range(2)]
    store = EdgeStore(config.edge_paths[0])
    edges = {}
    for bucket in store.list_buckets():
        e = store.load(bucket)
        edges[tuple(bucket)] = [e.lhs.tensor.tolist(), e.rhs.tensor.tolist(), e.rel.tolist()]
    return names, edges


def named_edges(config: ConfigSchema) -> Counter:
    names, edges = snapshot(config)
    return Counter(
        (names[l][a], r, names[rp][b]) for (l, rp), cols in edges.items() for a, b, r in zip(*cols, strict=True)
    )


def test_same_output_across_batch_sizes_and_paths(tmp_path: Path) -> None:
    lines = graph_lines(3000)
    src = write(tmp_path / "g.tsv", lines)
    ragged = write(tmp_path / "ragged.tsv", [line + ("\textra" if i % 7 == 0 else "") for i, line in enumerate(lines)])
    results = []
    for i, (path, block) in enumerate([(src, 1 << 20), (src, 1 << 10), (ragged, 1 << 20)]):  # last: slow path
        config = config_for(tmp_path / f"run{i}")
        run_import(config, [path], ReadSpec(Columns(0, 2, 1, None), None, block_bytes=block), seed=4, chunk_edges=500)
        results.append(snapshot(config))
    assert results[0] == results[1] == results[2]
    want = Counter((a, int(r[1:]), b) for a, r, b in (line.split("\t") for line in lines))
    config = config_for(tmp_path / "run0")
    assert named_edges(config) == want


def test_blocks_cut_mid_line_with_blank_runs_and_crlf_stay_on_the_fast_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = graph_lines(2000)
    # Runs of blank lines (longer than a block) land at block starts; CRLF endings; no final newline.
    text = "".join(line + ("\r\n" + "  \r\n" * 200 if i % 333 == 0 else "\r\n") for i, line in enumerate(lines))
    src = tmp_path / "g.tsv"
    src.write_bytes(text.rstrip("\r\n").encode())
    reference = write(tmp_path / "plain.tsv", lines)
    results = []
    for i, (path, block) in enumerate([(str(src), 1 << 9), (reference, 1 << 20)]):
        config = config_for(tmp_path / f"run{i}")
        with caplog.at_level("INFO"):
            report = run_import(config, [path], ReadSpec(Columns(0, 2, 1, None), "\t", block_bytes=block), seed=4)
        results.append(snapshot(config))
        assert report.edges_read == len(lines)
    assert "line by line" not in caplog.text
    assert results[0] == results[1]


@pytest.mark.parametrize(
    ("bad_line", "fragments"),
    [
        ("n1\tr0", ["line 1500", "expected at least 3 columns", "found 2"]),
        ("n1 r0 n2", ["line 1500", "found 1"]),  # mixed delimiters
        ("n1\tr0\t", ["line 1500", "empty name in column 2"]),
    ],
)
def test_malformed_line_deep_in_a_file_is_located(tmp_path: Path, bad_line: str, fragments: list[str]) -> None:
    lines = graph_lines(2000)
    lines[1499] = bad_line
    src = write(tmp_path / "bad.tsv", lines)
    config = config_for(tmp_path)
    with pytest.raises(BadDataError) as err:
        run_import(config, [src], ReadSpec(Columns(0, 2, 1, None), None, block_bytes=1 << 12), seed=0)
    for fragment in [src, *fragments]:
        assert fragment in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["bad.tsv"]


def test_non_utf8_and_wrong_column_index(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    src = tmp_path / "latin.tsv"
    src.write_bytes(b"a\tr0\tb\nc\tr1\tcaf\xe9\n")
    with pytest.raises(BadDataError, match=r"latin\.tsv: line 2: expected UTF-8 text in column 2"):
        import_edges(config, [str(src)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0)
    good = write(tmp_path / "good.tsv", ["a\tr0\tb"])
    with pytest.raises(
        BadDataError,
        match=r"line 1: expected at least 6 columns \(lhs=0, rhs=2, rel=5.*found 3 "
        r"\(is a column index",
    ):
        import_edges(config, [good], ImportOptions(lhs_col=0, rhs_col=2, rel_col=5), seed=0)


def test_skip_bad_lines_counts_and_lists_them(tmp_path: Path) -> None:
    lines = graph_lines(100)
    lines[9], lines[49] = "oops", "n1\tr0\tn2\tok-extra"
    config = config_for(tmp_path)
    src = write(tmp_path / "g.tsv", lines + [""], suffix="\r\n")
    report = import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, skip_bad_lines=True), seed=0)
    assert report.skipped["malformed_line"] == 1 and report.skipped["blank_line"] == 1
    assert report.bad_lines == [
        f"{src}: line 10: expected at least 3 columns (lhs=0, rhs=2, rel=1, 0-based) but found 1: 'oops'"
    ]
    assert sum(report.edges_written) == 99 and report.edges_read == 100


def test_gzip_and_parquet_inputs_give_the_same_graph(tmp_path: Path) -> None:
    lines = graph_lines(500)
    plain = config_for(tmp_path / "plain")
    import_edges(plain, [write(tmp_path / "g.tsv", lines)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=9)
    gz = tmp_path / "g.tsv.gz"
    gz.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))
    zipped = config_for(tmp_path / "gz")
    import_edges(zipped, [str(gz)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=9)
    assert snapshot(zipped) == snapshot(plain)
    # Parquet by column name, with integer ids: names become their decimal strings.
    cols = [line.split("\t") for line in lines]
    table = pa.table(
        {
            "src": [int(a[1:]) for a, _, _ in cols],
            "rel": [r for _, r, _ in cols],
            "dst": [int(b[1:]) for _, _, b in cols],
            "w": np.linspace(0.5, 2, len(cols)),
        }
    )
    pq.write_table(table, tmp_path / "g.parquet")
    par = config_for(tmp_path / "pq")
    import_edges(
        par,
        [str(tmp_path / "g.parquet")],
        ImportOptions(lhs_col="src", rhs_col="dst", rel_col="rel", weight_col="w"),
        seed=9,
    )
    assert named_edges(par) == Counter(
        {(f"{a[1:]}", int(r[1:]), f"{b[1:]}"): n for (a, r, b), n in Counter(map(tuple, cols)).items()}
    )
    store = EdgeStore(par.edge_paths[0])
    weights = np.concatenate([store.load(b).weight.numpy() for b in store.list_buckets()])
    assert weights.dtype == np.float32 and sorted(weights.tolist()) == pytest.approx(sorted(table["w"].to_pylist()))


def test_near_empty_bucket_files_are_small(tmp_path: Path) -> None:
    config = config_for(tmp_path, parts=2, relations=1)
    import_edges(
        config,
        [write(tmp_path / "g.tsv", ["a\tr0\tb", "b\tr0\tc"])],
        ImportOptions(lhs_col=0, rhs_col=2, rel_col=1),
        seed=0,
    )
    sizes = [os.path.getsize(tmp_path / "edges" / name) for name in os.listdir(tmp_path / "edges")]
    assert len(sizes) == 4 and max(sizes) < 20_000


def test_a_name_under_two_entity_types_is_two_entities_and_is_reported(tmp_path: Path) -> None:
    config = parse_config(
        {
            "entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
            "relations": [
                {"name": "bought", "lhs": "user", "rhs": "item"},
                {"name": "follows", "lhs": "user", "rhs": "user"},
            ],
            "dimension": 4,
            "entity_path": str(tmp_path / "ent"),
            "edge_paths": [str(tmp_path / "edges")],
            "checkpoint_path": str(tmp_path / "ckpt"),
        }
    )
    # Integer ids per type, the usual case: "1" and "2" are both a user and an item.
    src = write(tmp_path / "g.tsv", ["1\tbought\t1", "2\tbought\t1", "2\tfollows\t1", "3\tbought\t2"])
    report = run_import(config, [src], ReadSpec(Columns(0, 2, 1, None), "\t"), seed=0)
    assert report.entity_counts == {"item": 2, "user": 3}
    assert report.shared_names == {"item/user": 2}
    assert report.shared_examples == {"item/user": ["1", "2"]}
    assert "names under several entity types" in str(report) and "item/user: 2 (e.g. '1', '2')" in str(report)
    users, items = (EntityStore(config.entity_path).load_names(t, 0) for t in ("user", "item"))
    e = EdgeStore(config.edge_paths[0]).load(Bucket(0, 0))
    got = Counter()
    for a, r, b in zip(e.lhs.tensor.tolist(), e.rel.tolist(), e.rhs.tensor.tolist(), strict=True):
        rhs_names = items if r == 0 else users
        got[(users[a], r, rhs_names[b])] += 1
    assert got == Counter({("1", 0, "1"): 1, ("2", 0, "1"): 1, ("2", 1, "1"): 1, ("3", 0, "2"): 1})


def test_no_shared_names_report_when_types_do_not_overlap(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    src = write(tmp_path / "g.tsv", graph_lines(100))
    report = run_import(config, [src], ReadSpec(Columns(0, 2, 1, None), "\t"), seed=0)
    assert report.shared_names == {} and "several entity types" not in str(report)


def test_unknown_relation_names_are_counted_once_also_after_a_slow_path_reread(tmp_path: Path) -> None:
    config = config_for(tmp_path, relations=2)  # r0, r1: r2 is not in the config
    lines = graph_lines(600)
    lines.append(lines[0] + "\textra")  # a ragged last line: the file is read again line by line
    src = write(tmp_path / "g.tsv", lines)
    report = run_import(config, [src], ReadSpec(Columns(0, 2, 1, None), "\t", block_bytes=1 << 10), seed=0)
    want = sum(1 for line in lines if line.split("\t")[1] == "r2")
    assert report.skipped["unknown_relation"] == want
    assert report.unknown_relations == {"r2": want}


def test_a_bad_line_sends_only_its_block_through_the_slow_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = graph_lines(5000)
    lines[3210] = "n1\tr0"  # too few columns, deep in the file
    src = write(tmp_path / "g.tsv", lines)
    config = config_for(tmp_path / "run")
    with caplog.at_level("INFO"):
        report = run_import(
            config, [src], ReadSpec(Columns(0, 2, 1, None), "\t", skip_bad_lines=True, block_bytes=1 << 12), seed=0
        )
    blocks = [r.getMessage() for r in caplog.records if "blocks read line by line" in r.getMessage()]
    assert len(blocks) == 1 and f"{src}: 1 of " in blocks[0], blocks
    assert report.skipped["malformed_line"] == 1
    assert report.bad_lines[0].startswith(f"{src}: line 3211: expected at least 3 columns")
    want = Counter((a, int(r[1:]), b) for a, r, b in (line.split("\t") for i, line in enumerate(lines) if i != 3210))
    assert named_edges(config) == want


def test_unknown_relations_error_also_checks_parquet_rows(tmp_path: Path) -> None:
    config = config_for(tmp_path, relations=2)  # r0, r1
    src = tmp_path / "g.parquet"
    pq.write_table(pa.table({"src": ["a", "b", "c"], "rel": ["r0", "r7", "r1"], "dst": ["b", "c", "a"]}), src)
    spec = ReadSpec(Columns("src", "dst", "rel", None), relations=frozenset({"r0", "r1"}))
    with pytest.raises(BadDataError, match=r"row 2: relation 'r7' is not in the config \(expected one of 'r0', 'r1'\)"):
        run_import(config, [str(src)], spec, seed=0)
    skipping = ReadSpec(spec.columns, skip_bad_lines=True, relations=spec.relations)
    report = run_import(config, [str(src)], skipping, seed=0)
    assert report.skipped["malformed_line"] == 1 and sum(report.edges_written) == 2


def test_an_unknown_relation_in_error_mode_sends_only_its_block_slow(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = graph_lines(5000)
    lines[2500] = "n1\tr9\tn2"  # r9 is not a config relation
    src = write(tmp_path / "g.tsv", lines)
    spec = ReadSpec(
        Columns(0, 2, 1, None), "\t", skip_bad_lines=True, relations=frozenset({"r0", "r1", "r2"}), block_bytes=1 << 12
    )
    with caplog.at_level("INFO"):
        report = run_import(config_for(tmp_path / "run"), [src], spec, seed=0)
    slow = [r.getMessage() for r in caplog.records if "line by line" in r.getMessage()]
    assert len(slow) == 1 and f"{src}: 1 of " in slow[0], slow
    assert report.skipped["malformed_line"] == 1 and report.bad_lines[0].startswith(f"{src}: line 2501: relation 'r9'")
