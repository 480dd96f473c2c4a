"""Ctrl-C (SIGINT) raised in the code that was running, never inside torch's C++.

Python runs a signal's handler at the next point it checks for signals, and C code checks too:
``str()`` of any object does. While autograd records an op on an xla tensor, torch's C++ asks the
device guard for the current stream in a function that must not throw, and pybind11's lookup of
the guard's Python override calls ``str()`` there: Python's handler raised its
``KeyboardInterrupt`` inside it and the process aborted (a notebook's kernel died). Raised in
Python code that torch's or JAX's C++ calls and whose errors it drops (a dispatch rule lookup, a
garbage-collection callback), it was lost.

The handler installed here only notes the interrupt. The handler that was in place (Python's
raises ``KeyboardInterrupt``) runs at the next line of a frame that was running when the
interrupt came, the innermost one outside torch, JAX and xlalab (their Python code is what C++
calls back): the user's loop, a training library's. If no such line runs for ``PATIENCE_S`` (the
main thread waits in C: ``time.sleep``, a long compile), the interrupt is sent again and the
handler in place runs at once, wherever Python checks next, as it would have without this one.
Under a debugger or a coverage tool (a trace function already set), interrupts are as before.
"""

from __future__ import annotations

import _signal
import _thread
import gc
import os
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Any

import jax
import torch

# How long an interrupt waits for a line of a frame it may be raised in before it is sent again.
PATIENCE_S = 0.2

# Python code that C++ calls back, where an interrupt is not raised: these packages' files,
# and the finalizers the garbage collector runs (weakref.finalize's).
_PACKAGES = (torch, jax, sys.modules["jaxlib"], sys.modules[__name__.split(".")[0]])
_CALLED_BACK = (*[os.path.dirname(m.__file__) + os.sep for m in _PACKAGES if m.__file__], weakref.__file__)

_previous: list[Any] = [None]  # the handler this one defers to
_held: list[int] = []  # the signal number of an interrupt not yet delivered
_traced: dict[int, FrameType] = {}  # id -> frame given the delivering trace function
_wake = _thread.allocate_lock()  # released to wake the watcher
_wake.acquire()
_watcher: list[threading.Thread] = []


def _may_raise_in(frame: FrameType) -> bool:
    """Whether a KeyboardInterrupt raised in ``frame`` reaches the user: not torch's, JAX's or
    xlalab's code (C++ calls it back), nor a finalizer or garbage-collection callback."""
    code = frame.f_code
    if code.co_filename.startswith(_CALLED_BACK) or code.co_name == "__del__":
        return False
    return all(getattr(cb, "__code__", None) is not code for cb in gc.callbacks)


def _stop_tracing() -> None:
    sys.settrace(None)
    for frame in _traced.values():
        frame.f_trace = None
    _traced.clear()


def _untraced(frame: FrameType, event: str, arg: Any) -> None:
    """The global trace function while an interrupt waits: frames started since are not traced
    (any of them may be code C++ calls back)."""
    return None


def _deliver(frame: FrameType, event: str, arg: Any) -> Any:
    """The trace function of the frames that were running: the held interrupt's handler, at the
    first line of one it may be raised in."""
    if not _held:
        _stop_tracing()
        return None
    if event != "line" or id(frame) not in _traced or not _may_raise_in(frame):
        return _deliver
    signum = _held.pop()
    _stop_tracing()
    previous = _previous[0]
    if callable(previous):
        previous(signum, frame)
    return None


def deferring(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler: hold the interrupt for ``_deliver``."""
    previous = _previous[0]
    if not callable(previous):
        return
    trace = sys.gettrace()
    if _held or (trace is not None and trace is not _untraced):
        # Sent again (no line ran where it could be raised: the main thread waits in C), or a
        # debugger traces: the handler in place, now.
        _held.clear()
        _stop_tracing()
        previous(signum, frame)
        return
    _held.append(signum)
    sys.settrace(_untraced)  # turns on line events in the frames given _deliver below
    while frame is not None:
        frame.f_trace = _deliver
        _traced[id(frame)] = frame
        frame = frame.f_back
    if _wake.locked():
        _wake.release()


def _watch() -> None:
    """Send a held interrupt again after PATIENCE_S."""
    main = threading.main_thread().ident
    while True:
        _wake.acquire()
        time.sleep(PATIENCE_S)
        if _held and main is not None:
            _signal.pthread_kill(main, _signal.SIGINT)


def ensure_installed() -> None:
    """Put ``deferring`` in front of Python's own SIGINT handler when it is the one in place (a
    notebook kernel puts it back before each cell). Only the main thread can; another handler
    (a library's own, ignoring the signal) is left as it is."""
    current = _signal.getsignal(_signal.SIGINT)
    if current is not _signal.default_int_handler:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    _previous[0] = current
    _signal.signal(_signal.SIGINT, deferring)
    if not _watcher:
        watcher = threading.Thread(target=_watch, name="xlalab-interrupts", daemon=True)
        watcher.start()
        _watcher.append(watcher)


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) has no watcher thread: it gets Python's handler
    back, and the deferring one with a new watcher at its first xla op, if it makes one."""
    _watcher.clear()
    _held.clear()
    _traced.clear()
    if _signal.getsignal(_signal.SIGINT) is deferring and callable(_previous[0]):
        _signal.signal(_signal.SIGINT, _previous[0])


os.register_at_fork(after_in_child=_after_fork_in_child)
