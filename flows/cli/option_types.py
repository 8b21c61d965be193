"""Options several ``pbg`` subcommands share, and the argparse types that check their values.

- :func:`positive`: a count of 1 or more; :func:`column`: a 0-based column index or a Parquet
  column name (``pbg import``'s ``-l``/``-r``/``--rel-col``, and the query files of
  ``pbg predict`` and ``pbg score``);
- :func:`version_choice`: ``--version N`` or ``--version best`` (``pbg eval``, ``pbg export``);
- :func:`add_param_arg`: ``-p key=value`` config overrides; :func:`add_debug_arg`: ``--debug``.

A bad value is an argparse usage error (exit status 2) naming it and what is allowed, printed as
one line by :class:`OneLineParser`.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from flows.cli.user_errors import DEBUG_VARIABLE

PARAM_HELP = (
    "override a config value; dotted paths reach nested ones (relations.0.all_negs=true), "
    'lists are a,b or ["a","b"]. '
    "Credentials (storage_options.key/secret/token) work too and are never printed, but the "
    "process list shows them: prefer AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN"
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, like every other error of ``pbg``.

    argparse prints the whole usage block (5-8 lines for ``pbg predict``) above the error; the
    error line names the option and what is allowed, and ``--help`` has the rest. Subcommands'
    parsers are of this class too (argparse makes them of their parent's class).
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def add_param_arg(parser: argparse.ArgumentParser) -> None:
    """``-p/--param KEY=VALUE`` (repeatable): the config overrides, PBG's habit."""
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help=PARAM_HELP)


def add_debug_arg(parser: argparse.ArgumentParser) -> None:
    """``--debug``: the traceback of a failure, before its one line."""
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"on failure, print the Python traceback (and Prefect's own failure lines) before "
        f"the one-line error; the same as {DEBUG_VARIABLE}=1",
    )


def version_choice(text: str) -> int | str:
    """A checkpoint version: a whole number >= 1, or ``best`` (the version ``best.json`` names)."""
    if text.strip().lower() == "best":
        return "best"
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; give a version number >= 1 or best")
    return int(text)


def positive(text: str) -> int:
    """A count of 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; give a whole number >= 1")
    return int(text)


def column(text: str) -> int | str:
    """A column: a 0-based index, or a name (Parquet inputs)."""
    if text.lstrip("-").isdigit():
        if text.startswith("-"):
            raise argparse.ArgumentTypeError(
                f"{text} is negative; give a 0-based column index (0, 1, ...) or a column name (Parquet inputs)"
            )
        return int(text)
    return text


__all__ = ["add_debug_arg", "add_param_arg", "column", "positive"]
