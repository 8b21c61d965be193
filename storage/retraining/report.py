"""A retraining run in words: its summary's sections and the one line of its night in the history.

Pure (no I/O) over the run directory's ``retrain.json`` (:class:`~storage.retraining.state.RetrainState`)
and the run's config: :func:`retrain_sections` are the markdown sections a retraining run adds to its
training summary (:func:`storage.stats_report.summary_markdown` takes them already rendered), and
:func:`history_line` is the description of the night's version of the root's history artifact
(:func:`tasks.artifacts.retrain_history_key`): the line the Prefect UI shows on the artifact's card
and at the top of its timeline. Numbers and names are written out, never as Python lists.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pbg_core.config import ConfigSchema
from storage import layout, metric_labels
from storage.report_numbers import fmt
from storage.retraining.state import RetrainState


def retrain_sections(state: RetrainState | None, config: ConfigSchema) -> list[str]:
    """The quality gate (once judged) and what the run trained on, as markdown sections.

    Args:
        state: The run directory's ``retrain.json``, or None (a run without one: no gate, no new data).
        config: The run's own config (its ``edge_paths`` are what it trained).
    """
    sections = [gate_section(state, config)] if state is not None and state.gate != "pending" else []
    return [*sections, data_section(state, config)]


def gate_section(state: RetrainState, config: ConfigSchema) -> str:
    """The quality gate: the previous and the new model on the holdout, the verdict, what the MRR measures."""
    verdict = "**passed**: promoted to latest.json" if state.gate == "passed" else "**FAILED**: not promoted"
    lines = ["## Quality gate", "", f"{verdict}. {state.reason}", ""]
    lines += [f"| model | {metric_labels.HOLDOUT} | Hits@10 | edges |", "|---|---|---|---|"]
    for label, figures in (("previous run (grown)", state.baseline), ("this run", state.trained)):
        found = figures or {}
        count = found.get("count")
        lines.append(
            f"| {label} | {fmt(found.get('mrr'))} | {fmt(found.get('r10'))} | "
            f"{f'{int(count):,}' if count is not None else '-'} |"
        )
    return "\n".join([*lines, "", metric_labels.holdout_definition(config)])


def data_section(state: RetrainState | None, config: ConfigSchema) -> str:
    """``New data: generation 2 (`day2.tsv`) ...`` and ``Trained on: `train_partitioned`, ...``."""
    return "\n".join(
        ["## Retraining data", "", f"- New data: {new_data(state)}", f"- Trained on: {trained_on(config)}"]
    )


def new_data(state: RetrainState | None) -> str:
    """The generations new to this run, their files, and their holdout (the gate's edges), in words."""
    if state is None or not state.new_generations:
        return "none (the run trained what its config names)"
    generations = sorted(state.new_generations)
    files = [
        str(f.get("relative"))
        for f in state.received_files
        if f.get("generation") in generations and f.get("relative") is not None
    ]
    what = f"{_plural('generation', len(generations))} {_and(str(g) for g in generations)}"
    if files:
        what += f" ({_and(f'`{name}`' for name in files)})"
    if not state.holdouts:
        return what + "; nothing held out"
    measured = (state.trained or state.baseline or {}).get("count")
    edges = f"{int(measured):,} edges " if measured is not None else ""
    return what + f"; {edges}held out for the gate in {_and(f'`{_name(h)}`' for h in state.holdouts)}"


def trained_on(config: ConfigSchema) -> str:
    """The run's edge paths by their last component (``train_partitioned, gen0001-day1_partitioned``)."""
    return _and(f"`{_name(path)}`" for path in config.edge_paths) or "no edge path"


def history_line(run_dir: str, state: RetrainState | None) -> str:
    """The night in one line: when, promoted or not, the run directory, the generation, the holdout MRRs.

    ``2026-12-05 03:00 UTC: promoted run-20261205T030000Z-7d3e91aa (generation 3); holdout MRR 0.5310,
    previous 0.5300`` or ``...: not promoted run-... (generation 3): <the gate's reason>``.

    Args:
        run_dir: The run directory's name (``run-YYYYmmddTHHMMSSZ-<8 hex>``: its date is the night's).
        state: Its ``retrain.json``, or None (no gate: promoted).
    """
    when = _night(run_dir)
    generation = f" (generation {state.generation})" if state is not None and state.generation is not None else ""
    if state is not None and state.gate == "failed":
        return f"{when}: not promoted {run_dir}{generation}: {state.reason}"
    if state is None or state.trained is None:
        return f"{when}: promoted {run_dir}{generation}; no quality gate measured"
    mrr, previous = state.trained.get("mrr"), (state.baseline or {}).get("mrr")
    return (  # 4 decimals, as the gate's own line
        f"{when}: promoted {run_dir}{generation}; holdout MRR {_decimals(mrr)}, "
        f"previous {_decimals(previous) if previous is not None else 'none (first run)'}"
    )


def skipped_line(run_dir: str, latest: str | None, failed: bool) -> str:
    """A night with nothing new in one line, for the root's history (no run directory was made).

    ``2026-12-05 03:00 UTC: nothing new, not trained; latest.json still names run-...`` (``failed``:
    ``retrain.on_no_new_data: fail`` ended the run Failed, and the line says so).

    Args:
        run_dir: The name the night's run directory would have had (its date is the night's).
        latest: What ``latest.json`` names (a URL or path), or None before any promotion.
        failed: Whether the run ended Failed for it (``on_no_new_data: fail``).
    """
    outcome = "nothing new, run failed (retrain.on_no_new_data: fail)" if failed else "nothing new, not trained"
    kept = f"latest.json still names {_name(latest)}" if latest else "no model promoted yet"
    return f"{_night(run_dir)}: {outcome}; {kept}"


def _night(run_dir: str) -> str:
    """The night of a run directory's name (``run-YYYYmmddTHHMMSSZ-...``, in UTC) to the minute."""
    match = layout.RUN_DIR_RE.match(run_dir)
    if match is None:
        return "unknown date"
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%d %H:%M UTC")


def _decimals(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _name(path: str) -> str:
    stripped = path.rstrip("/")
    return stripped.rsplit("/", 1)[-1] or stripped


def _plural(word: str, count: int) -> str:
    return word if count == 1 else word + "s"


def _and(items: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c`` (empty: ``""``)."""
    names = list(items)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + f" and {names[-1]}"
