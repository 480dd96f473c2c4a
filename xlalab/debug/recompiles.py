"""When a new compilation at one place in the user's code is a recompilation worth a warning.

A training loop compiles more than once at its barrier before it settles: step 1's graph has no
optimizer state yet, step 2 creates it (SGD's momentum buffer, Adam's moments) and so compiles a
graph with more ops. The first two compilations at a place are therefore warm-up, unless the
second has exactly the same op sequence as the first (then only a shape or a baked-in value
changed, which warm-up does not explain). Once the place has settled (two compilations, or a
graph served from the cache), every new variant is a recompilation.

The notebook (``xlalab.lab.watcher``), ``PT_XLA_DEBUG`` and ``xlalab debug-run`` all judge
recompilations by this one rule, so they agree on what is a warning. The notebook, which sees
optimizer steps as they run, also counts as warm-up the graph after the step that created the
optimizer's state where that step is not the first (a loop that accumulates gradients steps at
its second graph or later); ``debug-run`` reads dumped graphs and cannot tell that step apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["WARM_UP_COMPILES", "PlaceHistory", "in_warm_up", "is_recompile", "same_ops"]

# Step 1 (no optimizer state) and step 2 (the state is created) each compile once.
WARM_UP_COMPILES = 2


def in_warm_up(compiles: int, cache_hits: int) -> bool:
    """Whether a place that compiled ``compiles`` graphs and hit the cache ``cache_hits`` times
    is still warming up (a cache hit means the loop has come round to a graph it already ran)."""
    return cache_hits == 0 and compiles < WARM_UP_COMPILES


def same_ops(old: Sequence[str], new: Sequence[str]) -> bool:
    """Whether two graphs have the same op sequence (names only: shapes and values may differ)."""
    return len(old) == len(new) and all(a == b for a, b in zip(old, new))


def is_recompile(*, warm_up: bool, same_op_sequence: bool) -> bool:
    """Whether a compilation that replaces an earlier graph at its place deserves a warning.

    ``warm_up`` is ``in_warm_up`` of the place *before* this compilation was counted.
    """
    return same_op_sequence or not warm_up


@dataclasses.dataclass
class PlaceHistory:
    """The compilations seen at one place, judged one at a time in the order they happened."""

    compiles: int = 0
    cache_hits: int = 0
    last_ops: tuple[str, ...] | None = None
    warm_up_compiles: int = 0  # compilations after the first that warm-up explains
    recompiles: int = 0  # compilations that warn

    def cache_hit(self) -> None:
        self.cache_hits += 1

    def compiled(self, ops: Sequence[str]) -> bool:
        """Count a new compilation with op sequence ``ops``; True when it is a recompilation."""
        warm_up = in_warm_up(self.compiles, self.cache_hits)
        previous, self.last_ops = self.last_ops, tuple(ops)
        self.compiles += 1
        if previous is None:
            return False
        if is_recompile(warm_up=warm_up, same_op_sequence=same_ops(previous, ops)):
            self.recompiles += 1
            return True
        self.warm_up_compiles += 1
        return False
