"""storage.exporting: ``pbg export``, a committed checkpoint -> TSV (PBG's layout), NPY or HDF5 files.

The entry points are :func:`storage.exporting.exporter.export_tsv` and
:func:`~storage.exporting.exporter.export_embeddings`; :mod:`~storage.exporting.text` formats
``%.9f`` rows, :mod:`~storage.exporting.sinks` holds the per-type formats and
:mod:`~storage.exporting.relations` the relation-parameters file.

May import: the stores at the top of :mod:`storage` (``checkpoints``, ``entities``, ``fs``,
``errors``, ``reader_names``) and :mod:`pbg_core`. Never :mod:`storage.importing`, and never Prefect.
The stores never import this package.
"""
