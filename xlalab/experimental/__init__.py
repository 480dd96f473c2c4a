"""``torch_xla.experimental``: eager mode.

In eager mode every op runs as soon as it is recorded, each op its own small cached XLA
program (xlalab's ``XLA_USE_EAGER_DEBUG_MODE``); ``torch_xla.compile`` regions still run as one
graph. Useful to find which op fails, at the cost of fusion.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..runtime import config

_SETTING = "XLA_USE_EAGER_DEBUG_MODE"


def eager_mode(enable: bool) -> None:
    """Switch eager mode on or off for the rest of the program."""
    config.set(_SETTING, bool(enable))


def is_eager_mode() -> bool:
    return bool(config.get(_SETTING))


@contextlib.contextmanager
def eager_mode_context(enable: bool) -> Iterator[None]:
    """Eager mode on (or off) inside the block, as it was after it."""
    saved = is_eager_mode()
    eager_mode(enable)
    try:
        yield
    finally:
        eager_mode(saved)


__all__ = ["eager_mode", "eager_mode_context", "is_eager_mode"]
