"""The runtime's event bus: what the debug and notebook layers subscribe to.

The runtime publishes an event when it compiles, executes, syncs, falls back to the
CPU or transfers data. Publishing costs one truthiness check when nobody listens, so
the hot path pays nothing for the debugger it does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .frames import Frame


@dataclass(frozen=True)
class Event:
    kind: str = field(init=False, default="event")
    frames: tuple[Frame, ...] = ()


@dataclass(frozen=True)
class CompileEvent(Event):
    """A graph was compiled (``cached`` False) or found in the compile cache."""

    kind: str = field(init=False, default="compile")
    graph_hash: int = 0
    num_nodes: int = 0
    seconds: float = 0.0
    cached: bool = False
    device: str = ""
    reason: str = ""
    graph: Any = None  # the linearized graph (xlalab.runtime.graph.Graph): nodes, roots, key
    # What the graph is of when it is not pending lazy work: a compiled function's graph
    # ("fwd_0, forward"), so that its programs for other shapes compare with one another.
    source: str = ""
    # The compiled program (xlalab.runtime.graph.Program) that this compile made or the cache
    # held: what listeners read the partitioned HLO from (SPMD collectives). None when unknown.
    program: Any = None


@dataclass(frozen=True)
class CompileStartEvent(Event):
    """A graph missed the compile cache and XLA is compiling it now (a CompileEvent follows).

    Published before the compile so a live view can show "compiling..." while a long
    compilation blocks the thread that asked for it.
    """

    kind: str = field(init=False, default="compile_start")
    graph_hash: int = 0
    num_nodes: int = 0
    device: str = ""
    reason: str = ""


@dataclass(frozen=True)
class CompileErrorEvent(Event):
    """Lowering or compiling a graph failed (the error is raised to the user right after)."""

    kind: str = field(init=False, default="compile_error")
    graph_hash: int = 0
    num_nodes: int = 0
    seconds: float = 0.0
    device: str = ""
    error: str = ""


@dataclass(frozen=True)
class ExecuteEvent(Event):
    kind: str = field(init=False, default="execute")
    graph_hash: int = 0
    seconds: float = 0.0
    device: str = ""


@dataclass(frozen=True)
class SyncEvent(Event):
    """A barrier gathered pending tensors; ``reason`` is mark_step, item, cpu, print..."""

    kind: str = field(init=False, default="sync")
    reason: str = ""
    num_tensors: int = 0
    graph_hash: int = 0
    graph: Any = None  # the linearized graph that ran (xlalab.runtime.graph.Graph)
    device: str = ""
    # Where a library's code made the sync (transformers' generate reading a flag), when it did:
    # ``frames`` holds only user lines, which then end at the call into the library.
    inside: Frame | None = None


# FallbackEvent.reason: the plain case, and the masked assignment the lab explains further.
NO_LOWERING = "no XLA lowering"
MASKED_VALUES = "one value per element a boolean mask selects: how many depends on the mask's values"


@dataclass(frozen=True)
class FallbackEvent(Event):
    kind: str = field(init=False, default="fallback")
    op: str = ""
    seconds: float = 0.0
    # The library line that called the op, when a library did (as SyncEvent.inside).
    inside: Frame | None = None
    # Why it ran on the CPU, in words; data_dependent: its output shape depends on its inputs'
    # values (a boolean mask's), so XLA cannot compile it.
    reason: str = ""
    data_dependent: bool = False
    backward: bool = False  # it ran inside backward(), for a forward op it differentiates


@dataclass(frozen=True)
class TransferEvent(Event):
    kind: str = field(init=False, default="transfer")
    direction: str = ""  # "to_device" or "from_device"
    nbytes: int = 0
    seconds: float = 0.0
    # to_device: the device array the upload made, which a graph's data leaf holds as its value
    # (so a listener can tell which upload a graph reads; keep it by weak reference only).
    data: Any = None


@dataclass(frozen=True)
class RegionEvent(Event):
    """A user's profiler region (``torch_xla.debug.profiler``: ``Trace``, ``StepTrace``,
    ``trace_me``) started (``phase`` "start") or ended ("end", ``seconds`` after its start).

    ``region`` pairs the two events of one region; ``depth`` is how many regions of this thread
    were already open around it; ``step`` is a ``StepTrace``'s ``step_num`` (None otherwise).
    """

    kind: str = field(init=False, default="region")
    name: str = ""
    phase: str = ""  # "start" or "end"
    region: int = 0
    depth: int = 0
    step: int | None = None
    seconds: float = 0.0


Subscriber = Callable[[Event], None]
_subscribers: list[Subscriber] = []


def subscribe(fn: Subscriber) -> Callable[[], None]:
    """Call ``fn(event)`` for every runtime event; returns a function that unsubscribes."""
    _subscribers.append(fn)

    def unsubscribe() -> None:
        if fn in _subscribers:
            _subscribers.remove(fn)

    return unsubscribe


def listening() -> bool:
    return bool(_subscribers)


def publish(event: Event) -> None:
    for fn in list(_subscribers):
        fn(event)
