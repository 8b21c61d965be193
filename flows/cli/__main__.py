"""``python -m flows.cli``: the ``pbg`` command, as the console script runs it."""

from flows.cli.main import run

run()
