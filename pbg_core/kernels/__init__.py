"""Numba loops for the memory-bound steps of a batch: the lowest numeric layer.

Imports only the foundations (``pbg_core.types``). Used by the model (losses), training
(optimizers, closed-form gradients, row operators), evaluation (ranks) and the workers
(warm-up).

- :mod:`.fused`: row Adagrad, ranking/softmax losses and their score gradients, ranks;
- :mod:`.complex_diagonal`: forward and backward of the complex-diagonal operator.
"""
