"""storage.trained: a trained model's answers by name, read-only (``from storage.trained import Model``).

:class:`~storage.trained.model.Model` loads one committed checkpoint version and answers as
training and ``pbg eval`` score: :meth:`~storage.trained.model.Model.predict` (top-k tails or
heads, filtered or not, with the true answers' ranks), :meth:`~storage.trained.model.Model.score`
(an edge's score), :meth:`~storage.trained.model.Model.similar` (the entities nearest to given
ones) and :meth:`~storage.trained.model.Model.embeddings` (as ``pbg export``).

- :mod:`~storage.trained.model`: :class:`~storage.trained.model.Model`;
- :mod:`~storage.trained.arguments`: the top lists' :class:`~storage.trained.arguments.Answer`, the checks of a call's arguments;
- :mod:`~storage.trained.queries`: queries grouped by relation, names found, predict's table;
- :mod:`~storage.trained.loading`: a version opened: its reader, its model's parameters, its names;
- :mod:`~storage.trained.targets`: predict's loop, one partition of the ranked type at a time;
- :mod:`~storage.trained.known_edges`: the filter paths' known edges, bucket by bucket, as ``pbg eval --filtered``;
- :mod:`~storage.trained.name_index`: names -> (partition, offset) per type, relation ids, the closest names;
- :mod:`~storage.trained.checkpoint_rows`: every row read: selected rows, whole partitions, one type's rows, as evaluation looks them up;
- :mod:`~storage.trained.row_ids`: an entity by (partition, offset) or by global id, and the one from the other;
- :mod:`~storage.trained.sources`: what a model loads from (a config, a checkpoint directory, a retraining root);
- :mod:`~storage.trained.answer_files`: files of queries and edges in, tables of answers out (``pbg predict``, ``pbg score``, ``pbg similar``);
- :mod:`~storage.trained.similar_names`: ``similar``'s names found in their types, and its table;
- :mod:`~storage.trained.similarity`: the entities nearest to given ones by the model's own metric,
  exactly or through a similarity index (:class:`~storage.trained.similarity.SimilarEntities`);
- :mod:`~storage.trained.similarity_index`: that faiss index (IVF-Flat or HNSW-Flat, whichever is faster at
  the recall target, for a type too large for exact search to be fast), built once per (version, entity
  type) and stored beside its version as ``similar_{type}.v{v}.h5``; the only module importing faiss;
- :mod:`~storage.trained.index_file`: that file: the index kinds, its bytes and attributes written and trusted;
- :mod:`~storage.trained.index_provenance`: what a stored index must match to be used.

May import: the stores at the top of :mod:`storage` (``checkpoint_reader``, ``entity_lease``,
``reader_names``, ``edges``, ``fs``, ``errors``, ``layout``, ``outputs``), :mod:`storage.edge_lists`,
:mod:`storage.remap.matching`, :mod:`storage.retraining.latest` and :mod:`pbg_core`; never :mod:`storage.importing` or
:mod:`storage.exporting`, and never Prefect. Nothing here takes a checkpoint lease, and nothing is written into a
checkpoint directory but a similarity index. Its layers are an import-linter contract.
"""

from storage.trained.model import Model

__all__ = ["Model"]
