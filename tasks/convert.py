"""Import edge lists and export checkpoints (storage conversions).

The tasks let flows and deployments run the storage conversions with observability. The CLI
(``pbg import`` / ``pbg export``) calls :mod:`storage.importing.importer` and
:mod:`storage.exporting.exporter` itself, without importing Prefect (about 3.5 s and 350 MB
saved per command).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prefect.runtime import flow_run

from pbg_core.config import ConfigSchema
from storage.exporting.exporter import export_embeddings, export_tsv
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.importing.progress import ImportProgress, estimate_lines
from tasks._policies import plain_task, run_logger
from tasks.artifacts import start_progress, update_progress


@plain_task(name="import-edges", task_run_name="import edges")
def import_edges_task(config: ConfigSchema, inputs: list[str], options: ImportOptions) -> dict[str, Any]:
    """:func:`storage.importing.importer.import_edges` with a progress artifact; returns the report's counts.

    The result holds ``summary`` (the report as text) and the counts of
    :class:`storage.importing.report.ImportReport` (edges read, written per input, skipped by reason).
    """
    logger = run_logger()
    artifact = start_progress(0, 1, f"importing {len(inputs)} input(s) into {config.entity_path}", counts=False)

    def report_progress(fraction: float, text: str) -> None:
        update_progress(artifact, round(1000 * fraction), 1000)
        logger.info("import %s", text)

    progress = ImportProgress(estimate_lines(inputs, config.storage_options_for_fs()), report_progress, every_s=5.0)
    holder = f"pbg-import flow run {flow_run.name} ({flow_run.id})" if flow_run.id else None  # named in its lease
    report = import_edges(
        config, inputs, options, seed=config.seed, progress=progress, holder=holder
    )  # as `pbg import`
    update_progress(artifact, 1, 1)
    return {"summary": str(report), **dataclasses.asdict(report)}


@plain_task(name="export-tsv", task_run_name="export embeddings to TSV")
def export_tsv_task(config: ConfigSchema, entities_output: str, relation_types_output: str) -> None:
    """Task form of :func:`storage.exporting.exporter.export_tsv`."""
    export_tsv(config, entities_output, relation_types_output)


@plain_task(name="export-embeddings", task_run_name="export embeddings as {format}")
def export_embeddings_task(
    config: ConfigSchema,
    output: str,
    format: str,  # noqa: A002 - `format` is the task parameter the CLI and task_run_name call it
    entity_types: list[str] | None = None,
) -> list[str]:
    """Task form of :func:`storage.exporting.exporter.export_embeddings`; returns the URLs written."""
    return list(export_embeddings(config, output, format, entity_types).outputs)  # type: ignore[arg-type]  # format is checked against the export formats by export_embeddings (which names the allowed ones)
