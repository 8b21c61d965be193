"""``retrain.json`` in a run directory: what a retraining run trained on and how its gate went.

Written atomically at each step of a gated retraining run (:mod:`tasks.retrain_gate`):

- ``generation``: the newest import generation the run trains (its edges included); ``-1`` in
  the file (None here) while the run has not imported yet;
- ``new_generations`` / ``holdouts``: the generations new since the run it starts from, and the
  holdout edge paths split off them (what the gate evaluates on); ``edge_paths``: the
  generations' edge paths under ``incoming.edges_dir`` (trained after the config's own);
- ``baseline``: the starting model's metrics on those holdouts (the previous run, grown to
  today's entities), measured before training; ``trained``: the trained model's;
- ``gate``: ``pending`` until judged, then ``passed`` or ``failed`` (with ``reason``);
- ``base_generation`` and ``received``: written first (``received: false``) before anything is
  imported, so that a retry after the import still knows what was new;
- ``received_files``: every file received so far, this run's and every earlier run's
  (:class:`storage.retraining.received.ReceivedFile` as JSON: ``relative``, ``size``, ``digest``,
  ``generation``, ``received_at``, ``mtime``), so that pruning old runs forgets none;
- ``holdout_warning``: empty, or why the new data's holdout is too small for the gate to mean
  much (:func:`storage.retraining.gate.small_holdout`), for the run's summary.

A run whose gate is ``pending`` or ``failed`` is never what a later run starts from
(:func:`storage.retraining.run_dirs.find_previous_run`), and its new generations stay new for the next run.
A run directory without the file (a run without a gate, or from before gates) counts as passed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

from storage import layout
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, changes, reads, urls
from storage.fs.urls import StorageOptions

Gate = Literal["pending", "passed", "failed"]
GATE_STATES: tuple[Gate, ...] = get_args(Gate)
_NOT_IMPORTED = -1  # the file's "generation" before the run imported (None in RetrainState)


@dataclass(frozen=True)
class GateResult:
    """A judged gate: ``passed`` or ``failed``, and a line naming the figures compared."""

    gate: Gate
    reason: str


@dataclass(frozen=True)
class RetrainState:
    """The content of ``retrain.json`` (see the module docstring)."""

    generation: int | None
    new_generations: list[int] = field(default_factory=list)
    holdouts: list[str] = field(default_factory=list)
    edge_paths: list[str] = field(default_factory=list)
    baseline: dict[str, float] | None = None
    trained: dict[str, float] | None = None
    gate: Gate = "pending"
    reason: str = ""
    base_generation: int | None = None  # the newest generation the starting run trained (None: none)
    received: bool = True  # False: written before the import, so that a retry keeps the same base
    received_files: list[dict[str, Any]] = field(default_factory=list)  # received.ReceivedFile.to_json
    holdout_warning: str = ""  # the holdout is too small for the gate (storage.retraining.gate.small_holdout)

    def judged(self, result: GateResult) -> RetrainState:
        """This state with the gate's verdict."""
        return replace(self, gate=result.gate, reason=result.reason)

    def measured(self, which: Literal["baseline", "trained"], metrics: dict[str, float]) -> RetrainState:
        """This state with the ``which`` model's metrics on the holdout."""
        return replace(self, baseline=metrics) if which == "baseline" else replace(self, trained=metrics)


def read_state(run_url: str, storage_options: StorageOptions = None) -> RetrainState | None:
    """The run directory's ``retrain.json``, or None if it has none.

    Raises:
        BadDataError: the file is not such an object (naming the file and what is wrong).
    """
    url = urls.join_url(run_url, layout.RETRAIN_STATE_FILE)
    try:
        text = reads.read_text(url, storage_options)
    except DataNotFound:
        return None
    try:
        raw = json.loads(text)
        if raw.get("generation") == _NOT_IMPORTED:
            raw["generation"] = None
        state = RetrainState(**raw)
    except (json.JSONDecodeError, TypeError, AttributeError) as err:
        raise BadDataError(url, f"not a retraining state of pbg-flow ({err})") from None
    if state.gate not in GATE_STATES:
        raise BadDataError(url, f"gate {state.gate!r} is not one of {', '.join(GATE_STATES)}")
    return state


def write_state(run_url: str, state: RetrainState, storage_options: StorageOptions = None) -> None:
    """Replace the run directory's ``retrain.json`` atomically."""
    text = json.dumps(as_json(state), indent=2, sort_keys=True) + "\n"
    atomic.write_text_atomic(urls.join_url(run_url, layout.RETRAIN_STATE_FILE), text, storage_options)


def remove_state(run_url: str, storage_options: StorageOptions = None) -> None:
    """Delete the run directory's ``retrain.json`` (idempotent)."""
    changes.remove(urls.join_url(run_url, layout.RETRAIN_STATE_FILE), missing_ok=True, storage_options=storage_options)


def may_start_from(run_url: str, storage_options: StorageOptions = None) -> bool:
    """Whether a later run may start from this run: no ``retrain.json``, or its gate passed."""
    state = read_state(run_url, storage_options)
    return state is None or state.gate == "passed"


def as_json(state: RetrainState) -> dict[str, Any]:
    """The state as the JSON object the file holds."""
    raw = asdict(state)
    if raw["generation"] is None:
        raw["generation"] = _NOT_IMPORTED
    return raw


__all__ = [
    "GATE_STATES",
    "Gate",
    "GateResult",
    "RetrainState",
    "as_json",
    "may_start_from",
    "read_state",
    "remove_state",
    "write_state",
]
