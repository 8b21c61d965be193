"""Run a producer iterator one step ahead in a background thread, with bounded memory.

:func:`prefetched` lets the importer parse the next text block (pyarrow, GIL released) while
the current one is being mapped, without pyarrow's streaming reader, which parses ahead
without bound (the whole file, measured: peak memory grew with the input size).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetched(items: Iterable[T], depth: int = 1, name: str = "pbg-prefetch") -> Iterator[T]:
    """The items of ``items``, produced in a thread at most ``depth`` items ahead.

    An exception of the producer is raised here, at the item where it happened. If the
    consumer stops early (break, exception, ``close()``), the producer stops at its next
    item and its thread is joined.
    """
    slots: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        iterator = iter(items)
        try:
            for item in iterator:
                if not put(item):
                    return
        except BaseException as error:  # noqa: BLE001  # handed to the consumer
            put(_Failed(error))
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # a generator's open files are closed here, in its own thread
        put(_DONE)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]  # item is a T once _DONE and _Failed are ruled out
    finally:
        stop.set()
        thread.join()
