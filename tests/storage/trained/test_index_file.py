"""storage.trained.index_file: a similarity index's file of either kind, trusted or rebuilt.

Real checkpoint versions and a real faiss (the index built through
:class:`~storage.trained.similarity.SimilarEntities`, ``flat_max_rows`` lowered): a stored index of
either kind (IVF-Flat, HNSW-Flat) is used as it is, with its own search width, whatever a build
would choose now; a file whose kind or kind's attributes are not what its bytes hold is rebuilt
with one warning. The kind is forced as tests/storage/trained/test_similarity_index.py does:
IVF-Flat when ``HNSW_BELOW_SPEEDUP`` is 0 (it reaches the target searching every list), HNSW-Flat
when ``NPROBES`` allows one list of a hardly clustered table, which misses the target.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from disk_state import changes, tree_state
from similar_checkpoints import clustered_tables, make_config, open_version, write_version

from storage import hdf5
from storage.trained import similarity_index
from storage.trained.index_file import KINDS, checksum
from storage.trained.similarity import SimilarEntities
from storage.trained.similarity_index import SimilarityIndex

INDEX_LOGGER = "storage.trained.similarity_index"
SIZES = [180, 95, 125]


def force(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Make a build choose ``kind`` on the hardly clustered tables below."""
    monkeypatch.setattr(similarity_index, "HNSW_BELOW_SPEEDUP", 0.0)
    monkeypatch.setattr(similarity_index, "NPROBES", (1,) if kind == "hnsw_flat" else similarity_index.NPROBES)


def open_index(config: object) -> SimilarityIndex:
    index = SimilarEntities(*open_version(config), flat_max_rows=100).index("e")  # type: ignore[arg-type]
    assert index is not None
    return index


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == INDEX_LOGGER and r.levelno >= level]


@pytest.mark.parametrize("stored", sorted(KINDS))
def test_a_stored_index_of_either_kind_is_used_whatever_a_build_would_choose_now(
    tmp_path: Path, stored: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, 3, 8, comparator="cos", global_emb=True)
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=400, seed=21))  # hardly clustered
    force(monkeypatch, stored)
    first = open_index(config)
    assert first.kind == stored and first.recall_at_10 >= similarity_index.RECALL_TARGET
    force(monkeypatch, next(kind for kind in KINDS if kind != stored))  # what a build would choose now
    before = tree_state(tmp_path)
    caplog.clear()  # the first build's lines, captured if an earlier test left the storage logger at INFO
    caplog.set_level(logging.INFO, INDEX_LOGGER)
    again = open_index(config)
    assert (again.kind, again.shape, again.width, again.recall_at_10) == (
        first.kind,
        first.shape,
        first.width,
        first.recall_at_10,
    )
    assert [m for m in messages(caplog, logging.INFO) if "built" in m] == []
    assert messages(caplog, logging.WARNING) == [] and changes(before, tree_state(tmp_path)) == []
    vectors = torch.randn(20, 8, generator=torch.Generator().manual_seed(2)).numpy()
    own = torch.full((20,), -1)
    assert torch.equal(again.neighbours(vectors, own, 5), first.neighbours(vectors, own, 5))


def set_attrs(url: str, attrs: dict[str, object]) -> None:
    """Rewrite root attributes of the file at ``url`` (None: delete one), and its checksum to match, as a
    writer with a bug would: what is checked behind the checksum; its index bytes stay as they are."""
    with h5py.File(url, "r+") as hf:
        for key, value in attrs.items():
            if value is None:
                del hf.attrs[key]
            else:
                hf.attrs[key] = value
        hf.attrs["checksum"] = checksum(np.asarray(hf["index"][...], dtype=np.uint8), hdf5.read_attrs(hf))


@pytest.mark.parametrize(
    ("stored", "attrs", "why"),
    [
        ("ivf_flat", {"kind": "pq"}, r"its kind is 'pq', not one of 'hnsw_flat', 'ivf_flat'"),
        ("ivf_flat", {"nprobe": None}, r"it has no 'nprobe' attribute \(its kind is 'ivf_flat'\)"),
        ("hnsw_flat", {"kind": None}, r"it has no 'kind' attribute"),
        (
            "ivf_flat",
            {"kind": "hnsw_flat", "m": 32, "ef_search": 16},
            r"faiss reads it as IndexIVFFlat of 400 rows of dimension 8, not as the IndexHNSWFlat of 400 x 8 its "
            r"attributes say",
        ),
    ],
)
def test_a_file_whose_kind_is_not_what_it_holds_is_rebuilt_with_one_warning(
    tmp_path: Path,
    stored: str,
    attrs: dict[str, object],
    why: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = make_config(tmp_path, 3, 8, comparator="dot")
    write_version(config, 1, clustered_tables(SIZES, 8, clusters=400, seed=22))
    force(monkeypatch, stored)
    open_index(config)
    url = f"{config.checkpoint_path}/similar_e.v1.h5"
    set_attrs(url, attrs)
    caplog.clear()
    caplog.set_level(logging.INFO, INDEX_LOGGER)
    rebuilt = open_index(config)
    [warning] = messages(caplog, logging.WARNING)
    assert warning.startswith(f"similarity index {url} is not used (") and re.search(why, warning), warning
    assert rebuilt.kind == stored and rebuilt.recall_at_10 >= similarity_index.RECALL_TARGET
    caplog.clear()
    open_index(config)
    assert messages(caplog, logging.WARNING) == [] and [m for m in messages(caplog, logging.INFO) if "built" in m] == []
