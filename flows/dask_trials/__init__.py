"""flows.dask_trials: a tuning study's trials placed on the workers of a Dask cluster.

- :mod:`flows.dask_trials.placement`: on the study's driver: the cluster checked before any
  trial, a worker per trial, the wait for its end, the pruner's answers, Ctrl-C;
- :mod:`flows.dask_trials.worker`: what runs on the worker: the trial's ``pbg`` flow.

docs/tuning.md, "Trials on a Dask cluster".
"""
