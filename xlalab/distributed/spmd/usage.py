"""What SPMD programs cost while they run: the collectives each run carries and their share of
the bytes the program moves, and where the live data sits (for the lab's panel).

Per program (once, at its first run): the collectives in its compiled HLO and XLA's cost
analysis of the bytes it accesses on each device. Per run: a count. Nothing here times or
profiles a run: the share is of bytes, the part of a run's memory traffic that is collectives'.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .collectives import program_collectives
from .debugging import device_memory

KEEP_PROGRAMS = 1024  # programs whose cost is kept (a few hundred bytes each)


@dataclass
class ProgramCost:
    """One compiled SPMD program's per-run figures, on each device."""

    collectives: dict[str, tuple[int, int]]  # kind -> (how many, bytes of their results)
    bytes_accessed: float  # XLA's cost analysis: bytes the program reads and writes

    @property
    def collective_bytes(self) -> int:
        return sum(b for _, b in self.collectives.values())


def program_cost(program: Any) -> ProgramCost:
    kinds: dict[str, tuple[int, int]] = {}
    for c in program_collectives(program):
        n, b = kinds.get(c.kind, (0, 0))
        kinds[c.kind] = (n + 1, b + c.nbytes)
    try:
        analysis = program.executable.cost_analysis()
        if isinstance(analysis, list):  # older JAX: one dict per partition
            analysis = analysis[0] if analysis else {}
        accessed = float(analysis.get("bytes accessed", 0.0))
    except Exception:  # a backend without cost analysis
        accessed = 0.0
    return ProgramCost(kinds, accessed)


@dataclass
class Usage:
    """Runs of SPMD programs since the last clear, and each program's cost (by graph hash: the
    newest program of a graph is the one that runs)."""

    costs: dict[int, ProgramCost] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def program_compiled(self, graph_hash: int, program: Any) -> None:
        cost = program_cost(program)
        with self._lock:
            self.costs.pop(graph_hash, None)
            self.costs[graph_hash] = cost
            while len(self.costs) > KEEP_PROGRAMS:  # the oldest programs' runs stop counting
                self.runs.pop(next(iter(self.costs)), None)
                del self.costs[next(iter(self.costs))]

    def ran(self, graph_hash: int) -> None:
        with self._lock:
            self.runs[graph_hash] = self.runs.get(graph_hash, 0) + 1

    def clear(self) -> None:
        with self._lock:
            self.runs.clear()

    def summary(self) -> dict[str, Any]:
        """The panel's SPMD figures: live bytes per device, and over the runs of programs whose
        cost is known, the collectives they carried and their share of the bytes moved."""
        with self._lock:
            known = [(self.costs[h], n) for h, n in self.runs.items() if h in self.costs]
        by_kind: dict[str, list[int]] = {}
        accessed = 0.0
        for cost, n in known:
            accessed += cost.bytes_accessed * n
            for kind, (count, nbytes) in cost.collectives.items():
                entry = by_kind.setdefault(kind, [0, 0])
                entry[0] += count * n
                entry[1] += nbytes * n
        moved = sum(b for _, b in by_kind.values())
        return {
            "devices": sorted(device_memory().items(), key=lambda kv: int(kv[0].split(":")[1])),
            "runs": sum(n for _, n in known),
            "collectives": {kind: {"count": c, "bytes": b} for kind, (c, b) in sorted(by_kind.items())},
            "collective_bytes": moved,
            "bytes_accessed": accessed,
            "share": moved / accessed if accessed > 0 else None,
        }


USAGE = Usage()  # the process's figures (the lab fills them from execution events)
