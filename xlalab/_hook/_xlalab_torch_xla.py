"""Interpreter-start hook: ``import torch_xla`` resolves to xlalab when XLALAB_TORCH_XLA is set.

The wheel installs this module at the top of site-packages, beside ``xlalab_torch_xla.pth``,
whose one line imports it only when the variable is set. It imports nothing but the standard
library: a Python process that never asks for torch_xla pays nothing. The finder sits *last*
on ``sys.meta_path``, so it is asked only after every other finder failed to find torch_xla:
a real torch_xla always wins. On the first ``torch_xla`` lookup it imports ``xlalab.compat``,
which reads the variable (rejecting a bad value) and installs the names.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

ENV = "XLALAB_TORCH_XLA"
_TOPS = ("torch_xla", "torch_xla_py")


class DeferredTorchXlaNames(importlib.abc.MetaPathFinder):
    """Loads xlalab's torch_xla names the first time a torch_xla module is looked up."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] not in _TOPS:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once: from now on xlalab.compat's finder answers
        import xlalab.compat as compat

        if not compat.torch_xla_names_installed():
            compat.use_torch_xla_names()
        return compat._FINDER.find_spec(fullname, path, target)


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def install() -> None:
    """Called by the .pth line when XLALAB_TORCH_XLA is set; idempotent."""
    if not any(isinstance(f, DeferredTorchXlaNames) for f in sys.meta_path):
        sys.meta_path.append(DeferredTorchXlaNames())
