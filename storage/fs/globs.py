"""Glob patterns over any URL: whether a path is one, where it is rooted, and what it matches.

One rule for every caller (retraining's edge-path patterns and its inbox): a match is given back
in the pattern's own form. A URL pattern's matches keep its scheme (``s3://b/in/*.tsv`` ->
``s3://b/in/a.tsv``, ``file:///data/in/*.tsv`` -> ``file:///data/in/a.tsv``); a plain local
pattern's are absolute local paths. Only the final part of a chained URL is globbed
(``simplecache::s3://b/*``), and its chain is kept on every match.

:func:`has_glob` and :func:`glob_root` are plain string functions: ``pbg train``'s checks run them
before its server starts (:mod:`flows.cli.retrain_configs`), so this module loads fsspec only when
:func:`glob` lists something.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

GLOB_CHARS = frozenset("*?[")

Kind = Literal["file", "directory"]


def has_glob(path: str) -> bool:
    """Whether ``path`` contains a glob character (``*``, ``?``, ``[``)."""
    return any(c in GLOB_CHARS for c in path)


def glob_root(pattern: str) -> str:
    """The directory a pattern (or a plain path) is rooted in: the part before its first glob character.

    ``in/`` -> ``in``; ``in/*.tsv`` and ``in/2026-*/edges.tsv`` -> ``in``; ``s3://b/in/*.parquet`` ->
    ``s3://b/in``; ``*.tsv`` -> ``.``; ``/*.tsv`` -> ``/``.
    """
    first = min((i for i, c in enumerate(pattern) if c in GLOB_CHARS), default=None)
    if first is None:
        return pattern.rstrip("/") or "/"
    head = pattern[:first].rpartition("/")[0]
    if head.endswith(":/"):  # "s3://bucket*": no directory above the pattern
        return pattern[:first]
    return head or ("/" if pattern.startswith("/") else ".")


def glob(pattern: str, kind: Kind, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The ``kind`` entries ``pattern`` matches, sorted, in the pattern's form (module docstring).

    Raises:
        StorageError: what the filesystem raised, translated (:func:`storage.fs.urls.translate_errors`).
    """
    from storage.fs import urls  # here: fsspec loads only when something is listed (module docstring)

    filesystem, path = urls.resolve(pattern, storage_options)
    with urls.translate_errors(pattern):
        found = filesystem.glob(path, detail=True)
    matches = sorted(p.rstrip("/") for p, info in found.items() if info.get("type") == kind)
    return [in_form_of(pattern, match) for match in matches]


def in_form_of(pattern: str, path: str) -> str:
    """``path`` (a path of ``pattern``'s filesystem, as fsspec lists it) in ``pattern``'s form."""
    from fsspec.core import split_protocol

    chain, _, last = pattern.rpartition("::")
    protocol = split_protocol(last)[0]
    url = f"{protocol}://{path}" if protocol else path
    return f"{chain}::{url}" if chain else url


__all__ = ["GLOB_CHARS", "Kind", "glob", "glob_root", "has_glob", "in_form_of"]
