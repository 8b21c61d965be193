"""How this process reaches a Dask scheduler: the address's scheme and Dask's own TLS settings.

A ``dask_address`` is ``tcp://host:port`` or ``tls://host:port``
(:func:`pbg_core.config.cluster_rules.address_problem`). For ``tls://`` every connection this
package makes (the probe, the run's :class:`distributed.Client`) carries
:func:`client_security`: a ``distributed.Security`` built from Dask's configuration, i.e.
``distributed.comm.tls.ca-file``, ``distributed.comm.tls.client.cert`` and
``distributed.comm.tls.client.key`` (in a Dask config file, or the environment variables
``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``, ``..._CLIENT__CERT``, ``..._CLIENT__KEY``), exactly what a
plain ``Client(address)`` reads. Dask's TLS is mutual: the scheduler checks the client's
certificate too, so all three are needed.

What can go wrong is said in one :class:`~pbg_core.errors.ClusterError` line naming the address
and the setting to check (:func:`tls_connection_args`, :func:`describe_tls_failure`): no
certificate configured, a file that cannot be read, a scheduler certificate this CA did not
sign, a client certificate the scheduler refused, or no TLS at all at that address.
"""

from __future__ import annotations

import ssl
from typing import Any

from distributed import Security

from pbg_core.errors import ClusterError

# Dask's config key -> the environment variable that sets it.
CA_FILE = "distributed.comm.tls.ca-file"
CLIENT_CERT = "distributed.comm.tls.client.cert"
CLIENT_KEY = "distributed.comm.tls.client.key"
SETTINGS = (CA_FILE, CLIENT_CERT, CLIENT_KEY)
REQUIRE_ENCRYPTION = "distributed.comm.require-encryption"


def environment_variable(setting: str) -> str:
    """The environment variable of a Dask config key (``distributed.comm.tls.ca-file`` -> ``DASK_..._CA_FILE``)."""
    return "DASK_" + "__".join(part.upper().replace("-", "_") for part in setting.split("."))


def client_security() -> Security:
    """Dask's security settings of this process (its config and ``DASK_*`` environment), read now."""
    return Security()


def tls_connection_args(address: str) -> dict[str, Any]:
    """The ``connection_args`` of a connection to ``address``: Dask's security for the client role.

    Raises:
        ClusterError: ``address`` is ``tls://`` and no certificate is configured, or a configured
            file cannot be read.
    """
    security = client_security()
    if not address.lower().startswith("tls://"):
        if security.require_encryption:  # Dask would refuse the connection with a RuntimeError
            raise ClusterError(
                f"dask_address {address}: Dask's config requires encryption ({REQUIRE_ENCRYPTION} is true, "
                f"{environment_variable(REQUIRE_ENCRYPTION)}); use the scheduler's tls:// address, or unset it"
            )
        return {}  # a tcp:// connection takes no TLS arguments (nor fails on a broken TLS setting)
    values = {name: _setting(security, name) for name in SETTINGS}
    missing = [name for name in (CA_FILE, CLIENT_CERT) if not values[name]]
    if missing:
        raise ClusterError(
            f"dask_address {address}: no TLS certificate configured for this client ({_unset(missing)}); "
            f"set {_how(SETTINGS)} to the CA file, certificate and key the cluster uses"
        )
    try:
        return dict(security.get_connection_args("client"))
    except (OSError, ssl.SSLError) as exc:  # ssl names neither the file nor the setting
        listed = ", ".join(f"{name}={values[name]}" for name in SETTINGS if values[name])
        raise ClusterError(
            f"dask_address {address}: cannot load this client's TLS files ({listed}): {_reason(exc)}; "
            f"check {_how(SETTINGS)}"
        ) from None


def describe_tls_failure(address: str, exc: BaseException) -> str | None:
    """One line for a failed TLS handshake with ``address``, naming the setting to check; None if not one."""
    error = next((e for e in _chain(exc) if isinstance(e, ssl.SSLError)), None)
    if error is None:
        return None
    security = client_security()
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"dask_address {address}: TLS handshake failed: the scheduler's certificate is not signed by the CA "
            f"of {CA_FILE} ({_setting(security, CA_FILE)}); check {_how([CA_FILE])} (the CA the cluster's "
            "certificates come from)"
        )
    reason = str(error.reason or error)
    # Under TLS 1.3 the scheduler checks the client's certificate after the handshake: its refusal
    # comes as an alert (unknown CA, bad certificate), or, if it closed first, as an EOF.
    refused = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_REQUIRED", "UNEXPECTED_EOF")
    if isinstance(error, ssl.SSLEOFError) or any(name in reason for name in refused):
        return (
            f"dask_address {address}: TLS handshake failed: the scheduler refused this client's certificate "
            f"({CLIENT_CERT} = {_setting(security, CLIENT_CERT)}); check {_how([CLIENT_CERT, CLIENT_KEY])}: it must "
            "be signed by the CA the scheduler trusts (its --tls-ca-file)"
        )
    if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason:
        return not_tls_failure(address)
    return f"dask_address {address}: TLS handshake failed ({reason}); check {_how(SETTINGS)}"


def not_tls_failure(address: str) -> str:
    """The line for a ``tls://`` address where a scheduler without TLS answers."""
    plain = "tcp://" + address.partition("://")[2]
    return (
        f"dask_address {address}: TLS handshake failed: what answered does not speak TLS; a scheduler "
        f"started without --protocol tls listens at {plain}"
    )


def _setting(security: Security, setting: str) -> str | None:
    """A TLS file setting's value in ``security`` (its attribute, e.g. ``tls_client_cert``)."""
    attribute = "tls_" + setting.removeprefix("distributed.comm.tls.").replace(".", "_").replace("-", "_")
    value = getattr(security, attribute, None)
    return str(value) if value else None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes/contexts, each once (Dask raises its own error from the ssl one, or from
    tornado's ``StreamClosedError``, which holds the ssl error as ``real_error``)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__ or getattr(current, "real_error", None)
    return seen


def _unset(names: list[str]) -> str:
    return ", ".join(f"{name} is not set" for name in names)


def _how(names: list[str] | tuple[str, ...]) -> str:
    """The settings and their environment variables, e.g. ``distributed.comm.tls.ca-file (DASK_..._CA_FILE)``."""
    return ", ".join(f"{name} ({environment_variable(name)})" for name in names)


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
    return f"{type(exc).__name__}: {text}"
