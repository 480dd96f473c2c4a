"""The lowering table through compiled mode: torch's OpInfo samples, compiled with backend="xlalab".

Every OpInfo op's first float32 sample (int64 or bool when the op has no float32) runs in
functions that ``torch.compile`` captures, ``CHUNK`` ops per function (a chunk with an op that
has no lowering is halved until that op runs alone), so each op reaches the
backend as part of a graph dynamo produced and AOTAutograd functionalized, and is lowered
through the same table as in lazy mode. Each result must match eager CPU with the sweep's
tolerances (``xlalab.testing.opinfo_sweep``). The programs' nodes then tell which lowerings
ran.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import torch

import xlalab
import xlalab.dynamo as dynamo
from xlalab.runtime.lowering.registry import LOWERINGS
from xlalab.testing import opinfo_sweep

CHUNK = 40
_NAMES = itertools.count()
DTYPES = (torch.float32, torch.int64, torch.bool)
# The default run takes every third op (about 200, a minute and a half on two cores); with
# XLALAB_DYNAMO_SWEEP=full every op runs and every lowering must be reached (four minutes).
FULL = os.environ.get("XLALAB_DYNAMO_SWEEP", "") == "full"
STRIDE = 1 if FULL else 3


def _sample(op: Any) -> tuple[torch.dtype, Any] | None:
    for dtype in DTYPES:
        if dtype not in op.supported_dtypes("cpu"):
            continue
        samples = opinfo_sweep._samples(op, dtype, requires_grad=False, limit=1)
        if not samples:
            continue
        sample = samples[0]
        try:
            out = opinfo_sweep._call(op, *opinfo_sweep._clone((sample.input, sample.args, sample.kwargs)))
        except Exception:
            return None  # eager itself refuses the sample
        leaves = opinfo_sweep._leaves(out)
        if not leaves or not all(isinstance(x, torch.Tensor) for x in leaves):
            return None  # a Python number or None: nothing on the device to compare
        if any(x.dtype in opinfo_sweep.UNSUPPORTED for x in leaves):
            return None  # a dtype XLA has no type for (complex32)
        return dtype, sample
    return None


@cache
def _cases() -> list[tuple[str, Any, Any]]:
    cases = []
    for op in opinfo_sweep.load_op_db():
        if op.name in opinfo_sweep.SHAPE_ONLY or op.name in opinfo_sweep.SKIP:
            continue  # random values (test_dynamo's dropout test), sparse layouts, Python results
        picked = _sample(op)
        if picked is not None:
            cases.append((opinfo_sweep.op_id(op), op, picked[1]))
    return cases


def _chunks() -> Iterator[list[tuple[str, Any, Any]]]:
    cases = _cases()[::STRIDE]
    for i in range(0, len(cases), CHUNK):
        yield cases[i : i + CHUNK]


def _lazy_graphs() -> int:
    return sum(len(rep.lazy) for rep in dynamo.compiled_functions())


def _run_chunk(chunk: list[tuple[str, Any, Any]], dev: torch.device) -> dict[str, str]:
    """Compile one function over the chunk's ops; the ops whose results differ from eager."""
    moved = [opinfo_sweep._move(op, sample, dev) for _, op, sample in chunk]
    ops = [op for _, op, _ in chunk]

    # Straight-line calls: dynamo cannot resume inside a loop, so an op that breaks the graph
    # in a loop would send the whole function to eager.
    calls = [f"    r{i} = ops[{i}](args[{i}][0], *args[{i}][1], **args[{i}][2])\n" for i in range(len(ops))]
    body = "".join(calls)
    # A name of its own per function: dynamo keeps what it learnt (dimensions that changed, so
    # dynamic) per function name and line, and each chunk's samples are unrelated.
    name = f"many_{next(_NAMES)}"
    namespace: dict[str, Any] = {"ops": ops}
    exec(f"def {name}(args):\n{body}    return [{', '.join(f'r{i}' for i in range(len(ops)))}]\n", namespace)
    many = namespace[name]

    problems: dict[str, str] = {}
    lazy = _lazy_graphs()
    try:
        outs = torch.compile(many, backend="xlalab")(moved)
        if _lazy_graphs() > lazy and len(chunk) > 1:
            # An op without a lowering made a graph run lazily (right values, but its other ops
            # never reached a program): halve the chunk until that op is alone.
            half = len(chunk) // 2
            return {**_run_chunk(chunk[:half], dev), **_run_chunk(chunk[half:], dev)}
    except Exception:
        # One op broke the chunk's graph: find it (and run the others) one op per graph.
        outs = []
        for (name, op, _), args in zip(chunk, moved):
            try:
                outs.append(torch.compile(lambda a, op=op: op(a[0], *a[1], **a[2]), backend="xlalab")(args))
            except Exception as e:
                problems[name] = f"compiled run failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                outs.append(None)
    for (name, op, sample), out in zip(chunk, outs):
        if name in problems:
            continue
        expected = sample.output_process_fn_grad(
            opinfo_sweep._call(op, *opinfo_sweep._clone((sample.input, sample.args, sample.kwargs)))
        )
        dtype = next(x.dtype for x in opinfo_sweep._leaves(expected))
        rtol, atol = opinfo_sweep.tolerances(op, dtype)
        try:
            actual = opinfo_sweep._to_cpu(sample.output_process_fn_grad(out))
        except Exception as e:
            problems[name] = f"reading the result failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            continue
        try:
            try:
                opinfo_sweep.compare(actual, expected, rtol, atol)
            except opinfo_sweep.Mismatch:
                reference = opinfo_sweep._wide_reference(op, sample)
                opinfo_sweep.compare(actual, expected, rtol, atol, False, reference)
        except opinfo_sweep.Mismatch as e:
            problems[name] = f"differs from eager: {str(e)[:200]}"
    return problems


def _lowered_ops() -> set[Any]:
    seen: set[Any] = set()
    for rep in dynamo.compiled_functions():
        for graph in rep.graphs:
            for compiled in graph.compiled:
                for variant in compiled.variants.values():
                    seen.update(n.op for n in variant.ir_graph.nodes if not isinstance(n.op, str))
    return seen


@pytest.fixture(scope="module")
def sweep(dev: torch.device) -> Iterator[tuple[dict[str, str], set[Any]]]:
    dynamo.reset()
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 64  # the halves of a chunk are new functions, but be safe
    try:
        problems: dict[str, str] = {}
        for chunk in _chunks():
            problems.update(_run_chunk(chunk, dev))
            xlalab.mark_step()
        yield problems, _lowered_ops()
    finally:
        torch._dynamo.config.recompile_limit = limit


def test_opinfo_samples_compiled_match_eager(sweep: tuple[dict[str, str], set[Any]]) -> None:
    problems, _ = sweep
    assert len(_cases()) > 400
    assert problems == {}


def test_lowerings_run_through_the_backend(sweep: tuple[dict[str, str], set[Any]]) -> None:
    """The compiled programs reach the lowering table broadly (not a handful of fused ops).

    Forward samples cannot reach every entry: backward lowerings run in training graphs
    (test_dynamo's workloads), ``prims`` ops never appear in an aten graph, and AOTAutograd
    decomposes composite overloads (``upsample_*``, ``matmul``, ``square``) before the backend.
    The full run reached 254 of the table's 435 entries; the default third reaches 155.
    """
    _, seen = sweep
    reached = {op for op in LOWERINGS if op in seen}
    assert len(reached) >= (250 if FULL else 150), sorted(str(op) for op in reached)
    for family in (
        "aten.convolution.default",
        "aten.addmm.default",
        "aten.gather.default",
        "aten.sort.default",
    ):
        if FULL or any(str(op) == family for op in reached):
            assert any(str(op) == family for op in reached), family
