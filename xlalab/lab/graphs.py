"""Pending graphs for ``%xla_graph``: which tensors, and the display bundle that shows them.

Nothing here runs a graph: the roots are the tensors' current IR nodes, linearized the way a
sync would, and the dumps are xlalab.debug.graph_dump's.

The dot format is shown as a picture three ways, best first: the JupyterLab extension
renders ``application/vnd.xlalab.graph+json`` with WebAssembly Graphviz; where the Graphviz
``dot`` program is installed, an ``image/svg+xml`` made by it comes along for other
frontends; and ``text/plain`` carries the IR text as the last resort.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import torch

from xlalab.debug import graph_dump
from xlalab.runtime import graph as _graph
from xlalab.runtime import ir
from xlalab.runtime import sharding as _sharding
from xlalab.runtime import tensor as _tensor

from .cells import CellMap
from .render import pre_bundle

MIME = "application/vnd.xlalab.graph+json"
DEFAULT_MAX_NODES = 300
FORMATS = ("text", "dot", "hlo", "stablehlo")


class GraphInputError(ValueError):
    """A tensor name that is not there, or not an xla tensor: said, never raised as a traceback."""


def pending_graph(tensors: list[tuple[str, torch.Tensor]] | None) -> tuple[Any, str]:
    """The pending graph of the named tensors, or of every live pending tensor (None).

    Returns (graph, what it is of). Raises GraphInputError for bad input.
    """
    if tensors is None:
        storages = _tensor.pending_storages()
        if not storages:
            raise GraphInputError("nothing is pending: every xla tensor holds computed device data")
        roots = [st.node for st in storages]
        return _graph.linearize(roots), f"every pending tensor ({len(roots)})"
    roots = []
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise GraphInputError(f"{name} is a {type(t).__name__}, not a tensor")
        if not isinstance(t, _tensor.XlaTensor):
            raise GraphInputError(
                f"{name} is on {t.device}, not an xla device: it has no graph "
                "(move it with .to(xm.xla_device()))"
            )
        roots.append(_tensor.value(t))
    names = ", ".join(name for name, _ in tensors)
    if all(r.op is ir.DATA for r in roots):
        held = "holds" if len(roots) == 1 else "hold"
        raise GraphInputError(f"nothing is pending for {names}: {held} computed device data")
    return _graph.linearize(roots), names


def graph_payload(
    graph: Any, cells: CellMap, *, title: str, max_nodes: int | None = DEFAULT_MAX_NODES
) -> dict[str, Any]:
    """The MIME payload of docs/lab-protocol.md: dot, node table and op counts; in SPMD mode
    also each node's sharding, the shardings' legend and the compiled program's collectives."""
    rows, total, op_counts = graph_dump.graph_rows(graph, max_nodes=max_nodes)
    payload: dict[str, Any] = {
        "v": 1,
        "hash": f"{graph.hash:x}",
        "title": title,
        "dot": _cell_locations(graph_dump.graph_dot(graph, max_nodes=max_nodes), rows, cells),
        "num_nodes": total,
        "shown_nodes": len(rows),
        "nodes": [
            {
                "id": f"node{r.num}",
                "op": r.name,
                "shape": r.shape,
                "operands": r.operands,
                "frames": [cells.location(f) for f in cells.user_frames(r.frames)],
                "roots": r.roots,
                "sharding": _sharding_attr(r.attrs),
            }
            for r in rows
        ],
        "op_counts": [[name, n] for name, n in op_counts],
    }
    if _sharding.enabled():
        payload.update(spmd_payload(graph, rows, payload["nodes"]))
    return payload


def _needing(c: Any, rows: list[Any], nodes: list[dict[str, Any]]) -> list[str]:
    """The ids of the shown nodes whose op could have needed collective ``c``."""
    from xlalab.distributed.spmd.collectives import node_matches

    return [n["id"] for r, n in zip(rows, nodes) if node_matches(c, r.name, r.frames)]


def _sharding_attr(attrs: list[str]) -> str | None:
    for a in attrs:
        if a.startswith("sharding="):
            return a[len("sharding=") :]
    return None


def spmd_payload(graph: Any, rows: list[Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The legend of the shardings the shown nodes have (first seen first), and the collectives
    XLA's partitioner inserted into the graph's compiled program, each with the nodes whose op
    needed it (None: the graph has not been compiled, so nothing is known yet)."""
    from xlalab.distributed.spmd import collectives

    legend: dict[str, int] = {}
    for n in nodes:
        if n["sharding"] is not None:
            legend[n["sharding"]] = legend.get(n["sharding"], 0) + 1
    program = collectives.latest_program(graph.hash)
    found = None
    if program is not None:
        found = [
            {
                "kind": c.kind,
                "shape": c.shape,
                "nbytes": c.nbytes,
                "op": c.aten_op,
                "location": c.location,
                "replica_groups": c.replica_groups,
                "nodes": _needing(c, rows, nodes),
            }
            for c in collectives.program_collectives(program)
        ]
    return {"shardings": [{"spec": spec, "nodes": k} for spec, k in legend.items()], "collectives": found}


def _cell_locations(dot: str, rows: list[Any], cells: CellMap) -> str:
    """Node labels say ``location=cell [3], line 2`` where the dump says ``<module>@2381.py:2``:
    a notebook's cells are files with made-up names."""
    seen: dict[str, str] = {}
    for r in rows:
        if r.frames:
            f = r.frames[0]
            if cells.cell_of(f.file) is not None:
                seen[f"location={f.function}@{os.path.basename(f.file)}:{f.line}"] = (
                    f"location={cells.label(f)} in {f.function}"
                )
    for old, new in seen.items():
        dot = dot.replace(old, new)
    return dot


def dot_svg(dot: str, timeout: float = 20.0) -> str | None:
    """SVG from the Graphviz program, if it is installed (None otherwise, or if it fails)."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-Tsvg"], input=dot, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def graph_bundle(
    graph: Any, cells: CellMap, *, fmt: str, title: str, max_nodes: int | None
) -> tuple[dict[str, Any], str]:
    """(display bundle, the text that ``--save`` writes) for one format."""
    if fmt == "text":
        text = graph_dump.graph_text(graph, max_nodes=max_nodes)
        return pre_bundle(f"# {title}\n{text}"), text
    if fmt == "hlo":
        text = graph_dump.graph_hlo(graph)
        return pre_bundle(text), text
    if fmt == "stablehlo":
        text = graph_dump.graph_stablehlo(graph)
        return pre_bundle(text), text
    payload = graph_payload(graph, cells, title=title, max_nodes=max_nodes)
    bundle: dict[str, Any] = {
        MIME: payload,
        "text/plain": f"# {title}\n" + graph_dump.graph_text(graph, max_nodes=max_nodes),
    }
    svg = dot_svg(payload["dot"])
    if svg is not None:
        bundle["image/svg+xml"] = svg
    return bundle, payload["dot"]
