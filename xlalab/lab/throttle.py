"""Call a function at most every ``interval`` seconds, never dropping the last call.

Live views (the comm to JupyterLab, the counters widget) are poked on every runtime event,
which can mean thousands a second in a training loop; they must send a few updates a second
and always end with the latest state. A trailing timer thread delivers the last poke.
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
        self._lock = threading.RLock()
        self._last = 0.0
        self._timer: threading.Timer | None = None
        self._closed = False

    def poke(self) -> None:
        """Call ``fn`` now if the interval has passed, else once when it has."""
        with self._lock:
            if self._closed or self._timer is not None:
                return
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                self._timer = threading.Timer(wait, self._fire)
                self._timer.daemon = True
                self._timer.start()
                return
            self._call()

    def flush(self) -> None:
        """Call ``fn`` now (a cell ended, a compile starts): nothing waits behind a timer."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._closed:
                self._call()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._call()

    def _call(self) -> None:
        self._last = time.monotonic()
        try:
            self.fn()
        except Exception:  # a live view must never break the program it watches
            logging.getLogger("xlalab.lab").exception("live view update failed")
