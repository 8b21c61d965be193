"""flows.cluster: a run on several machines (``num_machines > 1``), its buckets on Dask workers.

- :mod:`flows.cluster.checks`: a cluster checked before a run (or a local one started);
- :mod:`flows.cluster.security`: how this process reaches a scheduler (``tcp://``, Dask's TLS);
- :mod:`flows.cluster.training`: a pass's bucket loop, called by the ``pbg`` flow.

Dask stays here and in the cluster modules of :mod:`tasks` (docs/distributed.md).
"""
