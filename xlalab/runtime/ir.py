"""The lazy IR: one small immutable node type.

Every recorded aten op becomes a ``Node``. Leaves are device data (a JAX array) or
scalar graph inputs (a Python float such as a learning rate, fed at run time so that
changing it never recompiles).

Two identities are computed once, when a node is created, never from tensor values:

* ``sid``, the node's exact *structural id*: equal sids mean the same op, the same static
  arguments (compared with their types: ``-1``/``-2``, ``True``/``1``/``1.0`` and
  ``0.0``/``-0.0`` all differ) and the same output shape and dtype. Ids are handed out by
  interning, whose dict compares whole keys, so two different nodes never share one. The
  compiled-graph cache is keyed by sids and operand positions, never by a Python hash.
* ``hash``, a structural hash over the whole subgraph, for people and file names (the
  "graph hash" that debug output prints).
"""

from __future__ import annotations

from typing import Any

import torch

Shape = tuple[int, ...]

# Leaf kinds. Op nodes use the aten OpOverload itself as ``op``.
DATA = "xla::device_data"
SCALAR = "xla::scalar"
ITEM = "xla::getitem"  # output i of a multi-output node
ERROR = "xla::error"  # a value whose computation failed: ``value`` holds the error


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


def _exact(value: Any) -> Any:
    """A number as a key that tells apart what ``==`` does not: 0.0 and -0.0 (in either part of a
    complex number)."""
    if type(value) is float:
        return value.hex()
    if type(value) is complex:
        return (value.real.hex(), value.imag.hex())
    return value


class Const:
    """A number baked into a graph: a wrapped integer or bool, a bool argument, a complex number,
    or a float argument that is not a graph input (``eps``).

    Equality is exact, with the type: Python says ``True == 1 == 1.0`` and ``0.0 == -0.0``,
    but each of them gives a different program (a bool fill makes a bool tensor).
    """

    __slots__ = ("_hash", "_key", "dtype", "value")

    def __init__(self, value: Any, dtype: torch.dtype | None) -> None:
        self.value = value
        self.dtype = dtype
        self._key = (type(value), _exact(value), dtype)
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return type(other) is Const and other._key == self._key

    def __repr__(self) -> str:
        return repr(self.value)


# Bool arguments are constants in templates, so that a template holding True never equals one
# holding 1 (Python's ``True == 1``), wherever templates are compared: the meta memo, the cache.
BOOLS = {True: Const(True, None), False: Const(False, None)}


def typed(a: Any) -> Any:
    """A static argument with its bools and floats as exact constants (lists become tuples)."""
    tp = type(a)
    if tp is bool:
        return BOOLS[a]
    if tp is float:
        return Const(a, None)
    if tp is list or tp is tuple:
        return tuple([typed(x) for x in a])
    return a


_STRUCTURES: dict[Any, int] = {}  # exact structural key -> its id


def structural_id(key: Any) -> int:
    """The exact id of a structure (an op with its typed static arguments and output type).

    A dict lookup compares the whole key after the hashes match, so equal ids mean equal keys.
    """
    sid = _STRUCTURES.get(key)
    if sid is None:
        sid = _STRUCTURES[key] = len(_STRUCTURES)
    return sid


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

    Nodes compare and hash by identity (no ``__eq__``/``__hash__``): graphs key dicts by them.
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
        "sid",
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
        sid: int | None = None,
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
        if hash_ is not None and sid is not None:
            self.hash = hash_  # the recorder computed both from its memo key
            self.sid = sid
        elif op is DATA or op is SCALAR:
            self.hash = hash((op, shape, dtype))
            self.sid = structural_id((op, shape, dtype))
        else:
            # id(op): OpOverload hashes in Python, and this runs for every recorded op.
            self.sid = structural_id((id(op), arg, shape, dtype, outs))
            self.hash = hash((self.sid, tuple([s.hash for s in src])))

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


# Leaf identities by (kind, shape, dtype): a sync makes a data leaf per tensor it computes and
# recording a scalar leaf per float argument, so these are built without Node.__init__.
_LEAF_IDS: dict[tuple[str, Shape, torch.dtype], tuple[int, int]] = {}  # -> (hash, sid)


def _leaf_ids(op: str, shape: Shape, dtype: torch.dtype) -> tuple[int, int]:
    ids = _LEAF_IDS.get((op, shape, dtype))
    if ids is None:
        ids = _LEAF_IDS[(op, shape, dtype)] = (hash((op, shape, dtype)), structural_id((op, shape, dtype)))
    return ids


def _leaf(op: str, value: Any, shape: Shape, dtype: torch.dtype, device: int, ids: tuple[int, int]) -> Node:
    n = Node.__new__(Node)
    n.op = op
    n.src = ()
    n.arg = None
    n.shape = shape
    n.dtype = dtype
    n.device = device
    n.value = value
    n.outs = None
    n.frames = None
    n.hash, n.sid = ids
    return n


def data(array: Any, shape: Shape, dtype: torch.dtype, device: int) -> Node:
    """A device-data leaf."""
    return _leaf(DATA, array, shape, dtype, device, _leaf_ids(DATA, shape, dtype))


def error(exc: BaseException, shape: Shape | None, dtype: torch.dtype | None, device: int) -> Node:
    """The value of a tensor whose sync failed: reading it raises ``exc`` again."""
    return Node(ERROR, (), None, shape, dtype, device, value=exc)


def scalar(value: float, device: int, dtype: torch.dtype = torch.float64) -> Node:
    """A scalar graph input (fed at run time); one per float argument recorded, so its identity
    comes from a dict keyed by the dtype alone."""
    ids = _SCALAR_IDS.get(dtype)
    if ids is None:
        ids = _SCALAR_IDS[dtype] = _leaf_ids(SCALAR, (), dtype)
    return _leaf(SCALAR, value, (), dtype, device, ids)


_SCALAR_IDS: dict[torch.dtype, tuple[int, int]] = {}

# ``arg`` of a scalar input that stands for a 0-d CPU tensor: unlike a Python number it takes
# part in type promotion with its own dtype (``int32 * tensor(0.1, dtype=float64)`` computes in
# float64, ``int32 * 0.1`` in float32).
ZERO_DIM = "0-d tensor"


def zero_dim_scalar(value: float, device: int, dtype: torch.dtype) -> Node:
    """A scalar graph input standing for a 0-d CPU tensor of ``dtype`` (see ``ZERO_DIM``)."""
    ids = _ZERO_DIM_IDS.get(dtype)
    if ids is None:
        ids = _ZERO_DIM_IDS[dtype] = _leaf_ids(SCALAR + "[0-d]", (), dtype)
    n = _leaf(SCALAR, value, (), dtype, device, ids)
    n.arg = ZERO_DIM
    return n


_ZERO_DIM_IDS: dict[torch.dtype, tuple[int, int]] = {}


def is_float_scalar(n: Node) -> bool:
    """A float scalar input: a Python number (float64) or a 0-d floating CPU tensor."""
    return n.op is SCALAR and (n.arg is ZERO_DIM or n.dtype is torch.float64)


def item(multi: Node, i: int) -> Node:
    shape, dtype = multi.outs[i]  # type: ignore[index]
    return Node(ITEM, (multi,), i, shape, dtype, multi.device)
