"""storage.exporting: ``pbg export``, a committed checkpoint -> TSV (PBG's layout), NPY or HDF5 files.

The entry points are :func:`storage.exporting.exporter.export_tsv` and
:func:`~storage.exporting.exporter.export_embeddings`; :mod:`~storage.exporting.text` formats
``%.9f`` rows, :mod:`~storage.exporting.sinks` holds the per-type formats and
:mod:`~storage.exporting.relations` the relation-parameters file. The checkpoint is read through
:mod:`storage.checkpoint_reader`, the files written through :mod:`storage.outputs`.

May import: the stores at the top of :mod:`storage` (``checkpoint_reader``, ``outputs``,
``entity_lease``, ``fs``, ``errors``, ``layout``) and :mod:`pbg_core`. Never :mod:`storage.importing`, and never Prefect.
The stores never import this package.
"""
