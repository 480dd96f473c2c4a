"""The notebook layer: ``%load_ext xlalab`` in Jupyter or IPython.

Registers ``%xla_graph``, ``%xla_metrics``/``%%xla_metrics``, ``%xla_debug``,
``%xla_counters``, ``%xla_step`` and ``%xla_sharding``; shows per-cell warnings
(recompilations with what changed, CPU fallbacks, reads that cut a step, a loop with no step
barrier, graph breaks, reshards) after the cell that caused them; and serves
the JupyterLab extension's comm (docs/lab-protocol.md). ``%unload_ext xlalab`` removes it all.

This layer imports IPython; the runtime (``xlalab.runtime``) never does.
"""

from __future__ import annotations

from typing import Any

from .session import LabSession

_SESSION: list[LabSession] = []


def load_ipython_extension(shell: Any) -> None:
    if _SESSION:  # loaded twice (a direct call, or a reload): start from a clean slate
        unload_ipython_extension(shell)
    session = LabSession(shell)
    session.start()
    _SESSION.append(session)


def unload_ipython_extension(shell: Any) -> None:
    while _SESSION:
        _SESSION.pop().stop()


def session() -> LabSession:
    """The loaded extension's session; a clear error if ``%load_ext xlalab`` was not run."""
    if not _SESSION:
        raise RuntimeError("the xlalab notebook extension is not loaded: run %load_ext xlalab first")
    return _SESSION[-1]


def counters() -> Any:
    """A live ipywidgets view of compiles, executions, transfers and fallbacks (display it)."""
    from .counters import CountersView

    s = session()
    view = CountersView(s.watcher)
    s.views.append(view)
    return view.widget


def step(*tensors: Any) -> Any:
    """An interactive step-through widget for the pending graph of ``tensors``."""
    from .step_widget import stepper_widget

    return stepper_widget(list(tensors))


__all__ = ["LabSession", "counters", "load_ipython_extension", "session", "step", "unload_ipython_extension"]
