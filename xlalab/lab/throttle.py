"""Call a function at most every ``interval`` seconds, never dropping the last call.

Live views (the comm to JupyterLab, the counters widget) are poked on every runtime event,
which can mean thousands a second in a training loop; they must send a few updates a second
and always end with the latest state. One daemon thread per throttle delivers the trailing
call: a poke only sets a flag (starting a thread per interval cost a training step about a
millisecond).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class Throttle:
    def __init__(self, interval: float, fn: Callable[[], None]) -> None:
        self.interval = interval
        self.fn = fn
        self._call_lock = threading.RLock()  # one call of fn at a time
        self._wake = threading.Condition(threading.Lock())
        self._dirty = False
        self._closed = False
        self._last = 0.0
        self._thread: threading.Thread | None = None

    def poke(self) -> None:
        """Call ``fn`` now if the interval has passed, else once when it has."""
        if self._closed:
            return
        if time.monotonic() - self._last >= self.interval and not self._dirty:
            self._call()
            return
        with self._wake:
            if not self._dirty:
                self._dirty = True
                self._ensure_thread()
                self._wake.notify()

    def flush(self) -> None:
        """Call ``fn`` now (a cell ended, a compile starts): nothing waits behind the interval."""
        with self._wake:
            self._dirty = False
        if not self._closed:
            self._call()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._dirty = False
            self._wake.notify()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="xlalab-throttle", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._dirty and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with self._wake:
                if not self._dirty:  # a flush got there first
                    continue
                self._dirty = False
            if not self._closed:
                self._call()

    def _call(self) -> None:
        with self._call_lock:
            self._last = time.monotonic()
            try:
                self.fn()
            except Exception:  # a live view must never break the program it watches
                logging.getLogger("xlalab.lab").exception("live view update failed")
