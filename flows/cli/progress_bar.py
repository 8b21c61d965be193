"""Terminal progress of ``pbg import``: a bar with rate and ETA on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from storage.importing.progress import ImportProgress

STEPS = 1000


@contextmanager
def import_progress(estimated_lines: int | None) -> Iterator[ImportProgress]:
    """An :class:`ImportProgress` that draws on stderr while the block runs."""
    if not sys.stderr.isatty():

        def print_line(fraction: float, text: str) -> None:
            print(f"  {100 * fraction:5.1f}%  {text}", file=sys.stderr, flush=True)

        yield ImportProgress(estimated_lines, print_line, every_s=5.0)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("reading", total=STEPS)

        def draw(fraction: float, text: str) -> None:
            bar.update(task, completed=round(STEPS * fraction), description=text)

        yield ImportProgress(estimated_lines, draw, every_s=0.2)
        bar.update(task, completed=STEPS)
