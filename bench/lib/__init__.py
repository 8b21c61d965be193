"""What the benchmarks of :mod:`bench` share: one module per concept.

- :mod:`bench.lib.tools`: where things are (the repository, bench/work, bench/results), the two
  tools' executables (our ``pbg``, PyPI torchbiggraph 1.0.0), ``pbg eval --json``'s metrics and
  the machine's description;
- :mod:`bench.lib.runner`: a measured command (wall time, peak memory of its process tree, bytes
  written, a deadline), the measurement lock, a quiet machine;
- :mod:`bench.lib.stats`: a checkpoint's ``training_stats.json`` read back through
  :class:`storage.stats_log.StatsLog`, and the sums the benchmarks take of it;
- :mod:`bench.lib.logs`: the one pattern of our log lines and of the engine's step lines, and
  PBG 1.0.0's per-bucket line;
- :mod:`bench.lib.report`: tables, ratios and result files;
- :mod:`bench.lib.graphs`: the seeded graph generators;
- :mod:`bench.lib.sides`: PBG 1.0.0 and ours as the two sides of a comparison;
- :mod:`bench.lib.deployed_stack`: a local deployed stack (``deployments/local-up.sh``) and the
  UMLS training the deployed-run benchmarks give it;
- :mod:`bench.lib.pipelined` (and its deployment entrypoint :mod:`bench.lib.pipelined_deployment`):
  the ``pbg`` flow with its iteration subflows pipelined through :mod:`bench.lib.subflow_pipeline`,
  as the product ran them before issue 34: bench.pipeline's alternative;
- :mod:`bench.lib.configs`, :mod:`bench.lib.flops`, :mod:`bench.lib.prefect_api`,
  :mod:`bench.lib.s3_server`: config files, FLOPs per edge, Prefect's REST API, a local S3 server.

Tests may import this package; nothing here imports tests.
"""
