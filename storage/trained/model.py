"""A trained model's answers by name: :class:`Model` (``from storage.trained import Model``).

``Model.load`` reads one committed checkpoint version read-only (:mod:`storage.trained.sources`
says what it may be loaded from, :mod:`storage.trained.loading` opens it) and answers as training and ``pbg eval`` score, through the
same code (:mod:`pbg_core.evaluation.ranking`):

- :meth:`Model.predict`: the top-k entities for ``(head, relation, ?)`` or ``(?, relation,
  tail)``, over every partition of the ranked type, one partition in memory at a time
  (:mod:`storage.trained.targets`); ``filtered`` leaves out the known edges of the filter
  paths as ``pbg eval --filtered`` does (:mod:`storage.trained.known_edges`). Given the true
  answers, each one's score and rank: ``answer_rank`` among every entity of the type, and
  ``answer_partition_rank`` within its own partition, the rank ``pbg eval`` gives that edge
  (evaluation with ``all_negs`` ranks an edge within its partition, as PBG does; the two are
  equal for a type with one partition).
- :meth:`Model.score`: each edge's score, evaluation's positive score (dynamic relations: the
  forward score ``score``, which ranks heads, and the reverse one ``reverse_score``, which
  ranks tails; standard relations have one score for both).
- :meth:`Model.embeddings`: an entity type's names and rows per partition, as ``pbg export``
  writes them (``global_emb`` added).

Read-only: the model never takes the checkpoint's lease and writes nothing; it holds a reader
file of ``entity_path`` only while it reads there (at load, and during a filtered prediction),
so a model kept for days never blocks an import. Names are the checkpoint's own (its ``names/``
record), so a model loads and answers after a re-import of ``entity_path``; only a filtered
prediction, which reads the current import's edges, refuses names that moved since.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa
import torch

from pbg_core.errors import UsageError
from pbg_core.evaluation.ranking import answer_scores
from pbg_core.types import EntityName, Side
from storage.fs.urls import StorageOptions
from storage.trained.arguments import Answer, check_k, check_version, query_form, same_length
from storage.trained.checkpoint_rows import CheckpointRows
from storage.trained.known_edges import known_edges
from storage.trained.loading import Loaded, load_version
from storage.trained.name_index import check_entity_type
from storage.trained.queries import ROLES, Queries, prediction_table
from storage.trained.row_ids import RowIds
from storage.trained.similar_names import locate_names, similar_table
from storage.trained.similarity import SimilarEntities
from storage.trained.similarity_index import SimilarityIndex
from storage.trained.sources import Source, resolve_config
from storage.trained.targets import rank_targets

SCORE_BLOCK = 1 << 16  # edges scored at once by Model.score
SCORED = ("head", "relation", "tail")  # Model.score's columns of names


class Model:
    """A committed checkpoint version's model, answering by entity and relation names (see the module docstring).

    Build it with :meth:`load`; the constructor only stores what ``load`` built.
    """

    def __init__(self, config: Any, loaded: Loaded) -> None:
        self.config = config
        self._reader = loaded.reader
        self._embedder = loaded.embedder
        self._names = loaded.names
        self._rows = CheckpointRows(loaded.reader, config.max_norm, loaded.names.counts)
        self._similar = SimilarEntities(loaded.embedder, loaded.reader, counts=loaded.names.counts)

    @classmethod
    def load(
        cls,
        config_or_checkpoint: Source,
        version: int | None = None,
        overrides: Sequence[str] = (),
        storage_options: StorageOptions = None,
    ) -> Model:
        """Load a committed checkpoint version, read-only.

        Args:
            config_or_checkpoint: A config (``.json``/``.yaml``/``.py`` file or URL, dict or
                ``ConfigSchema``), a checkpoint directory, or a retraining root (its promoted run).
            version: The version to load; None: the latest committed one.
            overrides: PBG's ``-p key=value`` overrides of the config.
            storage_options: fsspec options to read the source and the stores with; None: the config's.

        Raises:
            DataNotFound: nothing committed, no files of ``version`` (the versions present named),
                or a file or directory missing.
            IncompleteVersionError: the latest committed version's files are missing.
            ShapeError: the checkpoint's parameters do not fit the config, or the config differs from
                the one it was trained with in a field that changes the scores (comparator, bias, ...).
            ConfigError: the config or an override is invalid.
            UsageError: ``version`` is not a whole number >= 1.
            NamesChangedError: rows whose names neither the checkpoint nor the entity files hold.
            LeaseHeldError: an import is writing ``entity_path``.
        """
        check_version(version)
        config = resolve_config(config_or_checkpoint, version, overrides, storage_options)
        return cls(config, load_version(config, version))

    @property
    def version(self) -> int:
        """The checkpoint version loaded."""
        return self._reader.version

    @property
    def relations(self) -> list[str]:
        """The relation names, by id (dynamic mode: the relation types the model was trained on)."""
        return list(self._names.relations)

    @property
    def entity_types(self) -> list[EntityName]:
        """The entity types with one embedding per entity (featurized ones excepted)."""
        return self._names.entity_types

    def __repr__(self) -> str:
        return f"Model({self.config.checkpoint_path!r}, version={self.version})"

    @overload
    def predict(
        self,
        *,
        head: str,
        relation: str,
        k: int = 10,
        filtered: bool = False,
        filter_paths: Sequence[str] | None = None,
    ) -> list[Answer]: ...

    @overload
    def predict(
        self,
        *,
        tail: str,
        relation: str,
        k: int = 10,
        filtered: bool = False,
        filter_paths: Sequence[str] | None = None,
    ) -> list[Answer]: ...

    @overload
    def predict(
        self,
        *,
        heads: Sequence[str],
        relations: str | Sequence[str],
        k: int = 10,
        answers: Sequence[str] | None = None,
        filtered: bool = False,
        filter_paths: Sequence[str] | None = None,
    ) -> pa.Table: ...

    @overload
    def predict(
        self,
        *,
        tails: Sequence[str],
        relations: str | Sequence[str],
        k: int = 10,
        answers: Sequence[str] | None = None,
        filtered: bool = False,
        filter_paths: Sequence[str] | None = None,
    ) -> pa.Table: ...

    def predict(
        self,
        *,
        head: str | None = None,
        tail: str | None = None,
        relation: str | None = None,
        heads: Sequence[str] | None = None,
        tails: Sequence[str] | None = None,
        relations: str | Sequence[str] | None = None,
        k: int = 10,
        answers: Sequence[str] | None = None,
        filtered: bool = False,
        filter_paths: Sequence[str] | None = None,
    ) -> list[Answer] | pa.Table:
        """The ``k`` best tails of ``(head, relation, ?)`` or heads of ``(?, relation, tail)``.

        One query: ``predict(head="aspirin", relation="treats")`` (or ``tail=``) returns its top
        list as :class:`Answer`\\ s. Many: ``predict(heads=[...], relations=[...] or one name)``
        (or ``tails=``) returns a ``pyarrow.Table`` with one row per (query, entity of its top
        list) in order: ``query`` (the query's index), ``head``, ``relation``, ``tail`` (the
        ranked side filled in), ``rank`` (1 = best), ``score``; a query left with no entity
        (``filtered``: all of them known) has one row with nulls there. With ``answers`` (each
        query's true entity) also ``answer``, ``answer_score``, ``answer_rank`` (among every entity of
        the type, known edges excepted) and ``answer_partition_rank`` (within its partition: the
        rank ``pbg eval`` gives that edge), on every row of the query.

        Args:
            head, tail, heads, tails: The queries' known side; exactly one of them.
            relation, relations: The relation name (one query), or each query's (or one for all).
            k: Entities per query, 1 up to the ranked type's entity count (with ``filtered``, a
                query may get fewer: known edges are left out).
            answers: Many queries only: each query's true entity, ranked.
            filtered: Leave out the known edges of ``filter_paths``, as ``pbg eval --filtered``.
            filter_paths: The edge paths whose edges are known; None: the config's ``edge_paths``.

        Raises:
            UsageError: not exactly one of the query forms, lists of different lengths, or ``k``
                outside 1..entity count (the count named).
            UnknownEntityError: an unknown entity or relation name (the closest names given), or an
                entity of another type than its relation takes on that side (named as such).
            NamesChangedError: ``filtered``, and the entity files list other names now.
        """
        forms = {"head": head, "tail": tail, "heads": heads, "tails": tails}
        form = query_form(forms, k, filtered, filter_paths)
        side = Side.RHS if form in ("head", "heads") else Side.LHS
        if form in ("head", "tail"):
            if relation is None or relations is not None or answers is not None:
                raise UsageError(f"predict({form}=...) takes relation= (one name), not relations= or answers=")
            return self._predict_one(side, str(forms[form]), relation, k, filtered, filter_paths)
        anchors = list(forms[form] or [])
        if relation is not None or relations is None:
            raise UsageError(f"predict({form}=[...]) takes relations= (one name for all, or one per query)")
        names = [relations] * len(anchors) if isinstance(relations, str) else list(relations)
        same_length(form, anchors, relations=names, answers=answers)
        queries = Queries(self.config, self._names, names, "" if isinstance(relations, str) else "relations")
        return self._predict(side, anchors, queries, form, k, answers, filtered, filter_paths)

    def _predict_one(
        self, side: Side, anchor: str, relation: str, k: int, filtered: bool, filter_paths: Sequence[str] | None
    ) -> list[Answer]:
        """One query's top list (see :meth:`predict`)."""
        queries = Queries(self.config, self._names, [relation], "")
        table = self._predict(side, [anchor], queries, "", k, None, filtered, filter_paths)
        found = ROLES[side]
        return [Answer(row["rank"], row[found], row["score"]) for row in table.to_pylist() if row["rank"] is not None]

    def _predict(
        self,
        side: Side,
        anchors: list[str],
        queries: Queries,
        argument: str,
        k: int,
        answers: Sequence[str] | None,
        filtered: bool,
        filter_paths: Sequence[str] | None,
    ) -> pa.Table:
        """Rank ``side`` for ``anchors`` (see :meth:`predict`)."""
        groups = queries.targets(side, anchors, answers, argument)
        for target in dict.fromkeys(group.target for group in groups):
            count = self._names.count(target)
            if k > count:
                raise UsageError(f"k={k}: entity type {target!r} has {count:,} entities; give 1..{count}")
        if not filtered:
            ranked = rank_targets(self._rows, self._embedder, groups, k)
        else:
            types = {group.anchors.entity for group in groups} | {group.target for group in groups}
            parts = {entity: self.config.entities[entity].num_partitions for entity in sorted(types)}
            paths = list(filter_paths) if filter_paths is not None else list(self.config.edge_paths)
            with known_edges(self.config, self.version, paths, parts) as known:
                ranked = rank_targets(self._rows, self._embedder, groups, k, known)
        return prediction_table(side, self._names, queries, groups, ranked, anchors, answers)

    @torch.no_grad()
    def score(self, heads: Sequence[str], relations: str | Sequence[str], tails: Sequence[str]) -> pa.Table:
        """The score of each edge ``(heads[i], relations[i], tails[i])``, as ``pbg eval`` scores a true edge.

        Returns:
            A ``pyarrow.Table``: ``head``, ``relation``, ``tail``, ``score`` (float32; dynamic mode:
            the forward score, which ranks heads) and, in dynamic mode only, ``reverse_score``
            (which ranks tails).

        Raises:
            UsageError: lists of different lengths.
            UnknownEntityError: as for :meth:`predict`.
        """
        heads, tails = list(heads), list(tails)
        names = [relations] * len(heads) if isinstance(relations, str) else list(relations)
        same_length("heads", heads, relations=names, tails=tails)
        queries = Queries(self.config, self._names, names, "" if isinstance(relations, str) else "relations")
        located = [
            (
                group,
                queries.locate(heads, group.lhs, "head", "heads", group),
                queries.locate(tails, group.rhs, "tail", "tails", group),
            )
            for group in queries.groups
        ]
        queries.check()
        forward, reverse = np.zeros(len(heads), np.float32), np.zeros(len(heads), np.float32)
        for group, lhs, rhs in located:
            for start in range(0, len(group.positions), SCORE_BLOCK):
                block = slice(start, start + SCORE_BLOCK)
                lhs_rows = self._rows.lookup(lhs.entity, lhs.part[block], lhs.offset[block])
                rhs_rows = self._rows.lookup(rhs.entity, rhs.part[block], rhs.offset[block])
                rel = group.rel if isinstance(group.rel, int) else torch.from_numpy(group.rel[block])
                at = group.positions[block]
                forward[at] = answer_scores(self._embedder, Side.LHS, rel, rhs_rows, lhs_rows).numpy()
                if self.config.dynamic_relations:  # standard relations score an edge alike for both sides
                    reverse[at] = answer_scores(self._embedder, Side.RHS, rel, lhs_rows, rhs_rows).numpy()
        columns = {
            name: pa.array(values, pa.string()) for name, values in zip(SCORED, (heads, names, tails), strict=True)
        }
        columns["score"] = pa.array(forward)
        if self.config.dynamic_relations:
            columns["reverse_score"] = pa.array(reverse)
        return pa.table(columns)

    @overload
    def similar(
        self, names: str, k: int = 10, entity_type: EntityName | None = None, approximate: bool = False
    ) -> list[Answer]: ...

    @overload
    def similar(
        self, names: Sequence[str], k: int = 10, entity_type: EntityName | None = None, approximate: bool = False
    ) -> pa.Table: ...

    def similar(
        self, names: str | Sequence[str], k: int = 10, entity_type: EntityName | None = None, approximate: bool = False
    ) -> list[Answer] | pa.Table:
        """The ``k`` entities nearest to each of ``names`` by the comparator's own metric; never the entity itself.

        The score of two entities of a type is the comparator's, as the model defines it
        (global embedding added, ``max_norm`` settled, a bias included; no operator): ``dot``,
        ``cos``, ``-l2`` or ``-squared_l2`` (higher is nearer). One name: ``similar("aspirin")``
        returns its neighbours as :class:`Answer`\\ s. Many: ``similar([...])`` returns a
        ``pyarrow.Table``, a row per (name, neighbour) in order: ``query`` (the name's index),
        ``entity``, ``entity_type``, ``rank`` (1 = nearest), ``neighbour``, ``score``.

        Args:
            names: A name, or a list of them (repeats allowed).
            k: Neighbours per name, 1 up to its type's entity count less one.
            entity_type: The names' type; None: each name's own (an error if it names entities of several).
            approximate: Search through the type's similarity index (:meth:`similarity_index`)
                instead of exactly; a type of at most ``FLAT_MAX_ROWS`` entities has none, and is
                searched exactly anyway. Hits are rescored by the model, so scores are its own.

        Raises:
            UsageError: ``k`` outside 1..count-1; a name of several types and no ``entity_type``
                (:class:`~storage.trained.similar_names.AmbiguousNameError`); ``approximate``
                with ``l2``/``squared_l2`` and a bias (no faiss metric ranks them).
            UnknownEntityError: an unknown name (the closest names given), or an unknown ``entity_type``.
        """
        check_k(k)
        if entity_type is not None:
            check_entity_type(self.config, entity_type, self.entity_types)
        single = isinstance(names, str)
        listed = [names] if isinstance(names, str) else list(names)
        groups = locate_names(self._names, listed, entity_type, "" if single else "names")
        for group in groups:
            self._similar.check(group.entity, k, approximate)
        found = []
        for group in groups:
            near = self._similar.nearest(group.entity, group.ids, k, approximate)
            found.append((near.scores, RowIds(near.partitions, near.offsets)))
        table = similar_table(self._names, listed, groups, found)
        if not single:
            return table
        return [Answer(row["rank"], row["neighbour"], row["score"]) for row in table.to_pylist() if row["rank"]]

    def similarity_index(self, entity_type: EntityName) -> SimilarityIndex | None:
        """The index ``similar(..., approximate=True)`` searches ``entity_type`` with; None: it is searched exactly.

        Loaded from beside the version (``similar_{type}.v{v}.h5``) if it matches what it would be
        built from now, else built (its recall@10 against exact search measured) and stored
        there; its ``describe()`` gives its kind, search width and recall. None for a type of at most
        ``FLAT_MAX_ROWS`` entities.

        Raises:
            UnknownNameError: an unknown entity type.
            UsageError: ``l2``/``squared_l2`` with a bias (no faiss metric ranks them).
        """
        check_entity_type(self.config, entity_type, self.entity_types)
        return self._similar.index(entity_type)

    def embeddings(self, entity_type: EntityName) -> Iterator[tuple[list[str], np.ndarray]]:
        """``(names, float32 [len(names), D] rows)`` of ``entity_type`` per partition, in order, as
        ``pbg export`` writes them (``global_emb`` added; rows as stored, ``max_norm`` not applied).

        Raises:
            UnknownNameError: ``entity_type`` is not one of :attr:`entity_types` (featurized types named).
            ShapeError: a partition's rows do not fit its names or the config's dimension.
        """
        check_entity_type(self.config, entity_type, self.entity_types)
        return self._partitions(entity_type)  # refused above at the call, not at the first partition

    def _partitions(self, entity_type: EntityName) -> Iterator[tuple[list[str], np.ndarray]]:
        """See :meth:`embeddings`."""
        table = self._names.table(entity_type)
        global_emb = self._reader.global_embedding(entity_type)
        start = 0
        for part, count in enumerate(table.counts):
            buffer = self._rows.buffer([(entity_type, count)])  # a new one: the caller keeps each partition
            rows = self._rows.partition(entity_type, part, buffer)
            if global_emb is not None:
                rows += global_emb.to(rows.dtype)
            yield table.names.slice(start, count).to_pylist(), rows.numpy()
            start += count


__all__ = ["Answer", "Model"]
