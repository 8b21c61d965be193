"""The training session: buckets, passes, partition residency, checkpoints, offline eval.

The top of pbg_core: may import every other part. Storage reaches it only through the
protocols of :mod:`pbg_core.ports`.

- :mod:`.partitions`, :mod:`.bucket_order`, :mod:`.iterations`, :mod:`.edge_checks`:
  the plan of a run (which buckets, in what order, over which edge chunks);
- :mod:`.schedule`: with room for more partitions than one bucket needs, which stay in memory
  between buckets and the bucket order that reuses them;
- :mod:`.residency`: which partitions sit in the shared slots, and their saves;
- :mod:`.memory_plan`: how many partitions stay resident, and the memory a run needs;
- :mod:`.parts`, :mod:`.build`: the session's settings and model state, and building it;
- :mod:`.engine`: :class:`~pbg_core.session.engine.TrainingSession`, the one owner of
  training state;
- :mod:`.dispatch`, :mod:`.records`, :mod:`.resume`: how the engine divides a bucket's
  edges among the workers, what it records per bucket, how it starts or resumes a pass;
- :mod:`.offline_eval`: evaluating an edge source with a session.
"""
