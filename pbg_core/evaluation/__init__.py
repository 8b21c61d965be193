"""Ranking metrics of scored edges: ranks, MRR, hits@k, AUC, and the filter of known edges.

Imports the foundations, ``pbg_core.config``, ``pbg_core.kernels`` and ``pbg_core.model``.
Evaluating edges in batches is :func:`pbg_core.training.batching.eval_edges` (it shares
the batch preparation of training); running an offline evaluation over a graph is
:mod:`pbg_core.session.offline_eval`.

- :mod:`.metrics`: the metrics, :class:`~pbg_core.evaluation.metrics.FilterIndex` and
  :func:`~pbg_core.evaluation.metrics.mask_known`;
- :mod:`.candidates`, :mod:`.sampling`: the distinct candidates of sampled offline evaluation;
- :mod:`.ranking`: every entity of a type ranked for many queries, one partition at a time,
  with evaluation's scoring path (a trained model's answers);
- :mod:`.early_stopping`: validation rows, the best of them and when they say to stop.
"""
