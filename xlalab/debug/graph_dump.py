"""Dump pending (or materialized) graphs as text, dot, HLO or StableHLO without running them.

The text and dot layouts are torch_xla's (``_get_xla_tensors_text`` / ``_get_xla_tensors_dot``),
so parsers written for its dumps read these too::

    IR {
      %0 = f32[4,2]{1,0} xla::device_data(), xla_shape=f32[4,2]{1,0}
      %1 = f32[4,2]{1,0} aten::mul(%0), location=helper@train.py:5, xla_shape=f32[4,2]{1,0}, ...
      %2 = f32[4]{0} aten::sum(%1), xla_shape=f32[4]{0}, ROOT=0
    }

Differences, all additive:

- A scalar graph input (a Python float fed at run time, such as a learning rate, or an RNG
  seed and offset) prints as torch_xla prints an uploaded scalar, ``xla::device_data`` with a
  0-d shape, plus ``input=scalar``. Its dtype is f64 (s64 for RNG operands): xlalab feeds
  every scalar in one float64 vector and the consuming op casts it. Values are left out, as
  torch_xla leaves out device data: the same graph prints the same text at every step.
- ``xla::getitem`` nodes (output ``i`` of a multi-output node) are folded into their users'
  operand lists as ``%k.i``, exactly as torch_xla writes them; the multi-output node shows
  the tuple shape and ``num_outputs=N``.
- With XLA_IR_DEBUG, ``location=fn@file.py:line`` is the innermost user frame (file base name,
  as torch_xla). xlalab keeps more frames (XLALAB_IR_DEBUG_DEPTH): they follow as the last
  attribute before ``ROOT``, ``frames=fn@/full/path.py:line|caller@/full/path.py:line|...``
  (innermost first, ``|``-separated, no spaces or commas, so a ``, ``-split of the line
  still works). Backward nodes carry the frames of the forward op they differentiate. In dot
  the location is a label line and the frames are the node's ``tooltip``.
- ``max_nodes`` bounds the output of very large graphs: the first and last nodes and every
  root are shown, each gap is one ``# ...`` line, and a ``# ops:`` line counts ops over
  the whole graph.

HLO and StableHLO come from lowering the graph through JAX (``jax.jit(...).lower``) with
shapes only: nothing is compiled for execution or run, and no metric or counter moves. With
XLA_HLO_DEBUG each HLO instruction's metadata carries ``op_type``, ``op_name``,
``source_file`` and ``source_line`` (the node's innermost user frame), like torch_xla's.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import torch

from xlalab.runtime import config, control_flow, ir, sharding
from xlalab.runtime import graph as _graph
from xlalab.runtime.dtypes import short_name, to_jnp
from xlalab.runtime.frames import Frame
from xlalab.runtime.graph import Graph
from xlalab.runtime.ir import Node

__all__ = [
    "_get_xla_tensors_dot",
    "_get_xla_tensors_hlo",
    "_get_xla_tensors_stablehlo",
    "_get_xla_tensors_text",
    "get_tensors_dot",
    "get_tensors_hlo",
    "get_tensors_stablehlo",
    "get_tensors_text",
    "graph_dot",
    "graph_hlo",
    "graph_of",
    "graph_rows",
    "graph_stablehlo",
    "graph_text",
]

# --------------------------------------------------------------------------- tensors -> graph


def graph_of(tensors: torch.Tensor | Iterable[torch.Tensor]) -> Graph:
    """The linearized graph whose roots are the tensors' current values (nothing runs)."""
    from xlalab.runtime.tensor import XlaTensor, value

    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    roots: list[Node] = []
    for t in tensors:
        if not isinstance(t, XlaTensor):
            raise TypeError(f"graph dumps take xla tensors; got a tensor on {t.device}")
        roots.append(value(t))
    return _graph.linearize(roots)


def get_tensors_text(tensors: torch.Tensor | Iterable[torch.Tensor], *, max_nodes: int | None = None) -> str:
    return graph_text(graph_of(tensors), max_nodes=max_nodes)


def get_tensors_dot(tensors: torch.Tensor | Iterable[torch.Tensor], *, max_nodes: int | None = None) -> str:
    return graph_dot(graph_of(tensors), max_nodes=max_nodes)


def get_tensors_hlo(tensors: torch.Tensor | Iterable[torch.Tensor]) -> str:
    return graph_hlo(graph_of(tensors))


def get_tensors_stablehlo(tensors: torch.Tensor | Iterable[torch.Tensor]) -> str:
    return graph_stablehlo(graph_of(tensors))


# torch_xla's names (torch_xla._XLAC._get_xla_tensors_*).
_get_xla_tensors_text = get_tensors_text
_get_xla_tensors_dot = get_tensors_dot
_get_xla_tensors_hlo = get_tensors_hlo
_get_xla_tensors_stablehlo = get_tensors_stablehlo


# --------------------------------------------------------------------------- rows


@dataclass
class _Row:
    """One printed node: ``%num = shape name(operands), attrs``."""

    num: int
    name: str
    shape: str
    operands: list[str]  # "%3" or "%3.1" (output 1 of multi-output node %3)
    sources: list[tuple[int, int | None]]  # (row number, output index) per operand
    attrs: list[str]
    frames: tuple[Frame, ...]
    roots: list[int]


_SHAPES: dict[tuple[Any, Any], str] = {}


def shape_str(shape: Sequence[int] | None, dtype: torch.dtype | None) -> str:
    """torch_xla's shape syntax: ``f32[4,2]{1,0}``, ``s64[]``."""
    key = (tuple(shape) if shape is not None else None, dtype)
    s = _SHAPES.get(key)
    if s is None:
        if shape is None or dtype is None:
            s = "()"  # an output switched off (e.g. convolution_backward's output_mask)
        else:
            dims = ",".join(str(d) for d in shape)
            layout = "{" + ",".join(str(i) for i in reversed(range(len(shape)))) + "}" if shape else ""
            s = f"{short_name(dtype)}[{dims}]{layout}"
        _SHAPES[key] = s
    return s


def _node_shape(n: Node) -> str:
    if n.outs is not None:
        return "(" + ", ".join(shape_str(*o) if o is not None else "()" for o in n.outs) + ")"
    return shape_str(n.shape, n.dtype)


def _location(f: Frame) -> str:
    return f"{f.function}@{os.path.basename(f.file)}:{f.line}"


def _frames_attr(frames: Sequence[Frame]) -> str:
    return "|".join(f"{f.function}@{f.file}:{f.line}" for f in frames)


def _display_name(n: Node) -> str:
    # A scalar input is an uploaded 0-d value, which torch_xla calls device data.
    return ir.DATA if n.op is ir.SCALAR else n.name


class _Table:
    """Row numbers of a graph's nodes in post-order, getitem nodes folded into ``%k.i`` operands.

    Numbering is one linear pass; a row's strings are built only when it is printed, so a
    summary of a huge graph costs little more than the numbering.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.pos = {id(n): i for i, n in enumerate(graph.nodes)}
        self.num = [-1] * len(graph.nodes)  # row number per graph position (-1: a folded getitem)
        self.at: list[int] = []  # graph position per row number
        for i, n in enumerate(graph.nodes):
            if n.op is not ir.ITEM:
                self.num[i] = len(self.at)
                self.at.append(i)
        self.roots: dict[int, list[int]] = {}
        for r, p in enumerate(graph.roots):
            n = graph.nodes[p]
            # A root that is one output of a multi-output node marks that node (as torch_xla does).
            target = self.pos[id(n.src[0])] if n.op is ir.ITEM else p
            self.roots.setdefault(self.num[target], []).append(r)

    def __len__(self) -> int:
        return len(self.at)

    def row(self, k: int) -> _Row:
        n = self.graph.nodes[self.at[k]]
        operands: list[str] = []
        sources: list[tuple[int, int | None]] = []
        for s in n.src:
            if s.op is ir.ITEM:
                j = self.num[self.pos[id(s.src[0])]]
                operands.append(f"%{j}.{s.arg}")
                sources.append((j, s.arg))
            else:
                j = self.num[self.pos[id(s)]]
                operands.append(f"%{j}")
                sources.append((j, None))
        shape = _node_shape(n)
        attrs: list[str] = []
        if n.outs is not None:
            attrs.append(f"num_outputs={len(n.outs)}")
        if isinstance(n.arg, control_flow.Bodies):
            attrs.append(n.arg.summary())  # what runs inside the conditional or loop
        if n.op is ir.SCALAR:
            # Not its value: the same graph must print the same text at every step (a changing
            # learning rate or RNG offset does not recompile), so dumps of two syncs diff cleanly.
            attrs.append("input=scalar")
        spec = sharding.node_sharding(n)
        if spec is not None:
            attrs.append(f"sharding={spec}")  # SPMD: how the value is split over the mesh
        frames: tuple[Frame, ...] = tuple(n.frames or ())
        if frames:
            attrs.append(f"location={_location(frames[0])}")
        attrs.append(f"xla_shape={shape}")
        return _Row(k, _display_name(n), shape, operands, sources, attrs, frames, self.roots.get(k, []))

    def shown(self, max_nodes: int | None) -> list[int] | None:
        """Row numbers to print when there are more than ``max_nodes`` (None: print all).

        At most ``max_nodes`` rows: the roots first (the graph's outputs, wherever they sit),
        then the first and last rows in the budget left.
        """
        if max_nodes is None or len(self) <= max_nodes:
            return None
        keep = set(sorted(self.roots)[:max_nodes])
        left = max_nodes - len(keep)
        head = [k for k in range(len(self)) if k not in keep][: (left + 1) // 2]
        keep.update(head)
        tail_budget = max_nodes - len(keep)
        if tail_budget:
            keep.update([k for k in range(len(self) - 1, -1, -1) if k not in keep][:tail_budget])
        return sorted(keep)

    def op_count_list(self) -> list[tuple[str, int]]:
        nodes = self.graph.nodes
        return Counter(_display_name(nodes[p]) for p in self.at).most_common()

    def op_counts(self) -> str:
        return ", ".join(f"{name}={c}" for name, c in self.op_count_list())


def graph_rows(
    graph: Graph, *, max_nodes: int | None = None
) -> tuple[list[_Row], int, list[tuple[str, int]]]:
    """The rows a dump of ``graph`` shows (all, or a summary's), the total row count, and the op
    counts: what a viewer needs to explain a dot node (its op, shape and frames)."""
    table = _Table(graph)
    shown = table.shown(max_nodes)
    ks = range(len(table)) if shown is None else shown
    return [table.row(k) for k in ks], len(table), table.op_count_list()


def _gaps(shown: list[int], total: int) -> dict[int, int]:
    """First -> last row number of each run of rows left out between shown rows."""
    out = {}
    prev = -1
    for k in [*shown, total]:
        if k > prev + 1:
            out[prev + 1] = k - 1
        prev = k
    return out


# --------------------------------------------------------------------------- text


def _text_line(r: _Row) -> str:
    attrs = list(r.attrs)
    if r.frames:
        attrs.append(f"frames={_frames_attr(r.frames)}")
    attrs.extend(f"ROOT={k}" for k in r.roots)
    return f"  %{r.num} = {r.shape} {r.name}({', '.join(r.operands)}), {', '.join(attrs)}"


def graph_text(graph: Graph, *, max_nodes: int | None = None) -> str:
    """torch_xla's ``IR { ... }`` text of a graph."""
    table = _Table(graph)
    lines = ["IR {"]
    shown = table.shown(max_nodes)
    if shown is None:
        lines.extend(_text_line(table.row(k)) for k in range(len(table)))
    else:
        gaps = _gaps(shown, len(table))
        for k in sorted([*shown, *gaps]):
            if k in gaps:
                hi = gaps[k]
                lines.append(f"  # ... %{k}..%{hi}: {hi - k + 1} nodes omitted (max_nodes={max_nodes})")
            else:
                lines.append(_text_line(table.row(k)))
        lines.append(f"  # ops: {table.op_counts()}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- dot


def _dot_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _dot_node(r: _Row) -> str:
    label = "\\n".join(_dot_escape(x) for x in [r.name, r.shape, *r.attrs, *(f"ROOT={k}" for k in r.roots)])
    line = f'  node{r.num} [label="{label}"'
    if r.frames:
        # Graphviz shows a tooltip on hover in SVG: the whole user stack, innermost first.
        tip = "\\n".join(_dot_escape(str(f)) for f in r.frames)
        line += f', tooltip="{tip}"'
    return line + "]"


def _edge_label(r: _Row, i: int, out: int | None) -> str:
    parts = []
    if len(r.operands) > 1:
        parts.append(f"i={i}")
    if out is not None:
        parts.append(f"o={out}")
    return f' [label="{",".join(parts)}"]' if parts else ""


def graph_dot(graph: Graph, *, max_nodes: int | None = None) -> str:
    """torch_xla's ``digraph G { ... }`` of a graph: nodes in post-order, then edges from the roots."""
    table = _Table(graph)
    shown = table.shown(max_nodes)
    lines = ["digraph G {"]
    gap_of: dict[int, str] = {}  # row number left out -> the box standing for its run
    if shown is None:
        rows = [table.row(k) for k in range(len(table))]
        lines.extend(_dot_node(r) for r in rows)
    else:
        gaps = _gaps(shown, len(table))
        rows = []
        for k in sorted([*shown, *gaps]):
            if k in gaps:
                hi = gaps[k]
                gap_of.update(dict.fromkeys(range(k, hi + 1), f"omitted{k}"))
                label = f"... %{k}..%{hi}: {hi - k + 1} nodes omitted"
                lines.append(f'  omitted{k} [label="{label}", shape=box, style=dashed]')
            else:
                rows.append(table.row(k))
                lines.append(_dot_node(rows[-1]))
        counts = table.op_counts().replace(", ", "\\n")
        lines.append(f'  op_counts [label="ops (max_nodes={max_nodes})\\n{counts}", shape=note]')
    for r in reversed(rows):
        lines.extend(_dot_edges(r, gap_of))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_edges(r: _Row, gap_of: dict[int, str]) -> list[str]:
    out = []
    seen: set[str] = set()
    for i, (src, output) in enumerate(r.sources):
        gap = gap_of.get(src)
        if gap is None:
            out.append(f"  node{src} -> node{r.num}{_edge_label(r, i, output)}")
        elif gap not in seen:  # one dashed edge per omitted run feeding this node
            seen.add(gap)
            out.append(f"  {gap} -> node{r.num} [style=dashed]")
    return out


# --------------------------------------------------------------------------- HLO / StableHLO


def _lower(graph: Graph) -> Any:
    """``jax.jit(...).lower`` of the graph's program from shapes alone: traced, never compiled."""
    fn = _graph.build_function(graph)
    fn.__name__ = "IrToHlo"  # the module's name, as in torch_xla's dumps
    datas = [
        jax.ShapeDtypeStruct(tuple(n.value.shape), n.value.dtype)
        if hasattr(n.value, "dtype")
        else jax.ShapeDtypeStruct(tuple(n.shape or ()), to_jnp(n.dtype))  # type: ignore[arg-type]
        for n in graph.nodes
        if n.op is ir.DATA
    ]
    n_scalars = sum(1 for n in graph.nodes if n.op is ir.SCALAR)
    scalars = jax.ShapeDtypeStruct((n_scalars,), np.float64)
    return jax.jit(fn).lower(datas, scalars)


def _hlo_debug() -> bool:
    return bool(config.get("XLA_HLO_DEBUG"))


# The runtime names each node's scope "aten__mul[file.py:12]" under XLA_HLO_DEBUG (older
# runtimes used "aten__mul@file.py:12", which XLA cuts at "@" when it makes HLO op_name
# metadata); both are read, and the location is pointed at the user's file and line.
_SCOPE_AT = re.compile(
    r'loc\("(?P<pre>[^"]*?)(?:@|\[)(?P<file>[^"/@:\[\]]+):(?P<line>\d+)\]?(?P<post>[^"]*)"'
    r"(?P<child>\(#loc\d+\))?\)"
)
_SCOPE_BRACKET = re.compile(r"(?P<op>[A-Za-z_][\w.]*?)\[(?P<file>[^\[\]:]+):(?P<line>\d+)\]")


def _sources(graph: Graph) -> dict[tuple[str, int], str]:
    """(base name, line) -> full path, from the nodes' innermost frames."""
    out: dict[tuple[str, int], str] = {}
    for n in graph.nodes:
        if n.frames:
            f = n.frames[0]
            out.setdefault((os.path.basename(f.file), f.line), f.file)
    return out


def _relocate(mlir: str, sources: dict[tuple[str, int], str], bracket: bool) -> str:
    """Point each node's MLIR location at the user's line instead of xlalab's lowering code.

    ``bracket`` also rewrites the scope's ``@file:line`` as ``[file:line]`` (for HLO).
    """

    def sub(m: re.Match[str]) -> str:
        base, line = m["file"], int(m["line"])
        where = f"[{base}:{line}]" if bracket else f"@{base}:{line}"
        name = f"{m['pre']}{where}{m['post']}"
        full = sources.get((base, line), base).replace("\\", "\\\\").replace('"', '\\"')
        return f'loc("{name}"("{full}":{line}:0))'

    return _SCOPE_AT.sub(sub, mlir)


def graph_stablehlo(graph: Graph) -> str:
    """The graph's program as StableHLO text; with XLA_HLO_DEBUG, with locations at user lines."""
    lowered = _lower(graph)
    if not _hlo_debug():
        return str(lowered.as_text())
    return _relocate(lowered.as_text(debug_info=True), _sources(graph), bracket=False)


def graph_hlo(graph: Graph) -> str:
    """The graph's program as HLO text in torch_xla's style (tuple root, operand shapes).

    With XLA_HLO_DEBUG, instruction metadata carries op_type, op_name, source_file and
    source_line, as in torch_xla's dumps.
    """
    lowered = _lower(graph)
    debug = _hlo_debug()
    sources = _sources(graph) if debug else {}
    module = _hlo_module(lowered, sources, debug)
    text = _print_hlo(module, debug)
    if debug:
        text = _with_source_metadata(_drop_frame_tables(text), sources)
    return text


def _hlo_module(lowered: Any, sources: dict[tuple[str, int], str], debug: bool) -> Any:
    """An XlaComputation with a tuple root; via the StableHLO text so locations can be fixed."""
    try:
        from jax._src.lib import _jax

        mlir = lowered.as_text(debug_info=debug)
        if debug:
            mlir = _relocate(mlir, sources, bracket=True)
        return _jax.mlir.mlir_module_to_xla_computation(mlir, use_tuple_args=False, return_tuple=True)
    except Exception:
        # The converter is JAX-internal; without it (or if it changes), JAX's own HLO: no tuple
        # root, and XLA_HLO_DEBUG source lines only once the runtime's scope names survive XLA.
        return lowered.compiler_ir("hlo")


def _print_hlo(computation: Any, metadata: bool) -> str:
    try:
        from jaxlib._hlo import HloPrintOptions
    except ImportError:
        return str(computation.as_hlo_text())
    opts = HloPrintOptions()
    opts.print_metadata = metadata
    opts.print_percent = True
    opts.print_operand_shape = True
    return str(computation.as_hlo_module().to_string(opts))


_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def _drop_frame_tables(text: str) -> str:
    """Remove XLA's stack-frame tables: they index the tracer's frames, not the user's."""
    out: list[str] = []
    skipping = False
    for line in text.split("\n"):
        if line in _TABLES:
            skipping = True
            continue
        if skipping:
            if line == "":
                skipping = False
            continue
        out.append(line)
    # The tables sat between blank lines: leave one blank line where they were.
    return re.sub(r"\n{3,}(?=\S)", "\n\n", "\n".join(out))


_METADATA = re.compile(r"metadata=\{([^}]*)\}")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_FRAME_ID = re.compile(r"\s*stack_frame_id=\d+")


def _with_source_metadata(text: str, sources: dict[tuple[str, int], str]) -> str:
    def sub(m: re.Match[str]) -> str:
        body = _FRAME_ID.sub("", m.group(1)).strip()
        op_name = _OP_NAME.search(body)
        scope = _SCOPE_BRACKET.search(op_name.group(1)) if op_name else None
        if scope is None:
            return f"metadata={{{body}}}"
        base, line = scope["file"], int(scope["line"])
        full = sources.get((base, line), base)
        return f'metadata={{op_type="{scope["op"]}" {body} source_file="{full}" source_line={line}}}'

    return _METADATA.sub(sub, text)


# Which dump each XLA_SAVE_TENSORS_FMT names.
FORMATS: dict[str, Callable[[Graph], str]] = {
    "text": graph_text,
    "dot": graph_dot,
    "hlo": graph_hlo,
    "stablehlo": graph_stablehlo,
}
