"""One edge-list input as batches, whatever its format: the reader chosen per file, restarts included.

:func:`edge_batches` reads a local or remote (``s3://``, through the read cache) file:

- **Parquet** (by suffix, :func:`~storage.edge_lists.parse.is_parquet`) is read by
  :func:`~storage.edge_lists.parquet.parquet_batches`;
- **text** (plain, ``.gz``, ``.bz2``) by the fast path
  (:func:`~storage.edge_lists.text_fast.fast_batches`), unless its delimiter is not one character
  or the fast path cannot start (column names) or finds no edge at all: then the file is read
  again from its first line by the slow path (:func:`~storage.edge_lists.text_slow.slow_batches`),
  the authority on what is wrong with it. The caller's ``on_restart`` runs first, so it can forget
  the batches it was given (an import drops what it counted and spilled; a reader that keeps the
  batches drops them).

A truncated or corrupt compressed or Parquet file is a :class:`~storage.errors.BadDataError`
naming it (:func:`~storage.edge_lists.parse.decoding_errors`), whichever reader meets it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from storage.edge_lists.parquet import parquet_batches
from storage.edge_lists.parse import FastPathAnomaly, RawBatch, ReadSpec, decoding_errors, detect_delimiter, is_parquet
from storage.edge_lists.text_fast import fast_batches
from storage.edge_lists.text_slow import slow_batches
from storage.fs import reads
from storage.fs.urls import StorageOptions

logger = logging.getLogger(__name__)


def edge_batches(
    url: str, spec: ReadSpec, storage_options: StorageOptions, on_restart: Callable[[], None]
) -> Iterator[RawBatch]:
    """The batches of the edge list at ``url`` (see the module docstring).

    Args:
        url: The input: local path, ``file://`` or another fsspec URL.
        spec: Columns, delimiter, bad-line policy, block size.
        storage_options: Filesystem keyword arguments.
        on_restart: Called once if a text file is read again from its start on the slow path,
            before the first batch of that reading: forget every batch this generator yielded.

    Raises:
        DataNotFound: no file at ``url``.
        BadDataError: a malformed line or row (unless ``spec.skip_bad_lines``), a missing column,
            no edge at all, or a truncated or corrupt compressed or Parquet file.
    """
    with reads.local_read_path(url, storage_options) as path, decoding_errors(url):
        if is_parquet(url):
            yield from parquet_batches(path, url, spec)
            return
        delimiter = detect_delimiter(path, url, spec.delimiter)
        try:
            if len(delimiter) != 1:
                raise FastPathAnomaly(f"delimiter {delimiter!r} is not one character")
            edges = 0
            for batch in fast_batches(path, url, spec, delimiter):
                edges += len(batch)
                yield batch
            if edges == 0:
                raise FastPathAnomaly("no edges")
        except FastPathAnomaly as why:
            logger.info("%s: reading line by line (%s)", url, why)
            on_restart()
            yield from slow_batches(path, url, spec, delimiter)
