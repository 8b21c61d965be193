"""storage.exporting.sinks: each export format written partition by partition and read back."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from storage.exporting.sinks import EXPORT_FORMATS, EmbeddingSink, EntityShape

NAMES = [["a", "noël"], [], ["名", 'quote"d', "tab\\t"]]  # an empty partition in the middle


def _partitions() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((len(names), 3)).astype(np.float32) for names in NAMES]


def _write(fmt: str, tmp_path: Path) -> list[str]:
    paths = [str(tmp_path / f"ent{suffix}") for suffix in EXPORT_FORMATS.get(fmt).suffixes]
    sink: EmbeddingSink = EXPORT_FORMATS.get(fmt).open(paths, 5, 3)
    for names, rows in zip(NAMES, _partitions(), strict=True):
        sink.write(names, rows)
    sink.close()
    return paths


def _all() -> tuple[list[str], np.ndarray]:
    return [n for names in NAMES for n in names], np.concatenate(_partitions())


def test_npy_holds_every_partition_in_order_with_names_as_json(tmp_path: Path) -> None:
    array_path, names_path = _write("npy", tmp_path)
    names, rows = _all()
    loaded = np.load(array_path)
    assert loaded.dtype == np.float32 and np.array_equal(loaded, rows)
    assert json.loads(Path(names_path).read_text(encoding="utf-8")) == names


def test_h5_holds_embeddings_and_utf8_names(tmp_path: Path) -> None:
    (path,) = _write("h5", tmp_path)
    names, rows = _all()
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["embeddings"][...], rows)
        assert [n.decode("utf-8") for n in f["names"][...]] == names


def test_tsv_is_pbg_entities_layout(tmp_path: Path) -> None:
    (path,) = _write("tsv", tmp_path)
    names, rows = _all()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[0] for line in lines] == names
    got = np.array([[float(v) for v in line.split("\t")[1:]] for line in lines])
    assert np.allclose(got, rows, atol=1e-9)


@pytest.mark.parametrize("fmt", ["tsv", "npy", "h5"])
def test_more_rows_than_announced_are_refused_naming_the_file(tmp_path: Path, fmt: str) -> None:
    paths = [str(tmp_path / f"ent{suffix}") for suffix in EXPORT_FORMATS.get(fmt).suffixes]
    sink = EXPORT_FORMATS.get(fmt).open(paths, 1, 2)
    with pytest.raises(ValueError, match=f"{paths[0]}: got 2 rows, announced 1"):
        sink.write(["a", "b"], np.zeros((2, 2), np.float32))
    sink.close()


def test_formats_are_registered_by_cli_name() -> None:
    assert EXPORT_FORMATS.names() == ["h5", "npy", "tsv"]


@pytest.mark.parametrize(
    ("fmt", "low", "high"),
    [("tsv", 1.0, 1.05), ("npy", 1.0, 1.0), ("h5", 0.95, 1.1)],
)
def test_estimated_sizes_match_what_is_written(tmp_path: Path, fmt: str, low: float, high: float) -> None:
    """Estimated from the shape and the names' bytes as the exporter knows them (the names file's size):
    TSV a little over the truth for values within (-10, 10) (13 bytes a value; positive ones take 12)."""
    rng = np.random.default_rng(0)
    count, dim = 20_000, 16
    names = [f"entity-{i}" for i in rng.permutation(count)]
    embeddings = (rng.standard_normal((count, dim)) * 0.5).astype(np.float32)
    names_file = tmp_path / "entity_names.json"
    names_file.write_text(json.dumps(names, indent=4))  # as the entity store writes it
    shape = EntityShape(count, dim, names_file.stat().st_size - 2 - 8 * count)
    assert shape.name_bytes == sum(len(name) for name in names)
    export_format = EXPORT_FORMATS.get(fmt)
    paths = [str(tmp_path / f"out{suffix}") for suffix in export_format.suffixes]
    sink = export_format.open(paths, count, dim)
    for start in range(0, count, 7_000):  # partitions
        sink.write(names[start : start + 7_000], embeddings[start : start + 7_000])
    sink.close()
    for path, estimate in zip(paths, export_format.sizes(shape), strict=True):
        actual = Path(path).stat().st_size
        assert low * actual <= estimate <= high * actual, (path, estimate, actual)
