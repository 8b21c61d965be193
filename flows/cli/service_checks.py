"""What a command checks of the services it will talk to, before it starts anything: a Prefect API
named by ``PREFECT_API_URL`` (:func:`check_prefect_api`) and a Dask scheduler (:func:`check_dask_scheduler`).

Each answers in seconds with one line naming the URL or address, instead of the client's long
retries ending in an "unexpected" error. Nothing heavy is imported here (no Prefect, no Dask until
a scheduler is to be probed): whatever this imports delays the embedded server's start.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from pbg_core.errors import PbgError


class PrefectApiUnreachable(PbgError):
    """``PREFECT_API_URL`` names a place where no Prefect API answers."""


EXAMPLE_API_URL = "http://127.0.0.1:4200/api"
EMBEDDED_HINT = "unset PREFECT_API_URL to run on an embedded server"


def check_prefect_api(api_url: str | None, timeout: float = 5.0, otherwise: str = EMBEDDED_HINT) -> None:
    """Raise :class:`PrefectApiUnreachable` unless a Prefect API answers ``GET /health`` at ``api_url`` (when set).

    A user-set ``PREFECT_API_URL`` that nothing answers would otherwise fail the command after
    Prefect's client has retried, as an "unexpected" error; here it takes at most ``timeout``
    seconds. Refused: a URL that is not http(s) with a host; nothing answering (refused, unreachable,
    silent for ``timeout``); an answer that is not a Prefect API's (``true`` from a server,
    401/403 from Prefect Cloud without a key: those pass, the client says more).

    Args:
        api_url: PREFECT_API_URL (None or empty: unset, nothing to check).
        timeout: Seconds to wait for the answer.
        otherwise: The way out the message ends with (default: unset it for the embedded server).
    """
    if not api_url:
        return
    where = f"PREFECT_API_URL={api_url}"
    parts = urllib.parse.urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrefectApiUnreachable(
            f"{where}: not an http(s) URL with a host; a Prefect server's is like {EXAMPLE_API_URL}"
        )
    health = f"{api_url.rstrip('/')}/health"
    try:
        with urllib.request.urlopen(health, timeout=timeout) as answer:
            body = answer.read(64).strip()
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            return  # Prefect Cloud wants a key even here: the client will say more
        raise PrefectApiUnreachable(f"{where}: {_not_prefect(f'HTTP {err.code}')}; {otherwise}") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            said = f"no answer within {timeout:g} s"
        else:  # "Connection refused", "Name or service not known": the OS's words without its number
            said = (reason.strerror if isinstance(reason, OSError) else None) or str(reason)
        raise PrefectApiUnreachable(
            f"{where}: nothing answers there ({said}); start that server, or {otherwise}"
        ) from None
    if body != b"true":
        raise PrefectApiUnreachable(f"{where}: {_not_prefect(f'answer {body[:40]!r}')}; {otherwise}")


def _not_prefect(answer: str) -> str:
    return (
        f"something answers there, but not a Prefect API (GET /health: {answer}); "
        f"a Prefect server's API URL ends in /api, like {EXAMPLE_API_URL}"
    )


def check_dask_scheduler(address: str | None, timeout: float = 5.0) -> None:
    """Raise :class:`~pbg_core.errors.ClusterError` unless a Dask scheduler answers at ``address`` (when set).

    Before the server starts; the flow's own check (:func:`flows.cluster.checks.check_cluster`)
    then asks the scheduler for its workers and their versions. Dask is imported only here.
    """
    if not address:
        return
    from flows.cluster.checks import probe_scheduler

    probe_scheduler(address, timeout)
