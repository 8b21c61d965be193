"""RowAdagrad / AsyncAdagrad: hand-computed updates, duplicates, state dicts."""

import io
import math
import pickle

import pytest
import torch
from torch import nn

from pbg_core.training.optimizers import AsyncAdagrad, RowAdagrad, duplicate_positions, fold_duplicate_rows_


def test_row_adagrad_sums_duplicates_then_updates() -> None:
    table = torch.zeros(4, 2)
    state = torch.tensor([0.0, 0.0, 1.0, 0.0])
    grads = torch.tensor([[1.0, 1.0], [2.0, 0.0], [1.0, 3.0]])
    RowAdagrad(lr=0.5).step(table, state, torch.tensor([2, 0, 2]), grads)
    # row 2: g = (2, 4), G = 1 + (4 + 16) / 2 = 11 ; row 0: g = (2, 0), G = 2
    assert state.tolist() == pytest.approx([2.0, 0.0, 11.0, 0.0])
    assert table[2].tolist() == pytest.approx([-0.5 * 2 / math.sqrt(11), -0.5 * 4 / math.sqrt(11)])
    assert table[0].tolist() == pytest.approx([-0.5 * 2 / math.sqrt(2), 0.0])
    assert table[1].tolist() == [0.0, 0.0] and table[3].tolist() == [0.0, 0.0]


def test_row_adagrad_without_duplicates_matches_dense_adagrad_rowwise() -> None:
    torch.manual_seed(0)
    table, state = torch.randn(10, 3), torch.rand(10)
    want_t, want_s = table.clone(), state.clone()
    idx, g = torch.tensor([7, 1, 4]), torch.randn(3, 3)
    RowAdagrad(0.1).step(table, state, idx, g)
    for i, row in enumerate(idx.tolist()):
        want_s[row] += g[i].pow(2).mean()
        want_t[row] -= 0.1 * g[i] / (want_s[row].sqrt() + 1e-10)
    assert torch.allclose(table, want_t) and torch.allclose(state, want_s)


def test_row_state_dict_roundtrip() -> None:
    state = torch.arange(5.0)
    buf = io.BytesIO()
    torch.save(RowAdagrad.state_dict(state), buf)
    out = torch.zeros(5)
    assert RowAdagrad.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True), out)
    assert torch.equal(out, state)
    assert not RowAdagrad.load_state_dict({"state": {}}, out)


def test_async_adagrad_elementwise_and_state_roundtrip() -> None:
    p = nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = AsyncAdagrad([p], lr=0.1).share_memory_()
    p.grad = torch.tensor([2.0, 0.0])
    opt.step()
    assert p.tolist() == pytest.approx([1.0 - 0.1 * 2 / 2, 2.0])
    p.grad = torch.tensor([1.0, 0.0])
    opt.step()
    assert p.tolist() == pytest.approx([0.9 - 0.1 * 1 / math.sqrt(5), 2.0])
    buf = io.BytesIO()
    torch.save(opt.optimizer_state_dict(), buf)
    other = AsyncAdagrad([nn.Parameter(torch.zeros(2))], lr=0.1)
    other.load_optimizer_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert other.sums[0].tolist() == [5.0, 0.0]
    with pytest.raises(ValueError, match="shape"):
        AsyncAdagrad([nn.Parameter(torch.zeros(3))], 0.1).load_optimizer_state_dict(opt.optimizer_state_dict())
    opt.zero_grad()
    assert p.grad is None


def test_async_adagrad_state_with_fewer_rows_fills_the_first_rows_only_when_it_may_grow() -> None:
    saved = {"state": {0: {"sum": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}}}
    grown = AsyncAdagrad([nn.Parameter(torch.zeros(3, 2))], lr=0.1)
    with pytest.raises(ValueError, match=r"shape \(2, 2\), expected \(3, 2\)"):
        grown.load_optimizer_state_dict(saved)
    grown.sums[0].fill_(9.0)
    grown.load_optimizer_state_dict(saved, grows=True)
    assert grown.sums[0].tolist() == [[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]]  # the new row starts at zero
    with pytest.raises(ValueError, match="shape"):  # another width is never a growth
        AsyncAdagrad([nn.Parameter(torch.zeros(3, 3))], 0.1).load_optimizer_state_dict(saved, grows=True)


def test_fold_duplicate_rows_sums_into_one_copy() -> None:
    idx = torch.tensor([5, 2, 5, 7, 2, 5])
    grads = torch.arange(12.0).view(6, 2)
    fold_duplicate_rows_(idx, grads)
    per_row: dict[int, list[float]] = {}
    for i, row in enumerate(idx.tolist()):
        if grads[i].abs().sum() > 0:
            assert row not in per_row  # at most one nonzero copy per row
            per_row[row] = grads[i].tolist()
    assert per_row == {5: [0 + 4 + 10, 1 + 5 + 11], 2: [2 + 8, 3 + 9], 7: [6, 7]}


def test_row_adagrad_leaves_grads_alone_unless_writable() -> None:
    grads = torch.ones(3, 2)
    RowAdagrad(0.1).step(torch.zeros(4, 2), torch.zeros(4), torch.tensor([1, 1, 3]), grads)
    assert torch.equal(grads, torch.ones(3, 2))
    RowAdagrad(0.1).step(torch.zeros(4, 2), torch.zeros(4), torch.tensor([1, 1, 3]), grads, grads_writable=True)
    assert not torch.equal(grads, torch.ones(3, 2))


def test_step_pieces_equals_step_on_the_concatenation() -> None:
    gen = torch.Generator().manual_seed(0)
    table, state = torch.randn(8, 3, generator=gen), torch.rand(8, generator=gen)
    idxs = [torch.tensor([1, 4, 1]), torch.tensor([4, 6]), torch.tensor([7, 1])]
    grads = [torch.randn(len(i), 3, generator=gen) for i in idxs]
    want_t, want_s = table.clone(), state.clone()
    before = state.clone()
    RowAdagrad(0.3).step(want_t, want_s, torch.cat(idxs), torch.cat(grads))
    RowAdagrad(0.3).step_pieces(table, state, idxs, [g.clone() for g in grads])
    torch.testing.assert_close(table, want_t)
    torch.testing.assert_close(state, want_s)
    assert (state > before).sum() == 4  # rows 1, 4, 6, 7 each got one accumulated update


def test_duplicate_positions_by_hand_ignores_scratch_contents() -> None:
    idx = torch.tensor([5, 2, 5, 7, 2, 5])
    for slots in (None, torch.full((8,), -3, dtype=torch.long), torch.arange(100, 108)):
        src, dst = duplicate_positions(idx, slots)
        assert src.tolist() == [2, 4, 5]  # ascending repeats
        assert dst.tolist() == [0, 1, 0]  # each points at its value's first copy
    empty_src, empty_dst = duplicate_positions(torch.tensor([3, 1, 4]))
    assert empty_src.numel() == 0 and empty_dst.numel() == 0


def test_row_adagrad_pickles_without_its_scratch() -> None:
    opt = RowAdagrad(0.25)
    opt.step(torch.zeros(6, 2), torch.zeros(6), torch.tensor([1, 1]), torch.ones(2, 2))
    assert opt._slots  # grown by the step
    copy = pickle.loads(pickle.dumps(opt))
    assert copy.lr == 0.25 and copy._slots == {}
    table, state = torch.zeros(6, 2), torch.zeros(6)
    copy.step(table, state, torch.tensor([4, 1, 4]), torch.ones(3, 2))
    assert state.tolist() == pytest.approx([0.0, 1.0, 0.0, 0.0, 4.0, 0.0])  # row 4 got g = (2, 2)
