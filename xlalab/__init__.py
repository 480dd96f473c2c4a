"""xlalab: see what a lazy-tensor XLA program does.

``import xlalab`` registers the ``xla`` device with torch. The runtime lives in
``xlalab.runtime``; torch_xla-shaped modules in ``xlalab.core`` and ``xlalab.debug``.
"""

from __future__ import annotations

from .runtime import device, devices, mark_step, sync, wait_device_ops

__version__ = "0.1.0"
__all__ = ["device", "devices", "mark_step", "sync", "wait_device_ops"]
