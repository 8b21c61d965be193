"""EdgeList / EntityList / TensorList: slicing, fancy indexing, cat, shared memory."""

import pytest
import torch

from pbg_core.edgelist import EdgeList, EntityList, TensorList
from pbg_core.errors import ShapeError


def bags() -> TensorList:
    # [[1, 2], [], [3], [4, 5, 6]]
    return TensorList(torch.tensor([0, 2, 2, 3, 6]), torch.tensor([1, 2, 3, 4, 5, 6]))


def as_lists(tl: TensorList) -> list[list[int]]:
    return [tl.data[int(tl.offsets[i]) : int(tl.offsets[i + 1])].tolist() for i in range(len(tl))]


def test_tensor_list_slice_and_index() -> None:
    tl = bags()
    assert as_lists(tl[1:4]) == [[], [3], [4, 5, 6]]
    assert as_lists(tl[torch.tensor([3, 0, 3, 1])]) == [[4, 5, 6], [1, 2], [4, 5, 6], []]
    assert as_lists(tl[::2]) == [[1, 2], [3]]
    assert tl.lengths().tolist() == [2, 0, 1, 3]


def test_tensor_list_cat_shifts_offsets() -> None:
    tl = TensorList.cat([bags()[2:], bags()[:2]])
    assert as_lists(tl) == [[3], [4, 5, 6], [1, 2], []]
    assert tl.offsets[0] == 0


def test_edge_list_index_cat_weight() -> None:
    edges = EdgeList.from_tensors(torch.tensor([0, 1, 2]), torch.tensor([5, 6, 7]), 3, torch.tensor([1, 2, 3]))
    assert edges.rel.tolist() == [3, 3, 3]
    assert edges.weight.dtype == torch.float32 and edges.has_weight
    sub = edges[torch.tensor([2, 0])]
    assert sub.lhs.tensor.tolist() == [2, 0] and sub.rhs.tensor.tolist() == [7, 5]
    assert sub.weight.tolist() == [3.0, 1.0]
    both = EdgeList.cat([edges[:1], EdgeList.from_tensors(torch.tensor([9]), torch.tensor([8]), 1)])
    assert both.lhs.tensor.tolist() == [0, 9] and both.rel.tolist() == [3, 1]
    assert both.weight.tolist() == [1.0, 1.0]  # missing weights count as 1
    assert len(both) == 2 and both == EdgeList.cat([both[:1], both[1:]])


def test_featurized_entity_list_follows_indexing() -> None:
    ents = EntityList(torch.zeros(4, dtype=torch.long), bags())
    edges = EdgeList(ents, EntityList(torch.arange(4)), torch.zeros(4, dtype=torch.long))
    sub = edges[torch.tensor([3, 1])]
    assert as_lists(sub.lhs.tensor_list) == [[4, 5, 6], []]


def test_share_memory_and_shape_errors() -> None:
    edges = EdgeList.from_tensors(torch.arange(3), torch.arange(3), 0).share_memory_()
    assert edges.lhs.tensor.is_shared() and edges.rel.is_shared()
    with pytest.raises(ShapeError, match="differ in length"):
        EdgeList.from_tensors(torch.arange(3), torch.arange(2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ShapeError, match="weight"):
        EdgeList.from_tensors(torch.arange(3), torch.arange(3), 0, torch.ones(2))
