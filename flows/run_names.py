"""Flow run names a person can read in the Prefect UI: ``{kind} {subject}, {YYYY-MM-DD HH:MM} UTC``.

Every flow names its runs here, e.g. ``train umls, 2026-12-05 14:12 UTC``,
``retrain umls, 2026-12-05 03:00 UTC, generation 3``,
``predict umls: test.txt -> test-top10.tsv, 2026-12-05 14:20 UTC``. The *subject* is derived from
the run's parameters (:func:`subject`): the config file's stem, or the first directory above it
whose name is not generic (``examples/umls/config.json`` is ``umls``); without a config file, the
checkpoint directory's name the same way (``demo-out/umls/model`` is ``umls``), with a retraining
run directory kept beside it (``umls run-20261205T030000Z-7d3e91aa``). The time is the run's
scheduled start, so a nightly run is named for its night even when it starts late.

A name is resolved once, as the run starts; :func:`rename_current_run` appends what a run learns
later (a retraining run's generation). Iteration subflows (``epoch 3/10, path 1/1, chunk 2/4``)
and tuning trials (``trial 7``) keep their own names. Only ASCII separators: the UI's run graph
draws its labels with a font that drops some other characters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from prefect import get_client
from prefect.context import FlowRunContext
from prefect.exceptions import PrefectException
from prefect.runtime import flow_run

from storage import layout

logger = logging.getLogger(__name__)

# Names that say nothing of what a run trains: a subject skips them for the directory above.
GENERIC_NAMES = frozenset(
    {
        "config",
        "configs",
        "model",
        "models",
        "checkpoint",
        "checkpoints",
        "retrain",
        "retraining",
        "runs",
        "output",
        "out",
    }
)
CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".py")
TIME_FORMAT = "%Y-%m-%d %H:%M UTC"

Detail = Callable[[Mapping[str, Any]], str]


def run_name(kind: str, detail: Detail | None = None) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``{kind} {subject}[: {detail}], {time} UTC`` (:func:`format_name`).

    Args:
        kind: What the run does: ``train``, ``retrain``, ``tune``, ``eval``, ``predict``, ``import``.
        detail: From the run's parameters, what follows the subject (a prediction's queries and
            output, an import's inputs); None for none.
    """

    def name() -> str:
        parameters = flow_run.parameters or {}
        return format_name(
            kind, subject(parameters), detail(parameters) if detail else None, flow_run.scheduled_start_time
        )

    return name


def format_name(kind: str, what: str | None, detail: str | None, start: datetime | None) -> str:
    """``{kind} {what}: {detail}, {start in UTC to the minute} UTC``; a part that is None is left out.

    A naive ``start`` is taken as UTC; None is now.
    """
    moment = start if start is not None else datetime.now(UTC)
    if moment.tzinfo is None or moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)
    head = " ".join(part for part in (kind, what) if part)
    if detail:
        head = f"{head}: {detail}" if what else f"{head} {detail}"
    return f"{head}, {moment.astimezone(UTC).strftime(TIME_FORMAT)}"


def subject(parameters: Mapping[str, Any]) -> str | None:
    """What a run is about, from its ``config_url`` (:func:`config_subject`), else its ``config``'s
    ``checkpoint_path`` (:func:`checkpoint_subject`); None without either."""
    url = parameters.get("config_url")
    if url:
        return config_subject(str(url))
    config = parameters.get("config")
    if config is None:
        return None
    path = config.get("checkpoint_path") if isinstance(config, Mapping) else getattr(config, "checkpoint_path", None)
    return checkpoint_subject(str(path)) if path else None


def config_subject(url: str) -> str:
    """A config file's stem (``umls.yaml`` is ``umls``); for a generic stem (``config.json``), the
    nearest directory above with a name that is not generic (:data:`GENERIC_NAMES`), else the stem."""
    parts = _components(url)
    if not parts:
        return url
    stem = parts[-1]
    for suffix in CONFIG_SUFFIXES:
        if stem.lower().endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    if stem.lower() not in GENERIC_NAMES:
        return stem
    return _named(parts[:-1]) or stem


def checkpoint_subject(path: str) -> str:
    """A checkpoint directory's nearest name that is not generic (``demo-out/umls/model`` is
    ``umls``); a retraining run directory (``run-...``) is kept after it (``umls run-...``)."""
    parts = _components(path)
    if not parts:
        return path
    last = parts[-1]
    if layout.is_run_dir_name(last):
        above = parts[:-1]
        base = _named(above) or (above[-1] if above else None)  # all generic: the root's own name
        return f"{base} {last}" if base else last
    return _named(parts) or last


def _components(url: str) -> list[str]:
    """The names along a local path or URL (an S3 bucket is one), without empty or dot ones."""
    rest = url.split("://", 1)[-1]
    return [part for part in rest.replace("\\", "/").split("/") if part not in ("", ".", "..")]


def _named(parts: list[str]) -> str | None:
    """The last of ``parts`` whose name is not generic, or None."""
    return next((part for part in reversed(parts) if part.lower() not in GENERIC_NAMES), None)


def rename_current_run(detail: str) -> None:
    """Append ``, {detail}`` to the current flow run's name (once: a second call with the same
    detail changes nothing). A no-op outside a flow run.

    A name only helps a person read the run list, so an API error is logged at debug and the run
    goes on under its first name.
    """
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None:
        return
    suffix = f", {detail}"
    if run.name.endswith(suffix):
        return
    name = run.name + suffix
    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_name(run.id, name)
    except (httpx.HTTPError, PrefectException, OSError) as error:
        logger.debug("flow run %s keeps its name %r: renaming it failed: %s", run.id, run.name, error)
        return
    run.name = name
