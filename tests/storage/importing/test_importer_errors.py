"""Tests of the importer's errors: bad lines and inputs, bad arguments, skipped edges, atomicity on failure.

Each error names the file (and line) and what was expected, and a failed import writes nothing.
"""

from __future__ import annotations

import bz2
import gzip
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import store_io
from import_cases import all_files, make_config, read_back, write_tsv
from store_io import StorePath

from pbg_core.errors import ConfigError, UsageError
from storage.errors import BadDataError, DataNotFound
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions


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
        import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=1, **kwargs), seed=0)
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
        import_edges(config, [good, bad], ImportOptions(lhs_col=0, rhs_col=1))
    assert all_files(root) == ["bad.tsv", "good.tsv"]


def test_failure_while_writing_removes_everything_created(root: StorePath) -> None:
    config = make_config(root, {"n": 2}, [("r", "n", "n")], num_edge_paths=2)
    (root / "edges0" / "keep.txt").write_text("mine")
    inputs = [write_tsv(root / f"{i}.tsv", ["a b", "b c", "c a"]) for i in range(2)]

    def fail_in_second_input(phase: str, lines: int) -> None:
        if phase == "writing" and lines == 6:
            raise KeyboardInterrupt  # e.g. Ctrl-C half way through the second edge path

    with pytest.raises(KeyboardInterrupt):
        import_edges(config, inputs, ImportOptions(lhs_col=0, rhs_col=1), progress=fail_in_second_input)
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
        import_edges(config, inputs, ImportOptions(lhs_col=0, rhs_col=1), progress=fail_late)
    assert all_files(root) == ["0.tsv", "1.tsv"]


def test_missing_input_and_bad_arguments(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    missing = str(root / "nope.tsv")
    with pytest.raises(DataNotFound, match="nope.tsv"):
        import_edges(config, [missing], ImportOptions(lhs_col=0, rhs_col=1))
    src = write_tsv(root / "ok.tsv", ["a b"])
    with pytest.raises(UsageError, match="got 2 input"):
        import_edges(config, [src, src], ImportOptions(lhs_col=0, rhs_col=1))
    with pytest.raises(UsageError, match="lhs_col must be .* got -1"):
        import_edges(config, [src], ImportOptions(lhs_col=-1, rhs_col=1))
    dynamic = make_config(root, {"n": 1}, [("r", "n", "n")], dynamic_relations=True, global_emb=False)
    with pytest.raises(UsageError, match=r"rel_col \(--rel-col\) is required with dynamic_relations=True"):
        import_edges(dynamic, [src], ImportOptions(lhs_col=0, rhs_col=1))
    assert all_files(root) == ["ok.tsv"]


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
        import_edges(config, [str(cut)], ImportOptions(lhs_col=0, rhs_col=1))
    assert all_files(root) == [f"cut.tsv{suffix}"]


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
        import_edges(Config(), [str(tmp_path / "unused.tsv")], ImportOptions(lhs_col=0, rhs_col=1))
    assert list(tmp_path.iterdir()) == []


def test_unknown_relations_error_names_file_line_and_the_expected_names(root: StorePath) -> None:
    config = make_config(root, {"n": 2}, [("likes", "n", "n"), ("knows", "n", "n")])
    lines = [f"a{i}\tlikes\tb{i}" for i in range(50)] + ["a1\tlkes\tb2"] + [f"c{i}\tknows\td{i}" for i in range(50)]
    src = write_tsv(root / "typo.tsv", lines)
    before = all_files(root)
    with pytest.raises(BadDataError) as err:
        import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, unknown_relations="error"), seed=0)
    message = str(err.value)
    for fragment in (src, "line 51", "relation 'lkes' in column 1 is not in the config", "'knows', 'likes'"):
        assert fragment in message
    assert all_files(root) == before
    report = import_edges(
        config,
        [src],
        ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, skip_bad_lines=True, unknown_relations="error"),
        seed=0,
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
    report = import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0)
    assert report.skipped["unknown_relation"] == 2 and report.unknown_relations == {"nope": 2}
    before = all_files(root)
    with pytest.raises(
        ValueError, match=r"unknown_relations\n  Input should be 'skip' or 'error' .*input_value='fail'"
    ):
        ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, unknown_relations="fail")  # type: ignore[arg-type]
    assert all_files(root) == before


def test_every_edge_skipped_is_an_error_that_writes_nothing(root: StorePath) -> None:
    """Every relation name unknown to the config: it used to write empty buckets and succeed."""
    config = make_config(root, {"n": 1}, [("likes", "n", "n")])
    import_edges(
        config, [write_tsv(root / "good.tsv", ["a\tlikes\tb"])], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0
    )
    before = read_back(config)
    src = write_tsv(root / "bad.tsv", ["a\tfollows\tb", "b\tfollows\tc", "c\tblocks\ta", ""])
    with pytest.raises(BadDataError) as raised:
        import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0)
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
        import_edges(config, [src], ImportOptions(lhs_col=0, rhs_col=1, entity_min_count=2), seed=0)
    assert all_files(root) == ["g.tsv"]


def test_an_input_directory_is_named_as_a_directory(root: StorePath) -> None:
    config = make_config(root, {"n": 1}, [("r", "n", "n")])
    write_tsv(root / "inputs" / "part-0.tsv", ["a b"])
    with pytest.raises(DataNotFound, match=r"inputs: input edge list is a directory, expected a file"):
        import_edges(config, [str(root / "inputs")], ImportOptions(lhs_col=0, rhs_col=1))
