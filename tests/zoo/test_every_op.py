"""Every analysis on the graph of every op the runtime records: no analysis may fail.

Each OpInfo's first float32 sample (and, where the op is differentiable, its backward) is
recorded on ``xla:0`` and left pending; the analyses the notebook and PT_XLA_DEBUG run on a
compiled graph then run on that graph: the signature and graph diff, the text and dot
dumps, the stripped copy the graph viewer keeps, PT_XLA_DEBUG's graph facts and sizes.
Nothing is compiled: the analyses never need a compiled program, and recording ~600 ops
costs seconds where compiling them would cost minutes.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from xlalab.debug import graph_diff, pt_xla_debug
from xlalab.debug.graph_dump import graph_dot, graph_of, graph_text
from xlalab.lab.watcher import strip_graph
from xlalab.runtime.lowering.registry import LOWERINGS
from xlalab.testing import opinfo_sweep


def _xla_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.device.type == "xla" else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _xla_tensors(v)]
    return []


def _analyse(tensors: list[torch.Tensor]) -> set[str]:
    graph = graph_of(tensors)
    sig = graph_diff.signature(graph)
    assert len(sig) == len(graph.nodes)
    assert graph_diff.first_change(sig, sig).kind == "settings"
    shorter = graph_diff.first_change(sig[:-1], sig)
    assert shorter.kind == "size"
    assert graph_text(graph).startswith("IR {")
    assert graph_dot(graph).startswith("digraph G {")
    assert graph_text(strip_graph(graph)) == graph_text(graph)
    pt_xla_debug._graph_info(graph, 0, len(tensors))
    assert all(n >= 0 for n in pt_xla_debug._memory(graph))
    return {n.name for n in graph.nodes}


def _first_sample(op: Any) -> list[Any]:
    """The OpInfo's first float32 sample. Called through ``sample_inputs_func``: ``sample_inputs``
    wraps it in torch's input tracker, which walks ``inspect.stack()`` per call (seconds per op
    under pytest, most of this test's time)."""
    torch.manual_seed(0)
    for sample in op.sample_inputs_func(op, "cpu", torch.float32, op.supports_autograd):
        return [sample]
    return []


def _sample_graphs(op: Any, dev: torch.device) -> list[list[torch.Tensor]]:
    try:
        samples = _first_sample(op)
    except Exception:
        return []
    graphs = []
    for sample in samples:
        try:
            inp, args, kwargs = opinfo_sweep._move(op, sample, dev)
            out = _xla_tensors(opinfo_sweep._call(op, inp, args, kwargs))
        except Exception:
            continue  # a sample the runtime rejects has no graph to analyse
        if not out:
            continue
        graphs.append(out)
        leaves = [t for t in _xla_tensors((inp, args, list(kwargs.values()))) if t.requires_grad]
        floats = [o for o in out if o.requires_grad and o.is_floating_point()]
        if leaves and floats:
            try:
                grads = torch.autograd.grad(sum(o.sum() for o in floats), leaves, allow_unused=True)
            except Exception:
                continue
            graphs.append([g for g in grads if g is not None])
    return graphs


def test_every_recorded_op_survives_every_analysis(dev: torch.device) -> None:
    seen: set[str] = set()
    t0 = time.perf_counter()
    for op in opinfo_sweep.load_op_db():
        if op.name in opinfo_sweep.SKIP or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        for tensors in _sample_graphs(op, dev):
            if tensors:
                seen |= _analyse(tensors)
    lowered = {f"aten::{o._schema.name.split('::')[-1]}" for o in LOWERINGS} | {
        o._schema.name for o in LOWERINGS
    }
    covered = seen & lowered
    # The sweep reaches most of the table (factories, in-place twins and RNG variants are the rest).
    assert len(covered) > 250, sorted(covered)
    assert {"aten::max_pool2d_with_indices_backward", "aten::convolution_backward"} <= seen
    print(f"{len(covered)} lowered ops analysed in {time.perf_counter() - t0:.1f} s")
