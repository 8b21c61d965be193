"""The run's filesystem options (``storage_options``) and the secrets they may hold.

One mapping of fsspec keyword arguments applies to every URL of a run (entity_path,
edge_paths, checkpoint_path, init_path, import inputs, export outputs). The known S3
keys are typed fields so Prefect's form shows them; other fsspec backends add free keys.

Secrets never serialize in clear. A value is a secret when its key is one of the
declared credential fields (``key``, ``secret``, ``token``) or its name looks like one
(:func:`is_secret_name`: *secret*, *token*, *password*, *credential*, access/account/
private/api keys, ...) at any depth, e.g. ``client_kwargs.aws_secret_access_key``;
everything below such a key is secret too. Secrets are held as pydantic ``SecretStr``:
``repr``, ``str``, ``model_dump(mode="json")`` and the JSON encoder Prefect uses for flow
parameters all give :data:`SECRET_MASK`. Validation errors inside ``storage_options``
never carry the input value (:class:`HiddenValue` replaces it), whatever the key.

:meth:`StorageOptions.to_fsspec` is the one place that reveals the values. A secret that
*is* the mask (a config read back from a saved ``config.json`` or from a Prefect flow
run's recorded parameters) is dropped with a warning, never sent as a credential, so
the environment (``AWS_*`` variables, profile, instance role) supplies it instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

logger = logging.getLogger(__name__)

SECRET_MASK = "**********"  # pydantic's rendering of a SecretStr
CREDENTIAL_FIELDS = ("key", "secret", "token")  # S3's, which the AWS_* environment can supply instead
AWS_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
)
_SECRET_NAMES = frozenset({"key", "secret", "token", "password", "passwd", "pwd", "sas"})
_SECRET_PARTS = (
    "secret",
    "token",
    "password",
    "passwd",
    "credential",
    "access_key",
    "account_key",
    "private_key",
    "api_key",
    "apikey",
    "connection_string",
    "session_key",
    "sas_",
)


def is_secret_name(name: object) -> bool:
    """Whether a storage option called ``name`` holds a credential (case-insensitive)."""
    lowered = str(name).lower()
    return lowered in _SECRET_NAMES or any(part in lowered for part in _SECRET_PARTS)


class HiddenValue:
    """Stands in for a rejected input in validation errors: its type, never its value."""

    def __init__(self, value: object) -> None:
        self.type_name = type(value).__name__

    def __repr__(self) -> str:
        article = "an" if self.type_name[:1] in "aeiou" else "a"
        return f"{article} {self.type_name} (value hidden)"

    __str__ = __repr__


def _mask_tree(value: Any, path: str, secret: bool) -> Any:
    """``value`` with every string at or below a secret name wrapped in ``SecretStr``.

    Raises:
        PydanticCustomError: a secret is neither a string, a mapping nor a list.
    """
    if isinstance(value, dict):
        return {k: _mask_tree(v, f"{path}.{k}", secret or is_secret_name(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_tree(v, f"{path}[{i}]", secret) for i, v in enumerate(value)]
    if not secret or value is None or isinstance(value, bool | SecretStr):
        return value
    if isinstance(value, str):
        return SecretStr(value)
    raise PydanticCustomError(
        "secret_type",
        "{path}: a secret must be a string, got {type_name} (value hidden)",
        {"path": path, "type_name": type(value).__name__},
    )


def _hidden(exc: ValidationError) -> ValidationError:
    """``exc`` with every input replaced by a :class:`HiddenValue`; types and messages kept."""
    details = [
        InitErrorDetails(
            type=PydanticCustomError(err["type"], "{message}", {"message": err["msg"]}),
            loc=err["loc"],
            input=HiddenValue(err["input"]),
        )
        for err in exc.errors(include_url=False)
    ]
    return ValidationError.from_exception_data(exc.title, details)


class StorageOptions(BaseModel):
    """fsspec keyword arguments for every URL of the run; secrets are masked when serialized."""

    model_config = ConfigDict(frozen=True, extra="allow")

    endpoint_url: str | None = Field(
        None, description="S3 endpoint (MinIO, moto, another region's host); default: AWS_ENDPOINT_URL or AWS."
    )
    region: str | None = Field(
        None, description="S3 region, sent as client_kwargs.region_name; default: AWS_DEFAULT_REGION."
    )
    profile: str | None = Field(None, description="AWS profile of ~/.aws/credentials; default: AWS_PROFILE.")
    anon: bool | None = Field(None, description="Anonymous access (public buckets): send no credentials.")
    key: SecretStr | None = Field(
        None, description="S3 access key id (secret, masked); with `secret`. Default: AWS_ACCESS_KEY_ID."
    )
    secret: SecretStr | None = Field(
        None, description="S3 secret access key (masked); with `key`. Default: AWS_SECRET_ACCESS_KEY."
    )
    token: SecretStr | None = Field(
        None, description="S3 session token of temporary credentials (masked). Default: AWS_SESSION_TOKEN."
    )
    client_kwargs: dict[str, Any] | None = Field(
        None, description="botocore client arguments, e.g. {'region_name': ...}; credential-like keys are masked."
    )
    config_kwargs: dict[str, Any] | None = Field(
        None, description="botocore Config arguments, e.g. {'connect_timeout': 5, 's3': {'addressing_style': 'path'}}."
    )

    @model_validator(mode="wrap")
    @classmethod
    def _mask_and_hide(cls, data: Any, handler: Callable[[Any], StorageOptions]) -> StorageOptions:
        # Wrap nested and free-key secrets before validation, and drop every input
        # from the errors: a mistyped key could put a secret under any name.
        try:
            if isinstance(data, dict):
                data = {k: cls._masked_value(k, v) for k, v in data.items()}
            options = handler(data)
            options._check_credentials()
            return options
        except ValidationError as exc:
            raise _hidden(exc) from None
        except PydanticCustomError as err:
            details = [InitErrorDetails(type=err, loc=(), input=HiddenValue(data))]
            raise ValidationError.from_exception_data(cls.__name__, details) from None

    @classmethod
    def _masked_value(cls, key: str, value: Any) -> Any:
        if key in cls.model_fields and not isinstance(value, dict):
            return value  # declared fields: their own type (SecretStr or not) applies
        return _mask_tree(value, key, is_secret_name(key))

    def _check_credentials(self) -> None:
        if (self.key is None) != (self.secret is None):
            given, missing = ("key", "secret") if self.secret is None else ("secret", "key")
            raise PydanticCustomError(
                "partial_credentials",
                "{given} is set but {missing} is not: give both, or neither to use "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the instance role",
                {"given": given, "missing": missing},
            )

    def credentials(self) -> tuple[str | None, str | None, str | None]:
        """The S3 ``key``, ``secret`` and ``token`` in clear (None: unset, or a mask read back)."""
        values = [_reveal(getattr(self, name), name) for name in CREDENTIAL_FIELDS]
        return values[0], values[1], values[2]

    def without_credentials(self) -> StorageOptions:
        """A copy without ``key``, ``secret`` and ``token``: whoever uses it resolves its own."""
        return self.model_copy(update=dict.fromkeys(CREDENTIAL_FIELDS))

    def secret_names(self) -> list[str]:
        """The dotted names of every secret value set here, masks read back excepted (names only: for messages)."""
        dumped = {**{name: getattr(self, name) for name in type(self).model_fields}, **(self.model_extra or {})}
        return sorted(_secret_paths(dumped, ""))

    def to_fsspec(self) -> dict[str, Any]:
        """The real (unmasked) fsspec keyword arguments: unset and empty values left out, masks dropped.

        Unset values are left to the filesystem's own defaults, for S3 the ``AWS_*``
        environment variables. ``region`` becomes ``client_kwargs.region_name`` unless that
        is given.
        """
        values = {**{name: getattr(self, name) for name in type(self).model_fields}, **(self.model_extra or {})}
        region = values.pop("region")
        revealed = {name: _reveal(value, name) for name, value in values.items()}
        kwargs = {name: value for name, value in revealed.items() if value is not None and value != {}}
        if region is not None:
            kwargs["client_kwargs"] = {"region_name": region, **kwargs.get("client_kwargs", {})}
        return kwargs


def _secret_paths(value: Any, path: str) -> list[str]:
    """Dotted paths of the ``SecretStr`` values in ``value`` (masks read back are none: never sent as such)."""
    if isinstance(value, SecretStr):
        return [path] if value.get_secret_value() != SECRET_MASK else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _secret_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _secret_paths(v, f"{path}[{i}]")]
    return []


def _reveal(value: Any, path: str) -> Any:
    """``value`` with secrets in clear; None for a masked secret (see the module docstring)."""
    if isinstance(value, SecretStr):
        if value.get_secret_value() == SECRET_MASK:
            logger.warning(
                "storage_options.%s holds the mask %r (a config saved by pbg-flow or a recorded flow "
                "parameter), not a credential: ignored, so the environment (%s) supplies it",
                path,
                SECRET_MASK,
                ", ".join(AWS_ENVIRONMENT),
            )
            return None
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: r for k, v in value.items() if (r := _reveal(v, f"{path}.{k}")) is not None or v is None}
    if isinstance(value, list):
        return [_reveal(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
