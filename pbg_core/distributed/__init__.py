"""Training one pass on several machines: the engine's side of PBG's distributed mode.

The top of pbg_core: may import every other part. The cluster itself (Dask, through
Prefect's task runner) is the orchestration layer's; here are the rules it applies.

- :mod:`.bucket_locks`: which bucket a machine trains next, so that no partition is trained
  in two places at once (PBG's lock server: locks, cost rule, tree initialisation), and a
  lost machine's bucket given back.
"""
