"""storage: PBG-compatible files (entities, edges, checkpoints, stats) through fsspec + h5py.

Every store takes a URL (local path, ``file://``, ``s3://``) plus optional fsspec
``storage_options``; the :mod:`storage.fs` package is the only place that resolves URLs.

- Top level: the stores (``checkpoints`` and its names record ``checkpoint_names``, which its
  readers follow through ``reader_names``; ``checkpoint_reader``, one committed version read-only,
  ``edges``, ``entities``, ``stats_log``, ``progress``, ``staged_progress``, ``lease``,
  ``entity_lease``, ``run_stores``, ``config_loader``; ``outputs``, the files a command writes
  where its user says), their plumbing (``fs``, ``read_cache``, ``fail_fast``, ``hdf5``,
  ``layout``, ``errors``, ``probe``, ``local_dirs``, ``credentials``, ``pause_points``), how an
  edge list is read (``edge_columns``: shared by ``pbg import`` and retraining's arrivals; the
  :mod:`storage.edge_lists` package reads one file as batches) and the
  checks and reports on them (``resume_checks``: the checkpoints a run starts from;
  ``disk_checks``: room before a checkpoint write; ``stats_report``: what the stats say, with
  ``learning_curve`` drawn by ``svg_chart``, the MRRs named by ``metric_labels``, the numbers
  rounded by ``report_numbers``).
- :mod:`storage.remap`: ``init_path``'s rows matched to the entity files by name, once per run.
- :mod:`storage.importing`: ``pbg import``; :mod:`storage.exporting`: ``pbg export``;
  :mod:`storage.trained`: a trained model's answers by name (``Model``: predict, score).
- :mod:`storage.retraining`: the run directories, records and holdouts of scheduled retraining.

May import: :mod:`pbg_core` (never tasks, flows or Prefect). The stores import neither
importing nor exporting, and importing, exporting and trained never import each other
(import-linter holds all of it).
This package re-exports nothing: import what you use from its module
(``from storage.checkpoints import CheckpointStore``), so one module loads only what it needs
(the checkpoint and edge stores load torch; ``pbg import`` does not).
"""
