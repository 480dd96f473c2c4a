"""Which notebook cell (and line in it) a frame of user code belongs to.

IPython compiles every cell under a file name of its own (``/tmp/ipykernel_1/2381.py`` in
ipykernel, ``<ipython-input-3-...>`` in a terminal) and remembers which execution count
each name had. JupyterLab sends the cell's id with the execute request, and IPython hands it
to ``pre_run_cell``. Together they turn a runtime ``Frame`` into "cell [3], line 4" and into
something the JupyterLab extension can jump to.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
from typing import Any

from xlalab.runtime.frames import Frame, relabel_locations

# Frames in these directories are the notebook machinery (IPython, ipykernel, asyncio,
# tornado), never the user's code: the runtime keeps them, the notebook layer drops them.
_MACHINERY = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)


class CellMap:
    """File names of executed cells -> (execution count, cell id)."""

    def __init__(self, shell: Any = None) -> None:
        self.shell = shell
        self.cell_ids: dict[int, str | None] = {}
        self.current: int | None = None  # execution count of the cell running now
        self._is_user_file: dict[str, bool] = {}

    def start_cell(self, execution_count: int, cell_id: str | None) -> None:
        self.cell_ids[execution_count] = cell_id
        self.current = execution_count

    def cell_of(self, file: str) -> tuple[int, str | None] | None:
        """(execution count, cell id) of the cell compiled under ``file``, or None."""
        compiler = getattr(self.shell, "compile", None)
        names: dict[str, int] = getattr(compiler, "_filename_map", {}) or {}
        count = names.get(file)
        if count is None:
            return None
        return count, self.cell_ids.get(count)

    def is_user(self, f: Frame) -> bool:
        if self.cell_of(f.file) is not None:
            return True
        known = self._is_user_file.get(f.file)
        if known is None:  # resolved once per file: events arrive every step
            path = os.path.realpath(f.file) if not f.file.startswith("<") else f.file
            known = not path.startswith(_MACHINERY) and not path.startswith("<frozen")
            self._is_user_file[f.file] = known
        return known

    def user_frames(self, frames: Any) -> list[Frame]:
        # A cell magic's own line (``get_ipython().run_cell_magic(...)``) is plumbing, not user code.
        return [f for f in frames if self.is_user(f) and not self.source_line(f).startswith("get_ipython().")]

    def label(self, f: Frame) -> str:
        cell = self.cell_of(f.file)
        if cell is not None:
            return f"cell [{cell[0]}], line {f.line}"
        return f"{os.path.basename(f.file)}:{f.line}"

    def relabel(self, text: str) -> str:
        """Each ``file:line`` of a cell in text from torch (a guard, dynamo's reason) as
        ``cell [N], line M``; dynamo may have cut the start of the file's name."""
        return relabel_locations(text, self._cell_label)

    def _cell_label(self, file: str, line: int) -> str | None:
        compiler = getattr(self.shell, "compile", None)
        names: dict[str, int] = getattr(compiler, "_filename_map", {}) or {}
        count = names.get(file)
        if count is None and not file.startswith("<"):
            count = next((n for name, n in names.items() if name.endswith(file)), None)
        return None if count is None else f"cell [{count}], line {line}"

    def location(self, f: Frame) -> dict[str, Any]:
        """A location as the comm protocol spells it (docs/lab-protocol.md)."""
        cell = self.cell_of(f.file)
        return {
            "file": f.file,
            "line": f.line,
            "function": f.function,
            "label": self.label(f),
            "cell": None if cell is None else {"execution_count": cell[0], "cell_id": cell[1]},
        }

    def source_line(self, f: Frame) -> str:
        return linecache.getline(f.file, f.line).strip()

    def jump_target(self, frames: list[Frame]) -> Frame | None:
        """The frame a warning points at: the innermost frame of user code (a cell or a user's
        file), at the operation that caused it. Its callers are context, shown under it."""
        return frames[0] if frames else None
