"""MultiRelationEmbedder: scores against brute force, dynamic mode, names, builder, ranking every entity."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from pbg_core.errors import ConfigError
from pbg_core.model.embedder import MASKED, MultiRelationEmbedder, Scores, SideBatch, build_model
from pbg_core.model.negatives import NegativeMode, chunk_layout
from pbg_core.model.param_names import model_private_names, model_public_names
from pbg_core.types import Side


def make_config(**overrides: object) -> SimpleNamespace:
    """A ConfigSchema look-alike (attribute access only), two entity types."""
    cfg = SimpleNamespace(
        entities={
            "a": SimpleNamespace(num_partitions=1, featurized=False, dimension=None),
            "b": SimpleNamespace(num_partitions=1, featurized=False, dimension=None),
        },
        relations=[
            SimpleNamespace(name="r0", lhs="a", rhs="b", weight=1.0, operator="translation", all_negs=False),
            SimpleNamespace(name="r1", lhs="b", rhs="b", weight=2.0, operator="diagonal", all_negs=False),
        ],
        dimension=4,
        comparator="dot",
        bias=False,
        global_emb=True,
        regularizer="N3",
        regularization_coef=0.0,
        dynamic_relations=False,
        operator_init="identity",
    )
    cfg.__dict__.update(overrides)
    cfg.entity_dimension = lambda name: cfg.dimension
    return cfg


def test_state_dict_keys_and_public_names_roundtrip() -> None:
    model = build_model(make_config(), 0)
    keys = set(model.state_dict())
    assert keys == {"rhs_operators.0.translation", "rhs_operators.1.diagonal", "global_embs.emb_a", "global_embs.emb_b"}
    public = model_public_names(model.state_dict())
    assert public["rhs_operators.1.diagonal"] == "relations/1/operator/rhs/diagonal"
    assert public["global_embs.emb_a"] == "entities/a/global_embedding"
    assert model_private_names(list(public.values())) == {v: k for k, v in public.items()}
    dyn = build_model(make_config(relations=make_config().relations[:1], global_emb=False, dynamic_relations=True), 3)
    assert set(dyn.state_dict()) == {"lhs_operators.0.translations", "rhs_operators.0.translations"}
    assert dyn.state_dict()["lhs_operators.0.translations"].shape == (3, 4)


@pytest.mark.parametrize("grad", [False, True])  # evaluation's one product, training's two
def test_standard_batch_uniform_scores_match_brute_force(grad: bool) -> None:
    torch.manual_seed(0)
    model = build_model(make_config(), 0)
    with torch.no_grad():
        model.rhs_operators[0].translation.copy_(torch.randn(4))
        model.global_embs["emb_a"].copy_(torch.randn(4))
        model.global_embs["emb_b"].copy_(torch.randn(4))
    P, chunk, U = 5, 2, 3
    lhs, rhs = torch.randn(P, 4), torch.randn(P, 4)
    ul, ur = torch.randn(3, U, 4), torch.randn(3, U, 4)
    layout = chunk_layout(NegativeMode.BATCH_UNIFORM, P, chunk, U)
    with torch.enable_grad() if grad else torch.no_grad():
        scores = model.score(
            0,
            layout,
            SideBatch("a", lhs, NegativeMode.BATCH_UNIFORM, ul),
            SideBatch("b", rhs, NegativeMode.BATCH_UNIFORM, ur),
        )
    scores = dataclasses.replace(
        scores, **{f: getattr(scores, f).detach() for f in ("lhs_pos", "rhs_pos", "lhs_neg", "rhs_neg")}
    )
    ga, gb, t = (
        model.global_embs["emb_a"].detach(),
        model.global_embs["emb_b"].detach(),
        model.rhs_operators[0].translation.detach(),
    )
    L = lambda x: x + ga  # noqa: E731 - named lambdas read as the formulas they check
    R = lambda x: x + gb + t  # noqa: E731 - named lambdas read as the formulas they check
    for i in range(P):
        c, k = divmod(i, chunk)
        assert float(scores.lhs_pos[i]) == pytest.approx(float(L(lhs[i]) @ R(rhs[i])), abs=1e-5)
        for j in range(chunk + U):
            if j < chunk:
                mate = c * chunk + j
                masked = j == k or mate >= P
                want_l = MASKED if masked else float(L(lhs[mate]) @ R(rhs[i]))
                want_r = MASKED if masked else float(L(lhs[i]) @ R(rhs[mate]))
            else:
                want_l = float(L(ul[c, j - chunk]) @ R(rhs[i]))
                want_r = float(L(lhs[i]) @ R(ur[c, j - chunk]))
            assert float(scores.lhs_neg[i, j]) == pytest.approx(want_l, abs=1e-4)
            assert float(scores.rhs_neg[i, j]) == pytest.approx(want_r, abs=1e-4)
    assert scores.reg is None


def test_dynamic_scores_forward_and_reverse() -> None:
    cfg = make_config(
        relations=[SimpleNamespace(name="t", lhs="a", rhs="a", weight=1.0, operator="diagonal", all_negs=False)],
        global_emb=False,
        dynamic_relations=True,
        regularization_coef=0.1,
    )
    model = build_model(cfg, 2)
    with torch.no_grad():
        model.rhs_operators[0].diagonals.copy_(torch.tensor([[1.0, 2, 3, 4], [2.0, 2, 2, 2]]))
        model.lhs_operators[0].diagonals.copy_(torch.tensor([[-1.0, 1, -1, 1], [0.5, 0.5, 0.5, 0.5]]))
    u, v, rel = torch.eye(4)[:2], torch.ones(2, 4), torch.tensor([0, 1])
    layout = chunk_layout(NegativeMode.BATCH_UNIFORM, 2, 2, 0)
    s = model.score(
        rel, layout, SideBatch("a", u, NegativeMode.BATCH_UNIFORM), SideBatch("a", v, NegativeMode.BATCH_UNIFORM)
    )
    h = model.rhs_operators[0].diagonals.detach()[rel] * v  # h_r(v)
    g = model.lhs_operators[0].diagonals.detach()[rel] * u  # g_r(u)
    assert s.lhs_pos.tolist() == pytest.approx((u * h).sum(1).tolist())  # c(u, h_r(v)) = [1, 0]
    assert s.rhs_pos.tolist() == pytest.approx((v * g).sum(1).tolist())  # c(v, g_r(u)) = [-1, 0.5]
    # lhs negatives: other lhs of the chunk, un-operated, against h_r(v)
    assert s.lhs_neg[0].tolist() == pytest.approx([MASKED, float(u[1] @ h[0])])
    assert s.rhs_neg[1].tolist() == pytest.approx([float(v[0] @ g[1]), MASKED])
    # N3 per direction: |u|^3 + |h|^3 + |d_r|^3 per edge, both directions, times 0.1
    want = (
        u.abs().pow(3).sum()
        + h.abs().pow(3).sum()
        + model.rhs_operators[0].diagonals.detach()[rel].abs().pow(3).sum()
        + v.abs().pow(3).sum()
        + g.abs().pow(3).sum()
        + model.lhs_operators[0].diagonals.detach()[rel].abs().pow(3).sum()
    )
    assert s.reg.item() == pytest.approx(0.1 * float(want), rel=1e-5)


@pytest.mark.parametrize("operator", ["translation", "diagonal", "complex_diagonal"])
def test_standard_n3_counts_the_operator_term_once_per_chunk(operator: str) -> None:
    """PBG's standard-mode N3 multiplies the operator term by len(chunked positives) = #chunks."""
    rels = [SimpleNamespace(name="r", lhs="a", rhs="b", weight=1.0, operator=operator, all_negs=False)]
    model = build_model(make_config(relations=rels, global_emb=False, regularization_coef=0.1), 0)
    op = model.rhs_operators[0]
    with torch.no_grad():
        for param in op.parameters():
            param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(3)))
    lhs, rhs = torch.randn(5, 4), torch.randn(5, 4)
    layout = chunk_layout(NegativeMode.BATCH_UNIFORM, 5, 2, 0)  # chunks of 2: 3 chunks for 5 positives
    s = model.score(
        0, layout, SideBatch("a", lhs, NegativeMode.BATCH_UNIFORM), SideBatch("b", rhs, NegativeMode.BATCH_UNIFORM)
    )
    dst = op(rhs).detach()
    embs = op.prepare_for_reg(lhs).abs().pow(3).sum() + op.prepare_for_reg(dst).abs().pow(3).sum()
    op_term = op.reg_params().detach().abs().pow(3).sum()
    assert s.reg.item() == pytest.approx(0.1 * float(embs + 3 * op_term), rel=1e-5)
    assert s.reg.item() != pytest.approx(0.1 * float(embs + 5 * op_term), rel=1e-5)


def test_all_mode_masks_own_entity_and_none_mode_is_empty() -> None:
    model = build_model(make_config(global_emb=False), 0)
    table_a = torch.eye(4)
    pos = table_a[torch.tensor([2, 0])]
    layout = chunk_layout(NegativeMode.ALL, 2, 50, 0)
    s = model.score(
        0,
        layout,
        SideBatch("a", pos, NegativeMode.ALL, all_embs=table_a, pos_offsets=torch.tensor([2, 0])),
        SideBatch("b", torch.ones(2, 4), NegativeMode.NONE),
    )
    assert s.lhs_neg.tolist() == [[1.0, 1.0, MASKED, 1.0], [MASKED, 1.0, 1.0, 1.0]]
    assert s.rhs_neg.shape == (2, 0)


@pytest.mark.parametrize("dynamic", [False, True], ids=["standard", "dynamic"])
def test_a_seed_leaves_the_identity_start_bit_equal_to_pbgs(dynamic: bool) -> None:
    """operator_init=identity: the seed changes nothing (PBG's start, as before the seed was passed)."""
    rels = [SimpleNamespace(name="r", lhs="a", rhs="b", weight=1.0, operator="affine", all_negs=False)]
    cfg = make_config(relations=rels, global_emb=not dynamic, dynamic_relations=dynamic)
    seeded, unseeded = build_model(cfg, 2, seed=5).state_dict(), build_model(cfg, 2).state_dict()
    assert seeded.keys() == unseeded.keys() and all(torch.equal(seeded[k], unseeded[k]) for k in seeded)
    eye = torch.eye(4).expand(2, 4, 4) if dynamic else torch.eye(4)
    sides = ("lhs", "rhs") if dynamic else ("rhs",)
    for side, param in [(s, p) for s in sides for p in ("linear_transformation", "translation")]:
        name = f"{side}_operators.0.{param}{'s' if dynamic else ''}"
        assert torch.equal(seeded[name], eye if param == "linear_transformation" else torch.zeros(eye.shape[:-1]))


def test_builder_errors() -> None:
    with pytest.raises(ConfigError, match="global_emb"):
        build_model(make_config(dynamic_relations=True, relations=make_config().relations[:1]), 3)
    with pytest.raises(ConfigError, match="operator 'linear'"):
        rels = [SimpleNamespace(name="r", lhs="a", rhs="b", weight=1.0, operator="linear", all_negs=False)]
        build_model(make_config(relations=rels, regularization_coef=1e-3), 0)
    with pytest.raises(ConfigError, match="even dimension"):
        rels = [SimpleNamespace(name="r", lhs="a", rhs="b", weight=1.0, operator="complex_diagonal", all_negs=False)]
        build_model(make_config(relations=rels, dimension=5), 0)


# ---- ranking every entity: eval's all_negs path, and row-block invariance ---------------------
OPERATORS = ["none", "translation", "diagonal", "linear", "affine", "complex_diagonal"]
DIM = 100  # the BLAS's kernel choice was measured to depend on the row count at this width
NUM_DYNAMIC = 3


def ranking_model(operator: str, comparator: str, bias: bool, dynamic: bool) -> MultiRelationEmbedder:
    """A model with every parameter random (seeded): standard mode has relations a->b and b->b."""
    rels = [
        SimpleNamespace(name="r0", lhs="a", rhs="b", weight=1.0, operator=operator, all_negs=True),
        SimpleNamespace(name="r1", lhs="b", rhs="b", weight=1.0, operator=operator, all_negs=True),
    ]
    cfg = make_config(
        relations=rels[:1] if dynamic else rels,
        dimension=DIM,
        comparator=comparator,
        bias=bias,
        global_emb=not dynamic,
        dynamic_relations=dynamic,
    )
    model = build_model(cfg, NUM_DYNAMIC if dynamic else 0)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.3)
    return model


def ranking_tables() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(12)
    return {"a": torch.randn(40, DIM, generator=gen), "b": torch.randn(37, DIM, generator=gen)}


def ranking_edges(dynamic: bool, rel: int, count: int) -> tuple[torch.Tensor, torch.Tensor, int | torch.Tensor]:
    gen = torch.Generator().manual_seed(13 + rel)
    lhs_count = 40 if rel == 0 else 37
    lhs, rhs = torch.randint(lhs_count, (count,), generator=gen), torch.randint(37, (count,), generator=gen)
    rels = torch.randint(NUM_DYNAMIC, (count,), generator=gen) if dynamic else rel
    return lhs, rhs, rels


def ranking_cases() -> list[tuple[str, str, bool, bool]]:
    comparators = ["dot", "cos", "l2", "squared_l2"]
    return [(o, c, b, d) for d in (False, True) for o in OPERATORS for c in comparators for b in (False, True)]


def case_id(case: tuple[str, str, bool, bool]) -> str:
    operator, comparator, bias, dynamic = case
    return f"{'dynamic' if dynamic else 'standard'}-{operator}-{comparator}{'-bias' if bias else ''}"


def eval_blocks(
    model: MultiRelationEmbedder,
    rel: int,
    edges: tuple[torch.Tensor, torch.Tensor, int | torch.Tensor],
    sizes: list[int],
) -> Scores:
    """What all_negs evaluation computes, in row blocks of ``sizes``, concatenated."""
    lhs, rhs, rels = edges
    spec, tables = model.relation(rel), ranking_tables()
    parts, start = [], 0
    for size in sizes:
        rows = slice(start, start + size)
        start += size
        sides = [
            SideBatch(e, tables[e][o[rows]], NegativeMode.ALL, all_embs=tables[e], pos_offsets=o[rows])
            for e, o in ((spec.lhs, lhs), (spec.rhs, rhs))
        ]
        block_rel = rels[rows] if isinstance(rels, torch.Tensor) else rel
        parts.append(model.score(block_rel, chunk_layout(NegativeMode.ALL, size, 0, 0), *sides))
    return Scores(
        *(torch.cat([getattr(p, f) for p in parts]) for f in ("lhs_pos", "rhs_pos", "lhs_neg", "rhs_neg")), None
    )


@pytest.mark.parametrize("case", ranking_cases(), ids=case_id)
def test_eval_all_negs_scores_are_candidate_scores_of_the_ranking_methods_bit_for_bit(
    case: tuple[str, str, bool, bool],
) -> None:
    operator, comparator, bias, dynamic = case
    model = ranking_model(operator, comparator, bias, dynamic)
    for rel in (0,) if dynamic else (0, 1):
        edges = ranking_edges(dynamic, rel, 23)
        lhs, rhs, rels = edges
        spec, tables = model.relation(rel), ranking_tables()
        with torch.no_grad():
            evaluated = eval_blocks(model, rel, edges, [5, 11, 7])
            for side, own, other, neg in (
                (Side.LHS, lhs, rhs, evaluated.lhs_neg),
                (Side.RHS, rhs, lhs, evaluated.rhs_neg),
            ):
                anchors = tables[side.other.pick(spec.lhs, spec.rhs)][other]
                query = model.ranking_query(side, rels, anchors)  # all 23 rows in one block
                cands = model.ranking_candidates(side, rels, tables[side.pick(spec.lhs, spec.rhs)])
                ours = model.candidate_scores(query, cands)
                ours[torch.arange(23), own] = MASKED  # evaluation masks the positive's own column
                assert torch.equal(ours, neg), (side, rel)


@pytest.mark.parametrize(
    "case",
    [(o, c, True, d) for d in (False, True) for o in OPERATORS for c in ("dot", "l2")],
    ids=case_id,
)
def test_a_rows_scores_are_the_same_whatever_block_it_is_scored_in(case: tuple[str, str, bool, bool]) -> None:
    """Blocks of 1..40 rows give every row the bits of one 40-row block: candidates and positives.

    Measured, not promised by the BLAS: without the padding to ROW_BLOCK this fails on oneMKL.
    """
    operator, comparator, bias, dynamic = case
    model = ranking_model(operator, comparator, bias, dynamic)
    lhs, rhs, rels = ranking_edges(dynamic, 0, 40)
    spec, tables = model.relation(0), ranking_tables()
    a_rows, b_rows = tables[spec.lhs][lhs], tables[spec.rhs][rhs]
    layout = chunk_layout(NegativeMode.NONE, 40, 0, 0)
    with torch.no_grad():
        cands = model.ranking_candidates(Side.RHS, rels, tables[spec.rhs])
        want = model.candidate_scores(model.ranking_query(Side.RHS, rels, a_rows), cands)
        pos = model.score(
            rels, layout, SideBatch(spec.lhs, a_rows, NegativeMode.NONE), SideBatch(spec.rhs, b_rows, NegativeMode.NONE)
        )
        for size in range(1, 41):
            got, got_lhs_pos, got_rhs_pos = [], [], []
            for start in range(0, 40, size):
                rows = slice(start, start + size)
                block_rels = rels[rows] if dynamic else rels
                got.append(model.candidate_scores(model.ranking_query(Side.RHS, block_rels, a_rows[rows]), cands))
                block = model.score(
                    block_rels,
                    chunk_layout(NegativeMode.NONE, a_rows[rows].shape[0], 0, 0),
                    SideBatch(spec.lhs, a_rows[rows], NegativeMode.NONE),
                    SideBatch(spec.rhs, b_rows[rows], NegativeMode.NONE),
                )
                got_lhs_pos.append(block.lhs_pos)
                got_rhs_pos.append(block.rhs_pos)
            assert torch.equal(torch.cat(got), want), size
            assert torch.equal(torch.cat(got_lhs_pos), pos.lhs_pos), size
            assert torch.equal(torch.cat(got_rhs_pos), pos.rhs_pos), size


def test_ranking_methods_take_the_relations_operator_on_the_right_side() -> None:
    """Standard mode: the RHS's candidates and the LHS's query pass relation rel's operator."""
    model = ranking_model("translation", "dot", False, False)
    ops, glob = model.rhs_operators, model.global_embs
    x = torch.randn(3, DIM, generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        a, b = x + glob["emb_a"], x + glob["emb_b"]
        assert torch.equal(model.ranking_query(Side.RHS, 0, x), a)  # (head, r0, ?): the head as it is
        assert torch.equal(model.ranking_query(Side.LHS, 1, x), ops[1](b))  # (?, r1, tail): f_r1(tail)
        assert torch.equal(model.ranking_candidates(Side.RHS, 1, x), ops[1](b))
        assert torch.equal(model.ranking_candidates(Side.LHS, 0, x), a)


@pytest.mark.parametrize("case", ranking_cases(), ids=case_id)
def test_candidate_scores_written_into_a_reused_buffer_are_the_same_bits(case: tuple[str, str, bool, bool]) -> None:
    """Ranking writes each block into one buffer (stale scores from the block before): same bits, in place."""
    operator, comparator, bias, dynamic = case
    model = ranking_model(operator, comparator, bias, dynamic)
    lhs, _, rels = ranking_edges(dynamic, 0, 40)
    spec, tables = model.relation(0), ranking_tables()
    with torch.no_grad():
        cands = model.ranking_candidates(Side.RHS, rels, tables[spec.rhs])
        query = model.ranking_query(Side.RHS, rels, tables[spec.lhs][lhs])
        buffer = torch.full((48, cands.shape[0]), float("nan"))
        for rows in (slice(0, 40), slice(0, 16), slice(16, 39), slice(7, 8)):  # 48, 16, 32 and 16 rows computed
            got = model.candidate_scores(query[rows], cands, out=buffer)
            assert got.data_ptr() == buffer.data_ptr()
            assert torch.equal(got, model.candidate_scores(query[rows], cands)), rows


def test_candidate_scores_refuse_a_buffer_that_cannot_hold_the_padded_rows() -> None:
    model = ranking_model("none", "dot", False, False)
    query, cands = torch.randn(17, DIM), torch.randn(5, DIM)
    with torch.no_grad():
        for shape in ((31, 5), (32, 6)):
            with pytest.raises(ValueError, match=r"it needs at least \[32, 5\]"):
                model.candidate_scores(query, cands, out=torch.empty(shape))
