"""How a tuning trial ended, wherever its ``pbg`` run trained (in this process, or on a Dask worker).

A trial's run ends as a :class:`TrialEnd` (its ``pbg`` flow's final state, reduced to what
crosses a Dask connection: completed, cancelled or failed, the one-line reason, the run's
``stopped`` note); :func:`classify` makes it the study's :class:`TrialOutcome`:

- cancelled: INTERRUPTED (left RUNNING in the study, resumed by its next run);
- failed: FAIL with :func:`failure_reason` (``diverged: ...``, a config error's line, or
  ``<Type>: <message>``);
- completed: PRUNED if the study's pruner stopped it, FAIL if no validation ran, else COMPLETE
  with the best validation value of its run (``best.json``, read from its checkpoint directory).
"""

from dataclasses import dataclass
from typing import Any

from prefect.client.schemas.objects import State
from pydantic import BaseModel

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError, TrainingDivergedError
from tasks.tune_study import was_pruned
from tasks.tune_trials import trial_result


class TrialOutcome(BaseModel):
    """How one trial ended: COMPLETE, PRUNED, FAIL, or INTERRUPTED (left RUNNING in the study)."""

    number: int
    state: str
    value: float | None = None
    epochs: int = 0
    seconds: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class TrialEnd:
    """A trial's ``pbg`` run's end: ``completed``, ``cancelled`` or ``failed``; why; its ``stopped`` note."""

    kind: str
    reason: str = ""
    stopped: str = ""


def failure_reason(error: Any) -> str:
    """One line: ``diverged: ...``, a config error's line, or ``<Type>: <message>``."""
    if isinstance(error, TrainingDivergedError):
        return f"diverged: {str(error).splitlines()[0]}"
    if isinstance(error, ConfigError):
        return str(error).replace("\n", " ")
    if isinstance(error, BaseException):
        first = str(error).splitlines()[0] if str(error) else ""
        return f"{type(error).__name__}: {first}"
    return str(error)


def end_of(state: State[dict[str, Any]]) -> TrialEnd:
    """The end of a ``pbg`` run from its final state."""
    if state.is_cancelled():
        return TrialEnd("cancelled", state.message or "")
    if not state.is_completed():
        return TrialEnd("failed", failure_reason(state.result(raise_on_failure=False)))
    return TrialEnd("completed", stopped=str(state.result().get("stopped", "")))


def classify(
    study: str, number: int, config: ConfigSchema, end: TrialEnd, seconds: float, resumes: int | None
) -> TrialOutcome:
    """The study's outcome of trial ``number`` (its run trained ``config``) from how its run ended."""
    if end.kind == "cancelled":
        return TrialOutcome(number=number, state="INTERRUPTED", seconds=seconds, reason=end.reason)
    if end.kind != "completed":
        return TrialOutcome(number=number, state="FAIL", seconds=seconds, reason=end.reason)
    value, epochs = trial_result(config)
    if was_pruned(study, number):
        reason = end.stopped or "pruned"
        return TrialOutcome(number=number, state="PRUNED", value=value, epochs=epochs, seconds=seconds, reason=reason)
    if value is None:
        reason = "no validation ran (num_epochs below validation.every_epochs)"
        return TrialOutcome(number=number, state="FAIL", epochs=epochs, seconds=seconds, reason=reason)
    reason = end.stopped + (f" (resumed trial {resumes})" if resumes is not None else "")
    return TrialOutcome(
        number=number, state="COMPLETE", value=value, epochs=epochs, seconds=seconds, reason=reason.strip()
    )
