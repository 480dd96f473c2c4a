"""The seeds' classic mistake: a training loop that never reaches its step barrier.

Without ``xm.mark_step()`` (or ``xm.optimizer_step``) nothing runs: every iteration adds its
forward, backward and optimizer update to one pending graph, which grows until something
reads a value, and then compiles and runs all of it at once (and again, larger, next time).

The runtime cannot see a loop, but torch tells anyone who asks when an optimizer steps
(``torch.optim``'s global step hook), and the runtime's events say when a step barrier ran.
Two optimizer steps with no barrier in between, each leaving work pending, is the mistake,
exactly (a compiled optimizer step runs its program and leaves nothing); the user's line that
called ``optimizer.step()`` and the size of the pending graph say where and how bad.
Watching costs one hook call per optimizer step and never touches a tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xlalab.runtime import events, ir
from xlalab.runtime.frames import Frame, user_frames

__all__ = ["PENDING_LIMIT", "BarrierWatch", "pending_graph", "pending_nodes"]

#: Optimizer steps without a barrier in between before the watch calls it a missing barrier.
MIN_STEPS = 2
#: A pending graph this large, left by code that ran no barrier, is growing without bound:
#: a training step of a small model is a few hundred to a few thousand nodes.
PENDING_LIMIT = 5000


@dataclass
class BarrierWatch:
    """Counts optimizer steps since the last step barrier, with where they were called."""

    steps: int = 0  # optimizer steps since the last barrier
    frames: tuple[Frame, ...] = ()  # the user frames of the latest optimizer.step() call
    first_frames: tuple[Frame, ...] = ()
    said: int = 0  # ``steps`` when a missing barrier was last reported (0: not reported)
    # An optimizer created state (momentum, Adam's moments) since the last barrier: its first step,
    # whose graph the next one at the same place replaces as warm-up, wherever it falls.
    created_state: bool = False
    _state_sizes: dict[int, int] = field(default_factory=dict)  # optimizer id -> len(state) before its step
    _handles: list[Any] = field(default_factory=list)
    _unsubscribe: Callable[[], None] | None = None

    def start(self, *, listen: bool = True) -> None:
        """Watch optimizer steps; with ``listen=False`` the caller, which already listens to the
        runtime's events, calls ``barrier()`` at every step barrier itself."""
        if self._handles:
            return
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_pre_hook(self._stepping))
        self._handles.append(register_optimizer_step_post_hook(self._stepped))
        if listen:
            self._unsubscribe = events.subscribe(self._on_event)

    def stop(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _stepping(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._state_sizes[id(optimizer)] = len(getattr(optimizer, "state", ()))

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        before = self._state_sizes.pop(id(optimizer), None)
        if not _on_xla(optimizer):
            return
        if before is not None and len(getattr(optimizer, "state", ())) > before:
            self.created_state = True
        if not _left_pending(optimizer):
            # The step's updates are on the device already: it ran (a compiled optimizer step,
            # eager debug mode), as a barrier would have made it. Nothing grows.
            self.barrier()
            return
        self.steps += 1
        self.frames = user_frames()
        if self.steps == 1:
            self.first_frames = self.frames

    def _on_event(self, ev: events.Event) -> None:
        if isinstance(ev, events.SyncEvent) and ev.reason == "mark_step":
            self.barrier()

    def barrier(self) -> None:
        self.created_state = False
        self.steps = self.said = 0
        self.frames = self.first_frames = ()

    @property
    def missing(self) -> bool:
        """Whether optimizer steps ran with no barrier between them."""
        return self.steps >= MIN_STEPS


def _left_pending(optimizer: Any) -> bool:
    """Whether the optimizer's step left its parameters' new values pending (lazy mode)."""
    for group in getattr(optimizer, "param_groups", ()):
        for p in group.get("params", ()):
            st = getattr(p, "_st", None)
            if st is not None and st.node.op is not ir.DATA:
                return True
    return False


def _on_xla(optimizer: Any) -> bool:
    for group in getattr(optimizer, "param_groups", ()):
        for p in group.get("params", ()):
            return getattr(getattr(p, "device", None), "type", None) == "xla"
    return False


def pending_graph() -> Any:
    """The graph of every live pending tensor (what the next barrier would compile), or None.

    Only walks the IR: nothing is compiled, run or transferred. A value made from one whose
    computation failed is counted like any other (reading it raises; looking at it must not).
    """
    from xlalab.runtime import graph as graph_mod
    from xlalab.runtime import tensor as tensor_mod

    storages = tensor_mod.pending_storages()
    if not storages:
        return None
    return graph_mod.linearize([st.node for st in storages], failed_ok=True)


def pending_nodes() -> int:
    graph = pending_graph()
    return 0 if graph is None else len(graph.nodes)


def explain(steps: int, nodes: int, barrier: str = "xm.mark_step()") -> str:
    """The finding's message, in plain words."""
    per = f" (about {nodes // steps} per step)" if steps and nodes else ""
    return (
        f"optimizer.step() ran {steps} times with no {barrier} in between: nothing ran, and the "
        f"pending graph has grown to {nodes} nodes{per}"
    )


ADVICE = (
    "end every step with xm.mark_step() (or use xm.optimizer_step(opt)): each step then compiles "
    "once and runs; without it the graph grows until a value is read, and compiles all of it"
)
