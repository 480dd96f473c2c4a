"""One FX graph from dynamo (or AOTAutograd) as one compiled XLA program.

The graph is not lowered by a second op table: on its first call it runs once on ``xla``
placeholder tensors, so every op goes through the runtime's own dispatch (views, in-place
updates, random ops, decompositions and the lowering table). The IR that run records, the
graph's outputs plus every input it wrote to, is linearized and compiled by the runtime's
``graph.compile_graph`` into one ``jax.jit`` executable (shared with lazy mode's cache).
Every later call is one executable call: the inputs' device arrays in, device data out.

Semantics kept from eager:

- inputs the graph writes to (in-place ops, ``copy_`` into a buffer) are updated in place;
- random ops draw fresh numbers from the device RNG on every call, the ones lazy mode would
  draw (seed and offsets are fed per call, in the order the ops ran when traced); a random op
  making a CPU tensor draws from the CPU's generator, so its graph runs lazily;
- CPU tensor inputs (an optimizer's ``step`` counter) are sent over on each call and CPU
  outputs are brought back; a graph whose inputs are all on the CPU and that moves them to
  xla itself is one program as well;
- a graph whose values cannot be computed in one program (an op without a lowering runs on the
  CPU, or a value is read in the middle) runs lazily on every call instead, with a warning
  naming the op.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import torch
from torch import fx

from xlalab.runtime import (
    backend,
    checks,
    compile_cache,
    config,
    donation,
    events,
    graph,
    ir,
    layouts,
    metrics,
    sharding,
    tensor,
)
from xlalab.runtime.frames import user_frames
from xlalab.runtime.rng import MASK32, rng_operands, seed_of
from xlalab.runtime.tensor import XlaTensor

from . import report
from .report import DynamoExecuteEvent

_EAGER_SETTING = "XLA_USE_EAGER_DEBUG_MODE"


# ----------------------------------------------------------------------------- inputs


def _device_of(args: Sequence[Any]) -> int | None:
    for a in args:
        if isinstance(a, XlaTensor):
            return int(a._st.device)
    return None


# Values of pending nodes that need no input's value (``ones_like(loss)``, the gradient autograd
# feeds a compiled backward), by structural id: equal ids are equal ops of equal shapes, so equal
# values, and JAX arrays are immutable. Saves a program run per step.
_CONSTANTS: dict[int, Any] = {}
# Ops whose value needs no operand's value (only its shape, which the structural id holds).
_VALUE_FREE = {torch.ops.aten.ones_like.default, torch.ops.aten.zeros_like.default}


def _array(t: Any, dev: int) -> Any:
    """The device array holding ``t``'s value now (pending work is synced first)."""
    if isinstance(t, XlaTensor):
        st = t._st
        n = st.node
        if not t._chain:
            if n.op is ir.DATA:
                return n.value
            if n.op in _VALUE_FREE or (not n.src and isinstance(n.op, torch._ops.OpOverload) and n.shape):
                arr = _CONSTANTS.get(n.sid)
                if arr is None:
                    arr = graph.materialize([n], [st], "dynamo_input")[0]
                    _CONSTANTS[n.sid] = arr
                else:
                    tensor.set_node(st, ir.data(arr, n.shape, n.dtype, n.device))  # type: ignore[arg-type]
                    tensor.forget_pending([st])
                return arr
        return graph.materialize([tensor.value(t)], [st], "dynamo_input")[0]
    return tensor.to_device_node(t.detach(), dev).value


def _graph_device(gm: fx.GraphModule) -> int | None:
    """The xla device a graph makes values on, from its nodes' fake values: a graph whose
    inputs are all CPU tensors may move them to xla itself (``x.to(device)`` in the step)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, (tuple, list)) else (val,):
            if isinstance(v, torch.Tensor) and v.device.type == "xla":
                return v.device.index or 0
    return None


def _is_static(gm: fx.GraphModule) -> bool:
    """Whether every placeholder is a tensor of fixed shape (dynamo's guards then fix the shapes)."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return False
        if any(not isinstance(s, int) for s in val.shape):
            return False
    return True


def _key(args: Sequence[Any]) -> tuple[Any, ...]:
    """What a variant of a dynamic graph is specialized on: tensor shapes and dtypes, a view
    argument's strides and offset (which the graph may read, and its views of it carry), other
    values."""
    return tuple(
        (tuple(a.shape), a.dtype, a.device.type, getattr(a, "_layout", None))
        if isinstance(a, torch.Tensor)
        else (type(a), a)
        for a in args
    )


# ----------------------------------------------------------------------------- one compiled variant


@dataclass
class _Output:
    # "root" (an executable output), "input" (an argument itself), "const", or "view": a view of
    # output ``index`` (strides and offset in ``layout``), so that it aliases it as in eager
    kind: str
    index: int = 0
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    cpu: bool = False
    value: Any = None
    # A view of an argument: its strides and storage offset, which AOTAutograd reads to rebuild
    # the alias on the argument (the value computed here is the view's value all the same).
    layout: tuple[tuple[int, ...], int] | None = None
    # A result eager lays out densely in another order than row-major (``x.permute(...) * 2``,
    # ``y.t()`` of an intermediate): its strides, which the result takes as lazy mode's does.
    strides: tuple[int, ...] | None = None


@dataclass
class Variant:
    """The executable for one set of input shapes, and how its inputs and outputs map.

    ``donating`` (when the graph writes to inputs) is the same program with those inputs'
    buffers donated, so XLA updates parameters and optimizer state in place instead of
    allocating new ones each call, as a hand-written ``jax.jit(..., donate_argnums=...)`` step
    does. It runs only when each such input is held by nothing but its tensor (checked per
    call); otherwise ``program`` runs, which leaves its inputs alone.
    """

    program: Any
    ir_graph: graph.Graph
    device: int
    leaves: list[Any]  # per data leaf: an argument index (int) or a constant array
    inputs: list[tuple[int, int]]  # (data leaf position, argument index)
    scalars: list[float]
    # Per random op, its (seed position, offset position) in ``scalars`` and which of the call's
    # draws it takes: the draws come in the order the ops ran when traced, as in lazy mode.
    rng: list[tuple[int, int, int]]
    outputs: list[_Output]
    mutations: list[tuple[int, int, tuple[int, ...], torch.dtype]]  # (root, argument, shape, dtype)
    fixed_scalars: Any = None
    checks: list[checks.Check] = field(default_factory=list)  # their flags are the last outputs
    donating: Any = None  # called as donating(*datas, scalars)
    donated: list[int] = field(default_factory=list)  # argument indices whose buffers it donates
    kept: list[int] = field(default_factory=list)  # the other arguments read from the device
    plain: Callable[[], Any] | None = None  # makes ``program`` when it was not compiled up front
    spmd_inputs: Any = None  # SPMD mode: the shardings ``program`` takes its inputs in
    draws: int = 0  # device RNG offsets a call takes (its random ops', the unused ones' too)

    def __post_init__(self) -> None:
        if not self.rng:
            self.fixed_scalars = jax.device_put(
                np.asarray(self.scalars, np.float64), backend.jax_device(self.device)
            )

    def _may_donate(self, args: Sequence[Any]) -> bool:
        if not all(_exclusive(args[k]) for k in self.donated):
            return False
        # The same storage passed twice (a tensor and its alias) must not be donated either.
        storages = {id(args[k]._st) for k in self.donated}
        if len(storages) < len(self.donated):
            return False
        return not any(type(a := args[k]) is XlaTensor and id(a._st) in storages for k in self.kept)

    def run(self, args: Sequence[Any], name: str) -> list[Any]:
        checks.raise_deferred(wait=False)
        dev = self.device
        datas = self.leaves.copy()
        donate = self.donating is not None and self._may_donate(args)
        for pos, k in self.inputs:
            datas[pos] = _array(args[k], dev)
        scalars = self.fixed_scalars
        if scalars is None:
            vals = list(self.scalars)
            drawn = [rng_operands(dev) for _ in range(self.draws)]
            for seed_pos, offset_pos, k in self.rng:
                seed, offset = drawn[k]
                vals[seed_pos] = seed.value
                vals[offset_pos] = offset.value
            scalars = jax.device_put(np.asarray(vals, np.float64), backend.jax_device(dev))
        elif self.draws:  # random ops whose values nothing uses: the stream moves on as in lazy mode
            for _ in range(self.draws):
                rng_operands(dev)
        t0 = time.perf_counter_ns()
        if donate:
            outs = self.donating(*datas, scalars)
        else:
            if self.program is None:
                self.program = self.plain()  # type: ignore[misc]
            if self.spmd_inputs is not None:
                datas, scalars = sharding.fit_inputs(datas, scalars, self.spmd_inputs)
            outs = self.program(datas, scalars)
        del datas  # a donated buffer is gone: drop the list that held it
        if config.get("XLA_SYNC_WAIT"):
            jax.block_until_ready(outs)
        dt = time.perf_counter_ns() - t0
        metrics.record("ExecuteTime", dt)
        metrics.count("ExecuteComputation")
        if events.listening():
            events.publish(
                DynamoExecuteEvent(
                    graph_hash=self.ir_graph.hash,
                    seconds=dt / 1e9,
                    device=f"xla:{dev}",
                    frames=user_frames(),
                    name=name,
                    graph=self.ir_graph,
                )
            )
        # Written inputs first: a donated input's old buffer is gone, whatever happens next.
        for root, k, shape, dtype in self.mutations:
            _write_back(args[k], ir.data(outs[root], shape, dtype, dev))
        if self.checks:
            checks.after_run(self.checks, list(outs[-len(self.checks) :]))
        results: list[Any] = []
        views = False
        for o in self.outputs:
            if o.kind == "root":
                data = ir.data(outs[o.index], o.shape, o.dtype, dev)
                if o.strides is not None:
                    t = tensor.laid_out_tensor(data, o.strides)
                else:
                    t = tensor.wrap(data, layout=o.layout)
                results.append(tensor.to_cpu(t, "dynamo_output") if o.cpu else t)
            elif o.kind == "input":
                results.append(args[o.index])
            elif o.kind == "view":
                results.append(None)  # once the output it views is made (it may come later)
                views = True
            elif isinstance(o.value, torch.Tensor):
                results.append(o.value.clone())  # a fresh tensor per call, as eager makes one
            else:
                results.append(o.value)
        if views:
            for i, o in enumerate(self.outputs):
                if o.kind == "view":
                    assert o.layout is not None
                    results[i] = results[o.index].as_strided(o.shape, *o.layout)
        return results


def _exclusive(t: Any) -> bool:
    """Whether ``t``'s device buffer is held by ``t``'s storage alone, so that a program may
    take it over (donate it): no pending op reads the value, no other tensor or view shares the
    node, nothing else keeps the array. Counts are ``sys.getrefcount``'s: the storage's
    reference, this function's local and the call's argument."""
    if type(t) is not XlaTensor or t._chain:
        return False
    node = t._st.node
    if node.op is not ir.DATA or sys.getrefcount(node) > 3:
        return False
    arr = node.value
    return arr is not None and sys.getrefcount(arr) <= 3


def _write_back(target: Any, node: ir.Node) -> None:
    """Store a graph's new value for an input it updated in place."""
    if isinstance(target, XlaTensor):
        if target._chain:
            tensor.assign(target, node)
        else:
            tensor.set_node(target._st, node)
            target._vcache = None
        return
    target.copy_(tensor.to_cpu(tensor.wrap(node), "dynamo_output"))


# ----------------------------------------------------------------------------- tracing


class _Run(fx.Interpreter):
    """Runs the graph's ops on xla tensors, through the runtime's own dispatch (a compiled
    optimizer's ``_foreach_*`` ops record as lazy mode records them: per tensor).

    Tracing (``cuts`` given), a random op that makes a CPU tensor is noted there: its draw
    would become a constant of the program, the same numbers on every call.
    """

    def __init__(self, gm: fx.GraphModule, cuts: list[str] | None = None) -> None:
        super().__init__(gm)
        self.cuts = cuts

    def run_node(self, n: fx.Node) -> Any:
        # Checks the node makes (an assertion, an index check) name the user's line it traced.
        checks.origin[0] = checks.where_of(n.meta.get("stack_trace"))
        tensor.FUNCTIONAL[0] = True  # the graph's views reshape values (see tensor.FUNCTIONAL)
        try:
            return super().run_node(n)
        finally:
            checks.origin[0] = None
            tensor.FUNCTIONAL[0] = False

    def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if target is torch.ops.higher_order.with_effects:
            # An op with side effects (linalg's error checks), ordered by a token: run it in order.
            token, op, *rest = args
            res = op(*rest, **kwargs)
            return (token,) if res is None else (token, *res) if isinstance(res, tuple) else (token, res)
        out = super().call_function(target, args, kwargs)
        if self.cuts is not None and _draws_on_cpu(target, out):
            self.cuts.append(
                f"aten::{target._schema.name.split('::')[-1]} draws from the CPU's random generator "
                "(its tensor is a CPU one; one made on xla draws in the program)"
            )
        return out


def _draws_on_cpu(target: Any, out: Any) -> bool:
    """Whether a random op made a CPU tensor (from the CPU's generator)."""
    return (
        isinstance(target, torch._ops.OpOverload)
        and torch.Tag.nondeterministic_seeded in target.tags
        and any(type(t) is torch.Tensor for t in (out if isinstance(out, (tuple, list)) else (out,)))
    )


class NotOneProgram(RuntimeError):
    """Tracing the graph needed a value in the middle (a CPU fallback or a read)."""


def _placeholder(a: Any, dev: int) -> Any:
    if isinstance(a, XlaTensor):
        arr = _array(a, dev)
        # The argument's strides and storage offset come along: a graph reads them (sym_stride
        # under dynamic shapes) and an output that is a view of it is rebuilt from them.
        return tensor.wrap(ir.data(arr, tuple(a.shape), a.dtype, dev), layout=a._layout)
    if isinstance(a, torch.Tensor):
        node = tensor.to_device_node(a.detach(), dev)
        return tensor.wrap(node)
    return a


_VALUE_READ = ("a value was read", "a value was copied")  # cuts that name no op


def _cut_reason(ev: events.Event) -> str | None:
    if isinstance(ev, events.FallbackEvent):
        return f"{ev.op} has no XLA lowering and ran on the CPU"
    if isinstance(ev, events.SyncEvent):
        if ev.reason.startswith("fallback"):
            return f"{ev.reason.partition(':')[2] or 'an op'} has no XLA lowering and ran on the CPU"
        return f"a value was read while tracing ({ev.reason})"
    if isinstance(ev, events.TransferEvent) and ev.direction == "from_device":
        return "a value was copied to the CPU while tracing"
    return None


def trace(gm: fx.GraphModule, args: Sequence[Any], dev: int, name: str) -> Variant:
    """Run ``gm`` once on placeholders over ``args``' values and compile what it recorded."""
    placeholders = [_placeholder(a, dev) for a in args]
    sharding.carry_annotations(args, placeholders)
    originals = [p._st.node if isinstance(p, XlaTensor) else None for p in placeholders]
    cuts: list[str] = []

    def watch(ev: events.Event) -> None:
        reason = _cut_reason(ev)
        if reason is not None:
            cuts.append(reason)

    # The trace's draws are thrown away, the program's own are made per call: every RNG the
    # trace may draw from goes back to where it was. The device RNG for a lowered random op;
    # the CPU's for one that runs on the CPU (whose graph then runs lazily, drawing again).
    rng_state = torch.xla.get_rng_state(dev)  # type: ignore[attr-defined]
    cpu_rng_state = torch.get_rng_state()
    rng_start = seed_of(dev)[1]
    eager = config.get(_EAGER_SETTING)
    unsubscribe = events.subscribe(watch)
    mark = checks.mark()
    try:
        if eager:
            config.set(_EAGER_SETTING, False)  # traced, not run op by op
        with torch.no_grad():
            outs = _Run(gm, cuts).run(*placeholders)
        draws = (seed_of(dev)[1] - rng_start) & MASK32
    finally:
        unsubscribe()
        if eager:
            config.set(_EAGER_SETTING, True)
        torch.xla.set_rng_state(rng_state, dev)  # type: ignore[attr-defined]
        torch.set_rng_state(cpu_rng_state)
        made = checks.made_since(mark)  # the graph's own assertions and index checks
    if cuts:
        # The op that cut the graph, rather than the copy that brought its operands over.
        raise NotOneProgram(next((c for c in cuts if not c.startswith(_VALUE_READ)), cuts[0]))
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    out_vals = gm.graph.output_node().args[0]
    out_metas = (
        [getattr(o, "meta", {}).get("val") if isinstance(o, fx.Node) else None for o in out_vals]
        if isinstance(out_vals, (tuple, list))
        else [None] * len(outs)
    )

    roots: list[ir.Node] = []
    outputs: list[_Output] = []
    by_placeholder = {id(p): k for k, p in enumerate(placeholders) if isinstance(p, torch.Tensor)}
    storages = {id(p._st) for p in placeholders if isinstance(p, XlaTensor)}
    whole = _whole_outputs(outs, out_metas, storages)
    for i, o in enumerate(outs):
        meta = out_metas[i] if i < len(out_metas) else None
        base = whole.get(id(o._st)) if isinstance(o, XlaTensor) else None
        if base is not None and base != i and o.dtype == outs[base].dtype:
            # A view of another output (``return y, y[0]``, ``return y.t(), y``) stays its view,
            # as eager returns it.
            within = (tuple(o.stride()), int(o.storage_offset()))
            outputs.append(_Output("view", base, tuple(o.shape), o.dtype, layout=within))
            continue
        if (
            isinstance(o, XlaTensor)
            and id(o) in by_placeholder
            and isinstance(args[by_placeholder[id(o)]], XlaTensor)
        ):
            outputs.append(_Output("input", by_placeholder[id(o)]))
        elif isinstance(o, XlaTensor):
            cpu = _on_cpu(meta)
            view = bool(o._chain) and id(o._st) in storages
            layout = (tuple(o.stride()), int(o.storage_offset())) if view else None
            strides = None if view else _permuted(o)
            outputs.append(
                _Output("root", len(roots), tuple(o.shape), o.dtype, cpu, layout=layout, strides=strides)
            )
            roots.append(tensor.value(o))
        else:
            outputs.append(_Output("const", value=o))
    mutations: list[tuple[int, int, tuple[int, ...], torch.dtype]] = []
    for k, (p, orig) in enumerate(zip(placeholders, originals)):
        if orig is not None and p._st.node is not orig:
            mutations.append((len(roots), k, tuple(p.shape), p.dtype))
            roots.append(p._st.node)
    for p in placeholders:
        if isinstance(p, XlaTensor):
            tensor.forget_pending([p._st])
    variant = _compile(
        [*roots, *[c.node for c in made]], placeholders, originals, outputs, mutations, dev, name, rng_start
    )
    variant.checks = made
    variant.draws = draws
    return variant


def _on_cpu(meta: Any) -> bool:
    """Whether torch computes the output on the CPU (its fake value says)."""
    return isinstance(meta, torch.Tensor) and meta.device.type == "cpu"


def _permuted(t: XlaTensor) -> tuple[int, ...] | None:
    """``t``'s strides when they lay it out densely in another order than row-major (from its
    storage's start), else None."""
    strides = tuple(t.stride())
    if t.storage_offset() or layouts.memory_order(t.shape, strides) is None:
        return None
    return strides


def _whole_outputs(outs: Sequence[Any], metas: Sequence[Any], inputs: set[int]) -> dict[int, int]:
    """Per storage the graph made (not an input's), the output holding its whole value: one
    that is no view if any, else one laid out over all of it (``y.t()`` of ``y``). The
    program computes that output; the others over the storage are its views, as in eager."""
    whole: dict[int, int] = {}
    for i, o in enumerate(outs):
        if type(o) is not XlaTensor or id(o._st) in inputs or _on_cpu(metas[i] if i < len(metas) else None):
            continue
        key = id(o._st)
        if not o._chain:
            if key not in whole or outs[whole[key]]._chain:
                whole[key] = i
        elif key not in whole and _permuted(o) is not None and o.numel() == _numel(o._st.node.shape):
            whole[key] = i
    return whole


def _numel(shape: Any) -> int:
    n = 1
    for s in shape or ():
        n *= int(s)
    return n


def _compile(
    roots: list[ir.Node],
    placeholders: list[Any],
    originals: list[ir.Node | None],
    outputs: list[_Output],
    mutations: list[tuple[int, int, tuple[int, ...], torch.dtype]],
    dev: int,
    name: str,
    rng_start: int,
) -> Variant:
    if not roots:  # nothing to compute: a graph of constants and aliases
        return Variant(_NoProgram(), graph.linearize([]), dev, [], [], [], [], outputs, mutations)
    g = graph.linearize(roots)
    arg_of = {id(n): k for k, n in enumerate(originals) if n is not None}
    leaves: list[Any] = []
    inputs: list[tuple[int, int]] = []
    scalars: list[float] = []
    scalar_pos: dict[int, int] = {}
    for n in g.nodes:
        if n.op is ir.DATA:
            k = arg_of.get(id(n))
            if k is None:
                leaves.append(n.value)  # a constant of the graph
            else:
                inputs.append((len(leaves), k))
                leaves.append(n.value)
        elif n.op is ir.SCALAR:
            scalar_pos[id(n)] = len(scalars)
            scalars.append(float(n.value))
    rng: list[tuple[int, int, int]] = []
    for n in g.nodes:
        if isinstance(n.arg, tuple) and len(n.arg) == 2 and isinstance(n.arg[1], tuple):
            for item in n.arg[1]:
                if isinstance(item, tuple) and len(item) == 2 and item[0] == "__rng__":
                    seed_slot, offset_slot = item[1]
                    offset_pos = scalar_pos[id(n.src[offset_slot.i])]
                    # The program's order of ops is not the trace's: the offset it drew says.
                    k = (int(scalars[offset_pos]) - rng_start) & MASK32
                    rng.append((scalar_pos[id(n.src[seed_slot.i])], offset_pos, k))
    jdev = backend.jax_device(dev)
    scalar_array = jax.device_put(np.asarray(scalars, np.float64), jdev)
    key: tuple[Any, ...] = (g.key, graph._trace_settings())
    leaves, scalar_array, spmd_key = sharding.compiled_graph_inputs(g, leaves, scalar_array)
    if spmd_key is not None:
        key = (*key, spmd_key)  # lazy mode's key for an SPMD program: the two share it
    # Inputs the graph writes to (an optimizer's parameters and state) are donated: XLA then
    # updates them in place. Not in SPMD mode, whose programs pin shardings of their own.
    written = {k for _, k, _, _ in mutations}
    donated = [
        k for _, k in inputs if k in written and type(placeholders[k]) is XlaTensor and not sharding.enabled()
    ]
    donate_positions = tuple(pos for pos, k in inputs if k in donated)
    written_by = {k: root for root, k, _, _ in mutations}
    replacing = tuple(written_by[k] for _, k in inputs if k in donated)  # per donated leaf, its new value
    donating = None
    if donated:
        donating = _compile_donating(g, leaves, scalar_array, donate_positions, replacing, key, name)
    program: Any = None
    if donating is None:
        program = _plain_program(g, leaves, scalar_array, key, dev, name)
    # Keep no input's array alive through the graph: inputs are fed per call.
    for pos, _ in inputs:
        leaves[pos] = None
    for n in g.nodes:
        if n.op is ir.DATA and id(n) in arg_of:
            n.value = None
    report.note_program(name, g, donating.program if donating is not None else program)
    variant = Variant(program, g, dev, leaves, inputs, scalars, rng, outputs, mutations)
    _spmd_variant(variant)
    if donating is not None:
        # The non-donating program, for a call whose written input is shared, compiles then.
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in donating.avals]
        variant.donating = donating.call
        variant.donated = donated
        variant.kept = [k for _, k in inputs if k not in donated]
        variant.plain = lambda: _plain_program(g, shapes, scalar_array, key, dev, name)
    return variant


def _plain_program(
    g: graph.Graph, leaves: list[Any], scalar_array: Any, key: Any, dev: int, name: str
) -> Any:
    """The runtime's own program for ``g`` (shared with lazy mode's cache), one that leaves its
    inputs alone: these inputs may be held elsewhere."""
    program = graph.CACHE.get(key)
    if program is None or getattr(program, "donated", None):
        fresh = graph.compile_graph(g, list(leaves), scalar_array, "dynamo_compile", source=name)
        if program is None:
            graph.CACHE.put(key, fresh)
        program = fresh
    else:
        graph.note_cache_hit(g, program, dev, "dynamo_compile", source=name)
    return program


@dataclass
class _Donating:
    program: graph.Program
    call: Any
    avals: list[Any]


# Donating programs by graph key, least recently used first out (as the runtime's cache).
_DONATING = compile_cache.ProgramCache(limit=256)


def _compile_donating(
    g: graph.Graph,
    leaves: list[Any],
    scalar_array: Any,
    positions: tuple[int, ...],
    replacing: tuple[int, ...],
    key: Any,
    name: str,
) -> _Donating | None:
    """``g`` compiled with the data leaves at ``positions`` donated, counted as the runtime
    counts its compiles; None if it does not lower (the runtime's own compile then reports why).

    ``replacing[i]`` is the root that is the new value of the leaf at ``positions[i]``: the
    program returns its roots in ``donation.output_order``, so that each buffer goes to its own
    new value, and the call puts them back in the roots' order."""
    full_key = (key, positions, replacing)
    hit = _DONATING.get(full_key)
    device = f"xla:{g.key[-1]}"
    if hit is not None:
        graph.note_cache_hit(g, hit.program, int(g.key[-1]), "dynamo_compile", source=name)
        return hit
    fn = graph.build_function(g)
    n = len(leaves)
    order = donation.output_order(len(g.roots), replacing)

    def flat(*operands: Any) -> list[Any]:
        return donation.in_program_order(fn(list(operands[:n]), operands[n]), order)

    graph.publish_compile_start(g, device, "dynamo_compile")
    t0 = time.perf_counter_ns()
    try:
        executable = jax.jit(flat, donate_argnums=positions).lower(*leaves, scalar_array).compile()
    except Exception:
        return None
    dt = time.perf_counter_ns() - t0
    metrics.record("CompileTime", dt)
    metrics.count("UncachedCompile")
    program = graph.Program(executable, g.hash, len(g.nodes), int(g.key[-1]))
    graph.publish_compile(g, program, device, "dynamo_compile", seconds=dt / 1e9, source=name)
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves]

    def call(*operands: Any) -> list[Any]:
        outs = executable(*operands)
        return donation.in_root_order(outs, order) if order else outs  # type: ignore[no-any-return]

    done = _Donating(program, call, avals)
    _DONATING.put(full_key, done)
    return done


def _spmd_variant(variant: Variant) -> None:
    """In SPMD mode, note the shardings the variant's program takes its inputs in (each call
    lays its arguments out so) and lay the fixed scalars out so once."""
    program = variant.program
    if program is None or not hasattr(program, "executable"):
        return
    variant.spmd_inputs = sharding.program_input_shardings(program.executable)
    if variant.spmd_inputs is not None and variant.fixed_scalars is not None:
        variant.fixed_scalars = sharding.put(variant.fixed_scalars, variant.spmd_inputs[1])


class _NoProgram:
    graph_hash = 0

    def __call__(self, datas: list[Any], scalars: Any) -> list[Any]:
        return []


# ----------------------------------------------------------------------------- the compiled graph


class CompiledGraph:
    """A dynamo/AOT FX graph, compiled on its first call (per input shapes if it is dynamic)."""

    def __init__(self, gm: fx.GraphModule, name: str) -> None:
        self.gm = gm
        self.name = name
        self.static = _is_static(gm)
        self.device = _graph_device(gm)  # where it computes when no input is on xla
        self.variants: dict[tuple[Any, ...], Variant] = {}
        self.lazy_reason: str | None = None
        self._only: Variant | None = None

    def __call__(self, *args: Any) -> list[Any]:
        only = self._only
        if only is not None:
            return only.run(args, self.name)
        return self._slow_call(args)

    def _slow_call(self, args: Sequence[Any]) -> list[Any]:
        dev = _device_of(args)
        if dev is None:
            dev = self.device
        if dev is None:
            out = self.gm(*args)  # nothing on xla: a CPU graph runs eagerly
            return list(out) if isinstance(out, (tuple, list)) else [out]
        if self.lazy_reason is not None:
            return self._lazy(args)
        key: tuple[Any, ...] = () if self.static else _key(args)
        spmd_key = sharding.arguments_key(args)  # SPMD mode: one program per input layout
        if spmd_key is not None:
            key = (key, spmd_key)
        variant = self.variants.get(key)
        if variant is None:
            try:
                variant = trace(self.gm, args, dev, self.name)
            except NotOneProgram as e:
                self.lazy_reason = str(e)
                warnings.warn(
                    f"xlalab: {self.name}: {e}, so this compiled graph cannot run as one XLA program; "
                    "it runs lazily on every call (op by op recording, one sync later). Give the op a "
                    "lowering, or move the read out of the compiled function.",
                    stacklevel=3,
                )
                report.note_lazy(self.name, str(e))
                return self._lazy(args)
            self.variants[key] = variant
            if self.static and spmd_key is None:
                self._only = variant
        return variant.run(args, self.name)

    def _lazy(self, args: Sequence[Any]) -> list[Any]:
        out = _Run(self.gm).run(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def hlo(self, kind: str = "hlo") -> str:
        """The compiled program's HLO (``kind="hlo"``) or StableHLO (``"stablehlo"``) text."""
        variant = self._only or next(iter(self.variants.values()), None)
        if variant is None or not variant.ir_graph.nodes:
            return ""
        fn = graph.build_function(variant.ir_graph)
        avals = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in _leaf_avals(variant)]
        scal = jax.ShapeDtypeStruct((len(variant.scalars),), np.float64)
        lowered = jax.jit(fn).lower(avals, scal)
        if kind == "stablehlo":
            return str(lowered.as_text())
        return str(lowered.compiler_ir("hlo").as_hlo_text())  # type: ignore[union-attr]


def _leaf_avals(variant: Variant) -> list[Any]:
    from xlalab.runtime.dtypes import to_jnp

    out = []
    for n in variant.ir_graph.nodes:
        if n.op is ir.DATA:
            out.append(jax.ShapeDtypeStruct(tuple(n.shape or ()), to_jnp(n.dtype or torch.float32)))
    return out


Compiler = Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]
