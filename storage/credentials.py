"""Whether a process resolves given S3 credentials by itself, found without sending them.

A distributed run sends each Dask worker the run's storage options with every bucket. A
credential in them crosses the scheduler connection; it need not when the worker's own
environment (the ``AWS_*`` variables, a ``~/.aws`` profile, an instance role) supplies the
same one. To find out without sending it, the coordinator draws a random salt and compares
:func:`credentials_digest` of the config's credentials with each worker's
:func:`own_credentials_digest`: a SHA-256 of the salt and the credentials, which tells equal
from different and nothing else (the salt is fresh per run, the secrets are long and random).

botocore (s3fs's client library) resolves the credentials, in the order s3fs would: the
profile the options name, else the environment, the shared files, an instance role.
"""

from __future__ import annotations

import hashlib
import logging

logger = logging.getLogger(__name__)


def credentials_digest(salt: bytes, key: str | None, secret: str | None, token: str | None) -> str | None:
    """The salted digest of an access key, secret key and session token; None without key and secret."""
    if not key or not secret:
        return None
    return hashlib.sha256(salt + b"\0".join(value.encode() for value in (key, secret, token or ""))).hexdigest()


def own_credentials_digest(salt: bytes, profile: str | None) -> str | None:
    """:func:`credentials_digest` of the credentials this process resolves by itself; None if it has none.

    Runs on a Dask worker (sent by reference: the worker imports this module).
    """
    import botocore.exceptions
    import botocore.session

    try:
        credentials = botocore.session.Session(profile=profile).get_credentials()
    except botocore.exceptions.BotoCoreError as exc:  # e.g. the profile is not in ~/.aws
        logger.info("no S3 credentials of its own here: %s", exc)
        return None
    if credentials is None:
        return None
    frozen = credentials.get_frozen_credentials()
    return credentials_digest(salt, frozen.access_key, frozen.secret_key, frozen.token)


__all__ = ["credentials_digest", "own_credentials_digest"]
