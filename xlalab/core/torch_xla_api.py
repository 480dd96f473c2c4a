"""What ``import torch_xla`` itself provides (2.x spelling), over xlalab's runtime.

:func:`xlalab.use_torch_xla_names` copies these into the ``torch_xla`` module it installs,
beside ``_XLAC``, ``core``, ``debug`` and ``runtime``.
"""

from __future__ import annotations

import torch

from ..runtime import backend
from . import xla_model as _xm


def device(index: int | None = None, n: int | None = None) -> torch.device:
    """The ``index``-th xla device (``xla:0`` by default); ``n`` is ``xm.xla_device``'s spelling."""
    return _xm.xla_device(index if index is not None else n)


def devices() -> list[torch.device]:
    """Every xla device of this process."""
    return [_xm.xla_device(i) for i in range(backend.device_count())]


def device_count() -> int:
    return backend.device_count()


def sync(wait: bool = False) -> None:
    """The step barrier (``xm.mark_step``): compile once and run everything pending."""
    _xm.mark_step(wait)


__all__ = ["device", "device_count", "devices", "sync"]
