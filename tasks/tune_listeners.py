"""Who hears a run's validations in this process: the tuning study's pruner, by checkpoint directory.

A tuning trial (``flows/tune.py``) runs the ``pbg`` flow in-process in its own checkpoint
directory. Before it starts, it registers a listener for that directory here
(:func:`listening`); :func:`tasks.validation_steps.record_best` calls :func:`notify` after each
validation of the run with the validation's index (1 for the first), its epoch and its value of the
study's metric. A listener returns a reason to stop (``pruned by study kinships``) or None; a
reason ends the run after that version as early stopping does, with the reason in its log line
and summary. Listeners live in this process only: a run with no listener (every run but a
trial's) is not affected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# (index of the validation, 1-based; its epoch; its value of the metric) -> a reason to stop, or None.
Listener = Callable[[int, int, float], str | None]

_LISTENERS: dict[str, Listener] = {}
_LOCK = threading.Lock()  # trials register and finish in their own threads


def _key(checkpoint_path: str) -> str:
    return checkpoint_path.rstrip("/")


@contextmanager
def listening(checkpoint_path: str, listener: Listener) -> Iterator[None]:
    """Call ``listener`` for every validation of the run in ``checkpoint_path`` inside the block.

    Raises:
        ValueError: another listener is registered for that directory (two trials in one directory).
    """
    key = _key(checkpoint_path)
    with _LOCK:
        if key in _LISTENERS:
            raise ValueError(f"{checkpoint_path}: a tuning trial already listens to this checkpoint directory")
        _LISTENERS[key] = listener
    try:
        yield
    finally:
        with _LOCK:
            _LISTENERS.pop(key, None)


def notify(checkpoint_path: str, index: int, epoch: int, value: float) -> str | None:
    """Tell the run's listener (if any) about a validation; its reason to stop the run, or None."""
    with _LOCK:
        listener = _LISTENERS.get(_key(checkpoint_path))
    return listener(index, epoch, value) if listener is not None else None
