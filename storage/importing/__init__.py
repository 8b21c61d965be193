"""storage.importing: ``pbg import``, edge lists -> PBG entity files and bucketed edge files.

The entry point is :func:`storage.importing.importer.import_edges`; :mod:`~storage.importing.run`
runs the two passes (:mod:`~storage.importing.count`, then :mod:`~storage.importing.write`),
whose counts :mod:`~storage.importing.progress` turns into a fraction done for a progress bar.
The inputs are read by :mod:`storage.edge_lists`.

May import: the stores and plumbing at the top of :mod:`storage` (``fs``, ``edge_lists``, ``layout``,
``hdf5``, ``entities``, ``errors``, ``local_dirs``, ``lease``, ``entity_lease``, ``disk_space``,
``pause_points``) and :mod:`pbg_core`. Never :mod:`storage.exporting`,
and nothing that loads torch or Prefect: ``pbg import`` starts without either.
The stores never import this package.
"""
