"""HOGWILD worker processes and the shared memory they train in.

Imports the foundations and ``pbg_core.training`` (the jobs a worker runs) and what
lies below it; never ``pbg_core.session`` nor ``pbg_core.config`` (a worker receives
:class:`~pbg_core.training.settings.WorkerSettings`, not the config). This ``__init__``
imports nothing: :mod:`.worker_boot` must load without torch.

- :mod:`.memory`: shared-memory embedding slots and their pool;
- :mod:`.worker`: the child's loop and the wire protocol;
- :mod:`.worker_boot`: workers started before their session (no torch import);
- :mod:`.pool`: the pool of child processes (start, jobs, failures, closing);
- :mod:`.hogwild`: the HOGWILD workers the session drives (this process and the pool);
- :mod:`.worker_jobs`: what runs in a worker (set-up, train and eval jobs).
"""
