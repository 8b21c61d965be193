"""Domain vocabulary shared by every layer: names, partitions, sides, buckets.

Tensor aliases state the dtype they are expected to hold; they are documentation
for readers, not runtime checks. They are resolved on first use (PEP 562), so modules that
only need names, partitions and buckets (the importer) do not load torch.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    import torch

EntityName = str
RelationName = str
Partition = int
Rank = int
# An entity type's partition: keys stored and resident embedding tables.
PartitionKey = tuple[EntityName, Partition]

if TYPE_CHECKING:
    ModuleStateDict = dict[str, torch.Tensor]
    FloatTensorType = torch.Tensor  # float32
    LongTensorType = torch.Tensor  # int64
    ByteTensorType = torch.Tensor  # uint8 / bool

_TORCH_ALIASES = ("ModuleStateDict", "FloatTensorType", "LongTensorType", "ByteTensorType")


def __getattr__(name: str) -> Any:
    if name not in _TORCH_ALIASES:
        raise AttributeError(f"module 'pbg_core.types' has no attribute {name!r}")
    import torch

    aliases = {
        "ModuleStateDict": dict[str, torch.Tensor],
        "FloatTensorType": torch.Tensor,  # float32
        "LongTensorType": torch.Tensor,  # int64
        "ByteTensorType": torch.Tensor,  # uint8 / bool
    }
    globals().update(aliases)  # later lookups skip this function
    return aliases[name]


# Entity types with a single partition store everything under partition 0,
# exactly as PBG names their files (``embeddings_{type}_0.v{n}.h5``).
UNPARTITIONED: Partition = 0

T = TypeVar("T")


class Side(Enum):
    """Which end of an edge: the left-hand (source) or right-hand (target) side."""

    LHS = 0
    RHS = 1

    def pick(self, lhs: T, rhs: T) -> T:
        """Return ``lhs`` for the LHS side and ``rhs`` for the RHS side."""
        return lhs if self is Side.LHS else rhs

    @property
    def other(self) -> Side:
        """The opposite side."""
        return Side.RHS if self is Side.LHS else Side.LHS

    @property
    def key(self) -> str:
        """Lower-case name used in file layouts and state dicts ("lhs"/"rhs")."""
        return self.name.lower()


# An entity type on one side of the current bucket (the bucket's side picks its partition):
# keys the bucket's shared tables, their slots and the rows a batch gathers.
SideKey = tuple[EntityName, Side]


class Bucket(NamedTuple):
    """A (lhs partition, rhs partition) cell of the edge grid."""

    lhs: Partition
    rhs: Partition

    def get_partition(self, side: Side) -> Partition:
        """The partition of ``side`` in this bucket."""
        return side.pick(self.lhs, self.rhs)

    def __str__(self) -> str:
        return f"( {self.lhs} , {self.rhs} )"
