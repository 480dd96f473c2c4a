"""Which line of *user* code caused something.

Library frames are skipped: torch, xlalab, the standard library and every installed
package (site-packages: transformers, numpy...), so that an op recorded deep inside a
library model names the user's line that called into it. Walking ``sys._getframe`` costs
a few microseconds, so it is only done when an event is published or IR debug is on,
never on the plain hot path.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from collections.abc import Callable
from typing import NamedTuple

import torch


class Frame(NamedTuple):
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.function}@{self.file}:{self.line}"


def _installed_dirs() -> tuple[str, ...]:
    """The standard library and site-packages directories, as spelled and as resolved."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs |= {p for p in sys.path if p.rstrip(os.sep).endswith(("site-packages", "dist-packages"))}
    return tuple({d.rstrip(os.sep) + os.sep for p in dirs for d in (p, os.path.realpath(p))})


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_XLALAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INSTALLED_DIRS = _installed_dirs()
_LIB_DIRS = (_TORCH_DIR, _XLALAB_DIR, *_INSTALLED_DIRS)
_STDLIB_SKIP = ("contextlib.py", "functools.py", "<frozen ", "threading.py")
# The machinery that runs a notebook cell sits below the cell's frame on every stack; matched
# by name so that the runtime never imports it.
_RUNNER_DIRS = tuple(
    f"{os.sep}{name}{os.sep}"
    for name in ("IPython", "ipykernel", "tornado", "asyncio", "jupyter_client", "nbclient")
)


_LIBRARY: dict[str, bool] = {}  # file name -> is it library code (few distinct files, asked per frame)


def is_library(filename: str) -> bool:
    known = _LIBRARY.get(filename)
    if known is None:
        known = _LIBRARY[filename] = (
            filename.startswith(_LIB_DIRS)
            or filename.endswith(_STDLIB_SKIP)
            or filename.startswith("<frozen")
            or filename.startswith("<eval_with_key>")  # code torch.fx generated for a graph
            or any(d in filename for d in _RUNNER_DIRS)
        )
    return known


# How many frames events carry: at least 8, more when PT_XLA_DEBUG_MAX_FRAME asks for more.
DEFAULT_DEPTH = [8]


def user_frames(limit: int | None = None) -> tuple[Frame, ...]:
    """The innermost ``limit`` user frames, innermost first."""
    if limit is None:
        limit = DEFAULT_DEPTH[0]
    out: list[Frame] = []
    f = sys._getframe(1)
    while f is not None and len(out) < limit:
        code = f.f_code
        if not is_library(code.co_filename):
            out.append(Frame(code.co_filename, f.f_lineno, code.co_name))
        f = f.f_back  # type: ignore[assignment]
    return tuple(out)


_TB_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


def ir_frames(limit: int) -> tuple[Frame, ...]:
    """Frames for a new IR node under XLA_IR_DEBUG.

    Inside backward there is no user frame on the stack: the node differentiates a forward
    op, and autograd's anomaly mode kept that op's stack on its ``grad_fn``. Use it.
    """
    node = torch._C._current_autograd_node()
    if node is not None:
        tb = node.metadata.get("traceback_")  # type: ignore[attr-defined]
        if tb:
            out = []
            for entry in reversed(tb):
                m = _TB_LINE.search(entry)
                if m and not is_library(m["file"]):
                    out.append(Frame(m["file"], int(m["line"]), m["fn"]))
                    if len(out) == limit:
                        break
            return tuple(out)
        return ()
    return user_frames(limit)


# torch's own plumbing between a read and the code that asked for it (Tensor.__bool__, item,
# __torch_function__ handling, the autograd engine that runs backward, the Python references
# and decompositions a torch function runs as, and dynamo's wrappers around them): never the
# line a user would look for.
_TORCH_PLUMBING = (
    "_tensor.py", "_ops.py", "overrides.py", "_compile.py", "utils" + os.sep, "autograd" + os.sep,
    "_refs" + os.sep, "_prims", "_decomp" + os.sep, "_dynamo" + os.sep,  # _prims: and _prims_common
)  # fmt: skip


def library_caller() -> Frame | None:
    """Where library code (transformers' generate, torch.nn.utils) made a read: the innermost
    frame outside xlalab and torch's plumbing, when that frame is a library's; None when user
    code made it."""
    f = sys._getframe(1)
    while f is not None:
        file = f.f_code.co_filename
        inside_torch = file.startswith(_TORCH_DIR)
        plumbing = inside_torch and file[len(_TORCH_DIR) :].startswith(_TORCH_PLUMBING)
        if not file.startswith(_XLALAB_DIR) and not plumbing and not file.endswith(_STDLIB_SKIP):
            return Frame(file, f.f_lineno, f.f_code.co_name) if is_library(file) else None
        f = f.f_back  # type: ignore[assignment]
    return None


def library_path(file: str) -> str:
    """A library file as its package spells it: ``transformers/generation/utils.py`` for the
    file under site-packages (the longest installed directory it is in); else its base name."""
    dirs = [d for d in _INSTALLED_DIRS if file.startswith(d)]
    return file[len(max(dirs, key=len)) :] if dirs else os.path.basename(file)


def user_frame() -> Frame | None:
    frames = user_frames(1)
    return frames[0] if frames else None


# ``file:line`` in text from torch (a guard's comment, dynamo's reason): a notebook's
# ``<ipython-input-3-...>`` or a path ending in ``.py`` (dynamo cuts a path's common prefix with
# torch's own directory, so the path may be the end of the file's name only).
_LOCATION = re.compile(r"(<[^<>\s]+>|[^\s:'\"`()<>#,]+\.py):(\d+)")


def relabel_locations(text: str, label: Callable[[str, int], str | None]) -> str:
    """Each ``file:line`` in ``text`` as ``label(file, line)`` names it (kept where it says None)."""
    return _LOCATION.sub(lambda m: label(m[1], int(m[2])) or m[0], text)
