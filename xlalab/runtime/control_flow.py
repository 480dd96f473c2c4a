"""``torch.cond``, ``while_loop``, ``scan`` and ``map`` on xla tensors: one XLA conditional or
loop, no sync.

Eager PyTorch reads the predicate on the host and runs one branch (or a loop, round by round).
Reading it here would cut the graph and wait for the device every time, which is what these
operators exist to avoid. Instead each branch (or the loop's condition and body, or the scanned
function) is traced once, on placeholder tensors, into a *body*: a small graph whose inputs are
the operands and the outside values it reads. The op becomes one node whose lowering is
``lax.cond``, ``lax.while_loop`` or ``lax.scan`` over the bodies, so the choice and the rounds
happen on the device.

The same handlers serve lazy mode (``torch.cond`` outside ``torch.compile`` runs its own small
dynamo graph, whose ops reach the runtime one by one) and compiled mode (the FX graph's
``cond`` node, traced by ``xlalab.dynamo``). Gradients come from torch's own rules for these
operators, whose backward is another cond or scan.

- Values a body reads that do not depend on its operands (a closed-over tensor, a constant it
  makes, a float argument) are computed outside, before the conditional, and passed in.
- A device check made inside a body (an index range, ``torch._assert_async``) becomes an extra
  output: the branch not taken reports "no failure", a loop ORs its rounds' flags.
- A random op made in a loop body draws new numbers each round (the round's count is folded
  into its key), as eager's draws in a Python loop do.
- A body's values have no host copy while it is traced: reading one (``.item()``) or an op
  with no lowering (a CPU fallback) inside the body raises at that op, saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import torch
import torch.utils._pytree as pytree
from jax import lax
from torch import fx

from . import checks, graph, ir, metrics, rng, tensor
from .frames import ir_frames
from .graph import Graph, LoweringError
from .ir import Node
from .tensor import XlaTensor, value, wrap

COND = "xla::cond"
WHILE = "xla::while"
SCAN = "xla::scan"
PARAM = "xla::body_input"  # a body's placeholder for one of its operands


class Bodies:
    """The static argument of a control-flow node: its bodies, compared by structure."""

    __slots__ = ("_hash", "key")
    key: tuple[Any, ...]

    def _keyed(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.key == self.key  # type: ignore[attr-defined]

    def named(self) -> dict[str, Body]:
        raise NotImplementedError

    def summary(self) -> str:
        """Each body's ops, for graph dumps: ``true=[aten::sin], false=[aten::cos, aten::mul]``."""
        return ", ".join(f"{name}=[{', '.join(body.op_names())}]" for name, body in self.named().items())


class Body:
    """One traced function: the structure of its graph (``key``) and its instructions.

    It holds no Node (so no device array): bodies live in the static arguments of nodes, and
    those stay interned as long as the process runs.
    """

    __slots__ = ("_fn", "_hash", "checks", "instrs", "key", "roots")

    def __init__(self, key: tuple[Any, ...], instrs: list[Any], roots: list[int], n_checks: int) -> None:
        self.key = key
        self.instrs = instrs
        self.roots = roots
        self.checks = n_checks  # the last roots are the flags of the checks the body made
        self._hash = hash(key)
        self._fn: Callable[[list[Any], Any], list[Any]] | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return type(other) is Body and other.key == self.key

    def op_names(self) -> list[str]:
        ops = [ins[1] for ins in self.instrs if ins[0] == "op"]
        return [op if isinstance(op, str) else op._schema.name for op in ops]

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        if self._fn is None:
            self._fn = graph.function_of(self.instrs, self.roots)
        return self._fn(list(inputs), None)


class _Traced:
    """A body being traced: its placeholders, and the outside nodes it reads (its inputs)."""

    def __init__(self, operands: Sequence[Any], what: str, sliced: tuple[int, int] = (0, 0)) -> None:
        """``sliced``: the range of operands of which the body sees one slice along dim 0 at a
        time (a scan's ``xs``)."""
        self.what = what
        self.inputs: dict[Node, int] = {}
        self.params: list[Any] = []  # per operand: its placeholder tensor, or the operand itself
        for a in operands:
            if isinstance(a, XlaTensor):
                n = value(a)
                shape = n.shape[1:] if sliced[0] <= len(self.inputs) < sliced[1] else n.shape  # type: ignore[index]
                p = Node(PARAM, (), len(self.inputs), shape, n.dtype, n.device)
                self.inputs[p] = len(self.inputs)
                self.params.append(wrap(p))
            else:
                self.params.append(a)

    def trace(self, fn: Callable[..., Any]) -> tuple[Body, list[Node], list[checks.Check], Any]:
        """``fn`` on the placeholders: its body, its outputs' nodes, the checks it made and the
        structure of what it returned."""
        mark = checks.mark()
        drawn: set[Node] = set()
        rng.BODIES.draws.append(drawn)  # also tells the runtime that a body is being traced
        try:
            out = _NamingLines(fn).run(*self.params) if isinstance(fn, fx.GraphModule) else fn(*self.params)
        except LoweringError as e:
            raise RuntimeError(f"{self.what}: {e}") from e
        finally:
            rng.BODIES.draws.pop()
            made = checks.made_since(mark)
        flat, spec = pytree.tree_flatten(out)
        for o in flat:
            if not isinstance(o, XlaTensor):
                raise RuntimeError(
                    f"{self.what} must return xla tensors only, but returned {type(o).__name__}: "
                    "create constants inside it on the xla device"
                )
        outs = [value(o) for o in flat]
        roots = outs + [c.node for c in made]
        return self._body(roots, len(made), drawn), outs, made, spec

    def _body(self, roots: list[Node], n_checks: int, drawn: set[Node]) -> Body:
        depends = self._depending(roots, drawn)
        index: dict[Node, int] = {}
        nodes: list[Node] = []
        key: list[Any] = []
        inputs = self.inputs

        def place(n: Node) -> None:
            index[n] = len(nodes)
            nodes.append(n)
            if n in depends and n not in inputs:
                key.append(n.sid)
                key.extend(index[s] for s in n.src)
            else:  # an outside value: an input of the body
                k = inputs.setdefault(n, len(inputs))
                key.append(("in", k, n.sid))

        for root in roots:
            stack = [root]
            while stack:
                n = stack[-1]
                if n in index:
                    stack.pop()
                    continue
                pending = [] if n in inputs or n not in depends else [s for s in n.src if s not in index]
                if pending:
                    stack.extend(pending)
                    continue
                stack.pop()
                place(n)
        key.append(-1)
        key.extend(index[r] for r in roots)
        body_graph = Graph((), nodes, [index[r] for r in roots])
        mine = {n: inputs[n] for n in nodes if n in inputs}
        instrs, positions, _, _ = graph._instructions(body_graph, mine)
        return Body(tuple(key), instrs, positions, n_checks)

    def _depending(self, roots: list[Node], drawn: set[Node]) -> set[Node]:
        """The nodes under ``roots`` whose value depends on a placeholder, or on a random op
        the body made (one of whose offsets is in ``drawn``): it draws each time the body runs,
        so it stays inside. A random value made before the body is a value like any other."""
        params = {n for n in self.inputs if n.op == PARAM}
        depends: set[Node] = set(params)
        seen: set[Node] = set(params)
        for root in roots:
            stack = [root]
            while stack:
                n = stack[-1]
                if n in seen:
                    stack.pop()
                    continue
                todo = [s for s in n.src if s not in seen]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                seen.add(n)
                if any(s in depends or s in drawn for s in n.src):
                    depends.add(n)
        return depends


class _NamingLines(fx.Interpreter):
    """Runs a body dynamo captured: a check its ops make names the user's line that the FX node
    traced, not the generated code that runs it."""

    def run_node(self, n: fx.Node) -> Any:
        outer = checks.origin[0]
        checks.origin[0] = checks.where_of(n.meta.get("stack_trace")) or outer
        try:
            return super().run_node(n)
        finally:
            checks.origin[0] = outer


def _outside(traced: _Traced) -> list[Node]:
    """The body inputs that are not placeholders, in input order: the op node's operands."""
    return [n for n in sorted(traced.inputs, key=traced.inputs.__getitem__) if n.op != PARAM]


def _operand_nodes(operands: Sequence[Any]) -> list[Node]:
    return [value(a) for a in operands if isinstance(a, XlaTensor)]


_FLAG: tuple[tuple[ir.Shape, torch.dtype]] = (((), torch.bool),)  # a check's "it failed" output


def _types(nodes: Sequence[Node]) -> tuple[tuple[ir.Shape, torch.dtype], ...]:
    return tuple((tuple(n.shape or ()), n.dtype or torch.float32) for n in nodes)


def _frames() -> Any:
    """Where the user made the op, when XLA_IR_DEBUG records lines (as for every other op)."""
    return ir_frames(tensor._IR_DEBUG[1]) if tensor._IR_DEBUG[0] else None


def _describe(nodes: Sequence[Node]) -> str:
    return ", ".join(f"{tuple(n.shape or ())} {str(n.dtype).replace('torch.', '')}" for n in nodes)


def _results(node: Node, n_out: int, made: list[tuple[int, checks.Check]]) -> list[XlaTensor]:
    """The op's outputs as tensors; the checks its bodies made re-pointed at their flags."""
    for i, c in made:
        checks.add(checks.Check(ir.item(node, n_out + i), c.error, c.message, c.deferred))
    return [wrap(ir.item(node, i)) for i in range(n_out)]


# ----------------------------------------------------------------------------- cond


class CondBodies(Bodies):
    """The static argument of a cond node: its two branches."""

    __slots__ = ("false", "true")

    def __init__(self, true: Body, false: Body) -> None:
        self.true = true
        self.false = false
        self._keyed((true, false))

    def named(self) -> dict[str, Body]:
        return {"true": self.true, "false": self.false}


def cond(
    pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], operands: Sequence[Any]
) -> Any:
    """``torch.ops.higher_order.cond`` with xla tensors among its arguments."""
    if not isinstance(pred, XlaTensor):  # known on the host: run the branch, as eager does
        return (true_fn if bool(pred) else false_fn)(*operands)
    if pred.numel() != 1:
        raise RuntimeError(f"Expected pred to be bool or single-element tensor, but got {tuple(pred.shape)}.")
    traced = _Traced(operands, "torch.cond's branch")
    true, true_outs, true_checks, spec = traced.trace(true_fn)
    false, false_outs, false_checks, _ = traced.trace(false_fn)
    if _types(true_outs) != _types(false_outs):
        raise RuntimeError(
            "torch.cond: both branches must return tensors of the same shapes and dtypes, but the "
            f"true branch returns ({_describe(true_outs)}) and the false branch ({_describe(false_outs)})"
        )
    p = value(pred)
    outs = _types(true_outs)
    flags = _FLAG * (len(true_checks) + len(false_checks))
    src = (p, *_outside_all(traced, operands))
    node = Node(COND, src, CondBodies(true, false), None, None, p.device, outs=outs + flags, frames=_frames())
    metrics.count("xla::cond")
    made = list(enumerate(true_checks + false_checks))
    return pytree.tree_unflatten(_results(node, len(outs), made), spec)


def _outside_all(traced: _Traced, operands: Sequence[Any]) -> list[Node]:
    """The op node's operands after the predicate: the tensors among ``operands``, then the
    outside values the bodies read (the order of ``traced.inputs``)."""
    return _operand_nodes(operands) + _outside(traced)


def _lower_cond(vals: list[Any], arg: CondBodies, shape: Any, dtype: Any) -> Any:
    pred = jnp.reshape(vals[0], ()).astype(jnp.bool_)
    inputs = list(vals[1:])
    no = jnp.zeros((), jnp.bool_)
    t, f = arg.true, arg.false

    def true_branch(ins: list[Any]) -> list[Any]:
        return t(ins) + [no] * f.checks

    def false_branch(ins: list[Any]) -> list[Any]:
        out = f(ins)
        n = len(out) - f.checks
        return out[:n] + [no] * t.checks + out[n:]

    return tuple(lax.cond(pred, true_branch, false_branch, inputs))


graph.SPECIAL_LOWERINGS[COND] = _lower_cond  # type: ignore[assignment]


# ----------------------------------------------------------------------------- while_loop


class LoopBodies(Bodies):
    """The static argument of a while node: the condition, the body, how many values it carries."""

    __slots__ = ("body", "carried", "condition")

    def __init__(self, condition: Body, body: Body, carried: int) -> None:
        self.condition = condition
        self.body = body
        self.carried = carried
        self._keyed((condition, body, carried))

    def named(self) -> dict[str, Body]:
        return {"cond": self.condition, "body": self.body}


def while_loop(
    cond_fn: Callable[..., Any],
    body_fn: Callable[..., Any],
    carried_inputs: Sequence[Any],
    additional_inputs: Sequence[Any],
    mutated_arg_indices: str = "",
) -> Any:
    """``torch.ops.higher_order.while_loop`` with xla tensors among its arguments."""
    operands = (*carried_inputs, *additional_inputs)
    if mutated_arg_indices or not all(isinstance(a, XlaTensor) for a in carried_inputs):
        return _python_loop(cond_fn, body_fn, carried_inputs, additional_inputs)
    traced = _Traced(operands, "while_loop's body")
    condition, cond_outs, _, _ = traced.trace(cond_fn)  # a check in the condition is not kept
    if len(cond_outs) != 1 or cond_outs[0].shape != () or cond_outs[0].dtype != torch.bool:
        raise RuntimeError(
            f"cond_fn must return a boolean scalar tensor or a boolean but got ({_describe(cond_outs)})"
        )
    body, body_outs, body_checks, _ = traced.trace(body_fn)
    carried = [value(a) for a in carried_inputs]
    if _types(body_outs) != _types(carried):
        raise RuntimeError(
            "while_loop: body_fn must return what it carries, with the same shapes and dtypes: it "
            f"takes ({_describe(carried)}) and returns ({_describe(body_outs)})"
        )
    condition = Body(condition.key, condition.instrs, condition.roots[:1], 0)
    outs = _types(carried) + _FLAG * len(body_checks)
    node = Node(
        WHILE,
        tuple(_outside_all(traced, operands)),
        LoopBodies(condition, body, len(carried)),
        None,
        None,
        carried[0].device,
        outs=outs,
        frames=_frames(),
    )
    metrics.count("xla::while")
    return tuple(_results(node, len(carried), list(enumerate(body_checks))))


def _python_loop(
    cond_fn: Callable[..., Any],
    body_fn: Callable[..., Any],
    carried: Sequence[Any],
    additional: Sequence[Any],
) -> Any:
    """The loop run round by round, reading the condition on the host each time (as eager):
    what a loop that carries Python numbers, or writes its inputs in place, gets."""
    vals = tuple(carried)
    while bool(cond_fn(*vals, *additional)):
        vals = tuple(body_fn(*vals, *additional))
    return tuple(v.clone() if isinstance(v, torch.Tensor) else v for v in vals)


def _lower_while(vals: list[Any], arg: LoopBodies, shape: Any, dtype: Any) -> Any:
    n = arg.carried
    rest = list(vals[n:])
    flags0 = [jnp.zeros((), jnp.bool_)] * arg.body.checks

    def keep_going(state: tuple[Any, list[Any], list[Any]]) -> Any:
        return jnp.reshape(arg.condition(state[1] + rest)[0], ()).astype(jnp.bool_)

    def one_round(state: tuple[Any, list[Any], list[Any]]) -> tuple[Any, list[Any], list[Any]]:
        count, carried, flags = state
        graph.LOOP_ITERATIONS.counts.append(count)
        try:
            out = arg.body(carried + rest)
        finally:
            graph.LOOP_ITERATIONS.counts.pop()
        return count + 1, out[:n], [f | g for f, g in zip(flags, out[n:])]

    start = (jnp.zeros((), jnp.uint32), list(vals[:n]), flags0)
    _, carried, flags = lax.while_loop(keep_going, one_round, start)
    return (*carried, *flags)


graph.SPECIAL_LOWERINGS[WHILE] = _lower_while  # type: ignore[assignment]


# ----------------------------------------------------------------------------- scan and map


class ScanBody(Bodies):
    """The static argument of a scan node: the step function and how its operands split."""

    __slots__ = ("body", "carried", "scanned")

    def __init__(self, body: Body, carried: int, scanned: int) -> None:
        self.body = body
        self.carried = carried
        self.scanned = scanned
        self._keyed((body, carried, scanned))

    def named(self) -> dict[str, Body]:
        return {"step": self.body}


def scan(
    combine_fn: Callable[..., Any], init: Sequence[Any], xs: Sequence[Any], additional_inputs: Sequence[Any]
) -> Any:
    """``torch.ops.higher_order.scan``: ``combine_fn(*carry, *x_slices, *additional)`` gives the
    next carry and this step's outputs; the result is the last carry and the stacked outputs."""
    from torch._higher_order_ops.scan import generic_scan

    if not xs or not all(isinstance(a, XlaTensor) for a in (*init, *xs)) or xs[0].shape[0] == 0:
        return generic_scan(combine_fn, init, xs, additional_inputs=additional_inputs)
    out = _scan(combine_fn, list(init), list(xs), list(additional_inputs), "scan's combine_fn")
    return out[0] + out[1]


def map_impl(f: Callable[..., Any], xs: Sequence[Any], pos_args: Sequence[Any]) -> Any:
    """``torch.ops.higher_order.map_impl``: ``f`` on each slice of ``xs`` along dim 0, stacked."""
    from torch._higher_order_ops.map import map_dense

    if not xs or not all(isinstance(a, XlaTensor) for a in xs) or xs[0].shape[0] == 0:
        return map_dense(f, xs, pos_args)
    _, ys, spec = _scan(f, [], list(xs), list(pos_args), "map's function")
    return pytree.tree_unflatten(ys, spec)


def _scan(
    fn: Callable[..., Any], init: list[Any], xs: list[Any], rest: list[Any], what: str
) -> tuple[list[XlaTensor], list[XlaTensor], Any]:
    """The last carry, the stacked outputs and their structure."""
    length = xs[0].shape[0]
    for x in xs:
        if x.shape[0] != length:
            sizes = [tuple(x.shape) for x in xs]
            raise RuntimeError(f"{what}: all xs must have the same size along dim 0, got {sizes}")
    operands = (*init, *xs, *rest)
    traced = _Traced(operands, what, sliced=(len(init), len(init) + len(xs)))
    body, outs, made, spec = traced.trace(fn)
    carried = [value(a) for a in init]
    if _types(outs[: len(init)]) != _types(carried):
        raise RuntimeError(
            f"{what} must return the next carry with the shapes and dtypes of init: init is "
            f"({_describe(carried)}), it returns ({_describe(outs[: len(init)])})"
        )
    ys = outs[len(init) :]
    shapes = _types(carried) + tuple(((length, *shape), dtype) for shape, dtype in _types(ys))
    node = Node(
        SCAN,
        tuple(_outside_all(traced, operands)),
        ScanBody(body, len(init), len(xs)),
        None,
        None,
        value(xs[0]).device,
        outs=shapes + _FLAG * len(made),
        frames=_frames(),
    )
    metrics.count("xla::scan")
    results = _results(node, len(shapes), list(enumerate(made)))
    if init:  # the structure of the outputs alone (map's spec is the whole output's)
        spec = pytree.tree_structure(results[len(init) :])
    return results[: len(init)], results[len(init) :], spec


def _lower_scan(vals: list[Any], arg: ScanBody, shape: Any, dtype: Any) -> Any:
    n, m = arg.carried, arg.scanned
    xs, rest = list(vals[n : n + m]), list(vals[n + m :])
    flags0 = [jnp.zeros((), jnp.bool_)] * arg.body.checks

    def step(state: tuple[Any, list[Any], list[Any]], x: list[Any]) -> tuple[Any, list[Any]]:
        count, carried, flags = state
        graph.LOOP_ITERATIONS.counts.append(count)
        try:
            out = arg.body(carried + list(x) + rest)
        finally:
            graph.LOOP_ITERATIONS.counts.pop()
        k = len(out) - arg.body.checks
        return (count + 1, out[:n], [f | g for f, g in zip(flags, out[k:])]), out[n:k]

    (_, carried, flags), ys = lax.scan(step, (jnp.zeros((), jnp.uint32), list(vals[:n]), flags0), xs)
    return (*carried, *ys, *flags)


graph.SPECIAL_LOWERINGS[SCAN] = _lower_scan  # type: ignore[assignment]


def _lower_param(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> Any:
    raise LoweringError(
        "a value computed inside a torch.cond branch or a while_loop body was read on the host "
        "(.item(), print, a Python `if`) while the body was traced: a body runs on the device and "
        "its values exist only there; return the value from the body and read it afterwards"
    )


graph.SPECIAL_LOWERINGS[PARAM] = _lower_param  # type: ignore[assignment]


def install() -> None:
    """The xla tensor rules of the control-flow operators (once per process)."""
    from torch._higher_order_ops.cond import cond_op
    from torch._higher_order_ops.map import map_impl as map_op
    from torch._higher_order_ops.scan import scan_op
    from torch._higher_order_ops.while_loop import while_loop_op

    for op, rule in ((cond_op, cond), (while_loop_op, while_loop), (scan_op, scan), (map_op, map_impl)):
        if XlaTensor not in op.python_key_table:
            op.py_impl(XlaTensor)(rule)
    eager_rules()


def eager_rules() -> None:
    """Every other higher-order operator created so far runs as on the CPU: its dense rule,
    which calls its function on the xla tensors themselves (``auto_functionalized`` copies
    the arguments a custom op writes, then calls it; ``invoke_quant_packed`` calls its
    subgraph). Called again when dynamo hands a graph over: operators are made as their
    modules are imported."""
    from torch._C import DispatchKey
    from torch._ops import _higher_order_ops

    for name, op in list(_higher_order_ops.items()):
        dense = op.py_kernels.get(DispatchKey.CompositeExplicitAutograd)
        if dense is not None and XlaTensor not in op.python_key_table and name not in _NO_EAGER_RULE:
            op.py_impl(XlaTensor)(dense)


# Their dense rules save and restore the CPU's (or CUDA's) generator, which xla's random ops do
# not draw from: a replay would not reproduce the draw. They keep raising instead.
_NO_EAGER_RULE = frozenset({"run_and_save_rng_state", "run_with_rng_state", "graphsafe_run_with_rng_state"})
