"""What ``import torch_xla`` itself provides (2.x spelling), over xlalab's runtime.

:func:`xlalab.use_torch_xla_names` copies these into the ``torch_xla`` module it installs,
beside ``_XLAC``, ``core``, ``debug`` and ``runtime``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..runtime import backend
from . import xla_model as _xm


def device(index: int | None = None, n: int | None = None) -> torch.device:
    """The ``index``-th xla device (``xla:0`` by default); ``n`` is ``xm.xla_device``'s spelling."""
    return _xm.xla_device(index if index is not None else n)


def devices() -> list[torch.device]:
    """Every xla device of this process."""
    return [_xm.xla_device(i) for i in range(backend.device_count())]


def real_devices() -> list[str]:
    """The devices behind ``devices()``, as torch_xla names them (``['CPU:0', ...]``)."""
    return _xm.xla_real_devices(devices())


def device_count() -> int:
    return backend.device_count()


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    """The step barrier (``xm.mark_step``): compile once and run everything pending, then the
    step closures."""
    _xm.mark_step(wait)


def manual_seed(seed: int, device: Any = None) -> None:
    """Seed the xla device's random generator (``xm.set_rng_state``)."""
    _xm.set_rng_state(seed, device)


class _Compiled(contextlib.ContextDecorator):
    """Runs the body as one lazy step: what is pending before it is synced first, so the
    body's ops form their own graph, which runs at the end (torch_xla's lazy ``compile``)."""

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.eager: list[bool] = []

    def __enter__(self) -> _Compiled:
        from ..experimental import eager_mode, is_eager_mode

        sync()
        # Inside a compiled region the ops are traced, even in eager mode (as in torch_xla).
        self.eager.append(is_eager_mode())
        eager_mode(False)
        return self

    def __exit__(self, *exc: Any) -> None:
        from ..experimental import eager_mode

        eager = self.eager.pop()
        try:
            if exc[0] is None:
                sync()
        finally:
            eager_mode(eager)


def compile(
    f: Callable[..., Any] | None = None,
    full_graph: bool | None = False,
    name: str | None = None,
    max_different_graphs: int | None = None,
    custom_compile_options: dict[str, Any] | None = None,
) -> Any:
    """``f`` (a function or module) whose every call runs as one graph: pending work is synced
    before the call and the call's own ops are compiled and run at its end. Without ``f``, a
    context manager doing the same for its block.

    This is torch_xla's lazy-tensor ``compile``; ``full_graph``, ``max_different_graphs`` and
    ``custom_compile_options`` are accepted and not enforced (the PT_XLA_DEBUG report shows
    every graph and recompilation).
    """
    label = name or (getattr(f, "__name__", None) if f is not None else None)
    if f is None:
        return _Compiled(label)
    if isinstance(f, torch.nn.Module):
        module = f

        def call(*args: Any, **kwargs: Any) -> Any:
            with _Compiled(label):
                return module(*args, **kwargs)

        return call

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _Compiled(label):
            return f(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def step() -> Iterator[None]:
    """Marks one training step: pending work is synced on entry, and the step's graph runs at
    exit (``with torch_xla.step(): loss = ...; loss.backward(); opt.step()``)."""
    with _Compiled(None):
        yield


def launch(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    start_method: str = "spawn",
    debug_single_process: bool = False,
) -> None:
    """Run ``fn(index, *args)`` once per xla device, as replicas of one data-parallel group
    (``xmp.spawn``); ``debug_single_process`` runs a single replica."""
    from ..distributed import xla_multiprocessing as xmp

    xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None, start_method=start_method)


__all__ = [
    "compile",
    "device",
    "device_count",
    "devices",
    "launch",
    "manual_seed",
    "real_devices",
    "step",
    "sync",
]
