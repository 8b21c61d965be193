"""pbg_core.errors: the hierarchy callers catch, ConfigError's message forms and its pickling.

Named after its package because ``tests/storage/test_errors.py`` holds the base name (tests have no
``__init__.py``).
"""

from __future__ import annotations

import pickle

import pytest

from pbg_core.errors import (
    ConfigError,
    PbgError,
    ShapeError,
    TrainingDivergedError,
    UnknownNameError,
    UsageError,
    WorkerDiedError,
)


def test_one_problem_reads_as_one_line_naming_the_source() -> None:
    err = ConfigError(["lr: 'x' is not a number"], "cfg.json")
    assert str(err) == "config in cfg.json: lr: 'x' is not a number"
    assert str(ConfigError(["lr: bad"])) == "config: lr: bad"


def test_several_problems_read_as_a_header_and_one_line_each() -> None:
    err = ConfigError(["lr: bad", "dimension: -1 is not positive"], "s3://b/c.py")
    assert str(err).splitlines() == [
        "2 problems with the config in s3://b/c.py:",
        "  - lr: bad",
        "  - dimension: -1 is not positive",
    ]


def test_config_error_keeps_its_own_copy_of_the_problems() -> None:
    problems = ["lr: bad"]
    err = ConfigError(problems)
    problems.append("later")
    assert err.problems == ["lr: bad"]


def test_config_error_survives_pickling_with_problems_and_source() -> None:
    """Errors cross process and Prefect task boundaries by pickle."""
    err = pickle.loads(pickle.dumps(ConfigError(["a: x", "b: y"], "c.json")))
    assert isinstance(err, ConfigError)
    assert (err.problems, err.source) == (["a: x", "b: y"], "c.json")
    assert str(err).startswith("2 problems with the config in c.json:")


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (ConfigError, ValueError),
        (UsageError, ValueError),
        (UnknownNameError, ValueError),
        (ShapeError, ValueError),
        (TrainingDivergedError, RuntimeError),
        (WorkerDiedError, RuntimeError),
    ],
)
def test_every_error_is_a_pbg_error_and_the_builtin_callers_expect(cls: type, builtin: type) -> None:
    assert issubclass(cls, PbgError) and issubclass(cls, builtin)
