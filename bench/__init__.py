"""pbg-flow's benchmarks: one module per benchmark, each run as ``python -m bench.NAME``.

What the benchmarks share (measured runs, read-back of ``training_stats.json``, the log-line
patterns, graph generators, tables and result files) is in :mod:`bench.lib`. docs/benchmarks.md
lists every benchmark, its Makefile target and what it measures. Nothing here is product code:
the wheel ships none of it, and no product package imports it.
"""
