"""worker_boot: children started ahead of their session, stopped when not adopted, killed by SIGTERM."""

from __future__ import annotations

import os
import signal


def test_prestarted_children_of_another_count_are_stopped_not_adopted() -> None:
    from pbg_core.parallel import worker_boot
    from pbg_core.parallel.worker_boot import close_prestarted, prestart_children, take_prestarted

    prestart_children(2)
    processes = list(worker_boot._warm.processes)
    assert take_prestarted(1) is None
    assert not any(proc.is_alive() for proc in processes)
    close_prestarted()  # idempotent


def test_prestarted_children_never_adopted_exit_when_closed() -> None:
    from pbg_core.parallel.worker_boot import close_prestarted, prestart_children, take_prestarted

    prestart_children(1)
    warm = take_prestarted(1)
    assert warm is not None and warm.processes[0].is_alive()
    warm.close()
    assert warm.processes == []
    close_prestarted()


def test_a_forked_child_dies_by_sigterm_even_if_the_parent_turns_sigterm_into_an_exception() -> None:
    """`pbg` makes SIGTERM raise KeyboardInterrupt; a forked child inherits that, and the pool
    stops children with SIGTERM: they must end by the signal, not with a traceback."""

    from pbg_core.parallel.worker_boot import start_children

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        children = start_children(1, start_method="fork")
    finally:
        signal.signal(signal.SIGTERM, previous)
    child = children.processes[0]
    try:
        os.kill(child.pid, signal.SIGTERM)  # as soon as it exists: held until it has reset its handlers
        child.join(30)
        assert child.exitcode == -signal.SIGTERM
    finally:
        children.close()
