"""flows.cluster.security: a ``tls://`` cluster of real ``dask scheduler`` / ``dask worker`` processes.

Certificates are made per module (tests/tls_certs.py); the scheduler and workers start with
``--protocol tls`` and ``--tls-ca-file/--tls-cert/--tls-key`` on 127.0.0.1, this process's client
settings come from Dask's config (``dask.config.set``), the ``pbg`` command's from the
``DASK_DISTRIBUTED__COMM__TLS__*`` environment variables. Each misconfiguration is one line that
names the address and the setting to check. The whole ``pbg train`` on two TLS workers runs
with ``PBG_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest
from _cli import PBG, cli_environment
from dask_processes import DaskProcesses
from tls_certs import TlsFiles, make_certificates

from flows.cluster.checks import ClusterError, check_cluster, probe_scheduler
from flows.cluster.security import environment_variable
from storage.checkpoints import CheckpointStore

FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
slow = pytest.mark.slow


@pytest.fixture(autouse=True)
def prefect_harness() -> Iterator[None]:
    """No Prefect server here (overrides the directory's session fixture): the train runs as a command."""
    yield


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsFiles, TlsFiles]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_cluster(
    certificates: tuple[TlsFiles, TlsFiles], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaskProcesses]:
    """A TLS scheduler (workers are started by the tests that need them)."""
    processes = DaskProcesses(tmp_path_factory.mktemp("dask-tls"), tls=certificates[0])
    processes.start_scheduler()
    yield processes
    processes.stop()


@pytest.fixture
def no_client_tls() -> Iterator[None]:
    """This process's Dask config without TLS settings, whatever the environment holds."""
    with dask.config.set({name: None for name in TlsFiles(Path(), Path(), Path()).client_config()}):
        yield


def test_the_address_is_tls_and_the_probe_passes_with_dask_s_settings(
    tls_cluster: DaskProcesses, certificates: tuple[TlsFiles, TlsFiles]
) -> None:
    assert tls_cluster.address.startswith("tls://127.0.0.1:")
    with dask.config.set(certificates[0].client_config()):
        probe_scheduler(tls_cluster.address, timeout=10)


def test_without_a_client_certificate_the_line_names_the_settings(
    tls_cluster: DaskProcesses, no_client_tls: None
) -> None:
    with pytest.raises(ClusterError) as caught:
        probe_scheduler(tls_cluster.address, timeout=10)
    message = str(caught.value)
    assert message.startswith(f"dask_address {tls_cluster.address}: no TLS certificate configured for this client")
    assert "distributed.comm.tls.ca-file is not set, distributed.comm.tls.client.cert is not set" in message
    assert "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY" in message and "\n" not in message


def test_another_ca_says_the_scheduler_s_certificate_is_not_signed_by_it(
    tls_cluster: DaskProcesses, certificates: tuple[TlsFiles, TlsFiles]
) -> None:
    cluster_files, other = certificates
    settings = {**cluster_files.client_config(), "distributed.comm.tls.ca-file": str(other.ca)}
    with dask.config.set(settings), pytest.raises(ClusterError) as caught:
        probe_scheduler(tls_cluster.address, timeout=10)
    assert str(caught.value) == (
        f"dask_address {tls_cluster.address}: TLS handshake failed: the scheduler's certificate is not signed by the "
        f"CA of distributed.comm.tls.ca-file ({other.ca}); check distributed.comm.tls.ca-file "
        "(DASK_DISTRIBUTED__COMM__TLS__CA_FILE) (the CA the cluster's certificates come from)"
    )


def test_a_client_certificate_of_another_ca_is_named_as_refused(
    tls_cluster: DaskProcesses, certificates: tuple[TlsFiles, TlsFiles]
) -> None:
    cluster_files, other = certificates
    settings = {
        **cluster_files.client_config(),
        "distributed.comm.tls.client.cert": str(other.cert),
        "distributed.comm.tls.client.key": str(other.key),
    }
    with dask.config.set(settings), pytest.raises(ClusterError) as caught:
        probe_scheduler(tls_cluster.address, timeout=10)
    assert str(caught.value).startswith(
        f"dask_address {tls_cluster.address}: TLS handshake failed: the scheduler refused this client's certificate "
        f"(distributed.comm.tls.client.cert = {other.cert}); check distributed.comm.tls.client.cert"
    )


def test_a_missing_ca_file_is_named(tls_cluster: DaskProcesses, certificates: tuple[TlsFiles, TlsFiles]) -> None:
    settings = {**certificates[0].client_config(), "distributed.comm.tls.ca-file": "/nonexistent/ca.pem"}
    with dask.config.set(settings), pytest.raises(ClusterError) as caught:
        probe_scheduler(tls_cluster.address, timeout=10)
    message = str(caught.value)
    assert message.startswith(f"dask_address {tls_cluster.address}: cannot load this client's TLS files (")
    assert "distributed.comm.tls.ca-file=/nonexistent/ca.pem" in message and "FileNotFoundError" in message


def test_tcp_to_a_tls_scheduler_and_tls_to_a_plain_one_say_which_to_use(
    tls_cluster: DaskProcesses, certificates: tuple[TlsFiles, TlsFiles], tmp_path: Path
) -> None:
    plain_address = "tcp://" + tls_cluster.address.partition("://")[2]
    with pytest.raises(ClusterError, match="a scheduler started with --protocol tls needs a tls:// address$"):
        probe_scheduler(plain_address, timeout=10)
    address, as_tls, message = _probe_a_plain_scheduler_as_tls(certificates, tmp_path)
    assert message == (
        f"dask_address {as_tls}: TLS handshake failed: what answered does not speak TLS; a scheduler started "
        f"without --protocol tls listens at {address}"
    )


def _probe_a_plain_scheduler_as_tls(certificates: tuple[TlsFiles, TlsFiles], tmp_path: Path) -> tuple[str, str, str]:
    """Start a scheduler without TLS, probe it as tls://; (its address, the tls:// one, the refusal)."""
    plain = DaskProcesses(tmp_path)
    try:
        address = plain.start_scheduler()
        as_tls = "tls://" + address.partition("://")[2]
        with dask.config.set(certificates[0].client_config()), pytest.raises(ClusterError) as caught:
            probe_scheduler(as_tls, timeout=10)
        return address, as_tls, str(caught.value)
    finally:
        plain.stop()


def test_a_plain_scheduler_that_closes_on_the_tls_hello_is_still_named(
    certificates: tuple[TlsFiles, TlsFiles], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A scheduler without TLS may close the connection on the ClientHello before it answers: then
    # there is no ssl error to read, only a closed comm. The probe asks it as tcp:// instead.
    from distributed.comm.core import CommClosedError

    import flows.cluster.checks as checks

    handshake = checks._identity

    async def closed_on_tls(address: str, timeout: float, connection_args: dict[str, Any]) -> object:
        if address.startswith("tls://"):
            raise CommClosedError("in <TLS (closed)>: Stream is closed")
        return await handshake(address, timeout, connection_args)

    monkeypatch.setattr(checks, "_identity", closed_on_tls)
    address, _, message = _probe_a_plain_scheduler_as_tls(certificates, tmp_path)
    assert message.endswith(f"does not speak TLS; a scheduler started without --protocol tls listens at {address}")


def test_check_cluster_passes_on_tls_workers(
    tls_cluster: DaskProcesses, certificates: tuple[TlsFiles, TlsFiles]
) -> None:
    tls_cluster.start_worker(FIT)
    with dask.config.set(certificates[0].client_config()):
        info = check_cluster(tls_cluster.address, machines=1, timeout=60)
    assert all(worker.startswith("tls://127.0.0.1:") for worker in info.workers)


def test_the_environment_variable_of_a_setting() -> None:
    assert environment_variable("distributed.comm.tls.client.cert") == "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"
    assert environment_variable("distributed.comm.tls.ca-file") == "DASK_DISTRIBUTED__COMM__TLS__CA_FILE"


@slow
def test_pbg_train_on_two_tls_workers(
    certificates: tuple[TlsFiles, TlsFiles], config_for: Any, graph_4x4: Any, tmp_path: Path
) -> None:
    files = certificates[0]
    cluster = DaskProcesses(tmp_path / "dask", tls=files)
    cluster.directory.mkdir()
    try:
        cluster.start_scheduler()
        cluster.start_worker(FIT)
        cluster.start_worker(FIT)
        config = config_for(graph_4x4, tmp_path / "ckpt", num_epochs=1, num_machines=2, shared_paths=True)
        (tmp_path / "config.json").write_text(json.dumps(config))
        env = {**cli_environment(tmp_path / "home"), **files.client_env()}
        command = [PBG, "train", "-p", f"dask_address={cluster.address}", str(tmp_path / "config.json")]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert CheckpointStore(str(tmp_path / "ckpt")).read_version() == 1
        # The same command without the client's settings: one line, nothing trained.
        bare = {k: v for k, v in env.items() if not k.startswith("DASK_DISTRIBUTED__COMM__TLS")}
        refused = subprocess.run(command, env=bare, capture_output=True, text=True, timeout=600)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            f"pbg train: error: dask_address {cluster.address}: no TLS certificate configured for this client "
            "(distributed.comm.tls.ca-file is not set, distributed.comm.tls.client.cert is not set); set "
            + ", ".join(
                f"{name} ({environment_variable(name)})"
                for name in (
                    "distributed.comm.tls.ca-file",
                    "distributed.comm.tls.client.cert",
                    "distributed.comm.tls.client.key",
                )
            )
            + " to the CA file, certificate and key the cluster uses"
        ]
    finally:
        cluster.stop()


def test_a_tcp_address_ignores_tls_files_but_not_required_encryption(tmp_path: Path) -> None:
    plain = DaskProcesses(tmp_path)
    try:
        address = plain.start_scheduler()
        with dask.config.set({"distributed.comm.tls.ca-file": "/nonexistent/ca.pem"}):
            probe_scheduler(address, timeout=10)  # TLS settings of another cluster do not break a tcp:// one
        with dask.config.set({"distributed.comm.require-encryption": True}), pytest.raises(ClusterError) as caught:
            probe_scheduler(address, timeout=10)
        assert str(caught.value) == (
            f"dask_address {address}: Dask's config requires encryption (distributed.comm.require-encryption is "
            "true, DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION); use the scheduler's tls:// address, or unset it"
        )
    finally:
        plain.stop()
