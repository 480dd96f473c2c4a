"""``torch_xla.debug.profiler`` on JAX's profiler.

The traces are JAX's (``jax.profiler``): an XPlane protobuf that TensorBoard's profile plugin
and XProf open, and a Chrome/Perfetto JSON (``perfetto_trace.json.gz``, open it at
ui.perfetto.dev) beside it, under ``<log_dir>/plugins/profile/<run>/``. They hold the user's
regions (:class:`Trace`, :class:`StepTrace`, :func:`trace_me`, as ``TraceAnnotation``) and
XLA's side: compiles, the HLO passes, each execution of a compiled graph and its fusions.

::

    import torch_xla.debug.profiler as xp
    xp.start_trace("/tmp/profile")
    for step in range(3):
        with xp.StepTrace("train_step", step_num=step):   # marks the step at its end
            with xp.Trace("forward"):
                loss = model(x).sum()
            loss.backward(); opt.step()
    xp.stop_trace()

``start_server(port)`` runs JAX's profiler server, which TensorBoard's "capture profile"
(and :func:`trace` from another process with the tensorboard-plugin-profile client) talk to.

Each region is also published on the runtime's event bus when it starts and when it ends
(``events.RegionEvent``), whether or not a trace is being taken: the lab's timeline draws the
regions beside the compiles and executions, as spans with their names.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from ..runtime import events
from ..runtime.frames import Frame, user_frames

_marked = threading.local()


def set_tracer_marked_step(value: bool) -> None:
    _marked.value = value


def get_tracer_marked_step() -> bool:
    return bool(getattr(_marked, "value", False))


def _options(host_tracer_level: int = 3, device_tracer_level: int = 1, python_tracer_level: int = 0) -> Any:
    options = jax.profiler.ProfileOptions()
    # Level 3 is what records XLA's executions on the CPU platform (ThunkExecutor, fusions).
    options.host_tracer_level = host_tracer_level
    options.device_tracer_level = device_tracer_level
    options.python_tracer_level = python_tracer_level
    return options


_SERVER: list[Any] = []


def start_server(port: int, only_on_master: bool = True) -> Any:
    """Start JAX's profiler server on ``port`` (one per process); returns it."""
    from ..core import xla_model as xm

    if only_on_master and not xm.is_master_ordinal(local=False):
        return None
    if not _SERVER:
        _SERVER.append(jax.profiler.start_server(port))
        _SERVER.append(port)
    elif _SERVER[1] != port:
        raise RuntimeError(f"the profiler server already runs on port {_SERVER[1]}; one per process")
    return _SERVER[0]


_tracing = threading.Lock()
_active: list[str] = []


def start_trace(log_dir: str | os.PathLike[str]) -> None:
    """Start tracing this process into ``log_dir`` until :func:`stop_trace`."""
    if _active:
        raise RuntimeError(f"a trace into {_active[0]} is already running; call stop_trace() first")
    jax.profiler.start_trace(os.fspath(log_dir), create_perfetto_trace=True, profiler_options=_options())
    _active.append(os.fspath(log_dir))


def stop_trace() -> None:
    """Stop the trace started by :func:`start_trace` and write its files."""
    if not _active:
        raise RuntimeError("no trace is running; start one with start_trace(log_dir)")
    try:
        jax.profiler.stop_trace()
    finally:
        _active.clear()


def trace(
    service_addr: str,
    logdir: str,
    duration_ms: int = 1000,
    num_tracing_attempts: int = 3,
    host_tracer_level: int = 2,
    device_tracer_level: int = 1,
    delay_ms: int = 0,
    timeout_s: int = 120,
    interactive: bool = False,
    **kwargs: Any,
) -> None:
    """Capture ``duration_ms`` of a profiler server's activity into ``logdir``.

    The server must be this process's (:func:`start_server`, ``localhost:<port>``): the
    capture is taken in process, levels as given. Capturing another process needs XProf's
    client (``tensorboard-plugin-profile``); TensorBoard's "Capture profile" button does that.
    """
    host, _, port = service_addr.rpartition(":")
    own = _SERVER[1] if _SERVER else None
    if own is None or str(own) != port or host not in ("localhost", "127.0.0.1", "[::1]", ""):
        raise RuntimeError(
            f"trace({service_addr!r}): xlalab captures from this process's own profiler server "
            f"(start_server(port), then trace('localhost:<port>', ...)); "
            f"{'no server runs here' if own is None else f'it runs on port {own}'}. To capture another "
            "process, use TensorBoard's 'Capture profile' (tensorboard-plugin-profile) on its address."
        )
    if delay_ms:
        time.sleep(delay_ms / 1000)
    with _tracing:
        if _active:
            raise RuntimeError(f"a trace into {_active[0]} is already running")
        options = _options(max(host_tracer_level, 3), device_tracer_level)
        jax.profiler.start_trace(logdir, create_perfetto_trace=True, profiler_options=options)
        _active.append(logdir)
        try:
            time.sleep(duration_ms / 1000)
        finally:
            _active.clear()
            jax.profiler.stop_trace()


def trace_detached(*args: Any, **kwargs: Any) -> threading.Thread:
    """:func:`trace` in a background thread (returned, started), so the program goes on meanwhile."""
    thread = threading.Thread(
        target=trace, args=args, kwargs=kwargs, name="xlalab profiler capture", daemon=True
    )
    thread.start()
    return thread


_region_ids = itertools.count(1)
_nesting = threading.local()  # .depth: the regions open on this thread


class _OpenRegion:
    """A region between its start and its end events."""

    __slots__ = ("depth", "frames", "name", "region", "started", "step")

    def __init__(self, name: str, step: int | None) -> None:
        self.name = name
        self.step = step
        self.region = next(_region_ids)
        self.depth = getattr(_nesting, "depth", 0)
        _nesting.depth = self.depth + 1
        self.frames: tuple[Frame, ...] = user_frames() if events.listening() else ()
        self.started = time.perf_counter()
        self._publish("start", 0.0)

    def close(self) -> None:
        _nesting.depth = self.depth
        self._publish("end", time.perf_counter() - self.started)

    def _publish(self, phase: str, seconds: float) -> None:
        if events.listening():
            events.publish(
                events.RegionEvent(
                    name=self.name, phase=phase, region=self.region, depth=self.depth, step=self.step,
                    seconds=seconds, frames=self.frames,
                )
            )  # fmt: skip


class Trace(jax.profiler.TraceAnnotation):
    """A named region on the trace's timeline (``with xp.Trace("forward"):``)."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self._open: list[_OpenRegion] = []
        super().__init__(name, **kwargs)

    def __enter__(self) -> Trace:
        self._open.append(_OpenRegion(self.name, None))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._open.pop().close()


class StepTrace(jax.profiler.StepTraceAnnotation):
    """A training step on the timeline (TensorBoard's step view reads ``step_num``). At its end
    the step barrier runs (``xm.mark_step``) unless the body already ran one."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        step = kwargs.get("step_num")
        self._step = step if isinstance(step, int) else None
        self._open: list[_OpenRegion] = []
        super().__init__(name, **kwargs)

    def __enter__(self) -> StepTrace:
        set_tracer_marked_step(False)
        self._open.append(_OpenRegion(self.name, self._step))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        from ..core import xla_model as xm

        try:
            if exc[0] is None and not get_tracer_marked_step():
                xm.mark_step()
        finally:
            try:
                super().__exit__(*exc)
            finally:
                self._open.pop().close()


def trace_me(scope: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: every call of the function is a :class:`Trace` region named ``scope``."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Trace(scope):
                return fn(*args, **kwargs)

        return wrapper

    return decorator


__all__ = [
    "StepTrace",
    "Trace",
    "get_tracer_marked_step",
    "set_tracer_marked_step",
    "start_server",
    "start_trace",
    "stop_trace",
    "trace",
    "trace_detached",
    "trace_me",
]
