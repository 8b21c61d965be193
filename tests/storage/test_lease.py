"""The checkpoint lease: one writer at a time, expiry, takeover of dead holders."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from storage.errors import BadDataError
from storage.fs import reads
from storage.lease import CheckpointLease, Lease, LeaseHeldError, LeaseLostError, kept


def test_second_run_is_refused_naming_the_holder(store_root: str) -> None:
    first = CheckpointLease(store_root, "run-a", ttl=30)
    first.acquire()
    second = CheckpointLease(store_root, "run-b", ttl=30)
    with pytest.raises(LeaseHeldError, match=r"run 'run-a' \(pid \d+ on host .+\), lease valid until") as err:
        second.acquire()
    assert f"{store_root}/lease.json" in str(err.value)
    first.release()
    second.acquire()  # free again
    assert second.read() is not None and second.read().run == "run-b"
    second.release()
    assert not reads.exists(f"{store_root}/lease.json")


def test_exactly_one_of_many_racing_runs_gets_the_lease(store_root: str) -> None:
    leases = [CheckpointLease(store_root, f"run-{i}", ttl=30) for i in range(6)]
    outcomes: list[str] = []

    def contend(lease: CheckpointLease) -> None:
        try:
            lease.acquire()
            outcomes.append("held")
        except LeaseHeldError:
            outcomes.append("refused")

    threads = [threading.Thread(target=contend, args=(lease,)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["held"] + ["refused"] * 5


def test_an_expired_lease_is_taken_over(tmp_path: Path) -> None:
    stale = CheckpointLease(str(tmp_path), "stalled", ttl=0.05)
    stale.acquire()
    time.sleep(0.1)
    fresh = CheckpointLease(str(tmp_path), "fresh", ttl=30)
    fresh.acquire()
    assert fresh.read().run == "fresh"
    with pytest.raises(LeaseLostError, match="taken over by run 'fresh'"):
        stale.renew()  # the stalled holder finds out before it commits
    stale.release()  # does not delete the new holder's lease
    assert fresh.read().run == "fresh"


def test_a_dead_holder_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    script = (
        "import sys; from storage.lease import CheckpointLease; "
        "CheckpointLease(sys.argv[1], 'killed', ttl=3600).acquire()"
    )
    # The child takes the lease and exits without releasing it, as after kill -9.
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, cwd=Path(__file__).parents[2])
    assert json.loads((tmp_path / "lease.json").read_text())["run"] == "killed"
    lease = CheckpointLease(str(tmp_path), "restarted", ttl=30)
    lease.acquire()  # no hour-long wait
    assert lease.read().run == "restarted"


def test_renew_extends_and_release_is_idempotent(tmp_path: Path) -> None:
    lease = CheckpointLease(str(tmp_path), "run", ttl=5)
    lease.acquire()
    before = lease.read().expires_at
    time.sleep(0.02)
    lease.renew()
    assert lease.read().expires_at > before
    lease.release()
    lease.release()
    with pytest.raises(LeaseLostError, match="nobody"):
        lease.renew()


def test_a_garbage_lease_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "lease.json").write_text("not json")
    with pytest.raises(BadDataError, match="not a lease file"):
        CheckpointLease(str(tmp_path), "run").acquire()


def test_a_lease_of_any_name_and_purpose(tmp_path: Path) -> None:
    first = Lease(
        str(tmp_path), "pbg import a.tsv", name="import_lease.json", busy="entity_path data is being imported into"
    )
    first.acquire()
    with pytest.raises(LeaseHeldError, match=r"import_lease.json: entity_path data is being imported into by run 'pbg"):
        Lease(str(tmp_path), "pbg import b.tsv", name="import_lease.json", busy=first.busy).acquire()
    CheckpointLease(str(tmp_path), "training").acquire()  # another file: another lease
    first.release()
    assert not (tmp_path / "import_lease.json").exists() and (tmp_path / "lease.json").exists()


def test_a_kept_lease_is_renewed_reports_its_loss_and_is_released(tmp_path: Path) -> None:
    lease = Lease(str(tmp_path), "run", ttl=0.3)  # renewed every 0.1 s
    lease.acquire()
    with kept(lease) as keeper:
        first = lease.read().expires_at
        deadline = time.monotonic() + 5
        while lease.read().expires_at == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.read().expires_at > first  # renewed by the thread
        keeper.check()
        (tmp_path / "lease.json").unlink()  # as if another run had taken it over
        while keeper.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(LeaseLostError, match="taken over by nobody"):
            keeper.check()
    assert not (tmp_path / "lease.json").exists()
    with kept(Lease(str(tmp_path), "again")):  # kept() expects an acquired lease; release is idempotent
        pass
