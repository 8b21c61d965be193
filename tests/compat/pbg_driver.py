"""Computes with PBG's own classes what the math compat tests compare ours against.

Runs in PBG's virtualenv, never in ours: ``python pbg_driver.py REQUEST.pt RESULT.pt``. With
PBG's main-branch source first on ``PYTHONPATH`` it drives that version instead of the installed
1.0.0 (main has the N3 regularizer, per-edge weights and the evaluator's loss; 1.0.0 has none
of them). Only PBG's public classes are called; nothing of PBG is copied here.

A request is a dict saved with ``torch.save`` (or a list of them: a list of results comes back);
``case`` picks what to compute:

- ``comparator``: ``name``, ``lhs_pos``/``rhs_pos`` [C, P, D], ``lhs_neg``/``rhs_neg`` [C, N, D]
  -> ``pos``, ``lhs_neg``, ``rhs_neg`` scores of ``COMPARATORS[name]``;
- ``loss``: ``name``, ``margin``, ``pos`` [P], ``neg`` [P, N] -> ``loss`` and the gradients
  ``grad_pos``, ``grad_neg``;
- ``train_step``: ``config`` (a PBG config dict), ``tables`` {entity: [count, D]},
  ``model_state`` (operator parameters, PBG's state-dict keys), ``edges`` -> the scores, the
  loss ``weight * (lhs + rhs)``, the regularizer (main), and the gradients of every table and
  model parameter after ``backward(loss + reg)``;
- ``eval``: like ``train_step``, scored by ``RankingEvaluator`` (``FilteredRankingEvaluator`` when
  ``filter_edges`` are given: saved to ``filter_path`` with PBG's edge storage first) under
  ``torch.manual_seed(seed)`` -> the evaluator's summed metrics.

``edges`` is ``{"lhs", "rhs", "rel"[, "weight"]}`` (int64 tensors, float weights).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch


def _comparator(request: dict[str, Any]) -> dict[str, Any]:
    from torchbiggraph.model import COMPARATORS

    comparator = COMPARATORS.get_class(request["name"])()
    embs = [request[k] for k in ("lhs_pos", "rhs_pos", "lhs_neg", "rhs_neg")]
    pos, lhs_neg, rhs_neg = comparator(*[comparator.prepare(e) for e in embs])
    return {"pos": pos, "lhs_neg": lhs_neg, "rhs_neg": rhs_neg}


def _make_loss(name: str, margin: float) -> Any:
    from torchbiggraph.losses import LOSS_FUNCTIONS

    cls = LOSS_FUNCTIONS.get_class(name)
    try:
        return cls(margin=margin)  # main: every loss takes margin=
    except TypeError:
        return cls(margin) if name == "ranking" else cls()  # 1.0.0


def _loss(request: dict[str, Any]) -> dict[str, Any]:
    loss_fn = _make_loss(request["name"], request["margin"])
    pos = request["pos"].clone().requires_grad_(True)
    neg = request["neg"].clone().requires_grad_(True)
    loss = loss_fn(pos, neg)
    loss.backward()
    return {"loss": loss.detach(), "grad_pos": pos.grad, "grad_neg": neg.grad}


def _config(request: dict[str, Any]) -> Any:
    from torchbiggraph.config import ConfigSchema

    return ConfigSchema.from_dict(request["config"])


def _model(request: dict[str, Any], config: Any) -> tuple[Any, dict[str, torch.nn.Parameter]]:
    from torchbiggraph.model import make_model
    from torchbiggraph.types import Side

    model = make_model(config)
    model.load_state_dict(request.get("model_state", {}), strict=False)
    tables = {name: torch.nn.Parameter(t.clone()) for name, t in request["tables"].items()}
    new_order = list(inspect.signature(model.set_embeddings).parameters)[1] == "side"  # main: (entity, side, w)
    for name, table in tables.items():
        for side in (Side.LHS, Side.RHS):
            model.set_embeddings(name, side, table) if new_order else model.set_embeddings(name, table, side)
    return model, tables


def _edges(spec: dict[str, Any]) -> Any:
    from torchbiggraph.edgelist import EdgeList
    from torchbiggraph.entitylist import EntityList

    args = [EntityList.from_tensor(spec["lhs"]), EntityList.from_tensor(spec["rhs"]), spec["rel"]]
    if spec.get("weight") is not None:
        args.append(spec["weight"])  # main only
    return EdgeList(*args)


def _scores_and_reg(model: Any, edges: Any) -> tuple[Any, Any]:
    out = model(edges)
    if hasattr(out, "lhs_pos"):
        return out, None  # 1.0.0: no regularizer
    return out[0], out[1]


def _train_step(request: dict[str, Any]) -> dict[str, Any]:
    config = _config(request)
    model, tables = _model(request, config)
    edges = _edges(request["edges"])
    scores, reg = _scores_and_reg(model, edges)
    loss_fn = _make_loss(config.loss_fn, config.margin)
    weight = request["edges"].get("weight")
    sides = [
        loss_fn(p, n, weight) if weight is not None else loss_fn(p, n)
        for p, n in ((scores.lhs_pos, scores.lhs_neg), (scores.rhs_pos, scores.rhs_neg))
    ]
    rel = 0 if config.dynamic_relations else int(request["edges"]["rel"].reshape(-1)[0])
    loss = config.relations[rel].weight * (sides[0] + sides[1])
    (loss + reg if reg is not None else loss).backward()
    grads = {
        f"table.{name}": t.grad.to_dense() if t.grad is not None else torch.zeros_like(t) for name, t in tables.items()
    }
    grads.update(
        {
            name: p.grad
            for name, p in model.named_parameters()
            if p.grad is not None and not name.startswith(("lhs_embs.", "rhs_embs."))
        }
    )  # tables: above
    return {
        "scores": {k: getattr(scores, k).detach() for k in ("lhs_pos", "rhs_pos", "lhs_neg", "rhs_neg")},
        "loss": loss.detach(),
        "reg": reg.detach() if reg is not None else None,
        "grads": grads,
    }


def _evaluator(request: dict[str, Any], config: Any) -> Any:
    from torchbiggraph import eval as pbg_eval

    if request.get("filter_edges"):  # written with PBG's own edge storage, then read back by it
        from torchbiggraph.filtered_eval import FilteredRankingEvaluator
        from torchbiggraph.graph_storages import EDGE_STORAGES
        from torchbiggraph.types import Partition

        storage = EDGE_STORAGES.make_instance(request["filter_path"])
        storage.prepare()
        storage.save_edges(Partition(0), Partition(0), _edges(request["filter_edges"]))
        return FilteredRankingEvaluator(config, [request["filter_path"]])
    params = inspect.signature(pbg_eval.RankingEvaluator.__init__).parameters
    if "loss_fn" not in params:
        return pbg_eval.RankingEvaluator()  # 1.0.0: no loss
    loss_fn = _make_loss(config.loss_fn, config.margin)
    return pbg_eval.RankingEvaluator(loss_fn, [r.weight for r in config.relations])


def _eval(request: dict[str, Any]) -> dict[str, Any]:
    config = _config(request)
    model, _ = _model(request, config)
    model.eval()
    evaluator = _evaluator(request, config)
    torch.manual_seed(request.get("seed", 0))
    with torch.no_grad():
        stats = evaluator.process_one_batch(model, _edges(request["edges"]))
    return {"count": stats.count, **{k: float(v) for k, v in stats.metrics.items()}}


CASES = {"comparator": _comparator, "loss": _loss, "train_step": _train_step, "eval": _eval}


def main() -> None:
    request = torch.load(sys.argv[1], weights_only=False)
    if isinstance(request, list):  # a batch of requests: one interpreter start for all
        torch.save([CASES[r["case"]](r) for r in request], sys.argv[2])
    else:
        torch.save(CASES[request["case"]](request), sys.argv[2])


if __name__ == "__main__":
    main()
