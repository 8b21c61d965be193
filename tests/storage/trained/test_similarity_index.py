"""storage.trained.similarity_index: the faiss index of one type's rows, built, stored, trusted or rebuilt.

Real checkpoint versions (tests/storage/trained/similar_checkpoints.py) and a real faiss, with
``flat_max_rows`` lowered so that small tables get an index: built, stored and reused on local
disk and on S3; a type up to ``flat_max_rows`` gets none (its approximate answers are exact); each
damaged or foreign index file rebuilt with one warning; a read-only checkpoint directory; the index
file removed with its version; faiss and torch run in turns in either import order. The kind
(IVF-Flat or HNSW-Flat): IVF-Flat kept when it is fast enough (``HNSW_BELOW_SPEEDUP`` set to 0 here
unless a test says otherwise, as which of two timed searches is faster is not a test's to decide),
HNSW-Flat when IVF-Flat misses the target (``NPROBES`` cut to one list), a stored file of either
kind used whatever the build would choose now, the choice between two measured candidates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from disk_state import changes, tree_state
from similar_checkpoints import clustered_tables, make_config, open_version, write_version
from store_io import StorePath, get_bytes

from pbg_core.session.build import version_layout
from storage.checkpoints import CheckpointStore
from storage.trained import similarity_index
from storage.trained.row_ids import RowIds
from storage.trained.similarity import Neighbours, SimilarEntities
from storage.trained.similarity_index import SimilarityIndex, choose

INDEX_LOGGER = "storage.trained.similarity_index"
SIZES = [180, 95, 125]
QUERIES = RowIds(torch.tensor([0, 0, 1, 2, 2, 1]), torch.tensor([0, 179, 50, 3, 124, 94]))
REPO = Path(__file__).resolve().parents[3]
FLAT_MAX_ROWS = 100  # the tables of 400 rows get an index


@pytest.fixture(autouse=True)
def ivf_when_it_reaches_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """IVF-Flat kept whenever it reaches the recall target: no timed choice decides a test's kind."""
    monkeypatch.setattr(similarity_index, "HNSW_BELOW_SPEEDUP", 0.0)


def index_file(config: object, version: int) -> str:
    return f"{config.checkpoint_path}/similar_e.v{version}.h5"  # type: ignore[attr-defined]  # a ConfigSchema


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == INDEX_LOGGER and r.levelno >= logging.WARNING]


def builds(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        1 for r in caplog.records if r.name == INDEX_LOGGER and r.getMessage().startswith("similarity index built in")
    )


def similar_in(config: object, version: int | None = None) -> SimilarEntities:
    return SimilarEntities(*open_version(config, version), flat_max_rows=FLAT_MAX_ROWS)  # type: ignore[arg-type]


def assert_answers(similar: SimilarEntities, k: int = 5) -> None:
    """The approximate lists hold the exact lists' entities (90%), each with the model's score, best first."""
    approx = similar.nearest("e", QUERIES, k, approximate=True)
    ranked = similar.nearest("e", QUERIES, similar.rows("e").count - 1)  # every other entity, exactly
    common = 0
    for q in range(len(QUERIES)):
        exact = {
            (int(p), int(o)): float(s)
            for p, o, s in zip(*(t[q] for t in (ranked.partitions, ranked.offsets, ranked.scores)), strict=True)
        }
        hits = list(zip(approx.partitions[q].tolist(), approx.offsets[q].tolist(), strict=True))
        assert torch.allclose(approx.scores[q], torch.tensor([exact[hit] for hit in hits]), rtol=1e-5, atol=1e-5)
        assert approx.scores[q].tolist() == sorted(approx.scores[q].tolist(), reverse=True)
        common += len(set(hits) & set(list(exact)[:k]))
    assert common >= 0.9 * k * len(QUERIES)


def test_an_index_is_built_stored_and_then_reused(root: StorePath, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, INDEX_LOGGER)
    config = make_config(root, 3, 8, comparator="cos", global_emb=True, max_norm=1.0)
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=3))
    similar = similar_in(config)
    assert_answers(similar)
    index = similar.index("e")
    assert index is not None and (index.kind, index.provenance.metric) == ("ivf_flat", "inner_product")
    assert (index.shape, index.recall_queries) == (400 // 39, 400) and index.recall_at_10 >= 0.95
    print(index.describe())
    with h5py.File(_local_copy(index_file(config, 1)), "r") as hf:
        assert hf.attrs["comparator"] == "cos" and hf.attrs["version"] == 1 and hf.attrs["rows"] == 400
        assert hf.attrs["recall_at_10"] == index.recall_at_10 and hf.attrs["nprobe"] == index.width
        assert hf.attrs["kind"] == "ivf_flat" and hf.attrs["nlist"] == index.shape and "ef_search" not in hf.attrs
        assert len(hf["index"]) > 400 * 8 * 4  # every row's vector
    before = tree_state(str(root))
    caplog.clear()
    again = similar_in(config)
    assert_answers(again)
    assert builds(caplog) == 0 and warnings_of(caplog) == []
    assert changes(before, tree_state(str(root))) == []  # read, not written again


def test_a_type_up_to_flat_max_rows_gets_no_index_and_exact_answers(tmp_path: Path) -> None:
    config = make_config(tmp_path, 3, 8, comparator="dot", global_emb=True)
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=13))
    similar = SimilarEntities(*open_version(config), flat_max_rows=400)
    before = tree_state(tmp_path)
    approx, exact = similar.nearest("e", QUERIES, 7, approximate=True), similar.nearest("e", QUERIES, 7)
    assert torch.equal(approx.scores, exact.scores) and torch.equal(approx.offsets, exact.offsets)
    assert similar.index("e") is None
    assert changes(before, tree_state(tmp_path)) == []  # no index file
    assert SimilarEntities(*open_version(config)).flat_max_rows == similarity_index.FLAT_MAX_ROWS


def _local_copy(url: str) -> str:
    if not url.startswith("s3://"):
        return url
    local = os.path.join(os.environ["PBG_CACHE_DIR"], "index-copy.h5")
    Path(local).write_bytes(get_bytes(url))
    return local


@pytest.mark.parametrize(("comparator", "bias"), [("dot", True), ("cos", False), ("l2", False), ("squared_l2", False)])
def test_above_flat_max_rows_an_ivf_index_reaches_the_recall_target(
    tmp_path: Path, comparator: str, bias: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, INDEX_LOGGER)
    sizes = [1100, 900, 1000]
    config = make_config(tmp_path, 3, 16, comparator=comparator, bias=bias)
    write_version(config, 1, clustered_tables(sizes, 16, clusters=3000, seed=4))  # hardly clustered: 8 lists miss
    model, reader = open_version(config)
    similar = SimilarEntities(model, reader, flat_max_rows=1000)
    index = similar.index("e")
    assert index is not None
    print(index.describe())
    assert (index.kind, index.shape) == ("ivf_flat", 3000 // 39)  # 4 sqrt(N) = 219 lists want 8.5k points
    assert index.width in (16, 32, 64, 76) and index.recall_at_10 >= similarity_index.RECALL_TARGET
    assert index.recall_queries == 1000
    assert f"recall@10 {index.recall_at_10:.3f} against exact search on 1,000 entities" in caplog.text
    queries = similar.rows("e").row_ids(torch.arange(0, 3000, 7))
    approx, exact = similar.nearest("e", queries, 10, approximate=True), similar.nearest("e", queries, 10)
    assert len(found(approx) & found(exact)) / (10 * len(queries)) >= 0.9
    with h5py.File(index_file(config, 1), "r") as hf:
        assert hf.attrs["kind"] == "ivf_flat" and hf.attrs["nprobe"] == index.width
        assert hf.attrs["recall_at_10"] == index.recall_at_10


@pytest.mark.parametrize(("comparator", "bias"), [("dot", True), ("l2", False)])
def test_where_ivf_misses_the_target_an_hnsw_index_is_built_kept_and_reused(
    tmp_path: Path, comparator: str, bias: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, INDEX_LOGGER)
    monkeypatch.setattr(similarity_index, "NPROBES", (1,))  # one list of 76 searched: IVF-Flat misses
    config = make_config(tmp_path, 3, 16, comparator=comparator, bias=bias, global_emb=False)
    tables = clustered_tables([1100, 900, 1000], 16, clusters=3000, seed=14)  # hardly clustered
    write_version(config, 1, tables)
    similar = SimilarEntities(*open_version(config), flat_max_rows=1000)
    index = similar.index("e")
    assert index is not None and (index.kind, index.shape) == ("hnsw_flat", similarity_index.HNSW_M)
    assert index.width in similarity_index.EF_SEARCHES and index.recall_at_10 >= similarity_index.RECALL_TARGET
    metric = "inner_product" if comparator == "dot" else "l2"
    assert index.describe().startswith(f"HNSW-Flat index of 3,000 rows of 'e' (v1, {metric}), M 32, efSearch ")
    assert "IVF-Flat at nprobe 1 reached recall@10 0." in caplog.text and "building HNSW-Flat too" in caplog.text
    assert "similarity index built in " in caplog.text and warnings_of(caplog) == []
    everyone = similar.rows("e").row_ids(torch.arange(3000))
    got = similar.rows("e").global_ids(_as_ids(similar.nearest("e", everyone, 10, approximate=True))).numpy()
    assert recall(got, brute_force_top10(torch.cat(tables).double().numpy(), comparator, bias)) >= 0.95
    with h5py.File(index_file(config, 1), "r") as hf:
        assert (hf.attrs["kind"], hf.attrs["m"], hf.attrs["ef_search"]) == ("hnsw_flat", 32, index.width)
        assert hf.attrs["recall_at_10"] == index.recall_at_10 and "nprobe" not in hf.attrs
    caplog.clear()
    again = SimilarEntities(*open_version(config), flat_max_rows=1000).index("e")
    assert again is not None and (again.kind, again.width) == ("hnsw_flat", index.width)
    assert again.recall_at_10 == index.recall_at_10
    assert builds(caplog) == 0 and warnings_of(caplog) == []


def _as_ids(neighbours: Neighbours) -> RowIds:
    return RowIds(neighbours.partitions, neighbours.offsets)


def brute_force_top10(x: np.ndarray, comparator: str, bias: bool) -> np.ndarray:
    """Every row's 10 nearest global ids by ``dot`` (a bias in dim 0) or ``l2``, itself left out."""
    if comparator == "dot":
        scores = (x[:, 1:] @ x[:, 1:].T + x[None, :, 0]) if bias else x @ x.T
    else:
        scores = 2 * x @ x.T - (x**2).sum(axis=1)[None, :]  # -|x_i - x_j|^2 less |x_i|^2, the same in a row
    np.fill_diagonal(scores, -np.inf)
    return np.argsort(-scores, axis=1)[:, :10]


def recall(got: np.ndarray, truth: np.ndarray) -> float:
    return sum(len(set(a) & set(b)) for a, b in zip(got.tolist(), truth.tolist(), strict=True)) / truth.size


def test_the_fastest_index_reaching_the_target_is_kept_else_the_one_of_highest_recall() -> None:
    def measured(kind: str, recall_at_10: float, search_s: float) -> SimilarityIndex:
        return SimilarityIndex(None, None, kind, 1, 1, recall_at_10, 1000, search_s)  # type: ignore[arg-type]

    fast_hnsw = measured("hnsw_flat", 0.967, 0.37)
    assert choose([measured("ivf_flat", 0.952, 1.2), fast_hnsw]) is fast_hnsw
    assert choose([measured("ivf_flat", 0.999, 0.06), fast_hnsw]).kind == "ivf_flat"
    assert choose([measured("ivf_flat", 0.94, 0.06), fast_hnsw]) is fast_hnsw  # the faster misses the target
    assert choose([measured("ivf_flat", 0.93, 0.06), measured("hnsw_flat", 0.91, 0.05)]).kind == "ivf_flat"


def found(neighbours: Neighbours) -> set[tuple[int, int, int]]:
    """(query, partition, offset) of every neighbour found."""
    return {
        (q, int(p), int(o))
        for q in range(neighbours.offsets.shape[0])
        for p, o in zip(neighbours.partitions[q], neighbours.offsets[q], strict=True)
    }


def flip_a_byte_of_the_index(url: str) -> None:
    with h5py.File(url, "r") as hf:
        dataset = hf["index"]
        at = dataset.id.get_offset() + dataset.shape[0] // 2
    data = bytearray(Path(url).read_bytes())
    data[at] ^= 0xFF
    Path(url).write_bytes(bytes(data))


def truncate(url: str) -> None:
    Path(url).write_bytes(Path(url).read_bytes()[: os.path.getsize(url) // 2])


def edit_attr(name: str, value: object) -> Callable[[str], None]:
    """A damage: attribute ``name`` of the file rewritten as ``value``, nothing else changed."""

    def edit(url: str) -> None:
        with h5py.File(url, "r+") as hf:
            hf.attrs[name] = value

    return edit


DAMAGES = {
    "truncated": (truncate, r"not a readable HDF5 file"),
    # A setting edited in place (the review's case: nprobe 128 -> 1 was trusted and missed true neighbours).
    "nprobe edited": (edit_attr("nprobe", 1), r"its bytes or attributes do not match their checksum"),
    "recall edited": (edit_attr("recall_at_10", 0.999), r"its bytes or attributes do not match their checksum"),
    "flipped byte": (flip_a_byte_of_the_index, r"its bytes or attributes do not match their checksum"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_index_file_is_rebuilt_with_one_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, 3, 8, comparator="dot")
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=5))
    similar_in(config).index("e")
    spoil, why = DAMAGES[damage]
    spoil(index_file(config, 1))
    assert_rebuilt(config, why, caplog)


def assert_rebuilt(config: object, why: str, caplog: pytest.LogCaptureFixture) -> None:
    """The next opening warns once, naming ``why``, answers right and leaves a file the one after trusts."""
    caplog.clear()
    caplog.set_level(logging.INFO, INDEX_LOGGER)
    similar = similar_in(config)
    assert_answers(similar)
    [warning] = warnings_of(caplog)
    assert warning.startswith(f"similarity index {index_file(config, similar.reader.version)} is not used (")
    assert warning.endswith("): building it again")
    assert re.search(why, warning), warning
    caplog.clear()
    similar_in(config).index("e")  # type: ignore[arg-type]
    assert warnings_of(caplog) == [] and builds(caplog) == 0


def test_another_versions_index_file_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, 3, 8, comparator="l2")
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=6))
    similar_in(config).index("e")
    write_version(config, 2, clustered_tables(SIZES, 8, clusters=6, seed=7))
    shutil.copyfile(index_file(config, 1), index_file(config, 2))
    assert_rebuilt(config, r"it was built from version 1, not version 2", caplog)


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        ({"comparator": "cos"}, r"its comparator is 'dot', not 'cos'"),
        ({"max_norm": 1.0}, r"its max_norm is 'none', not '1.0'"),
    ],
)
def test_another_configs_index_file_is_rebuilt(
    tmp_path: Path, changed: dict[str, object], why: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, 3, 8, comparator="dot")
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=8))
    similar_in(config).index("e")
    assert_rebuilt(make_config(tmp_path, 3, 8, **{"comparator": "dot", **changed}), why, caplog)


def test_a_partition_file_written_again_makes_the_index_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, 3, 8, comparator="squared_l2")
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=9))
    similar_in(config).index("e")
    tables = clustered_tables(SIZES, 8, clusters=6, seed=9)
    tables[1][0] += 1.0  # one row of partition 1 changes (a hand-edited version, say)
    write_version(config, 1, tables)
    assert_rebuilt(config, r"partition 1's file embeddings_e_1\.v1\.h5 differs from the one it was built from", caplog)


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` made unwritable: by its mode, or for root (whom modes do not stop) by ``chattr +i``."""
    directory.chmod(0o555)
    immutable = False
    try:
        if os.access(directory, os.W_OK):
            immutable = subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("this user may write into a read-only directory and chattr +i is not allowed here")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        directory.chmod(0o755)


def test_a_read_only_checkpoint_directory_keeps_the_index_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, 3, 8, comparator="dot", bias=True)
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=10))
    before = tree_state(tmp_path)
    with read_only(tmp_path / "ckpt"):
        similar = similar_in(config)
        assert_answers(similar)
        assert_answers(similar)  # the index in memory: built once
    [warning] = warnings_of(caplog)
    assert warning.startswith(f"cannot write the similarity index {index_file(config, 1)} (")
    assert warning.endswith("): it is kept in memory only")
    assert changes(before, tree_state(tmp_path)) == []


def test_the_index_file_is_removed_with_its_version(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, 3, 8, comparator="cos")
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=6, seed=11))
    similar_in(config, 1).index("e")
    write_version(config, 2, clustered_tables(SIZES, 8, clusters=6, seed=12))
    similar_in(config, 2).index("e")
    store = CheckpointStore(config.checkpoint_path)
    assert store.remove_versions_before(store.check_complete(2, version_layout(config))) == [1]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("similar_*")) == ["similar_e.v2.h5"]
    caplog.clear()
    similar_in(config).index("e")
    assert warnings_of(caplog) == [] and builds(caplog) == 0


@pytest.mark.parametrize("first", ["torch", "faiss"])
def test_faiss_and_torch_run_in_turns_in_one_process(tmp_path: Path, first: str) -> None:
    """Each brings its own OpenMP runtime: both compute right in turns, and faiss follows torch's threads."""
    script = f"""
import {first}
import faiss, numpy as np, torch
from similar_checkpoints import clustered_tables, make_config, open_version, write_version
from storage.trained.similarity import SimilarEntities
from storage.trained.row_ids import RowIds
config = make_config({str(tmp_path)!r}, 2, 32, comparator="dot", global_emb=False)
tables = clustered_tables([3000, 2000], 32, clusters=20, seed=1)
write_version(config, 1, tables)
x = torch.cat(tables).double().numpy()
scores = x[:300] @ x.T
scores[np.arange(300), np.arange(300)] = -np.inf  # not itself
want = np.argsort(-scores, axis=1, kind="stable")[:, :10]
similar = SimilarEntities(*open_version(config), flat_max_rows=1000)
rows, queries = similar.rows("e"), RowIds(torch.zeros(300, dtype=torch.long), torch.arange(300))
for threads in (2, 1, 2):
    torch.set_num_threads(threads)
    product = torch.randn(600, 600) @ torch.randn(600, 600)
    approx, exact = similar.nearest("e", queries, 10, approximate=True), similar.nearest("e", queries, 10)
    assert faiss.omp_get_max_threads() == threads, (faiss.omp_get_max_threads(), threads)
    assert np.array_equal(rows.global_ids(RowIds(exact.partitions, exact.offsets)).numpy(), want)
    got = rows.global_ids(RowIds(approx.partitions, approx.offsets)).numpy()
    assert sum(len(set(a) & set(b)) for a, b in zip(got, want)) >= 0.9 * want.size
print("ok")
"""
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(here), str(here.parent)])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
