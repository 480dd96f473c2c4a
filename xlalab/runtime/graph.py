"""Sync: turn pending IR into one compiled XLA computation, cached, and run it.

A barrier gathers the roots (every live storage with pending IR, in creation order),
walks the graph once into a post-order list and an exact cache key, looks the key up,
compiles through JAX on a miss (an ``eval_jaxpr``-style loop over the nodes, traced by
``jax.jit``), executes, and puts device data in place of the IR.

The key is the post-order sequence of the nodes' exact structural ids (``ir.Node.sid``)
plus, for every node, the positions of its operands: so ``a + a`` and ``a + b`` differ,
``sum(-1)`` and ``sum(-2)`` differ, while the *values* of device data and scalar inputs
never enter it. No Python hash decides a hit: a dict compares whole keys.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import (
    backend,
    checks,
    compile_cache,
    config,
    debug_files,
    donation,
    events,
    execution_timer,
    index_checks,
    ir,
    metrics,
    program_store,
    promotion,
    replica_state,
    sharding,  # SPMD: shardings of leaves, pinned outputs and constraints
)
from .dtypes import convert, to_jnp
from .frames import Frame, library_caller, user_frames
from .ir import Node
from .log import vlog
from .lowering.registry import LOWERINGS, RESULT_DTYPE
from .storage import forget_pending, pending_storages


class LoweringError(RuntimeError):
    """A node could not be lowered to XLA (a bug in a lowering, or bad arguments).

    ``node_index`` is the failing node's position in the graph's post-order, when known: the
    sync then keeps every tensor that does not depend on that node computable.
    """

    node_index: int | None = None


class FailedValueError(LoweringError):
    """A tensor whose value could not be computed earlier was read, or used by a later op."""


@dataclass
class Graph:
    """One linearized graph: nodes in post-order and where the roots sit."""

    key: tuple[Any, ...]
    nodes: list[Node]
    roots: list[int]

    @property
    def hash(self) -> int:
        return hash(self.key) & 0xFFFFFFFFFFFFFFFF


def linearize(roots: Sequence[Node], failed_ok: bool = False) -> Graph:
    """The roots' graph in post-order, with its exact cache key.

    The key is flat: each node's sid, then the positions of its operands (a sid fixes how many).
    Leaves are placed when first met as an operand, without a trip through the stack: half the
    nodes of a typical graph are leaves (device data, scalar inputs).
    A failed value (``ir.ERROR``) among the nodes raises ``FailedValueError`` unless ``failed_ok``.
    """
    # Keyed by the nodes themselves: Node keeps object identity for == and hash, which a dict
    # computes in C (cheaper than a call to id() per lookup).
    index: dict[Node, int] = {}
    nodes: list[Node] = []
    key: list[int] = []
    error = ir.ERROR
    position = index.__getitem__
    for root in roots:
        if root in index:
            continue
        stack = [root]
        while stack:
            n = stack[-1]
            if n in index:
                stack.pop()
                continue
            ready = True
            for s in n.src:
                if s not in index:
                    if not s.src and s.op is not error:
                        index[s] = len(nodes)
                        nodes.append(s)
                        key.append(s.sid)
                    else:
                        stack.append(s)
                        ready = False
            if not ready:
                continue
            stack.pop()
            if n.op is error and not failed_ok:
                failed = FailedValueError(f"this tensor's value could not be computed: {n.value}")
                failed.node_index = len(nodes)
                raise failed from n.value
            index[n] = len(nodes)
            nodes.append(n)
            key.append(n.sid)
            key.extend(map(position, n.src))
    root_pos = [index[r] for r in roots]
    key.append(-1)  # no sid is negative: the roots follow
    key.extend(root_pos)
    key.append(roots[0].device if roots else 0)
    return Graph(tuple(key), nodes, root_pos)


# --------------------------------------------------------------------------- programs


@dataclass
class Program:
    """A compiled graph: call it with the data leaves and the scalar vector."""

    executable: Any
    graph_hash: int
    num_nodes: int
    device: int
    # Positions among the data leaves whose buffers the program may overwrite (see donation.py),
    # and how many operand slots of the graph hold each of those leaves.
    donated: tuple[int, ...] = ()
    donated_uses: tuple[int, ...] = ()
    # The order the executable returns the roots in (``donation.output_order``; empty: as is).
    order: tuple[int, ...] = ()

    def run(self, datas: list[Any], scalars: Any) -> tuple[list[Any], Any]:
        """The roots' arrays, and a token that is ready when the program has finished."""
        if not self.donated:
            return self.executable(datas, scalars)  # type: ignore[no-any-return]
        given, kept = _split(datas, self.donated)
        outs, done = self.executable(given, kept, scalars)
        if self.order:
            outs = donation.in_root_order(outs, self.order)
        return outs, done

    def __call__(self, datas: list[Any], scalars: Any) -> list[Any]:
        return self.run(datas, scalars)[0]


def _split(datas: list[Any], donated: tuple[int, ...]) -> tuple[list[Any], list[Any]]:
    chosen = set(donated)
    return [datas[i] for i in donated], [a for i, a in enumerate(datas) if i not in chosen]


def _with_done_token(fn: Callable[[list[Any], Any], list[Any]]) -> Callable[[list[Any], Any], Any]:
    """``fn`` that also returns a token, ready when the whole program has finished (every output
    of one execution is): what waits for the device holds it, never the roots' arrays."""

    def with_token(datas: list[Any], scalars: Any) -> tuple[list[Any], Any]:
        return fn(datas, scalars), jnp.zeros((), jnp.bool_)

    return _named_as(with_token, fn)


def _named_as(wrapper: Any, fn: Any) -> Any:
    # Profiles and HLO module names show jax.jit's function name: keep the graph function's.
    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = fn.__qualname__
    return wrapper


def _with_donated_argument(
    fn: Callable[[list[Any], Any], Any], donated: tuple[int, ...], n: int, order: tuple[int, ...]
) -> Any:
    """``fn(datas, scalars)`` as ``f(donated_datas, kept_datas, scalars)``: ``jax.jit`` donates
    whole arguments. The roots come back in ``order`` (see ``donation.output_order``)."""
    kept_positions = [i for i in range(n) if i not in set(donated)]

    def with_donated(given: list[Any], kept: list[Any], scalars: Any) -> Any:
        datas: list[Any] = [None] * n
        for i, a in zip(donated, given):
            datas[i] = a
        for i, a in zip(kept_positions, kept):
            datas[i] = a
        outs, done = fn(datas, scalars)
        return donation.in_program_order(outs, order), done

    return _named_as(with_donated, fn)


CACHE = compile_cache.ProgramCache()  # exact graph key -> Program


def _instructions(
    graph: Graph, inputs: dict[Node, int] | None = None
) -> tuple[list[Any], list[int], int, int]:
    """Static per-node instructions; they keep no Node (so no device array) alive.

    ``inputs`` (a control-flow body, ``control_flow``) names the nodes that are the body's
    inputs, whatever they are, with their positions among its data arguments.
    """
    pos = {id(n): i for i, n in enumerate(graph.nodes)}
    instrs: list[Any] = []
    n_data = n_scalar = 0
    for n in graph.nodes:
        if inputs is not None and n in inputs:
            instrs.append(("data", inputs[n]))
        elif n.op is ir.DATA:
            instrs.append(("data", n_data))
            n_data += 1
        elif n.op is ir.SCALAR:
            instrs.append(("scalar", n_scalar, n.dtype))
            n_scalar += 1
        else:
            weak = _scalar_casts(n)
            tensor_dtypes = [s.dtype for s in n.src if s.op is not ir.SCALAR]
            promote = _promotion(n)
            instrs.append(
                (
                    "op",
                    n.op,
                    n.arg,
                    n.shape,
                    n.dtype,
                    n.outs,
                    tuple(pos[id(s)] for s in n.src),
                    weak,
                    promote[0] if promote else _compute_dtype(n.dtype, tensor_dtypes),
                    _scope_name(n),
                    promote,
                )
            )
    return instrs, graph.roots, n_data, n_scalar


def _scalar_casts(n: Node) -> tuple[tuple[int, torch.dtype | None], ...]:
    """The node's float scalar inputs (Python numbers: wrapped numbers, ``alpha``...), each with
    the half dtype it is rounded to first where eager's kernel sees it so (None: it goes to the
    computation dtype directly). Asked of eager once per op and argument layout."""
    weak = [i for i, s in enumerate(n.src) if ir.is_float_scalar(s)]
    half = next((s.dtype for s in n.src if s.op is not ir.SCALAR and s.dtype in promotion.HALF), None)
    aten = isinstance(n.op, torch._ops.OpOverload) and n.op.namespace == "aten"  # no user op runs twice
    if not weak or half is None or not aten or len(n.arg or ()) != 2:
        return tuple((i, None) for i in weak)
    key = _probe_key(n)
    seen = _SCALARS_SEEN_ROUNDED.get(key)
    if seen is None:
        seen = _SCALARS_SEEN_ROUNDED[key] = _ask_eager_about_numbers(n, half, weak=weak)
    return tuple((i, half if r else None) for i, r in zip(weak, seen))


_SCALARS_SEEN_ROUNDED: dict[Any, tuple[bool, ...]] = {}


def _probe_key(n: Node) -> Any:
    """What a probe of eager's kernel depends on: the op, its static arguments, and each
    operand's kind (scalar input or tensor, 0-d CPU tensor or number), dtype and rank-0-ness."""
    operands = tuple((s.op is ir.SCALAR, s.arg is ir.ZERO_DIM, s.dtype, not s.shape) for s in n.src)
    return (n.op, n.arg, operands)


# The probe's tensors, whatever the node's shapes: elementwise ops take them; an op that needs
# shapes of its own fails the probe and keeps its numbers in float32.
_PROBE_SHAPE = (514,)


def _ask_eager_about_numbers(
    n: Node, half: torch.dtype, weak: Sequence[int] = (), spots: Sequence[Any] = ()
) -> tuple[bool, ...]:
    """``promotion.scalars_seen_rounded`` for a node's numbers: its float scalar inputs (or 0-d
    float tensors) at the source positions ``weak``, then the integers at the argument positions
    (or names) ``spots``. The probe's float numbers take their places; a 0-d tensor is asked
    about as a 0-d CPU tensor (a float one of its dtype, an integer one as float32), whose dtype
    decides the promotion."""
    from torch.utils._python_dispatch import _disable_current_modes

    tpl, ktpl = n.arg
    named = dict(ktpl)

    def call(scalars: list[float], make: Callable[[Sequence[int], torch.dtype], torch.Tensor]) -> Any:
        # A 0-d tensor (of the CPU or the device) is asked about as a 0-d CPU tensor of its dtype,
        # an integer one as float32 (which promotes as it does, and holds the probe's numbers).
        given = {
            i: v if _is_number(n.src[i]) else torch.tensor(v, dtype=_probe_dtype(n.src[i].dtype))
            for i, v in zip(weak, scalars)
        }
        shapes = [_PROBE_SHAPE if s.shape else () for s in n.src]
        vals = [
            given[i] if i in given else 1 if s.op is ir.SCALAR else make(shapes[i], s.dtype or half)
            for i, s in enumerate(n.src)
        ]
        args = [_subst(a, vals) for a in tpl]
        kwargs = {k: _subst(v, vals) for k, v in ktpl}
        for spot, v in zip(spots, scalars[len(weak) :]):
            target: Any = args if type(spot) is int else kwargs
            was = tpl[spot] if type(spot) is int else named[spot]
            target[spot] = torch.tensor(v, dtype=torch.float32) if type(was) is ir.Const else v
        return n.op(*args, **kwargs)

    with _disable_current_modes(), torch.no_grad():
        return promotion.scalars_seen_rounded(call, len(weak) + len(spots), half)


def _probe_dtype(dtype: torch.dtype | None) -> torch.dtype:
    return dtype if dtype is not None and dtype.is_floating_point else torch.float32


def _scope_name(n: Node) -> str:
    name = n.name.replace("::", "__")
    if n.frames and config.get("XLA_HLO_DEBUG"):
        f = n.frames[0]
        name += f"[{os.path.basename(f.file)}:{f.line}]"  # XLA cuts op_name at '@': brackets survive
    return name


Promotion = tuple[
    torch.dtype,
    tuple[int, ...],
    tuple[str, ...],
    torch.dtype | None,
    torch.dtype | None,
    frozenset[Any],
    frozenset[Any],
]


def _promotion(n: Node) -> Promotion | None:
    """For an elementwise op: torch's computation dtype, where its promoting arguments sit, the
    half type its integer operands pass through on the way (``promotion.half_common_dtype``),
    and the positions (or names) of integer numbers that eager's kernel sees rounded to the
    half type their tensors share (``_integers_seen_rounded``).

    The lowering then receives those arguments already in that dtype (``_promoted``): the
    arithmetic happens in the type torch computes in, not only the result.
    """
    if not isinstance(n.op, torch._ops.OpOverload) or type(n.arg) is not tuple or len(n.arg) != 2:
        return None
    tpl, ktpl = n.arg
    kwargs = dict(ktpl)
    rule = promotion.rule_for(n.op, kwargs)
    if rule is None:
        return None
    operands: list[Any] = []
    for p, name in zip(rule.positions, rule.names):
        a = tpl[p] if p < len(tpl) else kwargs.get(name)
        if type(a) is ir.Slot:
            s = n.src[a.i]
            # Scalar inputs are Python floats, which promote as numbers do, or 0-d CPU tensors.
            number = s.op is ir.SCALAR and s.arg is not ir.ZERO_DIM
            operands.append(1.0 if number else (s.shape, s.dtype))
        elif type(a) is ir.Const:
            # A baked 0-d CPU tensor (an integer or bool one) promotes as a 0-d tensor.
            operands.append(a.value if a.dtype is None else ((), a.dtype))
        elif a is None or isinstance(a, (bool, int, float)):
            operands.append(a)
        else:
            return None  # a list or something unexpected: leave it to the lowering
    cd = promotion.compute_dtype(rule, operands)
    if cd is None:
        return None
    half = promotion.half_type(cd, operands)
    via = promotion.half_common_dtype(cd, operands)
    return cd, rule.positions, rule.names, via, half, *_integers_seen_rounded(n, rule, half)


def _integers_seen_rounded(
    n: Node, rule: promotion.Rule, half: torch.dtype | None
) -> tuple[frozenset[Any], frozenset[Any]]:
    """The positions (or names) of the integer numbers (Python ints, 0-d integer CPU tensors) of a
    half-type op that eager's kernel rounds to the half type before computing in float32
    (``float16 + 2049`` adds 2048), where that rounding changes them. Kernels differ as for
    float numbers (``_scalar_casts``); eager is asked once per op, layout and number.

    A 0-d tensor of the device, of a wider type than the half type, is asked about too: eager's
    CPU kernel sees it as it sees a 0-d CPU tensor (``float16 + tensor(1.1)`` adds float16's
    1.0996, ``float16 * tensor(1.1)`` multiplies by float32's 1.1, and ``float16 *
    tensor(2**40)`` by float32's 2**40, not float16's inf). Returned second: those of them that
    eager reads unrounded (an integer tensor then skips the half type that integer tensors take)."""
    if half is None:
        return frozenset(), frozenset()
    tpl, ktpl = n.arg
    kwargs = dict(ktpl)
    spots: list[Any] = []
    zero_dims: list[tuple[Any, int]] = []  # (spot, source index)
    for p, name in zip(rule.positions, rule.names):
        a = tpl[p] if p < len(tpl) else kwargs.get(name, _ABSENT)
        value = a.value if type(a) is ir.Const else a
        spot = p if p < len(tpl) else name
        if type(value) is int and promotion.half_rounding(value, half) != value:
            spots.append(spot)
        elif type(a) is ir.Slot and _wider_zero_dim(n.src[a.i], half):
            zero_dims.append((spot, a.i))
    if not spots and not zero_dims:
        return frozenset(), frozenset()
    key = (_probe_key(n), half)
    seen = _INTEGERS_SEEN_ROUNDED.get(key)
    if seen is None:
        asked = _ask_eager_about_numbers(n, half, weak=[i for _, i in zero_dims], spots=spots)
        probed = [spot for spot, _ in zero_dims] + spots
        seen = _INTEGERS_SEEN_ROUNDED[key] = (
            frozenset(spot for spot, r in zip(probed, asked) if r),
            frozenset(spot for spot, r in zip(probed[: len(zero_dims)], asked) if not r),
        )
    return seen


def _wider_zero_dim(s: Node, half: torch.dtype) -> bool:
    """A 0-d tensor of the device (not a scalar input) of another type than ``half`` that may hold
    numbers ``half`` does not: a float one, or an integer one wider than 8 bits."""
    if s.op is ir.SCALAR or s.shape or s.dtype is None or s.dtype == half:
        return False
    return s.dtype.is_floating_point or (s.dtype.itemsize > 1 and not s.dtype.is_complex)


def _is_number(s: Node) -> bool:
    """A scalar input that is a Python number (not a 0-d CPU tensor)."""
    return s.op is ir.SCALAR and s.arg is not ir.ZERO_DIM


_ABSENT = object()
_INTEGERS_SEEN_ROUNDED: dict[Any, tuple[frozenset[Any], frozenset[Any]]] = {}


def _promoted(v: Any, dtype: torch.dtype, via: torch.dtype | None = None, seen_rounded: bool = False) -> Any:
    if v is None:
        return v
    if type(v) is complex:
        # A baked 0-d complex CPU tensor (``_Args.cpu_tensor``): an array of the computation
        # dtype. A real one (``fill_`` of a float tensor) keeps the real part, as eager's cast.
        z = jnp.asarray(v, dtype=jnp.complex128)
        return _cast(z if dtype.is_complex or dtype is torch.bool else jnp.real(z), dtype)
    if isinstance(v, (bool, int, float)):
        if via is not None and type(v) is int:
            return promotion.half_rounding(v, via)  # an integer number eager rounds (see above)
        return promotion.python_number(v, dtype)
    if via is not None and (seen_rounded or not jnp.issubdtype(v.dtype, jnp.inexact)):
        # An integer or bool operand of a half-type op becomes the half type first, as eager's
        # iterator casts every operand to the common dtype before the kernel widens it to
        # float: int16 32767 is 32768 in float16, and equal to a float16 32768. So does a 0-d
        # float tensor of a wider type where eager's kernel rounds it (``_integers_seen_rounded``).
        v = _cast(v, via)
    return _cast(v, dtype)


def _rounded_via(
    a: Any,
    spot: Any,
    via: torch.dtype | None,
    half: torch.dtype | None,
    rounded: frozenset[Any],
    kept: frozenset[Any],
) -> torch.dtype | None:
    """The half type an argument passes through: integer tensors take the op's half common dtype
    (but a 0-d one of the device that eager's kernel reads unrounded, ``kept``), integer numbers
    and 0-d float tensors only where eager's kernel rounds them (``rounded``)."""
    if spot in rounded:
        return half
    if type(a) is int or spot in kept:
        return None
    return via


def _compute_dtype(out: torch.dtype | None, operands: list[torch.dtype | None]) -> torch.dtype:
    """The dtype a float scalar input takes inside an op (torch's scalar promotion).

    Half-precision ops apply float scalars at float32, as torch's CPU kernels do (opmath),
    after rounding them to the half type where the kernel does that too (``_scalar_casts``).
    """
    if out in (torch.float16, torch.bfloat16):
        return torch.float32
    real = operands and all(d is not None and d.is_floating_point for d in operands)
    if out is not None and out.is_complex and real:
        # A complex result of real operands (``complex``, ``polar``): a 0-d CPU float tensor
        # is one of those real operands, of the result's real dtype.
        return out.to_real()
    if out is not None and (out.is_floating_point or out.is_complex):
        return out
    for d in operands:
        if d is not None and (d.is_floating_point or d.is_complex):
            return d
    return torch.get_default_dtype()


def _subst(
    a: Any, vals: Sequence[Any], leaf: Callable[[Any], Any] | None = None, typed: bool = False
) -> Any:
    """A static-argument template with its operand slots filled (``leaf`` maps other values).
    ``typed``: a baked 0-d CPU tensor becomes an array of its dtype, not a number (for ops
    that take it as a tensor without promoting it: an index, ``index_put``'s values)."""
    tp = type(a)
    if tp is ir.Slot:
        return vals[a.i]
    if tp is ir.Const:
        return jnp.asarray(a.value, to_jnp(a.dtype)) if typed and a.dtype is not None else a.value
    if tp is tuple:
        items = [_subst(x, vals, leaf, typed) for x in a]
        return items if any(type(x) is ir.Slot for x in a) else tuple(items)
    return a if leaf is None else leaf(a)


def _cast(x: Any, dtype: torch.dtype) -> Any:
    return convert(x, to_jnp(dtype))


def lower_node(instr: tuple[Any, ...], vals: list[Any]) -> Any:
    """Evaluate one op node on traced JAX values."""
    _, op, arg, shape, dtype, outs, _, weak, cdtype, _, promote = instr
    if weak:
        vals = list(vals)
        for i, via in weak:
            # A half type first where eager's kernel rounds the scalar to it (``_scalar_casts``).
            v = vals[i] if via is None else vals[i].astype(to_jnp(via))
            vals[i] = v.astype(to_jnp(cdtype))
    if op is ir.ITEM:
        return vals[0][arg]
    special = SPECIAL_LOWERINGS.get(op)
    if special is not None:
        return special(vals, arg, shape, dtype)
    fn = LOWERINGS.get(op)
    if fn is None:
        raise LoweringError(f"xlalab has no lowering for {op}")
    tpl, ktpl = arg
    typed = promote is None  # an elementwise op's promotion casts its numbers itself
    args = [_subst(a, vals, typed=typed) for a in tpl]
    kwargs = {k: _subst(v, vals, typed=typed) for k, v in ktpl}
    if promote is not None:
        cd, positions, names, via, half, rounded, kept = promote
        for p in positions:
            if p < len(args):
                a = args[p]
                args[p] = _promoted(a, cd, _rounded_via(a, p, via, half, rounded, kept), p in rounded)
        for name in names:
            if name in kwargs:
                a = kwargs[name]
                through = _rounded_via(a, name, via, half, rounded, kept)
                kwargs[name] = _promoted(a, cd, through, name in rounded)
    if op in RESULT_DTYPE and outs is None:
        kwargs["result_dtype"] = to_jnp(dtype)
    rng = kwargs.pop("__rng__", None)
    if rng is not None:
        seed, offset = rng
        key = jax.random.PRNGKey(seed.astype(jnp.uint32))
        key = jax.random.fold_in(key, offset.astype(jnp.uint32))
        for iteration in LOOP_ITERATIONS.counts:  # a random op in a loop body draws anew each round
            key = jax.random.fold_in(key, iteration.astype(jnp.uint32))
        kwargs["key"] = key
    try:
        res = fn(*args, **kwargs)
    except Exception as e:
        raise LoweringError(f"lowering {op} failed: {type(e).__name__}: {e}") from e
    if outs is None:
        return _checked(op, res, shape, dtype)
    return tuple(None if o is None or r is None else _checked(op, r, *o) for r, o in zip(res, outs))


def _checked(op: Any, res: Any, shape: Any, dtype: torch.dtype) -> Any:
    res = jnp.asarray(res)
    if tuple(res.shape) != tuple(shape):
        raise LoweringError(f"lowering of {op} gave shape {tuple(res.shape)}, torch expects {tuple(shape)}")
    return _cast(res, dtype)


# Nodes that are not aten ops: registered here, beside the graph machinery that makes them.
SPECIAL_LOWERINGS: dict[Any, Callable[[list[Any], Any, Any, Any], Any]] = {}
SPECIAL_LOWERINGS[index_checks.CHECK] = index_checks.lower
SPECIAL_LOWERINGS[checks.ASSERT] = checks.lower_assert
SPECIAL_LOWERINGS[sharding.CONSTRAINT] = sharding.lower_constraint


class _LoopIterations(threading.local):
    """The round counters of the loop bodies JAX is tracing on this thread, outermost first
    (``control_flow``); per thread, as replica threads compile programs of their own."""

    def __init__(self) -> None:
        self.counts: list[Any] = []


LOOP_ITERATIONS = _LoopIterations()
# Collective ops (registered by xlalab.runtime.replicated): op -> how many replicas a node spans.
COLLECTIVES: dict[Any, Callable[[Node], int]] = {}


def collective_width(graph: Graph) -> int:
    """The most replicas any collective in ``graph`` spans (0 without collectives)."""
    if not COLLECTIVES:
        return 0
    width = 0
    for n in graph.nodes:
        if n.op in COLLECTIVES:
            width = max(width, COLLECTIVES[n.op](n))
    return width


def _refuse_collectives(graph: Graph) -> None:
    """A graph whose collectives span several replicas runs only as a replicated program."""
    width = collective_width(graph)
    if width > 1:
        raise LoweringError(
            f"this graph ({len(graph.nodes)} nodes) holds a collective across {width} replicas, so it can "
            "only run in a replicated step, where every replica reaches the barrier (mark_step, "
            "optimizer_step or a read of the value) inside DataParallel; it was synced outside one, or "
            "it is the unfinished value left by a replicated step that failed."
        )


def build_function(
    graph: Graph, inputs: dict[Node, int] | None = None
) -> Callable[[list[Any], Any], list[Any]]:
    """The graph as a function of its data leaves' and scalar inputs' values (or of the values
    of ``inputs``, see ``_instructions``), for JAX to trace."""
    instrs, roots, _, _ = _instructions(graph, inputs)
    return function_of(instrs, roots)


def function_of(instrs: list[Any], roots: list[int]) -> Callable[[list[Any], Any], list[Any]]:
    """The function that evaluates ``instrs`` (``_instructions``) and returns the roots' values."""

    def run(datas: list[Any], scalars: Any) -> list[Any]:
        env: list[Any] = []
        for i, ins in enumerate(instrs):
            kind = ins[0]
            if kind == "data":
                env.append(datas[ins[1]])
            elif kind == "scalar":
                env.append(scalars[ins[1]])
            else:
                # A named scope per node: HLO op_name metadata (and profiles) show the aten op,
                # and with XLA_HLO_DEBUG the user's file and line that created it.
                try:
                    with jax.named_scope(ins[9]):
                        env.append(lower_node(ins, [env[i] for i in ins[6]]))
                except LoweringError as e:
                    e.node_index = i
                    raise
                except Exception as e:
                    failed = LoweringError(f"lowering {ins[1]} failed: {type(e).__name__}: {e}")
                    failed.node_index = i
                    raise failed from e
        return [env[i] for i in roots]

    return run


def _failure(graph: Graph, what: str, error: Exception, lowered: Any = None) -> LoweringError:
    """A compile/execute failure as an error that says where the offending graph went.

    XLA_SAVE_HLO_FILE saves the HLO (or, when lowering itself failed, the IR); XLA_DUMP_HLO_GRAPH
    puts it into the message.
    """
    if lowered is not None:
        try:
            text = lowered.compiler_ir("hlo").as_hlo_text()
        except Exception:  # the dump must never hide the original error
            text = lowered.as_text()
    else:
        text = "\n".join(
            f"%{i} = {n.name} shape={n.shape} dtype={n.dtype} "
            f"operands={[graph.nodes.index(s) for s in n.src]}"
            + (f" location={n.frames[0]}" if n.frames else "")
            for i, n in enumerate(graph.nodes)
        )
    message = f"{what} graph {graph.hash:x} ({len(graph.nodes)} nodes): {type(error).__name__}: {error}"
    index = getattr(error, "node_index", None)
    if index is not None:
        node = graph.nodes[index]
        if node.frames:
            message += f"\nThe failing op, {node.name}, was recorded at {node.frames[0]}."
        else:
            message += f"\nThe failing op is {node.name}; set XLA_IR_DEBUG=1 to record the line that made it."
    path = config.get("XLA_SAVE_HLO_FILE")
    if path and debug_files.write("XLA_SAVE_HLO_FILE", path, text, mode="w"):
        message += f"\nThe offending {'HLO' if lowered is not None else 'IR'} graph was saved to {path}."
    elif path:
        message += f"\nXLA_SAVE_HLO_FILE={path} could not be written."
    else:
        message += (
            "\nSet XLA_SAVE_HLO_FILE=path to save the offending graph, or XLA_DUMP_HLO_GRAPH=1 to print it."
        )
    if config.get("XLA_DUMP_HLO_GRAPH"):
        message += "\n" + text
    failure = LoweringError(message)
    failure.node_index = index
    return failure


def publish_compile(graph: Graph, prog: Any, device: str, reason: str, *, seconds: float = 0.0,
                    cached: bool = False, source: str = "") -> None:  # fmt: skip
    """Tell listeners a graph was compiled, or found in the cache (single-device and replicated alike)."""
    if events.listening():
        events.publish(
            events.CompileEvent(
                graph=graph,
                program=prog,
                graph_hash=prog.graph_hash,
                num_nodes=prog.num_nodes,
                seconds=seconds,
                cached=cached,
                device=device,
                reason=reason,
                frames=user_frames(),
                source=source,
            )
        )


def publish_compile_start(graph: Graph, device: str, reason: str) -> None:
    """Tell listeners a compile begins (a live view shows "compiling..." while XLA works)."""
    if events.listening():
        events.publish(
            events.CompileStartEvent(
                graph_hash=graph.hash,
                num_nodes=len(graph.nodes),
                device=device,
                reason=reason,
                frames=user_frames(),
            )
        )


def compile_graph(
    graph: Graph,
    datas: list[Any],
    scalars: Any,
    reason: str = "",
    donated: tuple[int, ...] = (),
    donated_uses: tuple[int, ...] = (),
    order: tuple[int, ...] = (),
    source: str = "",
) -> Program:
    """Compile ``graph`` for these inputs; the data leaves at ``donated`` are given to XLA, and
    the roots come out in ``order`` (``donation.output_order``: each buffer to its new value).
    ``source`` names what the graph is of (a compiled function's graph), for listeners."""
    publish_compile_start(graph, f"xla:{graph.key[-1]}", reason)
    t0 = time.perf_counter_ns()
    fn = _with_done_token(build_function(graph))
    options = sharding.jit_options(graph)
    if "out_shardings" in options:
        roots = donation.in_program_order(options["out_shardings"], order)
        options["out_shardings"] = (roots, None)  # the token's is XLA's choice
    lowered = None
    try:
        if donated:
            with warnings.catch_warnings():
                # A donated leaf no output can reuse is still freed at once (nothing holds it).
                warnings.filterwarnings("ignore", "Some donated buffers were not usable")
                jitted = jax.jit(
                    _with_donated_argument(fn, donated, len(datas), order),
                    donate_argnums=(0,),
                    **options,
                )
                lowered = jitted.lower(*_split(datas, donated), scalars)
        else:
            lowered = jax.jit(fn, **options).lower(datas, scalars)
        executable = lowered.compile(compiler_options=backend.COMPILER_OPTIONS)
    except Exception as e:
        failure = _failure(graph, "Lowering" if lowered is None else "XLA failed to compile", e, lowered)
        publish_compile_error(graph, f"xla:{graph.key[-1]}", t0, failure)
        raise failure from e
    dt = time.perf_counter_ns() - t0
    metrics.record("CompileTime", dt)
    metrics.count("UncachedCompile")
    prog = Program(executable, graph.hash, len(graph.nodes), graph.key[-1], donated, donated_uses, order)
    publish_compile(graph, prog, f"xla:{prog.device}", reason, seconds=dt / 1e9, source=source)
    return prog


def publish_compile_error(graph: Graph, device: str, t0: int, error: Exception) -> None:
    """Tell listeners a compile that started (CompileStartEvent) ended in an error."""
    if events.listening():
        events.publish(
            events.CompileErrorEvent(
                graph_hash=graph.hash,
                num_nodes=len(graph.nodes),
                seconds=(time.perf_counter_ns() - t0) / 1e9,
                device=device,
                error=str(error).split("\n", 1)[0],
                frames=user_frames(),
            )
        )


# --------------------------------------------------------------------------- execution


def _trace_settings() -> tuple[Any, ...]:
    """torch settings that lowerings read while tracing: part of the cache key."""
    return (
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
        config.get("XLA_HLO_DEBUG"),
        # The precision switches change the device dtypes of data leaves and results: a program
        # traced for float32 leaves must not be reused for bfloat16 ones.
        config.get("XLA_USE_BF16"),
        config.get("XLA_USE_F16"),
        config.get("XLA_USE_32BIT_LONG"),
    )


def _inputs(graph: Graph, device: int) -> tuple[list[Node], list[Any], Any]:
    """The data leaves, their arrays (laid out for the program) and the scalar vector."""
    leaves = [n for n in graph.nodes if n.op is ir.DATA]
    scalars = np.asarray([float(n.value) for n in graph.nodes if n.op is ir.SCALAR], dtype=np.float64)
    if not leaves or sharding.enabled():
        scalars = jax.device_put(scalars, backend.jax_device(device))
    # Otherwise the host vector goes straight into the call: the executable copies it to the
    # device its data leaves are on, in C++ (a device_put first costs ~0.25 ms of Python).
    datas, scalars = sharding.place_inputs(graph, [n.value for n in leaves], scalars)
    return leaves, datas, scalars


# --------------------------------------------------------------------------- op-by-op

_OP_CACHE = compile_cache.ProgramCache()  # one small executable per node signature


@dataclass(frozen=True)
class NodeCounters:
    """Where a per-node run counts its work (a None name is not counted).

    The OPBYOP modes count the user's compiles and executions; a debugger stepping through a
    graph counts under its own names, so its compiles never look like the program's.
    """

    compiled: str | None
    cached: str | None
    executed: str | None
    compile_time: str | None


USER_COUNTERS = NodeCounters("UncachedCompile", "CachedCompile", "ExecuteComputation", "CompileTime")


def node_executable(
    ins: tuple[Any, ...], vals: list[Any], settings: tuple[Any, ...], cache: compile_cache.ProgramCache
) -> tuple[Any, int | None]:
    """The small compiled program for one op instruction on ``vals``, and its compile time in ns
    (None when ``cache`` already held it). Keyed by the node's signature and the trace settings,
    which change what a lowering traces (a bfloat16 switch changes output types)."""
    # The op itself, not its id: an op made at run time (a control-flow body's) can be freed, and
    # a later one at the same address must not find its program.
    sig = (ins[1], ins[2:6], ins[7:9], ins[10], tuple((v.shape, v.dtype) for v in vals), settings)
    fn = cache.get(sig)
    if fn is not None:
        return fn, None
    t0 = time.perf_counter_ns()
    lowered = jax.jit(lambda *vs, _ins=ins: lower_node(_ins, list(vs))).lower(*vals)
    fn = lowered.compile(compiler_options=backend.COMPILER_OPTIONS)
    cache.put(sig, fn)
    return fn, time.perf_counter_ns() - t0


def run_node(
    ins: tuple[Any, ...],
    node: Node,
    env: list[Any],
    dev: Any,
    settings: tuple[Any, ...],
    cache: compile_cache.ProgramCache = _OP_CACHE,
    counters: NodeCounters = USER_COUNTERS,
) -> Any:
    """One node's value, from the values ``env`` holds for the nodes before it; an op node runs
    as its own small computation (compiled once per signature into ``cache``)."""
    kind = ins[0]
    if kind == "data":
        return node.value
    if kind == "scalar":
        return jax.device_put(np.asarray(node.value, np.float64), dev)
    if ins[1] is ir.ITEM:
        return env[ins[6][0]][ins[2]]
    vals = [env[i] for i in ins[6]]
    fn, compile_ns = node_executable(ins, vals, settings, cache)
    if compile_ns is None:
        if counters.cached:
            metrics.count(counters.cached)
    else:
        if counters.compile_time:
            metrics.record(counters.compile_time, compile_ns)
        if counters.compiled:
            metrics.count(counters.compiled)
    out = fn(*vals)
    if counters.executed:
        metrics.count(counters.executed)
    return out


def run_op_by_op(graph: Graph, device: int) -> list[Any]:
    """Run every node as its own small computation, chaining results (the OPBYOP modes).

    Same results as fused execution; each distinct node signature compiles once.
    """
    if sharding.enabled():
        return sharding.run_op_by_op(graph, device)  # each node over the mesh
    instrs, roots, _, _ = _instructions(graph)
    dev = backend.jax_device(device)
    settings = _trace_settings()
    env: list[Any] = []
    for ins, node in zip(instrs, graph.nodes):
        env.append(run_node(ins, node, env, dev, settings))
    return [env[i] for i in roots]


def _read_by_library(reason: str) -> Frame | None:
    """For a read (not a step barrier), the library line that made it, if a library did."""
    return None if reason == "mark_step" else library_caller()


def _op_by_op(reason: str) -> bool:
    if config.get("XLA_USE_EAGER_DEBUG_MODE"):
        return True
    if reason == "mark_step":
        return bool(config.get("XLA_SYNC_TENSORS_OPBYOP"))
    return bool(config.get("XLA_GET_TENSORS_OPBYOP"))


def note_cache_hit(graph: Graph, prog: Any, device: int, reason: str, source: str = "") -> None:
    """Count a compile-cache hit and tell listeners (single-device and replicated programs alike)."""
    metrics.count("CachedCompile")
    publish_compile(graph, prog, f"xla:{device}", reason, cached=True, source=source)


def execute(
    roots: Sequence[Node], reason: str, donate: bool = False, replaced: Sequence[int] = ()
) -> list[Any]:
    """Compute ``roots`` (all on one device) and return their arrays.

    ``donate``: the caller replaces every pending value of the device with its result (a full
    barrier), so leaves nothing else holds may be given to XLA (see donation.py); ``replaced``
    says, per root, which leaf it replaces (``Storage.replaced``), so each buffer goes to its
    new value.
    """
    metrics.flush_tracing()
    checks.raise_deferred(wait=False)
    pending_checks = checks.take(roots[0].device) if roots else []
    if pending_checks:
        roots = [*roots, *[c.node for c in pending_checks]]
    if _op_by_op(reason):
        graph = linearize(roots)
        _refuse_collectives(graph)
        metrics.record("TensorsGraphSize", len(graph.nodes), "number")
        outs = run_op_by_op(graph, graph.key[-1])
        if events.listening():
            events.publish(
                events.SyncEvent(
                    graph=graph,
                    reason=reason,
                    num_tensors=len(roots),
                    graph_hash=graph.hash,
                    frames=user_frames(),
                    inside=_read_by_library(reason),
                )
            )
        if pending_checks:
            checks.after_run(pending_checks, outs[-len(pending_checks) :])
            outs = outs[: -len(pending_checks)]
        return outs
    graph = linearize(roots)
    device = graph.key[-1]
    leaves, datas, scalars = _inputs(graph, device)
    metrics.record("TensorsGraphSize", len(graph.nodes), "number")
    donate = donate and donation.enabled()
    settings = _trace_settings()
    key = (graph.key, settings, sharding.cache_key(graph, datas))
    prog = CACHE.get(key)
    in_memory = prog is not None
    text = None
    # Which leaves this compile would donate: decided now, from who holds them (``donation``).
    donated: tuple[int, ...] = ()
    uses: tuple[int, ...] = ()
    order: tuple[int, ...] = ()
    if prog is None and donate:
        donated, uses = _free_leaves(graph, leaves, datas)
        if donated and replaced:
            root_of = {leaf: r for r, leaf in enumerate(replaced) if leaf}
            replacing = [root_of.get(id(leaves[i]), -1) for i in donated]
            order = donation.output_order(len(roots), replacing)
    if prog is None and not sharding.enabled() and program_store.usable():
        # A new process: an earlier one may have left this program on disk.
        text = program_store.structure_text(graph, settings, donated, uses, order)
        prog = _load_stored(graph, text, reason) if text else None
        if prog is not None:
            CACHE.put(key, prog)
    if prog is not None and prog.donated:
        # Compiled at a barrier; a read that needs the same graph copies what it would give.
        donation.guard(leaves, datas, prog.donated, prog.donated_uses, everything=not donate)
    del leaves  # a leaf's last holders are now the graph's operands: XLA may take its buffer
    if prog is None:
        # Checked on a miss only: a refused graph never enters the cache, so it misses again.
        _refuse_collectives(graph)
        vlog(
            "xla_graph_executor",
            3,
            "Compiling IR graph hash %x on device xla:%d (%d nodes)",
            graph.hash,
            device,
            len(graph.nodes),
        )
        t_compile, jax_hits = time.perf_counter(), compile_cache.jax_cache_hits()
        prog = compile_graph(graph, datas, scalars, reason, donated, uses, order)
        CACHE.put(key, prog)
        # Only what XLA compiled here: an executable JAX read from its own cache does not
        # serialize again whole on every backend (XLA:CPU loses its kernels).
        if text and compile_cache.jax_cache_hits() == jax_hits:
            program_store.save(text, prog.executable, donated, uses, order, time.perf_counter() - t_compile)
    elif in_memory:
        note_cache_hit(graph, prog, device, reason)
    t0 = time.perf_counter_ns()
    try:
        outs, done = prog.run(datas, scalars)
        synchronous = bool(config.get("XLA_SYNC_WAIT"))
        if synchronous:
            jax.block_until_ready(done)
    except Exception as e:
        raise _failure(graph, "Executing", e) from e
    dt = time.perf_counter_ns() - t0
    metrics.record("DispatchTime", dt)
    if synchronous:
        execution_timer.record_now(t0)
    else:
        execution_timer.dispatched(t0, done)  # ExecuteTime, when the device has finished
    metrics.count("ExecuteComputation")
    vlog("tensor", 5, "Executing IR graph hash %x on device xla:%d done!", prog.graph_hash, device)
    if events.listening():
        events.publish(
            events.ExecuteEvent(
                graph_hash=prog.graph_hash, seconds=dt / 1e9, device=f"xla:{device}", frames=user_frames()
            )
        )
        events.publish(
            events.SyncEvent(
                device=f"xla:{graph.key[-1]}",
                graph=graph,
                reason=reason,
                num_tensors=len(roots),
                graph_hash=prog.graph_hash,
                frames=user_frames(),
                inside=_read_by_library(reason),
            )
        )
    if pending_checks:
        checks.after_run(pending_checks, list(outs[-len(pending_checks) :]))
        outs = outs[: -len(pending_checks)]
    return list(outs)


def _free_leaves(
    graph: Graph, leaves: list[Node], datas: list[Any]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The data leaves nothing outside the graph holds (``donation.free_leaves``), and how many
    operand slots of the graph hold each."""
    all_uses = donation.leaf_uses(graph.nodes, leaves)
    donated = donation.free_leaves(leaves, datas, all_uses)
    return donated, tuple(all_uses[i] for i in donated)


def _load_stored(graph: Graph, text: str, reason: str) -> Program | None:
    """The program an earlier process stored for this graph, told to listeners as a compile."""
    t0 = time.perf_counter_ns()
    stored = program_store.load(text, graph.key[-1])
    if stored is None:
        return None
    executable, donated, uses, order = stored
    device = f"xla:{graph.key[-1]}"
    publish_compile_start(graph, device, reason)
    prog = Program(executable, graph.hash, len(graph.nodes), graph.key[-1], donated, uses, order)
    dt = time.perf_counter_ns() - t0
    metrics.record("CompileTime", dt)
    metrics.count("UncachedCompile")
    metrics.count("PersistentCacheHit")
    publish_compile(graph, prog, device, reason, seconds=dt / 1e9)
    return prog


def execute_isolating(
    roots: Sequence[Node], reason: str, donate: bool = False, replaced: Sequence[int] = ()
) -> tuple[list[Any], dict[int, LoweringError]]:
    """``execute``, keeping a failure where it happened: the roots that depend on the failing
    node get the error (by position), every other root is computed all the same. (Donating
    stays safe on the retry: the failed roots' storages get the error, so nothing reads their
    graphs again, and a leaf those graphs hold has holders outside the retried graph.)"""
    arrays: list[Any] = [None] * len(roots)
    errors: dict[int, LoweringError] = {}
    remaining = list(range(len(roots)))
    while remaining:
        try:
            replacing = [replaced[i] for i in remaining] if replaced else ()
            outs = execute([roots[i] for i in remaining], reason, donate, replacing)
        except LoweringError as e:
            # The failed tensors keep the error; its traceback would keep these frames, and
            # with them every array this sync computed, alive as long as they do.
            e.with_traceback(None)
            failed = _depending_on_failure([roots[i] for i in remaining], e)
            for k in failed:
                errors[remaining[k]] = e
            remaining = [r for k, r in enumerate(remaining) if k not in failed]
            continue
        for i, array in zip(remaining, outs):
            arrays[i] = array
        break
    return arrays, errors


def _depending_on_failure(roots: Sequence[Node], error: LoweringError) -> set[int]:
    """Positions of the roots whose value needs the node that failed (all, when it is unknown)."""
    graph = linearize(roots, failed_ok=True)
    if error.node_index is None or error.node_index >= len(graph.nodes):
        return set(range(len(roots)))
    tainted = [False] * len(graph.nodes)
    tainted[error.node_index] = True
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    for i in range(error.node_index + 1, len(graph.nodes)):
        tainted[i] = any(tainted[position[id(s)]] for s in graph.nodes[i].src)
    return {k for k, r in enumerate(graph.roots) if tainted[r]}


def sync(reason: str = "mark_step", device: int | None = None) -> None:
    """Materialize every live tensor with pending IR (a step barrier).

    In a replica thread (``xlalab.runtime.replicated``) this is the group's barrier: the
    replicas' graphs run together as one SPMD program. Elsewhere, devices that a running
    replica group owns are left to their replicas.
    """
    replica = replica_state.current()
    if replica is not None:
        replica.sync(reason)
        return
    storages = pending_storages(device)
    owned = replica_state.owned_devices()
    if owned:
        storages = [st for st in storages if st.device not in owned]
    first_error = _compute_storages(storages, reason)
    forget_pending(storages)
    if first_error is not None:
        del storages  # the error's traceback holds this frame: let it not hold the tensors
        raise first_error
    for dev in checks.devices(device):
        if dev not in owned:  # checks made where nothing else is pending: a graph of their own
            made = checks.take(dev)
            checks.after_run(made, execute([c.node for c in made], reason))
    if not storages and events.listening():
        # A barrier with nothing pending still marks a step for debuggers that count steps.
        events.publish(events.SyncEvent(reason=reason, num_tensors=0, frames=user_frames()))


def _compute_storages(storages: list[Any], reason: str) -> LoweringError | None:
    """Give every storage its computed value, or its error; the first new error, if any."""
    by_device: dict[int, list[Any]] = {}
    for st in storages:
        by_device.setdefault(st.device, []).append(st)
    first_error: LoweringError | None = None
    for dev, group in sorted(by_device.items()):
        # Every pending value of the device is a root here: leaves no one else holds may be
        # given to XLA.
        arrays, errors = execute_isolating(
            [st.node for st in group], reason, donate=True, replaced=[st.replaced for st in group]
        )
        for i, (st, array) in enumerate(zip(group, arrays)):
            if i in errors:
                # Marked, not pending: reading it raises this error again, later syncs skip it.
                st.node = ir.error(errors[i], st.node.shape, st.node.dtype, dev)
                if not isinstance(errors[i], FailedValueError):
                    # A new failure is reported at the barrier where it happened; a value made
                    # from one reported before raises only when it is read.
                    first_error = first_error or errors[i]
            else:
                st.node = ir.data(array, st.node.shape, st.node.dtype, dev)
    return first_error


def materialize(nodes: Sequence[Node], storages: Sequence[Any], reason: str) -> list[Any]:
    """Arrays for ``nodes`` (values of tensors over ``storages``), syncing those storages only."""
    if all(n.op is ir.DATA for n in nodes):
        return [n.value for n in nodes]
    replica = replica_state.current()
    if replica is not None:
        return replica.materialize(nodes, storages, reason)  # type: ignore[no-any-return]
    return materialize_on_devices(nodes, storages, reason, forget_pending)


def materialize_plan(
    nodes: Sequence[Node], storages: Sequence[Any]
) -> tuple[list[Any], list[int], list[Node]]:
    """What reading ``nodes`` computes on one device: the pending storages among ``storages``
    (their new values come along), the indices of the pending ``nodes``, and the roots."""
    bases: list[Any] = []
    seen: set[int] = set()
    for st in storages:
        if st.node.op is not ir.DATA and id(st) not in seen:
            seen.add(id(st))
            bases.append(st)
    idx = [i for i, n in enumerate(nodes) if n.op is not ir.DATA]
    return bases, idx, [st.node for st in bases] + [nodes[i] for i in idx]


def materialize_finish(
    nodes: Sequence[Node],
    bases: list[Any],
    idx: list[int],
    arrays: Sequence[Any],
    forget: Callable[[list[Any]], None],
) -> list[Any]:
    """Store the bases' new values, and return every node's array (for a plan on one device)."""
    for st, array in zip(bases, arrays):
        st.node = ir.data(array, st.node.shape, st.node.dtype, st.device)
    results = [n.value if n.op is ir.DATA else None for n in nodes]
    for i, array in zip(idx, arrays[len(bases) :]):
        results[i] = array
    forget(bases)
    return results


def _held_on_the_way(nodes: list[Node], device: int, taken: list[Any]) -> list[Any]:
    """The other pending storages of ``device`` whose values the graph of ``nodes`` computes on
    its way (a generation loop's cache, a forward's activations before a ``.item()``).

    A read computes them anyway: kept, the graphs after it start from them. Left pending, every
    later graph computed them again, and a loop that reads a value each iteration with no step
    barrier (transformers' generate checking its stopping criteria per token) compiled a graph
    that grew by one iteration each time."""
    pending = pending_storages(device)
    if not pending:
        return []
    seen: set[int] = set()
    stack = [n for n in nodes if n.op is not ir.DATA]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(s for s in n.src if s.src)
    have = {id(st) for st in taken}
    return [st for st in pending if id(st) not in have and id(st.node) in seen]


def materialize_on_devices(
    nodes: Sequence[Node], storages: Sequence[Any], reason: str, forget: Callable[[list[Any]], None]
) -> list[Any]:
    """``materialize`` device by device, each device's graph on its own (``forget`` drops the
    storages from the pending set)."""
    bases, idx, _ = materialize_plan(nodes, storages)
    results: list[Any] = [n.value if n.op is ir.DATA else None for n in nodes]
    by_device: dict[int, list[int]] = {}
    for i in idx:
        by_device.setdefault(nodes[i].device, []).append(i)
    for dev in sorted(by_device):
        group = [st for st in bases if st.device == dev]
        dev_idx = by_device[dev]
        held = _held_on_the_way([nodes[i] for i in dev_idx] + [st.node for st in group], dev, group)
        group += held
        bases += held
        # Each node once among the roots: reading a pending tensor builds the graph a barrier
        # would (same key, same program), not one with its root listed twice.
        roots = [st.node for st in group]
        position = {id(n): k for k, n in enumerate(roots)}
        where = []
        for i in dev_idx:
            k = position.setdefault(id(nodes[i]), len(roots))
            if k == len(roots):
                roots.append(nodes[i])
            where.append(k)
        arrays, errors = execute_isolating(roots, reason)
        for k, (st, array) in enumerate(zip(group, arrays)):
            if k in errors:
                st.node = ir.error(errors[k], st.node.shape, st.node.dtype, dev)
            else:
                st.node = ir.data(array, st.node.shape, st.node.dtype, dev)
        for i, k in zip(dev_idx, where):
            if k in errors:
                forget(bases)
                raise errors[k]
            results[i] = arrays[k]
    forget(bases)
    return results


def wait_device_ops() -> None:
    """Block until every dispatched computation has finished (and is timed)."""
    jax.effects_barrier()
    for arr in jax.live_arrays():
        arr.block_until_ready()
    execution_timer.drain()
    checks.raise_deferred(wait=True)
