"""TF_CPP_MIN_LOG_LEVEL, TF_CPP_VMODULE and TF_CPP_LOG_THREAD_ID, mapped onto Python logging.

Lines look like TensorFlow's, so habits and greps carry over::

    2026-11-22 11:02:03.419040: I xlalab/runtime/graph.py:312] Executing IR graph hash 42 on xla:0 done!

``vlog("tensor", 5, ...)`` prints only when TF_CPP_VMODULE gives module ``tensor`` a level of 5 or
more and TF_CPP_MIN_LOG_LEVEL is 0, as the seeds describe. The check is two dictionary reads.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import threading
from typing import Any

from . import config

logger = logging.getLogger("xlalab")
_LETTER = {
    logging.DEBUG: "I",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "F",
}
_PY_LEVEL = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_vmodule: dict[str, int] = {}


class _TFFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S.%f")
        tid = f" {threading.get_native_id()}" if config.get("TF_CPP_LOG_THREAD_ID") else ""
        path = record.pathname.removeprefix(_ROOT)
        return (
            f"{when}: {_LETTER.get(record.levelno, 'I')}{tid} {path}:{record.lineno}] {record.getMessage()}"
        )


def _parse_vmodule(spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, level = item.partition("=")
        if not sep or not level.strip().isdigit():
            raise ValueError(f"TF_CPP_VMODULE={spec!r}: {item!r} is not name=level (e.g. tensor=5)")
        out[name.strip()] = int(level)
    return out


def _on_vmodule(spec: Any) -> None:
    _vmodule.clear()
    _vmodule.update(_parse_vmodule(str(spec)))


def _on_level(level: Any) -> None:
    if int(level) not in _PY_LEVEL:
        raise ValueError(
            f"TF_CPP_MIN_LOG_LEVEL={level!r} is not one of 0 (INFO), 1 (WARNING), 2 (ERROR), 3 (FATAL)"
        )
    logger.setLevel(_PY_LEVEL[int(level)])


def vlog(module: str, level: int, msg: str, *args: Any) -> None:
    """TensorFlow's VLOG(level) for ``module``: on with TF_CPP_VMODULE=module=N (N >= level)."""
    if _vmodule and _vmodule.get(module, 0) >= level and logger.isEnabledFor(logging.INFO):
        logger.info(msg, *args, stacklevel=2)


def _install_handler() -> None:
    if any(getattr(h, "_xlalab", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TFFormatter())
    handler._xlalab = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.propagate = False


_install_handler()
config.watch("TF_CPP_MIN_LOG_LEVEL", _on_level)
config.watch("TF_CPP_VMODULE", _on_vmodule)
