"""The ``pbg`` command line: import, train, eval, export, predict, score, similar (PBG's habits, one entry point).

    pbg import CONFIG INPUT... --lhs-col N --rhs-col N [--rel-col N] [-p key=value ...]
    pbg train  CONFIG [-p key=value ...]
    pbg retrain CONFIG [-p key=value ...] [--incoming PATTERN --edges-dir DIR] [--epochs N] [--keep-last K]
               [--min-mrr X] [--max-mrr-drop X] [--on-no-new-data skip|fail] ...
    pbg tune   CONFIG --space SPACE --trials N [--parallel P] [--timeout S] [--study-dir DIR] [-p key=value ...]
    pbg eval   CONFIG [-p key=value ...] [--filtered [--filter-path P ...]] [--json]
               [--sample-edges N] [--candidates K] [--sample-seed S]
    pbg export CONFIG --entities-output F --relation-types-output F [-p key=value ...]
    pbg predict CONFIG (--head NAME | --tail NAME | --queries FILE...) [--relation NAME] [-k K] [--filtered]
               [--output FILE [--force]] [--json] [--version N] [-p key=value ...]
    pbg score  CONFIG INPUT... -l COL -r COL [--rel-col COL] [--output FILE [--force]] [--version N] ...
    pbg similar CONFIG (--entity NAME... | --names FILE... [-l COL]) [-k K] [--entity-type T] [--approximate]
               [--output FILE [--force]] [--json] [--version N] [-p key=value ...]
    pbg serve  [--config-url URL] [-p key=value ...] [--cron EXPR] [--retrain-keep-last K] [--name NAME]

``train``, ``retrain``, ``tune`` and ``eval`` run Prefect flows on the embedded defaults (Prefect's
ephemeral API with SQLite) unless PREFECT_API_URL points at a server; they check the
config and their local inputs first (:mod:`flows.cli.preflight`), before that server starts.

A failure is one line naming what is wrong (:mod:`flows.cli.user_errors`); every subcommand
takes ``--debug`` (or ``PBG_DEBUG=1``) for the traceback.

This module is the entry point (:func:`run`, :func:`main`): the environment Prefect must
see, the dispatch, and how a failure or a stop ends the process. The options are in
:mod:`flows.cli.parser`, the commands in :mod:`flows.cli.commands` (import, export, serve),
:mod:`flows.cli.runs` (train, retrain, eval: the Prefect flows), :mod:`flows.cli.tune_command` (tune) and :mod:`flows.cli.answers`
(predict, score) and :mod:`flows.cli.similar` (similar): a trained model's answers, without Prefect.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from flows.cli.answers import cmd_predict, cmd_score
from flows.cli.commands import cmd_export, cmd_import, cmd_serve
from flows.cli.parser import build_parser
from flows.cli.runs import cmd_eval, cmd_retrain, cmd_train
from flows.cli.similar import cmd_similar
from flows.cli.tune_command import cmd_tune
from flows.cli.user_errors import debug_enabled, report
from flows.prefect_host import interrupts
from flows.prefect_host.log_filters import VERBOSE_VARIABLE
from pbg_core.parallel.worker_boot import close_prestarted


def _prepare_prefect_env() -> None:
    """Defaults that must be set before Prefect is imported."""
    loggers = os.environ.get("PREFECT_LOGGING_EXTRA_LOGGERS", "")
    wanted = [name for name in ("pbg_core", "storage") if name not in loggers.split(",")]
    os.environ["PREFECT_LOGGING_EXTRA_LOGGERS"] = ",".join(filter(None, [loggers, *wanted]))
    # A brand-new PREFECT_HOME needs its SQLite migrations: the default 20 s can expire.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # import/export run no flow: their storage logs must not warn about a missing flow run.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    # Prefect's client telemetry runs a thread that calls home (Prefect's opt-out variable).
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # A temporary server Prefect starts itself (ours sets this too) would call home every 10
    # minutes: "Failed to send telemetry" without network, "database is locked" on a new database.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


COMMANDS = {
    "import": cmd_import,
    "train": cmd_train,
    "retrain": cmd_retrain,
    "tune": cmd_tune,
    "eval": cmd_eval,
    "export": cmd_export,
    "predict": cmd_predict,
    "score": cmd_score,
    "similar": cmd_similar,
    "serve": cmd_serve,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pbg`` console script."""
    interrupts.install()  # first: Ctrl-C and SIGTERM stop every command the same orderly way
    args = build_parser().parse_args(argv)
    if getattr(args, "verbose", False):
        os.environ[VERBOSE_VARIABLE] = "1"
    _prepare_prefect_env()
    # Engine and storage progress lines (per bucket, per import phase) are INFO.
    for name in ("pbg_core", "storage", "tasks"):
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        return COMMANDS[args.command](args)
    except Exception as exc:  # noqa: BLE001 - reported in one line (see flows.cli.user_errors), not swallowed
        if interrupts.stop_signal_of(exc) is None:
            return report(args.command, exc, debug_enabled(args.debug))
        # An error on the way out of a stop the user asked for: report the stop (--debug: and it).
        if debug_enabled(args.debug):
            traceback.print_exception(exc)
        print(interrupts.interruption_report(args.command, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return interrupts.exit_code()
    except KeyboardInterrupt:
        # Where it stopped, what is committed, and the command line that resumes.
        print(interrupts.interruption_report(args.command, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return interrupts.exit_code()
    finally:
        # What a failed command opened ahead but never used: sessions, then spare workers.
        if "tasks.sessions" in sys.modules:
            sys.modules["tasks.sessions"].close_prepared_sessions()
        close_prestarted()


def run() -> None:
    """The ``pbg`` console script: :func:`main`, then exit without the interpreter's teardown.

    With torch, Prefect and pydantic loaded, tearing the interpreter down (collecting every
    module's objects) takes ~0.7 s of each command's end. By then everything that matters is
    done: the flow's results are printed, the local server has flushed and stopped, and the
    atexit handlers (run here first) have closed what they own.
    """
    code = main()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
