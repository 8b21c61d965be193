"""The current bucket's shared tables: what every training path reads and updates in place.

The lowest module of :mod:`pbg_core.training` (it imports only the foundations), so the
batch loop, the hand-written paths and the row gather all name it without importing
each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pbg_core.types import FloatTensorType, SideKey


@dataclass
class BucketTables:
    """The current bucket's shared tables (same tensor object on both sides when shared)."""

    embeddings: dict[SideKey, FloatTensorType]
    optim_state: dict[SideKey, FloatTensorType] = field(default_factory=dict)
