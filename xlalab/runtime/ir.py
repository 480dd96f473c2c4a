"""The lazy IR: one small immutable node type.

Every recorded aten op becomes a ``Node``. Leaves are device data (a JAX array) or
scalar graph inputs (a Python float such as a learning rate, fed at run time so that
changing it never recompiles). A node's structural ``hash`` is computed once, when it
is created, from its op, static arguments and its operands' hashes - never from tensor
values - so the sync never re-hashes the graph.
"""

from __future__ import annotations

from typing import Any

import torch

Shape = tuple[int, ...]

# Leaf kinds. Op nodes use the aten OpOverload itself as ``op``.
DATA = "xla::device_data"
SCALAR = "xla::scalar"
ITEM = "xla::getitem"  # output i of a multi-output node


class Slot:
    """Marks where operand ``i`` sits inside a node's static-argument template.

    Slots are interned (one object per index) and hash by identity, which Python does in C:
    templates are hashed for every recorded op.
    """

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i

    def __repr__(self) -> str:
        return f"%{self.i}"


SLOTS = [Slot(i) for i in range(256)]


def slot(i: int) -> Slot:
    while i >= len(SLOTS):
        SLOTS.append(Slot(len(SLOTS)))
    return SLOTS[i]


class Const:
    """An integer or bool baked into a graph (from a wrapped Python number)."""

    __slots__ = ("_hash", "dtype", "value")

    def __init__(self, value: Any, dtype: torch.dtype) -> None:
        self.value = value
        self.dtype = dtype
        self._hash = hash(("xla::const", value, dtype))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and other.value == self.value and other.dtype == self.dtype

    def __repr__(self) -> str:
        return repr(self.value)


class Node:
    """One value in the pending graph.

    ``op``       the aten OpOverload, or DATA / SCALAR / ITEM
    ``src``      operand nodes
    ``arg``      static arguments: ``(args_template, kwargs_template)`` with operands
                 replaced by ``Slot``s; for ITEM the output index
    ``shape``    output shape (None for a multi-output node, see ``outs``)
    ``dtype``    output torch dtype
    ``value``    the JAX array (DATA) or Python number (SCALAR)
    ``outs``     per-output (shape, dtype) of a multi-output node
    ``frames``   where user code created it (only with IR debug on)
    """

    __slots__ = (
        "__weakref__",
        "arg",
        "device",
        "dtype",
        "frames",
        "hash",
        "op",
        "outs",
        "shape",
        "src",
        "value",
    )

    def __init__(
        self,
        op: Any,
        src: tuple[Node, ...],
        arg: Any,
        shape: Shape | None,
        dtype: torch.dtype | None,
        device: int,
        value: Any = None,
        outs: tuple[tuple[Shape, torch.dtype], ...] | None = None,
        frames: Any = None,
        hash_: int | None = None,
    ) -> None:
        self.op = op
        self.src = src
        self.arg = arg
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.value = value
        self.outs = outs
        self.frames = frames
        if hash_ is not None:
            self.hash = hash_  # the recorder computed it from its memo key
        elif op is DATA or op is SCALAR:
            self.hash = hash((op, shape, dtype))
        else:
            # id(op): OpOverload hashes in Python, and this runs for every recorded op.
            self.hash = hash((id(op), arg, shape, dtype, tuple([s.hash for s in src])))

    @property
    def is_leaf(self) -> bool:
        return self.op is DATA or self.op is SCALAR

    @property
    def name(self) -> str:
        """torch_xla-style op name: ``aten::add``, ``xla::device_data``."""
        op = self.op
        if isinstance(op, str):
            return op
        return op._schema.name

    def __repr__(self) -> str:
        return f"Node({self.name}, shape={self.shape}, dtype={self.dtype})"


def data(array: Any, shape: Shape, dtype: torch.dtype, device: int) -> Node:
    return Node(DATA, (), None, shape, dtype, device, value=array)


_SCALAR_HASH = {
    torch.float64: hash((SCALAR, (), torch.float64)),
    torch.int64: hash((SCALAR, (), torch.int64)),
}


def scalar(value: float, device: int, dtype: torch.dtype = torch.float64) -> Node:
    """A scalar graph input (fed at run time). Built without __init__: one per float argument."""
    n = Node.__new__(Node)
    n.op = SCALAR
    n.src = ()
    n.arg = None
    n.shape = ()
    n.dtype = dtype
    n.device = device
    n.value = value
    n.outs = None
    n.frames = None
    n.hash = _SCALAR_HASH[dtype]
    return n


def item(multi: Node, i: int) -> Node:
    shape, dtype = multi.outs[i]  # type: ignore[index]
    return Node(ITEM, (multi,), i, shape, dtype, multi.device)
