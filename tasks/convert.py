"""Import edge lists and export checkpoints (storage conversions).

``run_import`` / ``run_export`` are plain functions the CLI calls directly (no
flow start-up cost); the task wrappers let flows and deployments run the same
steps with retries and observability.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import task

from pbg_core.config import ConfigSchema
from storage.exporters import export_tsv
from storage.importers import import_edges
from tasks._policies import NO_CACHE


def _print_progress(phase: str, lines: int) -> None:
    print(f"  {phase}: {lines:,} lines", flush=True)


def run_import(config: ConfigSchema, inputs: Sequence[str], **options: Any) -> Any:
    """Convert ``inputs`` (one per edge path) into the config's entity and edge files."""
    return import_edges(config, list(inputs), progress=_print_progress, **options)


def run_export(config: ConfigSchema, entities_output: str, relation_types_output: str) -> None:
    """Write the latest checkpoint's embeddings and relation parameters as TSV."""
    export_tsv(config, entities_output, relation_types_output)


@task(name="import-edges", task_run_name="import edges", cache_policy=NO_CACHE)
def import_edges_task(config: ConfigSchema, inputs: list[str], options: dict[str, Any]) -> str:
    """Task form of :func:`run_import`; returns the report as text."""
    return str(import_edges(config, inputs, **options))


@task(name="export-tsv", task_run_name="export embeddings to TSV", cache_policy=NO_CACHE)
def export_tsv_task(config: ConfigSchema, entities_output: str, relation_types_output: str) -> None:
    """Task form of :func:`run_export`."""
    export_tsv(config, entities_output, relation_types_output)
