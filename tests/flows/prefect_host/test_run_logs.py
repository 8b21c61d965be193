"""flows.prefect_host.run_logs: which lines reach a flow run's logs, and the loggers forward_engine_logs sets up."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from flows.prefect_host.log_filters import PREFECT_RUN_LOGGERS, RoutineLifecycleFilter, VerdictFilter
from flows.prefect_host.run_logs import ENGINE_LOGGERS, InRunLogHandler, forward_engine_logs


@pytest.fixture
def restored_loggers() -> Iterator[None]:
    """forward_engine_logs changes process-wide loggers: put them back for the other tests."""
    loggers = [logging.getLogger(name) for name in (*ENGINE_LOGGERS, *PREFECT_RUN_LOGGERS)]
    saved = [(lg.level, list(lg.handlers), list(lg.filters)) for lg in loggers]
    for lg in loggers:
        lg.filters = [f for f in lg.filters if not isinstance(f, (RoutineLifecycleFilter, VerdictFilter))]
        lg.handlers = [h for h in lg.handlers if not isinstance(h, InRunLogHandler)]
        lg.setLevel(logging.NOTSET)
    yield
    for lg, (level, handlers, filters) in zip(loggers, saved, strict=True):
        lg.setLevel(level)
        lg.handlers, lg.filters = handlers, filters


def test_forward_engine_logs_sets_info_adds_one_handler_and_filters_routine_lines(
    restored_loggers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PBG_VERBOSE", raising=False)
    logging.getLogger("storage").setLevel(logging.DEBUG)  # a lower level is the user's: kept
    forward_engine_logs()
    forward_engine_logs()  # idempotent: flows call it at every start
    assert logging.getLogger("pbg_core").level == logging.INFO
    assert logging.getLogger("storage").level == logging.DEBUG
    for name in ENGINE_LOGGERS:
        assert sum(isinstance(h, InRunLogHandler) for h in logging.getLogger(name).handlers) == 1
    for name in PREFECT_RUN_LOGGERS:
        assert sum(isinstance(f, RoutineLifecycleFilter) for f in logging.getLogger(name).filters) == 1
        assert sum(isinstance(f, VerdictFilter) for f in logging.getLogger(name).filters) == 1


def test_verbose_keeps_the_lifecycle_lines(restored_loggers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBG_VERBOSE", "1")
    forward_engine_logs()
    for name in PREFECT_RUN_LOGGERS:
        assert not any(isinstance(f, RoutineLifecycleFilter) for f in logging.getLogger(name).filters)
        assert any(isinstance(f, VerdictFilter) for f in logging.getLogger(name).filters)  # a verdict is no crash


def test_the_run_handler_is_silent_outside_a_run(recwarn: pytest.WarningsRecorder) -> None:
    """Background threads log outside any run: no 'not in a flow run' warning per record."""
    InRunLogHandler().emit(logging.LogRecord("storage", logging.INFO, __file__, 1, "upload done", None, None))
    assert not [w for w in recwarn if "run" in str(w.message)]
