"""flows.cli: the ``pbg`` command line.

- :mod:`flows.cli.main`: the entry point (:func:`run`): dispatch, exit codes, stops;
- :mod:`flows.cli.parser`: every subcommand's options (:mod:`flows.cli.answer_parser`: those of
  ``predict``, ``score`` and ``similar``; :mod:`flows.cli.option_types`: those several share);
- :mod:`flows.cli.commands`: ``pbg import``, ``export`` and ``serve``;
- :mod:`flows.cli.runs`: ``pbg train`` and ``eval``, the commands that run flows;
- :mod:`flows.cli.answers`: ``pbg predict`` and ``score``, a trained model's answers (no Prefect);
- :mod:`flows.cli.similar`: ``pbg similar``, the entities nearest to given ones (no Prefect);
- :mod:`flows.cli.preflight`, :mod:`flows.cli.service_checks`, :mod:`flows.cli.eval_sampling`,
  :mod:`flows.cli.retrain_configs`: what a command checks before any server or worker starts;
- :mod:`flows.cli.user_errors`: a failure as one line; :mod:`flows.cli.progress_bar`: an import's bar.

``run`` is imported here because ``flows.cli:run`` is the console script's entry point
(``pyproject.toml``), the path every installed ``pbg`` script holds.
"""

from flows.cli.main import run

__all__ = ["run"]
