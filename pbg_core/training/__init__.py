"""One worker's batches: sampling, forward, backward and row updates of the shared tables.

Imports the foundations, kernels, model and evaluation; never config, parallel or
session (a worker's training knows nothing of processes or checkpoints, and reads the
config only as the session's :class:`~pbg_core.training.settings.WorkerSettings`). Lowest first:

- :mod:`.tables`: the bucket's shared tables (the batch types everything here uses);
- :mod:`.workspace`: per-thread scratch buffers reused from batch to batch;
- :mod:`.optimizers`: RowAdagrad and AsyncAdagrad;
- :mod:`.settings`: a worker's settings, :class:`~pbg_core.training.settings.Trainer`, ``Evaluator``;
- :mod:`.row_gather`: fetching rows for autograd and writing their updates back;
- :mod:`.fast_backward`, :mod:`.loss_grads`, :mod:`.row_operators`: closed-form pieces
  of the hand-written paths;
- :mod:`.fast_paths`, :mod:`.fast_dynamic`: the hand-written forward/backward;
- :mod:`.batching`: the batch loop (train and evaluate), which picks a path per batch.
"""
