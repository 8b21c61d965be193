"""pbg_core: the PyTorch-BigGraph training engine, pure torch/numpy/pydantic.

No Prefect, fsspec or h5py here and no file I/O: storage reaches the engine only
through the Protocols in :mod:`pbg_core.ports`.

The parts, lowest first; a part imports only the parts below it (import-linter holds
this, and ``tests/pbg_core/test_pbg_core_plan.py`` checks every import statement):

- foundations, top-level modules importing no subpackage: :mod:`~pbg_core.errors`,
  :mod:`~pbg_core.types`, :mod:`~pbg_core.registry`, :mod:`~pbg_core.seeding`,
  :mod:`~pbg_core.stats`, :mod:`~pbg_core.edgelist`, :mod:`~pbg_core.ports`;
- :mod:`pbg_core.config`: the typed training config;
- :mod:`pbg_core.kernels`: numba loops, the lowest numeric layer;
- :mod:`pbg_core.model`: what scores an edge (operators, comparators, losses, ...);
- :mod:`pbg_core.evaluation`: ranking metrics, and ranking every entity of a type (answers);
- :mod:`pbg_core.training`: one worker's batches, forward and backward;
- :mod:`pbg_core.parallel`: HOGWILD worker processes and their shared memory;
- :mod:`pbg_core.session`: the training session that runs buckets, passes and checkpoints.
- :mod:`pbg_core.distributed`: one pass on several machines (which bucket each trains next).

Subpackage ``__init__`` modules import nothing heavy (``pbg_core.parallel.worker_boot``
must load without torch), except :mod:`pbg_core.config`, whose public names live there.
"""
