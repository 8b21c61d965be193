"""Only transient faults are retried; every task is made by one of the named kinds, none caches."""

from __future__ import annotations

import ast
import errno
import importlib
import pkgutil
from pathlib import Path

from prefect import Task
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

import tasks
from pbg_core.errors import BucketAbandoned, ClusterError, MachineLost
from tasks._policies import KINDS, TaskKind, is_transient, retry_if_transient

TASKS_DIR = Path(tasks.__file__).parent
# The @task keyword arguments a kind sets; a task spelling any of them is a copy of a kind.
KIND_OPTIONS = {"cache_policy", "retries", "retry_delay_seconds", "retry_condition_fn", "persist_result"}


class Throttled(Exception):
    transient = True


def test_transient_classification() -> None:
    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert is_transient(OSError(errno.ETIMEDOUT, "timed out"))
    assert is_transient(Throttled())
    assert not is_transient(FileNotFoundError(errno.ENOENT, "missing"))
    assert not is_transient(ValueError("bad format"))


def test_transient_cause_is_found_through_wrapping() -> None:
    try:
        try:
            raise ConnectionResetError("reset")
        except ConnectionResetError as inner:
            raise RuntimeError("upload failed") from inner
    except RuntimeError as outer:
        assert is_transient(outer)


def test_retry_condition_reads_the_failed_state() -> None:
    assert retry_if_transient(None, None, Failed(data=ConnectionResetError()))
    assert not retry_if_transient(None, None, Failed(data=ValueError("bad")))


def test_a_cluster_error_is_never_a_storage_fault_to_retry() -> None:
    # A lost worker or scheduler has its own handling; a timeout inside it must not look transient.
    for error_type in (ClusterError, MachineLost, BucketAbandoned):
        try:
            try:
                raise TimeoutError("waited")
            except TimeoutError as cause:
                raise error_type("dask_address tcp://h:1: lost") from cause
        except ClusterError as exc:
            assert not is_transient(exc)


def _all_tasks() -> dict[str, Task]:
    """Every Prefect task defined in a module of ``tasks/``, by ``module.attribute``."""
    found = {}
    for info in pkgutil.iter_modules(tasks.__path__):
        module = importlib.import_module(f"tasks.{info.name}")
        for attribute, value in vars(module).items():
            if isinstance(value, Task) and value.fn.__module__ == module.__name__:
                found[f"{info.name}.{attribute}"] = value
    return found


def _kind_of(made: Task) -> TaskKind | None:
    """The kind whose every option the task has, or None."""
    matching = [kind for kind in KINDS if _options(made) == _expected(kind)]
    return matching[0] if len(matching) == 1 else None


def _options(made: Task) -> dict[str, object]:
    return {name: getattr(made, name) for name in (*KIND_OPTIONS, "timeout_seconds")}


def _expected(kind: TaskKind) -> dict[str, object]:
    """The options a task of ``kind`` has (Prefect's defaults where the kind sets none)."""
    defaults = {"retries": 0, "retry_delay_seconds": 0, "retry_condition_fn": None, "persist_result": None}
    return {**defaults, "timeout_seconds": None, **kind.options}


def test_every_task_has_the_options_of_one_kind_and_none_caches() -> None:
    found = _all_tasks()
    assert len(found) >= 30, sorted(found)  # the walk found the tasks (40 when this was written)
    for where, made in found.items():
        assert made.cache_policy is NO_CACHE, where
        assert _kind_of(made) is not None, f"{where}: {_options(made)} is no kind of tasks._policies"


def test_the_kinds_differ_and_none_caches() -> None:
    assert len({tuple(sorted(map(str, _expected(kind).items()))) for kind in KINDS}) == len(KINDS)
    assert all(kind.options["cache_policy"] is NO_CACHE for kind in KINDS)
    assert [kind.kind for kind in KINDS] == [
        "storage_task",
        "plain_task",
        "unpersisted_task",
        "unpersisted_storage_task",
    ]


def _inline_options(name: str, source: str) -> list[str]:
    """Where a module's source makes a task with ``@task`` or spells a kind's options (call or dict)."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "prefect":
            problems += [f"{name}:{node.lineno} imports prefect.task" for alias in node.names if alias.name == "task"]
        if isinstance(node, ast.keyword) and node.arg in KIND_OPTIONS:
            problems.append(f"{name}:{node.value.lineno} sets {node.arg}")
        if isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
            problems += [f"{name}:{node.lineno} holds {key}" for key in sorted(keys & KIND_OPTIONS)]
    return sorted(problems)


def test_no_task_module_spells_task_options_or_uses_task_itself() -> None:
    problems = []
    for path in sorted(TASKS_DIR.glob("*.py")):
        if path.name != "_policies.py":
            problems += _inline_options(path.name, path.read_text())
    assert problems == []


def test_an_inline_copy_is_caught() -> None:
    copy = (
        "from prefect import task\n"
        "_STORAGE = dict(retries=3, retry_condition_fn=retry_if_transient)\n"
        "OTHER = {'persist_result': False}\n"
        "@task(name='x', cache_policy=NO_CACHE, **_STORAGE)\n"
        "def x() -> None: ...\n"
    )
    assert _inline_options("copy.py", copy) == [
        "copy.py:1 imports prefect.task",
        "copy.py:2 sets retries",
        "copy.py:2 sets retry_condition_fn",
        "copy.py:3 holds persist_result",
        "copy.py:4 sets cache_policy",
    ]
    assert _kind_of(Task(lambda: None, retries=2, cache_policy=NO_CACHE)) is None  # options of no kind
