"""flows.prefect_host: how ``pbg`` hosts Prefect in its own process.

- :mod:`flows.prefect_host.local_server`: the embedded API server of ``pbg train``/``eval``
  (no ``PREFECT_API_URL``), started as :mod:`flows.prefect_host.local_server_app`'s process;
- :mod:`flows.prefect_host.prefect_server`: Prefect's SQLite configuration with writes begun
  IMMEDIATE (the embedded server's and the local stack's, ``python -m flows.prefect_host.prefect_server``);
- :mod:`flows.prefect_host.interrupts`: Ctrl-C and SIGTERM in every command and flow;
- :mod:`flows.prefect_host.log_filters`: every rule of which log line shows where;
  :mod:`flows.prefect_host.run_logs`: the engine's lines in a run's logs.

It imports no flow and nothing of :mod:`flows.cli` (import-linter holds it): the flows and the
command line use it.
"""
