"""Import edge lists and export checkpoints (storage conversions).

``run_export`` / ``run_export_embeddings`` are plain functions the CLI calls directly (no
flow start-up cost; ``pbg import`` calls :func:`storage.importers.import_edges` itself, without
importing Prefect); the task wrappers let flows and deployments run the same steps with
observability.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from prefect import task

from pbg_core.config import ConfigSchema
from storage.exporters import ExportReport, export_embeddings, export_tsv
from storage.importers import import_edges
from tasks._policies import NO_CACHE, run_logger
from tasks.artifacts import start_progress, update_progress
from tasks.import_progress import ImportProgress, estimate_lines


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
def import_edges_task(config: ConfigSchema, inputs: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """:func:`storage.importers.import_edges` with a progress artifact; returns the report's counts.

    The result holds ``summary`` (the report as text) and the counts of
    :class:`storage.import_report.ImportReport` (edges read, written per input, skipped by reason).
    """
    logger = run_logger()
    artifact = start_progress(0, 1, f"importing {len(inputs)} input(s) into {config.entity_path}")

    def report_progress(fraction: float, text: str) -> None:
        update_progress(artifact, round(1000 * fraction), 1000)
        logger.info("import %s", text)

    progress = ImportProgress(estimate_lines(inputs, config.storage_options_for_fs()), report_progress, every_s=5.0)
    report = import_edges(config, inputs, progress=progress, **options)
    update_progress(artifact, 1, 1)
    return {"summary": str(report), **dataclasses.asdict(report)}


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
