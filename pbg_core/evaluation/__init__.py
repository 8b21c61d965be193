"""Ranking metrics of scored edges: ranks, MRR, hits@k, AUC, and the filter of known edges.

Imports the foundations, ``pbg_core.config``, ``pbg_core.kernels`` and ``pbg_core.model``.
Evaluating edges in batches is :func:`pbg_core.training.batching.eval_edges` (it shares
the batch preparation of training); running an offline evaluation over a graph is
:mod:`pbg_core.session.offline_eval`.

- :mod:`.metrics`: the metrics and :class:`~pbg_core.evaluation.metrics.FilterIndex`.
"""
