"""One loaded notebook extension: the cell hooks, the watcher, the comm and the live views.

``%load_ext xlalab`` makes a ``LabSession`` and ``%unload_ext xlalab`` takes everything it
registered back out: IPython event callbacks, magics, the event-bus subscription, the comm
target and open comms, live widgets.
"""

from __future__ import annotations

import linecache
import logging
import sys
import warnings
from typing import Any

from xlalab.runtime import config

from . import render
from .cells import CellMap
from .comm import CommServer
from .watcher import Watcher

_log = logging.getLogger("xlalab.lab")


def _ipython_major() -> int:
    import IPython

    try:
        return int(IPython.__version__.split(".")[0])
    except ValueError:
        return 0


def record_lines(on: bool) -> None:
    """Every op records the user's line that made it (XLA_IR_DEBUG), so a warning can name the
    line that baked a changed integer or took another path. The notebook turns it on when it
    loads (%xla_debug off turns it off): it costs a stack walk per op, and backward ops keep
    their forward op's stack (autograd's anomaly mode, whose warning is not the user's)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
        config.set("XLA_IR_DEBUG", on)


class LabSession:
    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.cells = CellMap(shell)
        self.watcher = Watcher(self.cells)
        self.comm = CommServer(self.watcher)
        self.views: list[Any] = []  # live widgets, closed on unload
        self.warnings_on = True
        self.cell_snapshots: list[dict[str, Any]] = []  # metrics at the start of the last two cells
        self._magics: Any = None
        self._ir_debug_before: Any = None
        self._showwarning: Any = warnings.showwarning
        self._count_ahead = 1 if _ipython_major() >= 9 else 0  # see pre_run_cell
        self._cell_id: str | None = None

    # ---- lifecycle
    def start(self) -> None:
        from .magics import XlaMagics

        self._ir_debug_before = config.get("XLA_IR_DEBUG")
        record_lines(True)
        self._showwarning = warnings.showwarning
        warnings.showwarning = self._show_warning
        self.watcher.start()
        self.comm.start()
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        self._magics = XlaMagics(self.shell, self)
        self.shell.register_magics(self._magics)

    def stop(self) -> None:
        for name, fn in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(name, fn)
            except ValueError:
                pass
        if self._magics is not None:
            table = self.shell.magics_manager.magics
            for kind, names in self._magics.magics.items():
                for name in names:
                    table[kind].pop(name, None)
            self.shell.magics_manager.registry.pop(type(self._magics).__name__, None)
            self._magics = None
        for view in self.views:
            try:
                view.close()
            except Exception:
                _log.exception("xlalab: could not close a live view")
        self.views.clear()
        self.comm.stop()
        self.watcher.stop()
        record_lines(bool(self._ir_debug_before))
        if warnings.showwarning == self._show_warning:
            warnings.showwarning = self._showwarning

    def _settle_count(self, result: Any) -> None:
        """Correct the running cell's number with the one IPython gave it (see pre_run_cell)."""
        count = getattr(result, "execution_count", None)
        guessed = self.cells.current
        if not isinstance(count, int) or guessed is None or count == guessed:
            return
        info = getattr(result, "info", None)
        if getattr(info, "store_history", False):
            self._count_ahead += guessed - count
        self.cells.cell_ids.pop(guessed, None)
        self.cells.start_cell(count, self._cell_id)
        for f in self.watcher.findings_of_cell():
            if f.cell == guessed:
                f.cell = count

    def _show_warning(
        self, message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        """A warning that points into a cell names the cell (``cell [3]:2``), not the temporary
        file IPython compiled it under (``/tmp/ipykernel_1/2381.py``)."""
        cell = self.cells.cell_of(filename)
        if cell is not None:
            if line is None:
                line = linecache.getline(filename, lineno)
            filename = f"cell [{cell[0]}]"
        if self._showwarning is getattr(warnings, "_showwarning_orig", None):
            # What the stock showwarning does, written here: it would hand the message to the
            # module's current sink, which a surrounding recorder (pytest's) may have replaced.
            target = sys.stderr if file is None else file
            try:
                target.write(warnings.formatwarning(message, category, filename, lineno, line))
            except OSError:
                pass  # a closed stream, as the stock one tolerates
            return
        self._showwarning(message, category, filename, lineno, file, line)

    # ---- cells
    def pre_run_cell(self, info: Any) -> None:
        # IPython 9 counts the cell before pre_run_cell (8 after): learnt from the first
        # post_run_cell's result, guessed from the version until then.
        stored = bool(getattr(info, "store_history", False))
        self._cell_id = getattr(info, "cell_id", None)
        count = self.shell.execution_count - (self._count_ahead if stored else 0)
        self.cells.start_cell(count, self._cell_id)
        self.watcher.start_cell()
        self.cell_snapshots.append(render.snapshot())
        del self.cell_snapshots[:-2]

    def post_run_cell(self, result: Any) -> None:
        try:
            self._settle_count(result)
            self.watcher.end_cell()
            findings = self.watcher.findings_of_cell()
            if findings and self.warnings_on:
                from IPython.display import display

                display(render.findings_bundle(findings, self.cells), raw=True)
        finally:
            self.watcher.start_cell()
            self.comm.end_of_cell()
            for view in self.views:
                refresh = getattr(view, "refresh", None)
                if refresh is not None:
                    refresh()
