"""What differs between two graphs compiled at one place in the user's code.

A recompilation is only useful to report if it says *what changed*: an input's shape, the
ops themselves, an op's output shape, or a Python number baked into the graph. Both the
PT_XLA_DEBUG analysis and the notebook's per-cell warnings ask this module, so they always
give the same answer.

Signatures keep no Node (and so no device array) alive: they are made of strings, ints and
frames only, and can be kept for as long as the session lasts.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xlalab.runtime.dtypes import short_name
from xlalab.runtime.frames import Frame

_SHORT_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "s64": 8, "s32": 4, "s16": 2,
                "s8": 1, "u8": 1, "pred": 1, "c64": 8, "c128": 16}  # fmt: skip


def type_str(shape: Any, dtype: Any) -> str:
    """torch_xla's short type notation without layout: ``f32[64,1,28,28]``."""
    dims = "" if shape is None else ",".join(str(d) for d in shape)
    return f"{short_name(dtype)}[{dims}]"


def type_bytes(ty: str) -> int:
    """Bytes of a ``f32[2,3]`` type string (to match an input with the transfer that sent it)."""
    name, _, dims = ty.partition("[")
    n = 1
    for d in dims.rstrip("]").split(","):
        if d:
            n *= int(d)
    return n * _SHORT_BYTES.get(name, 4)


@dataclass(frozen=True)
class NodeSig:
    """A node's identity for diffing: op name, type, structural hash (which covers baked-in
    static arguments), whether it is an input, where user code created it (IR debug), the
    static arguments it baked into the graph (``(("end", "3"),)``) and whether the graph
    returns it (a live tensor holds it); ``factory``: an op that reads no operand (``arange``,
    the empty tensor ``randn(n, 8, device=dev)`` fills), whose shape is Python's sizes."""

    name: str
    type: str
    hash: int
    leaf: bool
    made: Frame | None
    consts: tuple[tuple[str, str], ...] = ()
    output: bool = False
    factory: bool = False

    def same_node(self, other: NodeSig) -> bool:
        """Equal but for being an output."""
        return self == dataclasses.replace(other, output=self.output)


def node_type(n: Any) -> str:
    """A node's type: ``f32[2,3]``, or a multi-output node's ``(f32[2,3], (), s64[2])``.

    A multi-output node's entry is None (or ``(None, None)``) for an output the op did not
    produce (max_pool2d_with_indices_backward's, convolution_backward's ``output_mask``).
    """
    outs = getattr(n, "outs", None)
    if n.shape is None and outs is not None:
        return "(" + ", ".join(_out_type(o) for o in outs) + ")"
    return type_str(n.shape, n.dtype)


def _out_type(out: Any) -> str:
    if out is None or tuple(out) == (None, None):
        return "()"
    shape, dtype = out
    return type_str(shape, dtype)


def node_bytes(n: Any) -> int:
    """Bytes a node's outputs take (the outputs an op did not produce take none)."""
    outs = getattr(n, "outs", None)
    if n.shape is None and outs is not None:
        return sum(_bytes(o[0], o[1]) for o in outs if o is not None)
    return _bytes(n.shape, n.dtype)


def _bytes(shape: Any, dtype: Any) -> int:
    if shape is None or dtype is None:
        return 0
    count = 1
    for d in shape:
        count *= int(d)
    size = getattr(dtype, "itemsize", None)
    return count * (int(size) if size else 4)


def constants(n: Any) -> tuple[tuple[str, str], ...]:
    """The static arguments a node baked into the graph, by the schema's argument names:
    ``aten::slice`` -> ``(("dim", "1"), ("start", "0"), ("end", "3"))``. Operands are left out."""
    arg = getattr(n, "arg", None)
    schema = getattr(n.op, "_schema", None)
    if schema is None or not isinstance(arg, tuple) or len(arg) != 2:
        return ()
    tpl, ktpl = arg
    names = [a.name for a in schema.arguments]
    out = []
    for i, v in enumerate(tpl if isinstance(tpl, tuple) else ()):
        if not _is_operand(v):
            out.append((names[i] if i < len(names) else f"arg{i}", _const_str(v)))
    for item in ktpl if isinstance(ktpl, tuple) else ():
        if isinstance(item, tuple) and len(item) == 2 and not str(item[0]).startswith("__"):
            if not _is_operand(item[1]):
                out.append((str(item[0]), _const_str(item[1])))
    return tuple(out)


def _is_operand(v: Any) -> bool:
    from xlalab.runtime.ir import Slot

    if isinstance(v, Slot):
        return True
    if isinstance(v, (tuple, list)) and v:
        return all(_is_operand(x) for x in v)
    return False


def _const_str(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        inner = ", ".join(_const_str(x) for x in v)
        return f"[{inner}]"
    value = getattr(v, "value", v)  # ir.Const wraps a typed number
    if hasattr(value, "is_floating_point") or type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return repr(value) if not isinstance(value, str) else value


def signature(graph: Any) -> tuple[NodeSig, ...]:
    roots = set(getattr(graph, "roots", ()))
    sig = []
    for i, n in enumerate(graph.nodes):
        frames = getattr(n, "frames", None)
        leaf = bool(n.is_leaf)
        sig.append(
            NodeSig(
                n.name, node_type(n), int(n.hash), leaf, frames[0] if frames else None,
                () if leaf else constants(n), i in roots, not leaf and not n.src,
            )
        )  # fmt: skip
    return tuple(sig)


@dataclass(frozen=True)
class Change:
    """The first difference between two graphs.

    ``kind``: ``input_shape``, ``baked_value`` (a static argument: ``arg`` names it, ``old``
    and ``new`` are its values), ``ops``, ``output_shape``, ``outputs`` (the same nodes, but
    the graph returns others: ``extra`` and ``dropped`` are their positions in the new and
    the old graph), ``size`` (one graph is a prefix of the other) or ``settings`` (same
    graph, different compile settings).
    ``index``: the node's position in the new graph's post-order (None for size/settings).
    """

    kind: str
    index: int | None = None
    op: str = ""
    old: str = ""
    new: str = ""
    made: Frame | None = None
    input_position: int | None = None  # for input_shape: which input (leaves in post-order)
    arg: str = ""  # for baked_value: the argument's name in the op's schema
    extra: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    # for baked_value: the node's other changed arguments and later nodes' changed ones, in words
    also: tuple[str, ...] = ()


def first_change(old: Sequence[NodeSig], new: Sequence[NodeSig]) -> Change:
    """The first difference, root causes first: an input whose shape or dtype changed explains
    the sizes that Python code read from it and baked into later ops (``x.view(x.shape[0], -1)``,
    a model's ``arange(seq_len)``), so it is named even when such an op comes first."""
    resized = input_changes(old, new)
    if resized:
        return resized[0]
    inputs = 0
    outputs_differ = False
    old_types = Counter(s.type for s in old if s.leaf)
    new_types = Counter(s.type for s in new if s.leaf)
    for i, (a, b) in enumerate(zip(old, new)):
        if a == b:
            inputs += b.leaf
            continue
        if a.same_node(b):
            outputs_differ = True
            continue
        if b.leaf and a.leaf and a.type != b.type:
            # A resized input leaves fewer inputs of its old type and more of its new one. Where
            # the counts say otherwise, the two graphs read other inputs here (a layer that ran
            # in one step only): that is another code path, not a shape change.
            if old_types[a.type] > new_types[a.type] and new_types[b.type] > old_types[b.type]:
                return Change("input_shape", i, b.name, a.type, b.type, b.made, input_position=inputs)
            return _ops_change(old, new, i)
        if a.name != b.name:
            return _ops_change(old, new, i)
        if a.consts != b.consts:
            changed = [(x, y) for x, y in zip(a.consts, b.consts) if x != y] or [(("", ""), ("", ""))]
            (name, was), (_, now) = changed[0]
            if len(a.consts) != len(b.consts):
                name, was, now = "arguments", _args_str(a.consts), _args_str(b.consts)
            also = [f"{n}: {x} → {y}" for (n, x), (_, y) in changed[1:]]
            also += [_baked(x, y) for x, y in zip(old[i + 1 :], new[i + 1 :]) if _same_but_baked(x, y)]
            return Change("baked_value", i, b.name, was, now, b.made, arg=name, also=tuple(also))
        if a.type != b.type and b.factory and _dims(a.type) != _dims(b.type):
            # A factory's shape is the sizes Python passed it: an integer baked into the graph.
            return Change("baked_value", i, b.name, _dims(a.type), _dims(b.type), b.made, arg="size")
        if a.type != b.type:
            return Change("output_shape", i, b.name, a.type, b.type, b.made)
        return Change("baked_value", i, b.name, a.type, b.type, b.made)
    if len(old) != len(new):
        return Change("size", None, "", f"{len(old)} nodes", f"{len(new)} nodes")
    if outputs_differ:
        extra = tuple(i for i, (a, b) in enumerate(zip(old, new)) if b.output and not a.output)
        dropped = tuple(i for i, (a, b) in enumerate(zip(old, new)) if a.output and not b.output)
        first = (extra or dropped)[0]
        return Change(
            "outputs", first, new[first].name, _outputs(sum(s.output for s in old)),
            _outputs(sum(s.output for s in new)), new[first].made, extra=extra, dropped=dropped,
        )  # fmt: skip
    return Change("settings")


def input_changes(old: Sequence[NodeSig], new: Sequence[NodeSig]) -> list[Change]:
    """Every input whose shape or dtype changed, when both graphs read as many inputs: the k-th
    input of one is the k-th of the other."""
    old_leaves = [i for i, s in enumerate(old) if s.leaf]
    new_leaves = [i for i, s in enumerate(new) if s.leaf]
    if len(old_leaves) != len(new_leaves):
        return []
    out = []
    for k, (i, j) in enumerate(zip(old_leaves, new_leaves)):
        a, b = old[i], new[j]
        if a.name == b.name and a.type != b.type:
            out.append(Change("input_shape", j, b.name, a.type, b.type, b.made, input_position=k))
    return out


def _ops_change(old: Sequence[NodeSig], new: Sequence[NodeSig], i: int) -> Change:
    """The graphs part at position ``i``. Named: the first op from there on that the new graph
    has more of than the old (an op of the other path; with a layer that ran in one step only,
    the op at ``i`` may be the same op on another input), preferring one made at a line new to
    the graph, and the old graph's op at ``i``. Ops, not the inputs they read: an extra loop
    iteration first shows as its scalar."""

    def key(s: NodeSig) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        return (s.name, s.type, s.consts)

    old_ops = Counter(key(s) for s in old if not s.leaf)
    new_ops = Counter(key(s) for s in new if not s.leaf)
    extra = [j for j in range(i, len(new)) if not new[j].leaf and new_ops[key(new[j])] > old_ops[key(new[j])]]
    # Best, an extra op made at a line that made nothing in the old graph: the code of the other
    # path itself (the layer that ran), rather than an op its gradient added to code both share.
    old_lines = {s.made for s in old if s.made is not None}
    fresh = [j for j in extra if new[j].made is not None and new[j].made not in old_lines]
    in_new = (fresh or extra)[0] if extra else _next_op(new, i)
    in_old = _next_op(old, i)
    op_new = new[in_new] if in_new is not None else new[i]
    op_old = old[in_old] if in_old is not None else old[i]
    at = in_new if in_new is not None else i
    was, now = op_old.name, op_new.name
    if was == now:  # the same op on other inputs: say which
        was, now = f"{was} {op_old.type}", f"{now} {op_new.type}"
    return Change("ops", at, op_new.name, was, now, op_new.made)


def _next_op(sig: Sequence[NodeSig], start: int) -> int | None:
    return next((k for k in range(start, len(sig)) if not sig[k].leaf), None)


def _dims(ty: str) -> str:
    """A type's sizes as Python writes them: ``f32[4,8]`` -> ``[4, 8]``."""
    dims = ty.partition("[")[2].rstrip("]")
    return "[" + ", ".join(d for d in dims.split(",") if d) + "]"


def _outputs(n: int) -> str:
    return "1 output" if n == 1 else f"{n} outputs"


def _args_str(consts: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in consts)


def _same_but_baked(a: NodeSig, b: NodeSig) -> bool:
    """The same op with the same number of static arguments, some of them changed."""
    return a.name == b.name and a.consts != b.consts and len(a.consts) == len(b.consts)


def _baked(a: NodeSig, b: NodeSig) -> str:
    changed = ", ".join(f"{n}: {x} → {y}" for (n, x), (_, y) in zip(a.consts, b.consts) if x != y)
    return f"{b.name} {changed}"
