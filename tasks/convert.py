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
from storage.exporters import ExportReport, export_embeddings, export_tsv
from storage.importers import import_edges
from tasks._policies import NO_CACHE


def _print_progress(phase: str, lines: int) -> None:
    print(f"  {phase}: {lines:,} lines", flush=True)


def run_import(config: ConfigSchema, inputs: Sequence[str], **options: Any) -> Any:
    """Convert ``inputs`` (one per edge path) into the config's entity and edge files."""
    return import_edges(config, list(inputs), progress=_print_progress, **options)


def run_export(
    config: ConfigSchema, entities_output: str, relation_types_output: str, version: int | None = None
) -> ExportReport:
    """Write a checkpoint's embeddings and relation parameters as PBG's two TSV files."""
    return export_tsv(config, entities_output, relation_types_output, version)


def run_export_embeddings(
    config: ConfigSchema, output: str, format: str, entity_types: Sequence[str] | None = None,
    version: int | None = None,
) -> ExportReport:
    """Write one file (or file pair) per entity type in ``format`` under ``output``."""
    return export_embeddings(config, output, format, list(entity_types) if entity_types else None, version)  # type: ignore[arg-type]


@task(name="import-edges", task_run_name="import edges", cache_policy=NO_CACHE)
def import_edges_task(config: ConfigSchema, inputs: list[str], options: dict[str, Any]) -> str:
    """Task form of :func:`run_import`; returns the report as text."""
    return str(import_edges(config, inputs, **options))


@task(name="export-tsv", task_run_name="export embeddings to TSV", cache_policy=NO_CACHE)
def export_tsv_task(config: ConfigSchema, entities_output: str, relation_types_output: str) -> None:
    """Task form of :func:`run_export`."""
    export_tsv(config, entities_output, relation_types_output)


@task(name="export-embeddings", task_run_name="export embeddings as {format}", cache_policy=NO_CACHE)
def export_embeddings_task(
    config: ConfigSchema, output: str, format: str, entity_types: list[str] | None = None
) -> list[str]:
    """Task form of :func:`run_export_embeddings`; returns the URLs written."""
    return list(run_export_embeddings(config, output, format, entity_types).outputs)
