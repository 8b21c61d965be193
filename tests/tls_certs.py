"""Certificates for TLS tests of a Dask cluster on 127.0.0.1, made with ``cryptography``.

:func:`make_certificates` writes, under a directory, a certificate authority and one key pair
signed by it for every part of the cluster (scheduler, workers, client), valid for 127.0.0.1,
plus a second, unrelated authority with a key pair of its own: what a machine set up for
another cluster would hold. Dask's TLS is mutual (each side checks the other's certificate
against its CA file), and does not check host names.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TlsFiles:
    """A CA file, and a certificate and key signed by that CA."""

    ca: Path
    cert: Path
    key: Path

    def dask_args(self) -> list[str]:
        """``dask scheduler`` / ``dask worker`` options that use these files."""
        return ["--tls-ca-file", str(self.ca), "--tls-cert", str(self.cert), "--tls-key", str(self.key)]

    def client_env(self) -> dict[str, str]:
        """Dask's client TLS settings as environment variables."""
        return {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(self.ca),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(self.cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(self.key),
        }

    def client_config(self) -> dict[str, str]:
        """The same settings as Dask config keys (for ``dask.config.set``)."""
        return {
            "distributed.comm.tls.ca-file": str(self.ca),
            "distributed.comm.tls.client.cert": str(self.cert),
            "distributed.comm.tls.client.key": str(self.key),
        }


def make_certificates(directory: Path) -> tuple[TlsFiles, TlsFiles]:
    """The cluster's files, and another authority's (its CA, and a pair it signed)."""
    directory.mkdir(parents=True, exist_ok=True)
    return _authority(directory, "cluster"), _authority(directory, "other")


def _authority(directory: Path, name: str) -> TlsFiles:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
    ca = (
        _valid(x509.CertificateBuilder(), now)
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _valid(x509.CertificateBuilder(), now)
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} dask")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(
        ca=directory / f"{name}-ca.pem", cert=directory / f"{name}-cert.pem", key=directory / f"{name}-key.pem"
    )
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return files


def _valid(builder: x509.CertificateBuilder, now: datetime.datetime) -> x509.CertificateBuilder:
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
