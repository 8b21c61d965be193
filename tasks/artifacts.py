"""Prefect UI artifacts of a training run (progress bar, per-iteration tables, final summary) and of a
batch prediction (:func:`publish_predictions_table`) and of a tuning study (:func:`publish_trials_table`).

Plain functions, not tasks: every task run costs API events, and these only post one
artifact each. They are no-ops (returning None) outside a flow or task run, so task
bodies called through ``.fn()`` in tests and benchmarks create nothing. An artifact is
an observer of training, never part of it: any failure to build or post one is logged
as a warning and swallowed. What the artifacts contain is computed in
:mod:`storage.stats_report`; their keys, which Prefect's rules shape, are made here.
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast
from uuid import UUID

from prefect.artifacts import (
    TableArtifact,
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.objects import Artifact as ArtifactResponse
from prefect.context import get_run_context
from prefect.exceptions import MissingContextError

from pbg_core.config import ConfigSchema
from pbg_core.evaluation.early_stopping import ValidationRow, comparable
from pbg_core.session.iterations import Iteration
from storage import metric_labels
from storage.stats_report import (
    checkpoint_basename,
    iteration_table,
    summary_markdown,
    validation_table,
    version_progress,
)
from storage.validation_log import ValidationLog
from tasks._policies import run_logger
from tasks.runs import get_run

T = TypeVar("T")

SUMMARY_KEY_PREFIX = "pbg-summary-"
TABLE_KEY_PREFIX = "pbg-"
PREDICTIONS_KEY_PREFIX = "pbg-predictions-"
VALIDATION_KEY_PREFIX = "pbg-validation-"
TUNE_KEY_PREFIX = "pbg-tune-"
_MAX_KEY_LENGTH = 100


def start_progress(done: int, total: int, description: str, counts: bool = True) -> UUID | None:
    """Create the run's progress artifact at ``100 * done / total`` percent.

    Its description (what the artifact's card shows without opening it) starts with the
    percentage, and every :func:`update_progress` rewrites it in the same call:
    ``37%: 74 of 200 buckets trained of <checkpoint>``.

    Args:
        done: Units (e.g. buckets) already done, resumed ones included.
        total: Units of the whole run; 0 shows 100 %.
        description: What ``done`` counts (``buckets trained of <checkpoint>``), or with
            ``counts=False`` what is under way (``importing 3 input(s) into <dir>``).
        counts: Show ``done of total`` after the percentage (False: units that mean nothing to a
            reader, e.g. thousandths of an estimate).

    Returns:
        The artifact id for :func:`update_progress`, or None outside a run or on failure.
    """
    what = (description, counts)

    def create() -> UUID:
        artifact_id = cast(
            UUID,
            create_progress_artifact(
                progress=_percent(done, total),
                description=_progress_line(done, total, what),
                _sync=True,  # type: ignore[call-arg]  # _sync is not in the signature; runs here, returns the id
            ),
        )
        _progress_described[artifact_id] = what
        return artifact_id

    return _post("create the progress artifact", create)


PROGRESS_INTERVAL_SECONDS = 1.0
_progress_posted: dict[UUID, float] = {}  # artifact id -> when it was last moved (monotonic)
_progress_described: dict[UUID, tuple[str, bool]] = {}  # artifact id -> (description, counts) of start_progress


def update_progress(artifact_id: UUID | None, done: int, total: int) -> None:
    """Move the progress artifact ``artifact_id`` to ``100 * done / total`` percent (None: no-op).

    The description's percentage moves with it (see :func:`start_progress`). At most once per
    :data:`PROGRESS_INTERVAL_SECONDS`, and always at ``done >= total``: each update is an API
    round trip between two buckets, and a small graph trains several per second.
    """
    if artifact_id is None:
        return
    now = time.monotonic()
    if done < total and now - _progress_posted.get(artifact_id, -math.inf) < PROGRESS_INTERVAL_SECONDS:
        return
    _progress_posted[artifact_id] = now
    what = _progress_described.get(artifact_id)
    _post(
        "update the progress artifact",
        lambda: update_progress_artifact(
            artifact_id=artifact_id,
            progress=_percent(done, total),
            description=_progress_line(done, total, what) if what is not None else None,
            _sync=True,  # type: ignore[call-arg]  # _sync is not in the signature
        ),
    )


def _progress_line(done: int, total: int, what: tuple[str, bool]) -> str:
    """``37%: 74 of 200 buckets trained of ckpt`` (``37%: importing ...`` without counts); ASCII."""
    description, counts = what
    percent = f"{math.floor(_percent(done, total)):.0f}%"
    return f"{percent}: {done:,} of {total:,} {description}" if counts else f"{percent}: {description}"


def publish_iteration_table(
    iteration: Iteration,
    rows: Sequence[dict[str, Any] | None],
    resumed: int,
    config: ConfigSchema,
    flow_run_id: str | UUID | None = None,
) -> None:
    """Post the table artifact of the buckets ``iteration`` trained in this attempt.

    It goes on the iteration's own subflow run (``flow_run_id``; the current run when None), so
    each subflow's Artifacts tab holds its table and the run's tab holds its progress bar and
    summary (whose learning curve lists the epochs in order): the UI lists a run's artifacts by
    artifact id, a random UUID, so a run holding every iteration's table showed them shuffled.
    Keyed :func:`iteration_key` (``pbg-<checkpoint>-epoch-003-path-1-chunk-1``): the
    UI titles the table's page by its key, and key-sorted listings (``prefect artifact ls``)
    show training order; a retried iteration adds a version under the key. Its description
    ends with what the in-training MRR columns measure (:mod:`storage.metric_labels`).

    Args:
        iteration: The iteration (its label and version go into the description).
        rows: The trained buckets' stats rows (``finish_bucket(...)["row"]``); None entries are skipped.
        resumed: Buckets of this pass finished by an earlier attempt (not in ``rows``).
        config: The run's config: its checkpoint's last component goes into the key, what its
            in-training MRR measures into the description.
        flow_run_id: The iteration's subflow run.
    """

    def post() -> UUID:
        description = (
            f"{iteration.label}, version {iteration.version}, {sum(r is not None for r in rows)} bucket(s) "
            f"trained, {resumed} resumed from an earlier attempt. {metric_labels.in_training_definition(config)}"
        )
        artifact = TableArtifact(
            table=iteration_table(rows),
            key=iteration_key(checkpoint_basename(config.checkpoint_path), iteration),
            description=description,
            flow_run_id=UUID(str(flow_run_id)) if flow_run_id else None,
        )
        return cast(ArtifactResponse, artifact.create(_sync=True)).id  # type: ignore[call-arg]  # _sync is not in the signature; runs here

    _post(f"publish the table of {iteration.label}", post)


_SUMMARY_BY_CALLER: ContextVar[bool] = ContextVar("pbg_summary_by_caller", default=False)


@contextmanager
def summary_by_caller() -> Iterator[None]:
    """Inside, :func:`publish_summary` calls without a ``key`` post nothing: the caller posts the summary.

    A retraining run wraps its nested ``pbg`` subflow in it: the retraining run posts the one
    summary of the night, under its root's history key (:func:`retrain_history_key`), instead of
    the subflow's ``pbg-summary-run-...`` of a run directory seen once.
    """
    token = _SUMMARY_BY_CALLER.set(True)
    try:
        yield
    finally:
        _SUMMARY_BY_CALLER.reset(token)


def publish_summary(
    run: str,
    version: int,
    total_iterations: int,
    *,
    extra_sections: Sequence[str] = (),
    key: str | None = None,
    description: str | None = None,
    validation: str | None = None,
) -> None:
    """Post the run's markdown summary, keyed ``pbg-summary-<checkpoint name>`` unless ``key`` is given.

    Reads every row of the checkpoint's ``training_stats.json`` (earlier runs included) and, when
    the config validates, its validations of the committed versions (drawn on the learning curve).
    Without ``key``, inside :func:`summary_by_caller`, posts nothing.

    Args:
        run: The run's handle (:mod:`tasks.runs`): its config and stats log.
        version: The committed checkpoint version.
        total_iterations: Iterations of the whole schedule.
        extra_sections: Markdown sections after the checkpoint's (a retraining run's gate and data).
        key: The artifact key (each post adds a version of it), e.g. :func:`retrain_history_key`.
        description: The card's line; by default the checkpoint's version and progress.
        validation: The best version and why training stopped early, if it did (one line), or None.
    """
    if key is None and _SUMMARY_BY_CALLER.get():
        return

    def post() -> UUID:
        config, stats = get_run(run).config, get_run(run).stores.stats
        markdown = summary_markdown(
            config, version, total_iterations, stats.read(), extra_sections, validation, _validations(config, version)
        )
        return cast(
            UUID,
            create_markdown_artifact(
                markdown=markdown,
                key=key or artifact_key(checkpoint_basename(config.checkpoint_path)),
                description=description
                or f"pbg training summary, checkpoint {version_progress(version, total_iterations)}",
                _sync=True,  # type: ignore[call-arg]  # _sync is not in the signature; runs here, returns the id
            ),
        )

    _post("publish the run summary", post)


def publish_history_entry(key: str, description: str, markdown: str) -> None:
    """Post a version of a history ``key`` that no trained checkpoint backs (a retraining night with
    nothing new): the root's history then lists every night, trained or not."""
    _post(
        "publish the retraining history",
        lambda: cast(
            UUID,
            create_markdown_artifact(
                markdown=markdown,
                key=key,
                description=description,
                _sync=True,  # type: ignore[call-arg]  # _sync is not in the signature; runs here, returns the id
            ),
        ),
    )


def _validations(config: ConfigSchema, version: int) -> list[ValidationRow]:
    """The validations of versions ``1..version`` measured as the newest one was (none without validation)."""
    if config.validation is None:
        return []
    rows = ValidationLog(config.checkpoint_path, config.storage_options_for_fs()).read()
    return comparable(rows, rows[-1].setup, version) if rows else []


def publish_validation_table(checkpoint_path: str, rows: Sequence[ValidationRow], best_version: int | None) -> None:
    """Post the run's validation table (epoch, version, mrr, r1, r10, count, sampled, best), keyed
    ``pbg-validation-<checkpoint name>``: each validation adds a version of the key, so the UI's
    latest one is the learning curve so far (on the run's Artifacts tab, beside its summary)."""
    key = (VALIDATION_KEY_PREFIX + _slug(checkpoint_basename(checkpoint_path)))[:_MAX_KEY_LENGTH].rstrip("-")
    description = f"validation of {checkpoint_path}: one row per validated version" + (
        f", best v{best_version}" if best_version is not None else ""
    )

    def post() -> UUID:
        artifact = TableArtifact(table=validation_table(rows, best_version), key=key, description=description)
        return cast(ArtifactResponse, artifact.create(_sync=True)).id  # type: ignore[call-arg]  # _sync is not in the signature

    _post("publish the validation table", post)


def publish_trials_table(study: str, study_dir: str, rows: Sequence[dict[str, Any]]) -> None:
    """Post a tuning study's table (trial, state, each param, the metric, epochs, seconds, reason),
    keyed ``pbg-tune-<study>``: re-posted after every trial, the UI's latest version is the study so far."""
    key = (TUNE_KEY_PREFIX + _slug(study))[:_MAX_KEY_LENGTH].rstrip("-")
    description = f"tuning study {study} in {study_dir}: one row per trial"

    def post() -> UUID:
        artifact = TableArtifact(table=list(rows), key=key, description=description)
        return cast(ArtifactResponse, artifact.create(_sync=True)).id  # type: ignore[call-arg]  # _sync is not in the signature

    _post("publish the trials table", post)


def publish_predictions_table(output: str, rows: Sequence[dict[str, Any]], description: str) -> None:
    """Post a ``pbg-predict`` run's table artifact: the output's first ``rows``, keyed
    ``pbg-predictions-<output's file name>`` (a new version of the key per run writing that output).

    Args:
        output: The published output's URL (its last component goes into the key).
        rows: The first rows of the output, one dict per row.
        description: The counts, the checkpoint version used and the output (markdown).
    """
    name = output.rstrip("/").rpartition("/")[2]
    key = (PREDICTIONS_KEY_PREFIX + _slug(name))[:_MAX_KEY_LENGTH].rstrip("-")
    artifact = TableArtifact(table=list(rows), key=key, description=description)
    _post(  # _sync=True: run here, the Artifact returned (not a coroutine)
        "publish the predictions table",
        lambda: cast(ArtifactResponse, artifact.create(_sync=True)).id,  # type: ignore[call-arg]  # _sync is not in the signature
    )


def _post(what: str, call: Callable[[], T]) -> T | None:
    """Run ``call`` inside a flow/task run only; log and swallow any failure."""
    try:
        get_run_context()
    except MissingContextError:
        return None
    try:
        return call()
    except Exception as err:  # noqa: BLE001 - artifacts must never fail training
        run_logger().warning("could not %s (the run goes on): %s: %s", what, type(err).__name__, err)
        return None


def _percent(done: int, total: int) -> float:
    """``100 * done / total`` clamped to [0, 100]; an empty run (total 0) is complete."""
    if total <= 0:
        return 100.0
    return min(100.0, max(0.0, 100.0 * done / total))


def artifact_key(text: str) -> str:
    """A valid Prefect artifact key (lowercase letters, digits, dashes) for ``text``.

    ``artifact_key("My Model_v2") == "pbg-summary-my-model-v2"``; accents are dropped
    (``é`` -> ``e``), other characters become dashes; empty input gives ``pbg-summary-run``.
    """
    return (SUMMARY_KEY_PREFIX + _slug(text))[:_MAX_KEY_LENGTH].rstrip("-")


def retrain_history_key(root: str) -> str:
    """The key of a retraining root's history: ``pbg-retrain-<root slugged>``, the same every night.

    ``retrain_history_key("s3://bucket/models/umls") == "pbg-retrain-s3-bucket-models-umls"``.
    Every retraining run on the root (its config's ``checkpoint_path``) adds a version, so the
    key's page in the UI lists the nights in order. A long root keeps its tail (the end of a path
    tells roots apart) within Prefect's 100 characters.
    """
    prefix = "pbg-retrain-"
    slug = _slug(root)[-(_MAX_KEY_LENGTH - len(prefix)) :].lstrip("-")
    return prefix + (slug or "run")


def iteration_key(checkpoint_name: str, iteration: Iteration) -> str:
    """The key of ``iteration``'s table artifact: ``pbg-<checkpoint>-epoch-003-path-1-chunk-2``.

    Numbers are 1-based as in the iteration's label (epoch 3 of 10, path 1 of 1, chunk 2 of 4)
    and zero-padded (epochs to at least 3 digits, paths and chunks to the digits of their
    count) so that sorting the keys as text gives the order of training. The checkpoint's
    name (slugged as in :func:`artifact_key`, shortened to keep the key within 100
    characters) keeps the tables of different models apart.
    """
    epoch_width = max(3, len(str(iteration.num_epochs)))
    suffix = (
        f"-epoch-{iteration.epoch_idx + 1:0{epoch_width}d}"
        f"-path-{iteration.edge_path_idx + 1:0{len(str(iteration.num_edge_paths))}d}"
        f"-chunk-{iteration.edge_chunk_idx + 1:0{len(str(iteration.num_edge_chunks))}d}"
    )
    room = _MAX_KEY_LENGTH - len(TABLE_KEY_PREFIX) - len(suffix)
    name = _slug(checkpoint_name)[:room].rstrip("-") or "run"
    return TABLE_KEY_PREFIX + name + suffix


def _slug(text: str) -> str:
    """``text`` in lowercase ASCII letters and digits joined by single dashes (``run`` when empty)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-") or "run"
