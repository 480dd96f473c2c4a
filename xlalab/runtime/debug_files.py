"""Writing debug output to the files the user named, without ever stopping their program.

XLA_METRICS_FILE, XLA_SAVE_TENSORS_FILE, PT_XLA_DEBUG_FILE and XLA_SAVE_HLO_FILE are side
channels: an unwritable path (a missing folder, a read-only disk) must not turn a working
training loop into a failing one. A failed write warns once per setting, path and reason,
naming all three, and the computation goes on.
"""

from __future__ import annotations

import threading
import warnings

_lock = threading.Lock()
_warned: set[tuple[str, str, str]] = set()


def write(setting: str, path: str, text: str, mode: str = "a") -> bool:
    """Write ``text`` to ``path`` (appended by default); False, after a warning, when it failed."""
    try:
        with _lock, open(path, mode, encoding="utf-8") as f:
            f.write(text)
        return True
    except OSError as e:
        warn_once(setting, path, e)
        return False


def warn_once(setting: str, path: str, error: BaseException) -> None:
    """Say once that ``setting``'s file ``path`` could not be written, and why."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    key = (setting, path, reason)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"xlalab: {setting}={path} could not be written ({reason}); the program goes on without it. "
        f"Point {setting} at a writable file to get this output.",
        RuntimeWarning,
        stacklevel=3,
    )
