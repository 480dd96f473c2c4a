"""What the debugging layers do when their own analysis of an event fails.

A debugger must never stop the program it watches, so for a user a failed analysis is one
log line (``xlalab: could not analyse CompileEvent``) and the program goes on. A test suite
wants the opposite: with ``XLALAB_ANALYSIS_ERRORS=raise`` in the environment the error
propagates out of the event's publisher into the code that caused the event, so the test
that hit an analysis bug fails with its traceback. Every failure is also kept in
``FAILURES`` for a test to assert on (a child process inherits the environment variable).
"""

from __future__ import annotations

import logging
import traceback

from xlalab.runtime import config

__all__ = ["FAILURES", "failed", "strict"]

#: ``"<layer>: <event>: <error>"`` for every analysis failure in this process.
FAILURES: list[str] = []


def strict() -> bool:
    return str(config.get("XLALAB_ANALYSIS_ERRORS")).lower() == "raise"


def failed(layer: str, event: object, error: BaseException, *, log: bool = True) -> None:
    """Record an analysis failure; re-raise it under ``XLALAB_ANALYSIS_ERRORS=raise``.

    Call from an ``except`` block: the log keeps the traceback. ``log=False`` for a layer
    that reports the failure in its own output (PT_XLA_DEBUG's stream).
    """
    what = f"{layer}: {type(event).__name__}: {error!r}"
    FAILURES.append(what)
    if strict():
        raise error
    if log:
            logging.getLogger(f"xlalab.{layer}").error(
            "xlalab: could not analyse %s (%r); the program goes on\n%s",
            type(event).__name__,
            error,
            traceback.format_exc(),
        )
