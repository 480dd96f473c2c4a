"""The collectives XLA's partitioner inserted into a compiled SPMD program, with their sizes.

Read from the compiled program's HLO text (after partitioning): each all-reduce, all-gather,
reduce-scatter, all-to-all or collective-permute, the bytes it moves per device, the aten op
whose lowering needed it (the HLO ``op_name`` metadata: xlalab names every node's scope after
its aten op, and with XLA_HLO_DEBUG=1 and XLA_IR_DEBUG=1 after the user's file and line too), and
the device groups it spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)

_INSTRUCTION = re.compile(
    r"=\s*(?P<shape>\([^()]*\)|\S+)\s+(?P<kind>" + "|".join(KINDS) + r")(?P<start>-start)?\("
)
_ARRAY = re.compile(r"\b(?P<dtype>pred|[fsuc]\d+|bf16)\[(?P<dims>[\d,]*)\]")
_OP_NAME = re.compile(r'op_name="(?P<name>[^"]*)"')
_GROUPS = re.compile(
    r"replica_groups=(?P<groups>\{[^=]*?\}\}|\[[^\]]*\]<=\[[^\]]*\][^,]*|mesh\[[^\]]*\] \{[^}]*\}|\{\})"
)
_ATEN = re.compile(r"\b(aten__\w+)")
_LOCATION = re.compile(r"\[([^\]\[]+:\d+)\]")
_BYTES = {"pred": 1, "bf16": 2, "c64": 8, "c128": 16}


@dataclass(frozen=True)
class Collective:
    """One collective of a compiled program."""

    kind: str  # all-reduce, all-gather, ...
    shape: str  # its result, as HLO writes it
    nbytes: int  # bytes of its result on each device
    op_name: str  # the scope (aten op) that needed it
    replica_groups: str  # which devices exchange data

    @property
    def aten_op(self) -> str:
        """The aten op whose lowering needed it (``aten::mm``), or "" when the scope names none."""
        m = _ATEN.search(self.op_name)
        return m.group(1).replace("__", "::") if m else ""

    @property
    def location(self) -> str:
        """``file:line`` of the user's op, when XLA_HLO_DEBUG=1 and XLA_IR_DEBUG=1 recorded it."""
        m = _LOCATION.search(self.op_name)
        return m.group(1) if m else ""

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        op = f" for {self.aten_op}" if self.aten_op else ""
        return f"{self.kind} of {self.shape} ({self.nbytes / 1024:.1f} KiB per device){op}{where}"


def _nbytes(shape: str) -> int:
    total = 0
    for m in _ARRAY.finditer(shape):
        dtype, dims = m.group("dtype"), m.group("dims")
        size = _BYTES.get(dtype) or max(1, int(dtype[1:]) // 8)
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += size * count
    return total


def collectives(hlo_text: str) -> list[Collective]:
    """The collectives in a compiled program's HLO text, in program order."""
    found: list[Collective] = []
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.search(line)
        if m is None:
            continue
        shape = m.group("shape")
        if (
            m.group("start")
            and m.group("kind") in ("all-gather", "collective-permute")
            and shape.startswith("(")
        ):
            shape = shape[1:-1].split(", ")[-1]  # an async start's tuple is (operand, result)
        name = _OP_NAME.search(line)
        groups = _GROUPS.search(line)
        found.append(
            Collective(
                kind=m.group("kind"),
                shape=shape,
                nbytes=_nbytes(shape),
                op_name=name.group("name") if name else "",
                replica_groups=groups.group("groups") if groups else "",
            )
        )
    return found


def program_collectives(program: Any) -> list[Collective]:
    """The collectives of a compiled ``xlalab.runtime.graph.Program`` (none for a one-device one)."""
    return collectives(program.executable.as_text())


RESHARDS = ("all-gather", "all-to-all")


def reshards(found: list[Collective], min_bytes: int = 1 << 20) -> list[Collective]:
    """The collectives that move a tensor between layouts (all-gather, all-to-all) and at least
    ``min_bytes`` per device: where the partitioner had to reshard because operands' shardings
    did not fit the op. Shard the op's operands compatibly (``mark_sharding``) to avoid them."""
    return [c for c in found if c.kind in RESHARDS and c.nbytes >= min_bytes]


def latest_program(graph_hash: int) -> Any:
    """The newest compiled program of the graph with ``graph_hash`` in the compile cache (None
    when it is not compiled, or was evicted). A graph has one program per input layout; the
    newest is the one its last run used."""
    from ...runtime import graph

    found = None
    for program in graph.CACHE.values():
        if program.graph_hash == graph_hash:
            found = program
    return found


def node_matches(c: Collective, op: str, frames: Any) -> bool:
    """Whether a graph node (its op name and creation frames) is one whose lowering could have
    needed collective ``c``: the same aten op, and the same ``file:line`` when the HLO names it."""
    if not c.aten_op or op != c.aten_op:
        return False
    if not c.location:
        return True
    import os

    return any(f"{os.path.basename(f.file)}:{f.line}" == c.location for f in frames[:1])
