"""Which replica the calling thread runs, and which devices running replica groups own.

``replicated.py`` sets it; the barrier (``graph.sync``) reads it to hand a replica's barrier to
its group and to leave the devices a group syncs itself alone. It sits below both, so that
the barrier needs nothing from the replicated runtime built on top of it.
"""

from __future__ import annotations

import threading
from typing import Any

# .replica: the Replica this thread runs; .axis: the replica axis while a program traces
LOCAL = threading.local()
OWNED: dict[int, Any] = {}  # xla device -> the replica group whose session runs on it


def current() -> Any:
    """The replica the calling thread runs (a ``replicated.Replica``), or None outside
    replicated execution."""
    return getattr(LOCAL, "replica", None)


def owned_devices() -> frozenset[int]:
    """Devices that a running group syncs itself; a plain sync from another thread leaves them."""
    return frozenset(OWNED)
