"""A brute-force reference for ranks: a checkpoint's scores written again in numpy float64, over all partitions.

Independent of the code under test (no torch product, no padding, no partition loop): rows are
read from the checkpoint files, every partition of a type at once, ``max_norm`` applied as a
lookup does (a row above it scaled to it), then PBG's order: global embedding, operator,
comparator ``prepare`` (``cos`` normalises; with ``bias`` the first coordinate is left out),
and the comparator. Float64 rounds differently from the model's float32, so a rank is checked
as an interval (:func:`rank_bounds`): candidates within a hair of the answer's score may count
either way, the others must.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pbg_core.types import Side
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore


class NumpyModel:
    """The committed version of ``config``'s checkpoint, scored in numpy float64.

    Args:
        config: The training config (ConfigSchema).
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        store = CheckpointStore(config.checkpoint_path)
        version = store.read_version()
        self.params = {key: value.double().numpy() for key, value in store.load_model(version)[0].items()}
        entities = EntityStore(config.entity_path)
        self.names: dict[str, list[str]] = {}
        self.rows: dict[str, np.ndarray] = {}
        for entity, schema in config.entities.items():
            parts = range(schema.num_partitions)
            self.names[entity] = [name for part in parts for name in entities.load_names(entity, part)]
            rows = np.concatenate([store.load_embeddings(entity, part, version)[0].double().numpy() for part in parts])
            self.rows[entity] = self._renormed(rows)

    def _renormed(self, rows: np.ndarray) -> np.ndarray:
        if self.config.max_norm is None:
            return rows
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return np.where(norms > self.config.max_norm, rows * (self.config.max_norm / (norms + 1e-7)), rows)

    def row(self, entity: str, name: str) -> np.ndarray:
        """The looked-up row of one entity."""
        return self.rows[entity][self.names[entity].index(name)]

    def _adjust(self, rows: np.ndarray, entity: str, side_ops: str | None, rel: int) -> np.ndarray:
        """Global embedding, operator ``{side_ops}_operators`` of ``rel`` (None: none), comparator prepare."""
        key = f"global_embs.emb_{entity}"
        if self.config.global_emb and key in self.params:
            rows = rows + self.params[key]
        if side_ops is not None:
            rows = self._operate(rows, side_ops, rel)
        body = rows[..., 1:] if self.config.bias else rows
        if self.config.comparator == "cos":
            body = body / np.maximum(np.linalg.norm(body, axis=-1, keepdims=True), 1e-30)
        return np.concatenate([rows[..., :1], body], axis=-1) if self.config.bias else body

    def _operate(self, rows: np.ndarray, side_ops: str, rel: int) -> np.ndarray:
        dynamic = self.config.dynamic_relations
        index, pick = (0, rel) if dynamic else (rel, None)
        spec = self.config.relations[0 if dynamic else rel]
        prefix = f"{side_ops}_operators.{index}."

        def param(name: str) -> np.ndarray:
            value = self.params[prefix + name]
            return value[pick] if pick is not None else value

        if spec.operator == "none":
            return rows
        if spec.operator == "translation":
            return rows + param("translations" if dynamic else "translation")
        if spec.operator == "diagonal":
            return rows * param("diagonals" if dynamic else "diagonal")
        if spec.operator == "linear":
            return rows @ param("linear_transformations" if dynamic else "linear_transformation").T
        if spec.operator == "affine":
            linear = param("linear_transformations" if dynamic else "linear_transformation")
            return rows @ linear.T + param("translations" if dynamic else "translation")
        if spec.operator == "complex_diagonal":
            half = rows.shape[-1] // 2
            a, b, real, imag = rows[..., :half], rows[..., half:], param("real"), param("imag")
            return np.concatenate([a * real - b * imag, a * imag + b * real], axis=-1)
        raise AssertionError(f"operator {spec.operator} not written here")

    def _compare(self, query: np.ndarray, cands: np.ndarray) -> np.ndarray:
        """Scores of one query row against candidate rows ``[N]``."""
        bias = 0.0
        if self.config.bias:
            bias, query, cands = query[0] + cands[:, 0], query[1:], cands[:, 1:]
        if self.config.comparator in ("dot", "cos"):
            return cands @ query + bias
        squared = ((cands - query) ** 2).sum(axis=1)
        if self.config.comparator == "l2":
            return -np.sqrt(np.maximum(squared, 1e-30)) + bias
        return -squared + bias

    def scores(self, side: Side, rel: int, anchor: str, answer: str) -> tuple[np.ndarray, float, list[str]]:
        """Scores of every entity of the ranked type for one query, the answer's score, the type's names.

        ``side`` is the side ranked; ``anchor`` the other side's entity.
        """
        spec = self.config.relations[0 if self.config.dynamic_relations else rel]
        lhs_type, rhs_type = spec.lhs, spec.rhs
        target, other = (lhs_type, rhs_type) if side is Side.LHS else (rhs_type, lhs_type)
        anchor_row = self.row(other, anchor)[None]
        if self.config.dynamic_relations:  # the anchor passes its side's operator; candidates none
            query = self._adjust(anchor_row, other, "rhs" if side is Side.LHS else "lhs", rel)[0]
            cands = self._adjust(self.rows[target], target, None, rel)
        elif side is Side.LHS:  # heads: compared with the tail through the relation's operator
            query = self._adjust(anchor_row, other, "rhs", rel)[0]
            cands = self._adjust(self.rows[target], target, None, rel)
        else:
            query = self._adjust(anchor_row, other, None, rel)[0]
            cands = self._adjust(self.rows[target], target, "rhs", rel)
        all_scores = self._compare(query, cands)
        return all_scores, float(all_scores[self.names[target].index(answer)]), self.names[target]


def rank_bounds(
    scores: np.ndarray, answer: float, names: list[str], answer_name: str, known: set[str], tolerance: float = 1e-4
) -> tuple[int, int]:
    """(fewest, most) candidates ``>=`` the answer's score, plus one: the answer and ``known`` left out.

    A candidate within ``tolerance`` (relative) of the answer's score may count either way.
    """
    keep = np.array([name != answer_name and name not in known for name in names])
    margin = tolerance * max(1.0, abs(answer))
    low = int(((scores > answer + margin) & keep).sum()) + 1
    high = int(((scores >= answer - margin) & keep).sum()) + 1
    return low, high


__all__ = ["NumpyModel", "rank_bounds"]
