"""Training one pass on several machines: the engine's side of PBG's distributed mode.

The top of pbg_core: may import every other part. The cluster itself (Dask workers driven by the
``pbg`` flow's tasks, docs/distributed.md) is the orchestration layer's; here are the rules.

- :mod:`.bucket_locks`: which bucket a machine trains next, so that no partition is trained
  in two places at once (PBG's lock server: locks, cost rule, tree initialisation), and a
  lost machine's bucket given back.
- :mod:`.assignments`: what a machine gets with a bucket and sends back.
- :mod:`.shared_state`: the parameters every bucket trains, shared by deltas.
- :mod:`.machine`: a machine's session, trained bucket by bucket.
- :mod:`.coordinator`: the coordinator's pass: hand out, merge, record.
"""
