"""Step closures (``xm.add_step_closure``): callbacks that run after the step barrier.

A closure queued during a step runs right after that step's ``mark_step`` has executed the
graph, so the tensors it reads are already device data: reading them costs a transfer, not
another execution. Closures queued by one thread (a DataParallel replica is one) run at that
thread's barrier, in the order they were queued. ``run_async`` ones run on a worker thread,
also in order; an error there is raised at the next barrier of the thread that queued it.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

_tls = threading.local()


class AsyncClosureHandler:
    """Runs closures in order on one daemon thread; remembers the first error."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _worker(self) -> None:
        while True:
            closure = self._queue.get()
            try:
                if closure is not None and self._error is None:
                    closure()
            except BaseException as e:
                self._error = e
            finally:
                self._queue.task_done()

    def run_all(self, closures: list[Callable[[], Any]]) -> None:
        self.raise_error()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._worker, name="xlalab async step closures", daemon=True
            )
            self._thread.start()
        for c in closures:
            self._queue.put(c)

    def wait(self) -> None:
        """Block until every queued closure has run (then raise the first error, if any)."""
        self._queue.join()
        self.raise_error()

    def raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(
                f"an asynchronous step closure failed: {type(error).__name__}: {error}"
            ) from error


def _state() -> tuple[list[Callable[[], Any]], list[Callable[[], Any]], AsyncClosureHandler]:
    if not hasattr(_tls, "sync"):
        _tls.sync, _tls.run_async, _tls.handler = [], [], AsyncClosureHandler()
    return _tls.sync, _tls.run_async, _tls.handler


def add_step_closure(
    closure: Callable[..., Any], args: tuple[Any, ...] = (), run_async: bool = False
) -> None:
    sync, run_async_list, _ = _state()
    (run_async_list if run_async else sync).append(functools.partial(closure, *args))


def run_step_closures() -> None:
    """Run (or hand to the worker) the closures this thread queued; called after the barrier."""
    sync, run_async, handler = _state()
    if run_async:
        pending, run_async[:] = list(run_async), []
        handler.run_all(pending)
    else:
        handler.raise_error()
    # Taken before running: a closure that queues another one queues it for the next step.
    pending, sync[:] = list(sync), []
    for closure in pending:
        closure()


def wait_async_closures() -> None:
    """Block until this thread's asynchronous closures have run."""
    _state()[2].wait()
