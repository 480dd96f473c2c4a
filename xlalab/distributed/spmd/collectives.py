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
_BYTES = {"pred": 1, "bf16": 2, "c64": 8, "c128": 16}


@dataclass(frozen=True)
class Collective:
    """One collective of a compiled program."""

    kind: str  # all-reduce, all-gather, ...
    shape: str  # its result, as HLO writes it
    nbytes: int  # bytes of its result on each device
    op_name: str  # the scope (aten op) that needed it
    replica_groups: str  # which devices exchange data


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
