"""What ``pbg train`` and ``pbg eval`` say about a config written for scheduled retraining (``pbg retrain``).

A retraining config (docs/retraining.md) names its edge paths by a glob pattern
(``edges/gen*_partitioned``: each run trains the directories it matches when it starts) and
its ``checkpoint_path`` is the root of the run directories (``latest.json`` names the promoted
one). Neither is something ``pbg eval`` can evaluate or ``pbg train`` should write: they need
concrete edge directories and one checkpoint. :func:`check_concrete_paths` says so in one line,
naming the pattern, what it matches now (local paths) and the ``-p`` overrides to give, before
any server starts. Evaluating "whatever the pattern matches" is not done on purpose: the set
grows with every import, so the same command would measure something else each day, and the
retraining run's own holdouts (``*_holdout``, never trained) are what measures a retrained model.

Standard library only: ``pbg`` runs this before its server starts (see :mod:`flows.cli.preflight`).
"""

from __future__ import annotations

import glob
import json
import os

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from storage import layout
from storage.config_loader import local_path
from storage.fs.globs import has_glob

_SHOWN = 3


def check_concrete_paths(config: ConfigSchema, command: str, source: str | None = None) -> None:
    """Refuse glob ``edge_paths`` and a retraining root as ``checkpoint_path`` (module docstring).

    Args:
        config: The command's validated config.
        command: ``train`` or ``eval`` (the advice differs).
        source: The config file, named in the message.

    Raises:
        ConfigError: one problem line naming the pattern or the root and what to pass instead.
    """
    patterns = [path for path in config.edge_paths if has_glob(path)]
    promoted = _promoted_run(config.checkpoint_path)
    if not patterns and promoted is None:
        return
    what = []
    if patterns:
        what.append(f"edge_paths {patterns[0]!r} is a glob pattern")
    if promoted is not None:
        what.append(f"checkpoint_path {config.checkpoint_path!r} is the root of retraining runs ({layout.LATEST_FILE})")
    needs = "concrete edge paths" if not promoted else "one checkpoint"
    if patterns and promoted is not None:
        needs = "one checkpoint and concrete edge paths"
    advice = _advice(config, command, patterns, promoted)
    problem = f"{' and '.join(what)}: a scheduled retraining config (docs/retraining.md); pbg {command} needs {needs}"
    raise ConfigError([f"{problem}: {advice}"], source)


def _advice(config: ConfigSchema, command: str, patterns: list[str], promoted: str | None) -> str:
    """The ``-p`` overrides to give, with what the pattern matches now."""
    overrides = []
    if promoted is not None:
        if command == "eval":
            overrides.append(f"-p checkpoint_path={os.path.join(config.checkpoint_path, promoted)} (latest.json's run)")
        else:
            overrides.append("-p checkpoint_path=<a directory of its own>")
    if patterns:
        matches, holdouts = _matches(patterns)
        pick = holdouts if command == "eval" and holdouts else matches
        example = json.dumps(pick[:1] or ["..."])
        overrides.append(f"-p 'edge_paths={example}'")
        found = f"; it matches {_listed(matches)}" if matches else ""
        if holdouts:
            found += f", held out (never trained): {_listed(holdouts)}"
        overrides[-1] += found
    runs = "; or retrain the root: `pbg retrain CONFIG` (each run expands the pattern when it starts)"
    return "give " + " and ".join(overrides) + (runs if command == "train" else "")


def _matches(patterns: list[str]) -> tuple[list[str], list[str]]:
    """Local directories the patterns match now, and the holdout directories beside them."""
    matches: list[str] = []
    for pattern in patterns:
        local = local_path(pattern)
        if local is not None:
            matches += sorted(p for p in glob.glob(local) if os.path.isdir(p) and not p.endswith(layout.HOLDOUT_SUFFIX))
    holdouts = [layout.holdout_dir(p) for p in matches if os.path.isdir(layout.holdout_dir(p))]
    return matches, holdouts


def _listed(paths: list[str]) -> str:
    shown = ", ".join(paths[:_SHOWN])
    return shown + (f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else "")


def _promoted_run(checkpoint_path: str) -> str | None:
    """The run a local retraining root's ``latest.json`` names; None if ``checkpoint_path`` is no such root."""
    local = local_path(checkpoint_path)
    if local is None or os.path.isfile(os.path.join(local, layout.VERSION_FILE)):
        return None
    try:
        with open(os.path.join(local, layout.LATEST_FILE), encoding="utf-8") as handle:
            run = json.load(handle).get("run")
    except (OSError, ValueError, AttributeError):
        return None
    return run if isinstance(run, str) and run.startswith("run-") else None


__all__ = ["check_concrete_paths"]
