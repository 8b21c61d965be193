"""Read a training config from a file and validate it with :func:`pbg_core.config.parse_config`.

Three formats:

- ``.py``: a PBG config, a module defining ``get_torchbiggraph_config()`` that
  returns the config dict. The file is executed, so only local files are
  accepted: running code fetched from a URL is refused.
- ``.json``, ``.yaml``/``.yml``: the config dict itself, read from any fsspec URL
  (local path, ``file://``, ``s3://``).

Every problem with the content is a :class:`ConfigError` whose ``source`` is the
file; a missing file is a :class:`storage.errors.DataNotFound` naming it.

A tuning study's search-space file (:func:`load_search_space`) is read the same way, as JSON or
YAML from any fsspec URL, into :class:`pbg_core.config.search_space.SearchSpace`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pbg_core.config import ConfigSchema, config_to_json, parse_config
from pbg_core.errors import ConfigError, SearchSpaceError
from storage.errors import AccessDenied, BadDataError, DataNotFound

if TYPE_CHECKING:
    from pbg_core.config.search_space import SearchSpace
    from storage.fs.urls import StorageOptions

# A URL's protocol: ``s3://``, ``file://``, chained ``simplecache::s3://``. A local config is
# read without fsspec (and yaml is imported for YAML only): ``pbg train`` reads its config
# before it starts its server, so every import here delays the server's start.
_PROTOCOL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)(://|::)")

PBG_CONFIG_FUNCTION = "get_torchbiggraph_config"
_SUFFIXES = (".py", ".json", ".yaml", ".yml")


def load_config(
    url_or_path: str, overrides: Sequence[str] = (), storage_options: StorageOptions = None
) -> ConfigSchema:
    """Load, override and validate the config stored at ``url_or_path``.

    Args:
        url_or_path: A ``.py`` (local only), ``.json``, ``.yaml`` or ``.yml`` file.
        overrides: PBG ``-p key=value`` overrides, applied before validation.
        storage_options: fsspec filesystem options for remote JSON/YAML files.

    Returns:
        The validated config.

    Raises:
        DataNotFound: the file does not exist.
        ConfigError: the file type is not supported, the file cannot be parsed or
            executed, or the config is invalid (every problem listed; ``source`` is the file).
    """
    suffix = os.path.splitext(url_or_path.split("?", 1)[0])[1].lower()
    if suffix == ".py":
        raw = _load_python(url_or_path)
    elif suffix == ".json":
        raw = _parse_text(url_or_path, _read_text(url_or_path, storage_options), _parse_json)
    elif suffix in (".yaml", ".yml"):
        raw = _parse_text(url_or_path, _read_text(url_or_path, storage_options), _parse_yaml)
    else:
        raise ConfigError(
            [f"unsupported config file type {suffix or '(none)'!r}; allowed: {', '.join(_SUFFIXES)}"],
            url_or_path,
        )
    return parse_config(raw, overrides, source=url_or_path)


def load_search_space(url_or_path: str, storage_options: StorageOptions = None) -> SearchSpace:
    """Read a search-space file; its structure is checked, its fit to a config is not (``check_space``).

    Args:
        url_or_path: A ``.json``, ``.yaml`` or ``.yml`` file, local or any fsspec URL.
        storage_options: fsspec filesystem options for a remote file.

    Returns:
        The space, whose ``study`` defaults to the file's name without its suffix.

    Raises:
        DataNotFound: the file does not exist.
        SearchSpaceError: the file type is not supported, the file cannot be parsed, or its
            content is not a search space (every problem listed; ``source`` is the file).
    """
    from pbg_core.config.search_space import parse_space  # its models are built for `pbg tune` alone

    suffix = os.path.splitext(url_or_path.split("?", 1)[0])[1].lower()
    parsers = {".json": _parse_json, ".yaml": _parse_yaml, ".yml": _parse_yaml}
    if suffix not in parsers:
        allowed = ", ".join(parsers)
        raise SearchSpaceError([f"unsupported file type {suffix or '(none)'!r}; allowed: {allowed}"], url_or_path)
    text = _read_text(url_or_path, storage_options, "search-space file")
    return parse_space(_parse_text(url_or_path, text, parsers[suffix], SearchSpaceError), url_or_path)


def dump_config_json(config: ConfigSchema) -> str:
    """The config as PBG's ``config.json`` text (every field, indent 4)."""
    return json.dumps(config_to_json(config), indent=4)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None


# YAML 1.2 and JSON read 1e-4 as a number; PyYAML's YAML 1.1 rules want a dot (1.0e-4) and give
# the string "1e-4" otherwise, which a config or search-space file never means.
_FLOAT = r"""^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"""


def _parse_yaml(text: str) -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader with YAML 1.2's float form added (``1e-4``); integers still read as integers."""

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_FLOAT), list("-+0123456789."))
    try:
        return yaml.load(text, Loader=Loader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as err:
        mark, problem = getattr(err, "problem_mark", None), getattr(err, "problem", None)
        if mark is not None and problem:
            context = getattr(err, "context", None)
            where = f"at line {mark.line + 1}, column {mark.column + 1}"
            raise ValueError(f"not valid YAML: {problem} {where}" + (f" ({context})" if context else "")) from None
        # PyYAML's message spans lines (context, marker); keep it on one line.
        raise ValueError("not valid YAML: " + " ".join(str(err).split())) from None


def _read_text(url: str, storage_options: StorageOptions, what: str = "config file") -> str:
    """The text of the file ``what`` (a config file): a local file directly, anything else through :mod:`storage.fs`."""
    path = local_path(url)
    if path is None:
        from storage.fs.reads import read_text

        return read_text(url, storage_options)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise DataNotFound(url, f"{what} does not exist") from None
    except IsADirectoryError:
        raise DataNotFound(url, f"is a directory, expected a {what}") from None
    except PermissionError:
        raise AccessDenied(url, f"cannot read the {what}: permission denied") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadDataError(url, f"expected UTF-8 text, got undecodable byte at offset {err.start}") from None


def local_path(url: str) -> str | None:
    """The local path ``url`` names (a plain path, ``file://`` or ``local://``), None for a remote URL.

    Decided from the text alone, without importing fsspec (see :data:`_PROTOCOL_RE`).
    """
    match = _PROTOCOL_RE.match(url)
    if match is None:
        return url
    if match.group(2) == "://" and match.group(1).lower() in ("file", "local"):
        return url.split("://", 1)[1]
    return None


def _parse_text(source: str, text: str, parse: Callable[[str], Any], error: type[ConfigError] = ConfigError) -> Any:
    """The parsed document; parse_config (or parse_space) checks that it is a mapping."""
    try:
        return parse(text)
    except ValueError as err:
        raise error([str(err)], source) from None


def _local_path(url: str) -> str:
    """The local path of ``url``; remote URLs are refused because the file would be executed."""
    path = local_path(url)
    if path is None:
        protocol = url.split(":", 1)[0]
        raise ConfigError(
            [
                f"a .py config is executed, so it must be a local file, not a {protocol}:// URL; "
                "copy it locally or convert it to .json/.yaml"
            ],
            url,
        )
    return path


def _load_python(url: str) -> Any:
    """Execute a PBG ``.py`` config and return what ``get_torchbiggraph_config()`` returns."""
    path = _local_path(url)
    if not os.path.isfile(path):
        raise DataNotFound(url, "config file does not exist")
    # A unique module name per file, so two configs never share a module object,
    # and registered in sys.modules so that classes defined in it can be pickled.
    digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]
    name = f"pbg_flow_config_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError([f"cannot load {path!r} as a Python module"], url)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ConfigError([f"executing the config file raised {type(err).__name__}: {err}"], url) from err
    function = getattr(module, PBG_CONFIG_FUNCTION, None)
    if not callable(function):
        raise ConfigError([f"the file does not define {PBG_CONFIG_FUNCTION}()"], url)
    try:
        return function()
    except Exception as err:
        raise ConfigError([f"{PBG_CONFIG_FUNCTION}() raised {type(err).__name__}: {err}"], url) from err
