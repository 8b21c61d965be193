"""flows: the product's Prefect flows, and around them the command line and how it hosts Prefect.

The flow files, in the order a graph goes through them:

- :mod:`flows.importing`: ``pbg-import``, edge files into PBG's partitioned layout;
- :mod:`flows.train`: ``pbg`` (training, one ``pbg-iteration`` subflow per iteration, one after
  another; on several machines, a pass's buckets through :mod:`flows.cluster`);
- :mod:`flows.evaluate`: ``pbg-eval``, the metrics of a checkpoint;
- :mod:`flows.tune`: ``pbg-tune``, a tuning study whose trials (``pbg-trial``) run ``pbg``.

Around them:

- :mod:`flows.cli`: the ``pbg`` command line (its options, commands, the checks before a run,
  one-line errors); it calls the flows;
- :mod:`flows.prefect_host`: how ``pbg`` hosts Prefect: the embedded API server and its SQLite
  configuration, Ctrl-C and SIGTERM, and which log lines show where; the flows and the command
  line use it, it uses neither;
- :mod:`flows.cluster`: distributed runs on a Dask cluster (checks, TLS, the bucket loop);
- :mod:`flows.run_names`: every flow run's name, ``{kind} {subject}, {date} UTC``.

import-linter holds the direction (``pyproject.toml``): cli -> the flows -> cluster, prefect_host and run_names.
"""
