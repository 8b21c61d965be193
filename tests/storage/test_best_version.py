"""storage.best_version: the second pointer, written only for a committed complete version, never removed."""

from __future__ import annotations

import math

import pytest
import torch
from store_io import StorePath

from pbg_core.evaluation.early_stopping import ValidationRow
from pbg_core.ports import VersionLayout
from storage.best_version import choose_best, pinned_versions, read_best, resolve_best, write_best
from storage.checkpoints import CheckpointMetadata, CheckpointStore
from storage.errors import BadDataError, DataNotFound

META = CheckpointMetadata(config_json="{}", iteration={})
LAYOUT = VersionLayout({("user", 0): (3, 2)})
SETUP = "valid|all"


def _row(version: int, mrr: float, setup: str = SETUP) -> ValidationRow:
    return ValidationRow(version, version, mrr, 0.0, 1.0, 5, False, 0.1, setup)


def _write_version(store: CheckpointStore, v: int) -> None:
    store.save_embeddings("user", 0, v, torch.full((3, 2), float(v)), None, META)
    store.save_model(v, {"w": torch.ones(1)}, {"w": "relations/0/operator/rhs/diagonal"}, None, META)


@pytest.fixture
def store(root: StorePath) -> CheckpointStore:
    return CheckpointStore(str(root))


def test_no_file_no_best_and_nothing_pinned(store: CheckpointStore) -> None:
    assert read_best(store.url) is None and pinned_versions(store.url) == frozenset()


def test_written_only_with_evidence_of_a_committed_version(store: CheckpointStore) -> None:
    _write_version(store, 1)
    _write_version(store, 2)
    kept = store.check_complete(2, LAYOUT)
    with pytest.raises(ValueError, match="only a committed, complete version"):
        write_best(kept, None, 1, _row(2, 0.5), "mrr")  # v2 not committed yet
    with pytest.raises(ValueError, match="evidence for v2"):
        write_best(kept, None, 2, _row(1, 0.5), "mrr")
    assert read_best(store.url) is None
    best = write_best(kept, None, 2, _row(2, 0.5), "mrr")
    assert read_best(store.url) == best and (best.version, best.value) == (2, 0.5)
    assert pinned_versions(store.url) == {2}


def test_removal_keeps_the_pinned_version_and_removes_the_rest(root: StorePath, store: CheckpointStore) -> None:
    for v in (1, 2, 3, 4):
        _write_version(store, v)
    (root / "similar_user.v2.h5").write_bytes(b"index")  # the best version's index stays with it
    store.write_version(4)
    write_best(store.check_complete(2, LAYOUT), None, 4, _row(2, 0.9), "mrr")
    assert store.remove_versions_before(store.check_complete(4, LAYOUT)) == [1, 3]
    assert store.list_versions() == [2, 4] and (root / "similar_user.v2.h5").exists()


def test_an_unreadable_best_json_stops_removal(root: StorePath, store: CheckpointStore) -> None:
    for v in (1, 2):
        _write_version(store, v)
    (root / "best.json").write_text("{torn")
    with pytest.raises(BadDataError, match="best.json"):
        store.remove_versions_before(store.check_complete(2, LAYOUT))
    assert store.list_versions() == [1, 2]


def test_choose_best_takes_the_best_complete_committed_row(store: CheckpointStore) -> None:
    for v in (1, 2, 3):
        _write_version(store, v)
    rows = [_row(1, 0.4), _row(2, 0.7), _row(3, 0.9), _row(4, 0.99), _row(5, 0.1, setup="other")]
    best = choose_best(store.url, None, rows, ("mrr", SETUP), 3, LAYOUT)  # v4 is above the committed v3
    assert best is not None and best.version == 3
    assert choose_best(store.url, None, rows, ("mrr", SETUP), 3, LAYOUT) == best  # unchanged: idempotent
    # A better version whose files are gone cannot be best: the next complete one is.
    rows.append(_row(0, 0.0))
    store.remove_versions_before(store.check_complete(3, LAYOUT))  # v1, v2 go (v3 is pinned and kept)
    assert choose_best(store.url, None, [*rows, _row(2, 0.95)], ("mrr", SETUP), 3, LAYOUT) == best


def test_another_setup_or_nan_rows_leave_the_pointer(store: CheckpointStore) -> None:
    _write_version(store, 1)
    best = write_best(store.check_complete(1, LAYOUT), None, 1, _row(1, 0.5), "mrr")
    assert choose_best(store.url, None, [_row(1, 0.9, setup="x")], ("mrr", SETUP), 1, LAYOUT) == best
    assert choose_best(store.url, None, [_row(1, math.nan)], ("mrr", SETUP), 1, LAYOUT) == best


def test_resolve_best_for_the_commands(store: CheckpointStore) -> None:
    with pytest.raises(DataNotFound, match="no best.json here: train with a validation section first"):
        resolve_best(store.url, None, 3)
    _write_version(store, 2)
    write_best(store.check_complete(2, LAYOUT), None, 2, _row(2, 0.5), "mrr")
    assert resolve_best(store.url, None, 2) == 2
    with pytest.raises(BadDataError, match="names v2, above the committed version 1"):
        resolve_best(store.url, None, 1)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", 'expected {"format": 1'),
        ('{"format": 1, "metric": "mrr", "row": {"version": 1}}', "a row must have exactly the fields"),
        ('{"format": 1, "metric": "auc", "row": ' + '{"version": 1, "epoch": 1, "mrr": 0.1, "r1": 0.1, "r10": 0.1, '
         '"count": 1, "sampled": false, "seconds": 0.1, "setup": "s"}}', "'auc' is not one of"),
    ],
)  # fmt: skip
def test_format_errors_name_the_file(root: StorePath, text: str, says: str) -> None:
    (root / "best.json").write_text(text)
    with pytest.raises(BadDataError, match="best.json") as info:
        read_best(str(root))
    assert says in str(info.value)
