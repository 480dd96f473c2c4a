"""ExecuteTime as the device spends it, without making the host wait for the device.

XLA runs a program asynchronously: ``execute`` returns once the program is dispatched, and
the host goes on recording the next step while the device works. The dispatch is timed on
the calling thread (``DispatchTime``); one waiter thread blocks on each dispatched program's
done token (an extra output that is ready when the program has finished), in order, and records
``ExecuteTime`` from the moment the device could start it (its dispatch, or the end of the
program before it) to that moment. It holds the token only, never the tensors' arrays: a
buffer nothing else holds may be given to the next program (donation.py).

Reading metrics settles what has already finished (a read right after ``.item()`` sees that
step's ExecuteTime) and never waits for work still running.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from typing import Any

import jax

from . import metrics

_queue: queue.Queue[tuple[int, Any]] = queue.Queue()
_state = {"last_end": 0}
_thread: list[threading.Thread] = []
_lock = threading.Lock()


def _wait_loop() -> None:
    while True:
        start, outputs = _queue.get()
        try:
            jax.block_until_ready(outputs)
        except Exception:
            pass  # a failing execution reports its error where its values are read
        end = time.perf_counter_ns()
        begin = max(start, _state["last_end"])
        _state["last_end"] = end
        metrics.record("ExecuteTime", end - begin)
        del outputs
        _queue.task_done()


def dispatched(start_ns: int, outputs: Any) -> None:
    """A program was dispatched at ``start_ns``; time it when ``outputs`` (its done token) are
    ready."""
    if not _thread:
        with _lock:
            if not _thread:
                t = threading.Thread(target=_wait_loop, name="xlalab-execute-timer", daemon=True)
                t.start()
                _thread.append(t)
    _queue.put((start_ns, outputs))


def record_now(start_ns: int) -> None:
    """A program that ran synchronously (XLA_SYNC_WAIT): its time is known at once."""
    end = time.perf_counter_ns()
    metrics.record("ExecuteTime", end - max(start_ns, _state["last_end"]))
    _state["last_end"] = end


def settle() -> None:
    """Wait for the timer only if everything it still holds has finished (never for the device)."""
    if _queue.unfinished_tasks == 0:
        return
    with _queue.mutex:
        items = list(_queue.queue)
    if all(_ready(outputs) for _, outputs in items):
        _queue.join()


def drain() -> None:
    """Wait until every dispatched program is timed (``wait_device_ops``)."""
    _queue.join()


def _drain_at_exit(limit_s: float = 60.0) -> None:
    # The waiter must not be blocked inside XLA while the interpreter tears down (the process
    # would abort): let it finish what was dispatched first. Registered after JAX's own exit
    # hooks, so it runs before them.
    deadline = time.monotonic() + limit_s
    while _queue.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.005)


def _ready(outputs: Any) -> bool:
    try:
        return all(o.is_ready() for o in jax.tree_util.tree_leaves(outputs) if hasattr(o, "is_ready"))
    except Exception:
        return True


metrics.BEFORE_READ.append(settle)
atexit.register(_drain_at_exit)
