"""xlalab's lazy-tensor runtime: an ``xla`` device for PyTorch that records, compiles
through XLA (JAX as compiler and PJRT runtime), caches and runs.

This package never imports IPython, ipywidgets or graphviz; the debug and notebook
layers subscribe to its events (``xlalab.runtime.events``).
"""

from __future__ import annotations

import torch

from . import backend, config, debug_files, events, metrics
from . import lowering as _lowering  # noqa: F401 - fills the lowering table
from .device import install, xla_device
from .graph import sync, wait_device_ops
from .rng import manual_seed_all
from .tensor import XlaTensor

install()


def device(n: int | None = None) -> torch.device:
    """The ``n``-th xla device (``xla:0`` by default)."""
    return xla_device(n)


_step = [0]


def mark_step(wait: bool = False) -> None:
    """The step barrier: compile (once) and run every pending graph."""
    metrics.count("MarkStep")
    sync("mark_step")
    if wait or config.get("XLA_SYNC_WAIT"):
        wait_device_ops()
    target = config.get("XLA_METRICS_FILE")
    if target:
        _write_metrics(target)
    _step[0] += 1


def _write_metrics(target: str) -> None:
    """XLA_METRICS_FILE: the report after every step, appended, in torch_xla's layout."""
    import sys

    block = f"[MetricsData; step={_step[0]}]\n" + metrics.metrics_report()
    if target == "1":
        sys.stdout.write(block)
    else:
        debug_files.write("XLA_METRICS_FILE", target, block)


def devices() -> list[torch.device]:
    return [xla_device(i) for i in range(backend.device_count())]


__all__ = [
    "XlaTensor",
    "backend",
    "config",
    "device",
    "devices",
    "events",
    "install",
    "manual_seed_all",
    "mark_step",
    "metrics",
    "sync",
    "wait_device_ops",
    "xla_device",
]
