"""Step through a pending graph node by node, as JAX's ``eval_jaxpr`` walks a jaxpr.

::

    from xlalab.debug.stepper import step

    s = step(loss)            # linearize the pending graph; nothing runs yet
    s.next()                  # compute %0
    s.run_to("aten::addmm")   # run through the first addmm from the cursor on
    print(s.preview())        # shape, dtype, min/max/mean and a few values of the last node
    print(s.compare_with_eager())  # the same aten op in eager PyTorch on the CPU
    s.divergence()            # the first node whose result differs from eager

Numbering is the IR text's (``%N`` as in ``get_tensors_text``): a multi-output node is one
row, and ``%N.k`` names its output ``k``. Integers and ``"%N"`` strings name rows.

Each op node runs as its own small XLA computation, compiled once per signature and cached
(``xlalab.runtime.graph.run_node``, the machinery of the OPBYOP modes). Stepping changes
nothing about the program: the tensors keep their pending IR, no storage is touched, and
the stepper's compiles and executions are counted as ``xlalab::StepCompile`` and
``xlalab::StepExecute``, never as the user's ``UncachedCompile``/``ExecuteComputation``,
so they trigger no recompilation warnings and publish no compile events.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import torch

from xlalab.debug.graph_dump import _Table, graph_of
from xlalab.runtime import compile_cache, config, ir, sharding
from xlalab.runtime import graph as _graph
from xlalab.runtime.dtypes import host_jnp, short_name
from xlalab.runtime.frames import Frame
from xlalab.runtime.ir import Node

__all__ = [
    "Comparison",
    "NodeView",
    "NothingPendingError",
    "StepError",
    "Stepper",
    "step",
]

STEP_COUNTERS = _graph.NodeCounters(
    compiled="xlalab::StepCompile", cached=None, executed="xlalab::StepExecute", compile_time=None
)
# The stepper's own executables: sharing the OPBYOP modes' cache would turn the user's later
# op-by-op compiles into cache hits, and stepping must leave no trace on the program.
_STEP_CACHE = compile_cache.ProgramCache(counter=None)

# A row's value: one CPU tensor, or one per output of a multi-output node (None: switched off).
Value: TypeAlias = "torch.Tensor | tuple[torch.Tensor | None, ...]"
# What run_to accepts: a row, a "%N" / op name / "file:line" string, or a predicate.
Target: TypeAlias = "int | str | Callable[[NodeView], bool]"


class NothingPendingError(ValueError):
    """The tensors given to the stepper hold computed device data: there is no graph to step."""


class StepError(RuntimeError):
    """A node failed while stepping (its lowering or its small computation)."""


# --------------------------------------------------------------------------- node views


@dataclass(frozen=True)
class NodeView:
    """One row of the stepped graph, as the IR text numbers and prints it."""

    row: int  # %N in the IR text
    index: int  # position in ``Stepper.graph.nodes`` (post-order)
    op: str  # "aten::addmm"; inputs are "xla::device_data"
    kind: str  # "data" (device data), "scalar" (a float fed at run time) or "op"
    shape: str  # "f32[4,5]", or "(f32[], f32[])" for a multi-output node
    operands: tuple[str, ...]  # "%3", or "%3.1" for output 1 of multi-output node %3
    operand_rows: tuple[int, ...]
    frames: tuple[Frame, ...]  # where user code created it (XLA_IR_DEBUG), innermost first
    roots: tuple[int, ...]  # which of the stepped tensors this row is (ROOT=k in the IR text)
    computed: bool

    @property
    def location(self) -> str | None:
        """``fn@file.py:12`` of the innermost user frame, as the IR text's ``location=``."""
        if not self.frames:
            return None
        f = self.frames[0]
        return f"{f.function}@{os.path.basename(f.file)}:{f.line}"

    def __str__(self) -> str:
        text = f"%{self.row} = {self.shape} {self.op}({', '.join(self.operands)})"
        if self.kind == "scalar":
            text += " input=scalar"
        if self.roots:
            text += "".join(f" ROOT={r}" for r in self.roots)
        if self.location:
            text += f"  at {self.location}"
        return text


def _short_shape(shape: Sequence[int] | None, dtype: torch.dtype | None) -> str:
    """torch_xla's shape syntax without the layout: ``f32[64,10]``, ``s64[]``."""
    if shape is None or dtype is None:
        return "()"
    return f"{short_name(dtype)}[{','.join(str(d) for d in shape)}]"


def _node_shape(n: Node) -> str:
    if n.outs is not None:
        return "(" + ", ".join(_short_shape(*o) if o is not None else "()" for o in n.outs) + ")"
    return _short_shape(n.shape, n.dtype)


def _kind(n: Node) -> str:
    return "data" if n.op is ir.DATA else "scalar" if n.op is ir.SCALAR else "op"


# --------------------------------------------------------------------------- values


def _to_torch(array: Any, dtype: torch.dtype) -> torch.Tensor:
    """A device value as a CPU tensor of its torch dtype.

    Not ``backend.to_host``: that warns once per precision switch, and a debugger reading
    values must not use up the warning the user's own program would get.
    """
    host = np.asarray(array)
    want = np.dtype(host_jnp(dtype))
    if host.dtype != want:
        host = host.astype(want)  # a precision switch stored it narrower (bf16 for f32)
    if dtype == torch.bfloat16:
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(host, copy=True))


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def preview_tensor(t: torch.Tensor, max_values: int = 6) -> str:
    """``f32[4,5] min=-1.2 max=3.4 mean=0.56 [0.1, 0.2, ...]``: one line, whatever the size."""
    head = f"{_short_shape(tuple(t.shape), t.dtype)}"
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return f"{head} (empty)"
    shown = flat[:max_values]
    if t.dtype == torch.bool:
        stats = f"true={int(flat.sum())}/{flat.numel()}"
        values = ", ".join("T" if v else "F" for v in shown.tolist())
    elif t.dtype.is_complex:
        stats = f"max|x|={_fmt(float(flat.abs().max()))}"
        values = ", ".join(f"{complex(v):.4g}" for v in shown.tolist())
    else:
        stats = _stats(flat)
        values = ", ".join(_fmt(v) if isinstance(v, float) else str(v) for v in shown.tolist())
    if t.dim() == 0:
        return f"{head} {values}"
    more = ", ..." if flat.numel() > max_values else ""
    return f"{head} {stats} [{values}{more}]"


def _stats(flat: torch.Tensor) -> str:
    if not flat.dtype.is_floating_point:
        return f"min={int(flat.min())} max={int(flat.max())} mean={_fmt(float(flat.double().mean()))}"
    x = flat.double()
    finite = x[torch.isfinite(x)]
    parts = []
    if finite.numel():
        parts += [f"min={_fmt(float(finite.min()))}", f"max={_fmt(float(finite.max()))}"]
        parts.append(f"mean={_fmt(float(finite.mean()))}")
    # Non-finite values are what a user hunting a divergence looks for: count them.
    nans = int(torch.isnan(x).sum())
    infs = int(torch.isinf(x).sum())
    if nans:
        parts.append(f"nan={nans}")
    if infs:
        parts.append(f"inf={infs}")
    return " ".join(parts)


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Comparison:
    """A node's XLA result against the same aten op run in eager PyTorch on the CPU.

    ``max_abs_diff`` is ``max |xla - eager|`` over all outputs; ``rel_diff`` divides it by the
    largest finite ``|eager|`` (so near-zero elements do not blow it up). A NaN or infinity on
    one side only counts as an infinite difference. Both are NaN when not ``comparable``.
    """

    node: NodeView
    comparable: bool
    reason: str  # why not comparable ("" when compared)
    max_abs_diff: float
    rel_diff: float
    xla: Value | None = None
    eager: Value | None = None

    def exceeds(self, threshold: float, *, relative: bool = True) -> bool:
        if not self.comparable:
            return False
        diff = self.rel_diff if relative else self.max_abs_diff
        return diff > threshold

    def __str__(self) -> str:
        where = f"%{self.node.row} {self.node.op} {self.node.shape}"
        if not self.comparable:
            return f"{where}: not comparable: {self.reason}"
        return (
            f"{where}: max abs diff {_fmt(self.max_abs_diff)}, rel diff {_fmt(self.rel_diff)} "
            "(XLA vs eager PyTorch on the CPU, same inputs)"
        )


def _not_comparable(view: NodeView, reason: str) -> Comparison:
    return Comparison(view, False, reason, math.nan, math.nan)


def _diff(xla: torch.Tensor, eager: torch.Tensor) -> tuple[float, float]:
    """(max abs diff, largest finite |eager|) of two results; NaN == NaN, one-sided NaN is inf."""
    if tuple(xla.shape) != tuple(eager.shape):
        return math.inf, 0.0
    if xla.numel() == 0:
        return 0.0, 0.0
    wide = torch.complex128 if (xla.dtype.is_complex or eager.dtype.is_complex) else torch.float64
    a, b = xla.to(wide), eager.to(wide)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    d = torch.where(same, torch.zeros((), dtype=torch.float64), (a - b).abs().to(torch.float64))
    d = torch.nan_to_num(d, nan=math.inf)  # inf - inf, or a NaN on one side only
    scale = b.abs().to(torch.float64)
    scale = scale[torch.isfinite(scale)]
    return float(d.max()), float(scale.max()) if scale.numel() else 0.0


def _eager_device(a: Any) -> Any:
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("cpu")
    return a


def _fill(a: Any, operands: Sequence[Any]) -> Any:
    """A static-argument template with its operand slots filled for an eager call."""
    return _graph._subst(a, operands, _eager_device)


# --------------------------------------------------------------------------- the stepper


def _flatten(tensors: Any) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    if isinstance(tensors, Iterable) and not isinstance(tensors, (str, bytes)):
        out: list[torch.Tensor] = []
        for t in tensors:
            out.extend(_flatten(t))
        return out
    raise TypeError(f"the stepper takes xla tensors; got {type(tensors).__name__}")


def _check_xla(tensors: list[torch.Tensor]) -> None:
    from xlalab.runtime.tensor import XlaTensor

    if not tensors:
        raise ValueError("the stepper needs at least one xla tensor whose value is pending IR")
    for i, t in enumerate(tensors):
        if not isinstance(t, XlaTensor):
            raise TypeError(
                f"the stepper takes xla tensors; tensor {i} is on {t.device}. Record the ops on an "
                "xla device (x.to(xlalab.device())) and step before the barrier that computes them."
            )


class Stepper:
    """Walk a pending graph one node at a time; see the module docstring.

    The cursor is the row about to run (``current``); every row above it has its value.
    """

    def __init__(self, tensors: torch.Tensor | Iterable[torch.Tensor]) -> None:
        flat = _flatten(tensors)
        _check_xla(flat)
        # Only the graph is kept, never the tensors: holding a tensor would keep its storage
        # alive and so in the next mark_step's roots, changing the user's program.
        self.graph: _graph.Graph = graph_of(flat)
        self._refuse_unsteppable()
        self.device: int = self.graph.key[-1]
        self._instrs = _graph._instructions(self.graph)[0]
        self._table = _Table(self.graph)
        self._env: list[Any] = [None] * len(self.graph.nodes)
        self._computed = 0  # graph positions [0, _computed) hold values
        self.cursor = 0  # the row about to run; len(self) once finished

    def _refuse_unsteppable(self) -> None:
        nodes = self.graph.nodes
        if all(nodes[p].op is ir.DATA for p in self.graph.roots):
            hint = ""
            if config.get("XLA_USE_EAGER_DEBUG_MODE"):
                hint = " XLA_USE_EAGER_DEBUG_MODE is on: each op runs as it is recorded, none stays pending."
            raise NothingPendingError(
                "nothing to step: the tensor(s) hold computed device data, not pending IR. Step "
                "before the barrier that computes them (xm.mark_step(), .item(), .cpu(), print)." + hint
            )
        width = _graph.collective_width(self.graph)
        if width > 1:
            raise ValueError(
                f"this graph holds a collective across {width} replicas: it runs only as a "
                "replicated program, where every replica takes part, and cannot be stepped alone"
            )

    # ---- the graph, row by row

    def __len__(self) -> int:
        """The number of rows (IR text nodes)."""
        return len(self._table)

    @property
    def finished(self) -> bool:
        return self.cursor >= len(self)

    def node(self, row: int | str) -> NodeView:
        k, _ = self._row_of(row)
        return self._view(k)

    @property
    def current(self) -> NodeView | None:
        """The row about to run (None once every row has run)."""
        return None if self.finished else self._view(self.cursor)

    @property
    def last(self) -> NodeView | None:
        """The row computed last (None before the first step)."""
        return self._view(self.cursor - 1) if self.cursor else None

    def _view(self, k: int) -> NodeView:
        r = self._table.row(k)
        p = self._table.at[k]
        n = self.graph.nodes[p]
        return NodeView(
            row=k,
            index=p,
            op=r.name,
            kind=_kind(n),
            shape=_node_shape(n),
            operands=tuple(r.operands),
            operand_rows=tuple(j for j, _ in r.sources),
            frames=r.frames,
            roots=tuple(r.roots),
            computed=k < self.cursor,
        )

    def _row_of(self, target: int | str) -> tuple[int, int | None]:
        """(row, output index or None) of ``5``, ``"%5"`` or ``"%5.1"``."""
        if isinstance(target, int):
            k, out = target, None
        else:
            m = re.fullmatch(r"\s*%?(\d+)(?:\.(\d+))?\s*", target)
            if m is None:
                raise ValueError(f"{target!r} names no row: use 5, '%5' or '%5.1' (output 1 of %5)")
            k, out = int(m[1]), int(m[2]) if m[2] is not None else None
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"no row %{k}: the graph has rows %0..%{len(self) - 1}")
        return k, out

    # ---- moving

    def next(self) -> NodeView:
        """Compute the current row; returns it."""
        return self.step(1)

    def step(self, n: int = 1) -> NodeView:
        """Compute the next ``n`` rows; returns the last one computed."""
        if self.finished:
            raise StopIteration("every node has run: nothing left to step")
        self._run_through(min(self.cursor + max(n, 1), len(self)) - 1)
        return self._view(self.cursor - 1)

    def run_to(self, target: Target) -> NodeView:
        """Run up to and including the first matching row; returns it.

        ``target``: a row (``7`` or ``"%7"``), an op name (``"aten::addmm"`` or ``"addmm"``), a
        source line (``"train.py:12"``, ``":12"``, any of the node's frames; needs XLA_IR_DEBUG
        while recording), or a predicate on ``NodeView``. Names, lines and predicates match
        from the cursor on; if nothing matches, nothing runs.
        """
        k = self._find(target)
        if k >= self.cursor:
            self._run_through(k)
        return self._view(k)

    def run_to_end(self) -> NodeView | None:
        """Compute every remaining row; returns the last row (None for an empty graph)."""
        if len(self):
            self._run_through(len(self) - 1)
        self._compute_positions(len(self.graph.nodes))  # getitem roots after the last row
        return self.last

    def _find(self, target: Target) -> int:
        if isinstance(target, int):
            return self._row_of(target)[0]
        if callable(target):
            return self._first(target, "the predicate")
        text = target.strip()
        if re.fullmatch(r"%?\d+", text):
            return self._row_of(text)[0]
        line = re.fullmatch(r"(?P<file>[^:]*):(?P<line>\d+)", text)
        if line is not None:
            return self._first(_at_line(line["file"], int(line["line"])), f"source line {text!r}", lines=True)
        return self._first(_is_op(text), f"op {text!r}")

    def _first(self, match: Callable[[NodeView], bool], what: str, lines: bool = False) -> int:
        for k in range(self.cursor, len(self)):
            if match(self._view(k)):
                return k
        hint = ""
        if lines and not any(n.frames for n in self.graph.nodes):
            hint = " The nodes carry no source lines: set XLA_IR_DEBUG=1 before recording the ops."
        raise LookupError(f"no row from %{self.cursor} on matches {what}; nothing ran.{hint}")

    def _run_through(self, k: int) -> None:
        """Compute rows up to and including row ``k`` (and the getitems between them)."""
        self._compute_positions(self._table.at[k] + 1)

    def _compute_positions(self, end: int) -> None:
        settings = _graph._trace_settings()
        dev = sharding.op_by_op_target(self.graph, self.device)  # the device, or the SPMD mesh
        nodes = self.graph.nodes
        for p in range(self._computed, end):
            try:
                self._env[p] = _graph.run_node(
                    self._instrs[p],
                    nodes[p],
                    self._env,
                    dev,
                    sharding.node_settings(settings, self._instrs[p], self._env),
                    _STEP_CACHE,
                    STEP_COUNTERS,
                )
            except Exception as e:
                row = self._row_of_position(p)
                raise StepError(f"%{row} {nodes[p].name} failed: {type(e).__name__}: {e}") from e
            self._computed = p + 1
            row = self._table.num[p]
            if row >= 0:  # a getitem has no row: it moves no cursor
                self.cursor = row + 1

    def _row_of_position(self, p: int) -> int:
        num = self._table.num[p]
        if num >= 0:
            return num
        return self._table.num[self._table.pos[id(self.graph.nodes[p].src[0])]]  # a getitem

    # ---- values

    def _computed_row(self, target: int | str | None) -> tuple[int, int | None]:
        if target is None:
            if not self.cursor:
                raise ValueError("nothing has run yet: call next() first")
            return self.cursor - 1, None
        k, out = self._row_of(target)
        if k >= self.cursor:
            raise ValueError(f"%{k} has not run yet (the cursor is at %{self.cursor}): run_to({k}) first")
        return k, out

    def value(self, target: int | str | None = None) -> Value:
        """The computed value of a row as a CPU tensor of its torch dtype (a tuple for a
        multi-output node; ``"%5.1"`` picks output 1). Default: the row computed last."""
        k, out = self._computed_row(target)
        return self._value_at(self._table.at[k], out)

    def _value_at(self, p: int, out: int | None = None) -> Value:
        n = self.graph.nodes[p]
        v = self._env[p]
        if n.op is ir.SCALAR:
            return torch.tensor(n.value, dtype=n.dtype)
        if n.outs is None:
            if out is not None:
                raise ValueError(f"{n.name} has a single output: there is no output {out}")
            return _to_torch(v, n.dtype)  # type: ignore[arg-type]
        outs = tuple(None if o is None or x is None else _to_torch(x, o[1]) for x, o in zip(v, n.outs))
        return outs if out is None else outs[out]  # type: ignore[return-value]

    def preview(self, target: int | str | None = None) -> str:
        """One line per output: shape, dtype, min/max/mean, NaN/inf counts and a few values."""
        k, out = self._computed_row(target)
        v = self.value(k if out is None else f"%{k}.{out}")
        if isinstance(v, torch.Tensor):
            return preview_tensor(v)
        return "\n".join(
            f"%{k}.{i}: " + ("(no output)" if x is None else preview_tensor(x)) for i, x in enumerate(v)
        )

    def results(self) -> list[torch.Tensor]:
        """The stepped tensors' values, in the order they were given (once their rows ran)."""
        out = []
        for p in self.graph.roots:
            if p >= self._computed:
                raise ValueError("the stepped tensors' nodes have not all run: call run_to_end() first")
            v = self._value_at(p)
            assert isinstance(v, torch.Tensor)
            out.append(v)
        return out

    # ---- eager comparison

    def compare_with_eager(self, target: int | str | None = None) -> Comparison:
        """Run the row's aten op in eager PyTorch on the CPU, on the stepped inputs (as CPU tensors
        of their torch dtypes), and compare with the XLA result. Default: the row computed last.

        Under XLA_USE_BF16 the device computes float32 ops in bfloat16 while eager runs them in
        float32, so each op's rounding shows up as a difference here.
        """
        k, _ = self._computed_row(target)
        view = self._view(k)
        n = self.graph.nodes[self._table.at[k]]
        why = _why_not_comparable(n)
        if why is not None:
            return _not_comparable(view, why)
        operands = [self._eager_operand(s) for s in n.src]
        try:
            eager = self._run_eager(n, operands)
        except Exception as e:
            return _not_comparable(view, f"eager PyTorch raised {type(e).__name__}: {e}")
        return self._compared(view, n, self._value_at(self._table.at[k]), eager)

    def _eager_operand(self, s: Node) -> Any:
        if s.op is ir.SCALAR:
            return s.value  # a Python number, as the op was called with
        return self._value_at(self._table.pos[id(s)])

    def _run_eager(self, n: Node, operands: list[Any]) -> Any:
        if n.op == _UPDATE_VIEW:
            return _eager_update_view(n.arg, operands[0], operands[1])
        tpl, ktpl = n.arg
        args = [_fill(a, operands) for a in tpl]
        kwargs = {k: _fill(v, operands) for k, v in ktpl}
        return n.op(*args, **kwargs)

    def _compared(self, view: NodeView, n: Node, xla: Value, eager: Any) -> Comparison:
        xs = (xla,) if isinstance(xla, torch.Tensor) else xla
        es = (eager,) if isinstance(eager, torch.Tensor) else tuple(eager)
        if len(xs) != len(es):
            return _not_comparable(view, f"eager gave {len(es)} outputs, XLA {len(xs)}")
        worst, scale = 0.0, 0.0
        for x, e in zip(xs, es):
            if x is None or not isinstance(e, torch.Tensor):
                continue  # an output switched off
            d, s = _diff(x, e)
            worst, scale = max(worst, d), max(scale, s)
        rel = worst / scale if scale > 0 else (0.0 if worst == 0 else math.inf)
        return Comparison(
            view, True, "", worst, rel, xla, eager if isinstance(eager, torch.Tensor) else tuple(es)
        )

    def divergence(self, threshold: float = 1e-4, *, relative: bool = True) -> Comparison | None:
        """Run on, comparing every row with eager PyTorch, and stop at the first whose difference
        (``rel_diff``, or ``max_abs_diff`` with ``relative=False``) exceeds ``threshold``.

        Rows already computed are compared too. Returns that row's comparison, with the cursor
        just after it; None (and the cursor at the end) if every row agrees.
        """
        for k in range(len(self)):
            if k >= self.cursor:
                self._run_through(k)
            c = self.compare_with_eager(k)
            if c.exceeds(threshold, relative=relative):
                return c
        self.run_to_end()
        return None

    # ---- listing

    def listing(self, around: int | None = None, before: int = 3, after: int = 3) -> str:
        """Rows around ``around`` (default: the cursor), ``->`` at the cursor, as a debugger lists
        source. Only the window is formatted, so this is cheap on huge graphs."""
        centre = self.cursor if around is None else self._row_of(around)[0]
        lo = max(0, centre - before)
        hi = min(len(self), centre + after + 1)
        lines = [self._header()]
        if lo:
            lines.append(f"     ... {lo} row(s) above")
        for k in range(lo, hi):
            lines.append(("  -> " if k == self.cursor else "     ") + str(self._view(k)))
        if hi < len(self):
            lines.append(f"     ... {len(self) - hi} row(s) below")
        elif self.finished:
            lines.append("  -> (end: every row has run)")
        return "\n".join(lines)

    def _header(self) -> str:
        at = "finished" if self.finished else f"at %{self.cursor}"
        return f"Stepper over {len(self)} rows on xla:{self.device}, {self.cursor} run, {at}"

    def __repr__(self) -> str:
        return self.listing()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("Stepper(...)" if cycle else self.listing())


# --------------------------------------------------------------------------- matching


def _is_op(name: str) -> Callable[[NodeView], bool]:
    """Matches ``aten::addmm`` by its full name or by ``addmm``."""
    return lambda v: v.op == name or v.op.split("::")[-1] == name


def _at_line(file: str, line: int) -> Callable[[NodeView], bool]:
    """Matches a node any of whose frames is ``file:line`` (file: a path suffix; empty: any)."""

    def match(v: NodeView) -> bool:
        return any(
            f.line == line and (not file or f.file == file or f.file.endswith(os.sep + file.lstrip(os.sep)))
            for f in v.frames
        )

    return match


_UPDATE_VIEW = "xla::update_view"


def _why_not_comparable(n: Node) -> str | None:
    if n.op is ir.DATA:
        return "an input (device data): nothing is computed here"
    if n.op is ir.SCALAR:
        return "a scalar input (a Python float fed at run time): nothing is computed here"
    if n.op is ir.ITEM:
        return "one output of a multi-output node: compare that node"
    if n.op == _UPDATE_VIEW:
        return None
    if isinstance(n.op, str):
        return f"{n.op} is xlalab's own node, with no eager aten op to run"
    if any(k == "__rng__" for k, _ in n.arg[1]):
        return "a random op: the device RNG and eager PyTorch's draw different numbers"
    return None


def _eager_update_view(chain: Any, base: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """A write through a view, in eager: replay the view chain on a copy of the base, copy into it."""
    out = base.clone()
    view = out
    for func, tpl in chain:
        view = func(view, *[_fill(a, []) for a in tpl])
    view.copy_(src)
    return out


def step(*tensors: torch.Tensor | Iterable[torch.Tensor]) -> Stepper:
    """A ``Stepper`` over the pending graph of ``tensors`` (``step(a, b)`` or ``step([a, b])``)."""
    return Stepper(_flatten(tensors))
