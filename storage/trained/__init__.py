"""storage.trained: answers from a trained checkpoint version, read-only.

- :mod:`~storage.trained.similarity`: the entities nearest to given ones by the model's own
  metric, exactly or through a similarity index (:class:`~storage.trained.similarity.SimilarEntities`).
- :mod:`~storage.trained.similarity_index`: that faiss index (IVF-Flat, for a type too large for
  exact search to be fast), built once per (version, entity type) and stored beside its version
  as ``similar_{type}.v{v}.h5``; the only module importing faiss.
- :mod:`~storage.trained.index_provenance`: what a stored index must match to be used.
- :mod:`~storage.trained.type_rows`: one entity type's rows by (partition, offset), looked up as
  evaluation does.

May import: the stores at the top of :mod:`storage` and :mod:`pbg_core`; never
:mod:`storage.importing` or :mod:`storage.exporting`, and never Prefect. Nothing here takes a
checkpoint lease, and nothing is written into a checkpoint directory but a similarity index.
"""
