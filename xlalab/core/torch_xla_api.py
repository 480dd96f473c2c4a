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

from ..runtime import backend, events
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


class GraphBreakError(RuntimeError):
    """A ``torch_xla.compile(full_graph=True)`` region executed before its end, or a compiled
    function traced more different graphs than ``max_different_graphs``."""


class _Compiled(contextlib.ContextDecorator):
    """Runs the body as one lazy step: what is pending before it is synced first, so the
    body's ops form their own graph, which runs at the end (torch_xla's lazy ``compile``).

    ``full_graph``: any execution inside the body (a ``.item()``, a print, a CPU fallback) is a
    :class:`GraphBreakError` at the end of the region, naming where each one happened.
    ``max_different_graphs``: the region's graph may take at most that many different forms
    over the calls sharing ``graphs`` (one compiled function's calls).
    """

    def __init__(
        self,
        name: str | None,
        full_graph: bool = False,
        max_graphs: int | None = None,
        graphs: set[int] | None = None,
    ) -> None:
        self.name = name
        self.full_graph = bool(full_graph)
        self.max_graphs = max_graphs
        self.graphs = graphs if graphs is not None else set()
        self.eager: list[bool] = []
        self.breaks: list[events.SyncEvent] = []
        self._unsubscribe: Callable[[], None] | None = None

    def _on_event(self, event: events.Event) -> None:
        if isinstance(event, events.SyncEvent) and event.num_tensors:
            self.breaks.append(event)

    def __enter__(self) -> _Compiled:
        from ..experimental import eager_mode, is_eager_mode

        sync()
        # Inside a compiled region the ops are traced, even in eager mode (as in torch_xla).
        self.eager.append(is_eager_mode())
        eager_mode(False)
        self.breaks = []
        if self.full_graph:
            self._unsubscribe = events.subscribe(self._on_event)
        return self

    def __exit__(self, *exc: Any) -> None:
        from ..experimental import eager_mode

        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        eager = self.eager.pop()
        try:
            if exc[0] is None:
                self._final_sync()
        finally:
            eager_mode(eager)
        if exc[0] is None and self.breaks:
            where = "; ".join(
                f"{b.reason} at {b.frames[0] if b.frames else 'an unknown line'}" for b in self.breaks
            )
            raise GraphBreakError(
                f"torch_xla.compile(full_graph=True){self._label()}: the body executed {len(self.breaks)} "
                f"graph(s) before its end ({where}). Keep values on the device inside the region: no "
                ".item(), print or .cpu() of a tensor, and no op that falls back to the CPU."
            )

    def _final_sync(self) -> None:
        if self.max_graphs is None:
            sync()
            return
        hashes: list[int] = []

        def on_compile(event: events.Event) -> None:
            if isinstance(event, events.CompileEvent):
                hashes.append(event.graph_hash)

        unsubscribe = events.subscribe(on_compile)
        try:
            sync()
        finally:
            unsubscribe()
        self.graphs.update(hashes)
        if len(self.graphs) > self.max_graphs:
            raise GraphBreakError(
                f"torch_xla.compile(max_different_graphs={self.max_graphs}){self._label()}: the function "
                f"has traced {len(self.graphs)} different graphs. Its inputs' shapes or dtypes, or a Python "
                "value baked into the graph, change between calls; PT_XLA_DEBUG=1 says what changed."
            )

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:  # type: ignore[override]
        # ``@torch_xla.compile(...)`` on a function: the region is named after it.
        if self.name is None:
            self.name = getattr(func, "__name__", None)
        return super().__call__(func)

    def _label(self) -> str:
        return f" of {self.name}" if self.name else ""


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

    This is torch_xla's lazy-tensor ``compile``. ``full_graph=True`` makes an execution inside
    the body an error (:class:`GraphBreakError`, raised at the end of the call, naming each
    line); ``max_different_graphs`` bounds how many different graphs the calls may trace.
    ``custom_compile_options`` is accepted and not applied (XLA's options are JAX's).
    """
    label = name or (getattr(f, "__name__", None) if f is not None else None)
    graphs: set[int] = set()

    def region() -> _Compiled:
        return _Compiled(label, bool(full_graph), max_different_graphs, graphs)

    if f is None:
        return region()
    if isinstance(f, torch.nn.Module):
        module = f

        def call(*args: Any, **kwargs: Any) -> Any:
            with region():
                return module(*args, **kwargs)

        return call

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with region():
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
    "GraphBreakError",
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
