"""storage.edge_lists: how an edge-list file is read, as batches of string columns (text, .gz, .bz2, Parquet).

:func:`storage.edge_lists.read.edge_batches` is the entry point: it picks the reader per file
(:mod:`~storage.edge_lists.parquet`, or :mod:`~storage.edge_lists.text_fast` falling back to
:mod:`~storage.edge_lists.text_slow`); :mod:`~storage.edge_lists.parse` says what a line means
and holds the column spec and the batch type; :mod:`~storage.edge_lists.prefetch` runs a producer
one step ahead in a thread. ``pbg import`` (:mod:`storage.importing`) reads its inputs through it.

May import: the plumbing at the top of :mod:`storage` (``fs``, ``errors``, ``edge_columns``) and
:mod:`pbg_core`; never :mod:`storage.importing` or :mod:`storage.exporting`, and nothing that
loads torch or Prefect (``pbg import`` starts without either). Its layers are an import-linter contract.
"""
