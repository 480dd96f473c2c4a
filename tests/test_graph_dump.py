"""Graph dumps (text, dot, HLO, StableHLO) and XLA_SAVE_TENSORS_FILE, against torch_xla 2.9's captures.

The reference files and ours go through the same small parsers, so a layout change that
would break a torch_xla user's parser fails here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import pytest
import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.debug import graph_dump as gd
from xlalab.debug import save_tensors
from xlalab.runtime import config, events, ir
from xlalab.runtime.graph import linearize
from xlalab.runtime.tensor import value

aten = torch.ops.aten
# What torch_xla 2.9 printed for the same programs (tests/reference/README.md).
REF = Path(__file__).parent / "reference" / "torch_xla-2.9-cpu"

# --------------------------------------------------------------------------- parsers

NODE = re.compile(r"^  %(\d+) = (\(.*?\)|\S+) (\S+)\(([^)]*)\)(.*)$")
DOT_NODE = re.compile(r'^  node(\d+) \[label="([^"]*)"')
DOT_EDGE = re.compile(r'^  node(\d+) -> node(\d+)(?: \[label="([^"]*)"\])?$')
OPERAND = re.compile(r"%(\d+)(?:\.(\d+))?")


@dataclass
class Line:
    num: int
    shape: str
    op: str
    operands: list[tuple[int, str]]  # (node number, output index or "")
    xla_shape: str
    roots: list[int]
    location: str | None
    frames: str | None


def _attr(pattern: str, rest: str) -> str | None:
    m = re.search(pattern, rest)
    return m[1] if m else None


def parse_text(text: str) -> list[Line]:
    """Node lines of one ``IR { ... }`` block: number, shape, op, operands, attributes."""
    lines = text.strip().splitlines()
    assert lines[0] == "IR {" and lines[-1] == "}", text[:200]
    nodes = []
    for line in lines[1:-1]:
        if line.startswith("  #"):  # xlalab's summary lines (max_nodes)
            continue
        m = NODE.match(line)
        assert m, line
        rest = m[5]
        nodes.append(
            Line(
                num=int(m[1]),
                shape=m[2],
                op=m[3],
                operands=[(int(a), b) for a, b in OPERAND.findall(m[4])],
                xla_shape=str(_attr(r"xla_shape=(\(.*?\)|\S+?)(?=, |$)", rest)),
                roots=[int(r) for r in re.findall(r"ROOT=(\d+)", rest)],
                location=_attr(r"location=([^,\s]+)", rest),
                frames=_attr(r"frames=([^,\s]+)", rest),
            )
        )
    return nodes


def parse_dot(text: str) -> tuple[dict[int, list[str]], list[tuple[int, int, str]]]:
    lines = text.strip().splitlines()
    assert lines[0] == "digraph G {" and lines[-1] == "}"
    nodes: dict[int, list[str]] = {}
    edges: list[tuple[int, int, str]] = []
    for line in lines[1:-1]:
        if m := DOT_NODE.match(line):
            nodes[int(m[1])] = m[2].split("\\n")
        elif m := DOT_EDGE.match(line):
            edges.append((int(m[1]), int(m[2]), m[3] or ""))
    return nodes, edges


def ref_section(name: str, title: str) -> str:
    """The block under ``##### <title>`` in a reference capture."""
    text = (REF / name).read_text()
    start = text.index(title)
    body = text[text.index("\n", start) + 1 :]
    return body[: body.find("\n#####")] if "\n#####" in body else body


LEAVES = ("xla::device_data", "prim::Constant")


def ops(nodes: list[Line]) -> list[str]:
    """The op sequence modulo leaves and constants (torch_xla uploads scalars, xlalab bakes ints)."""
    return [n.op for n in nodes if n.op not in LEAVES]


def op_edges(nodes: list[Line]) -> list[tuple[str, list[str]]]:
    """Each op with the ops among its operands: the graph's shape without its leaves."""
    by_num = {n.num: n for n in nodes}
    return [
        (n.op, [by_num[k].op for k, _ in n.operands if by_num[k].op not in LEAVES])
        for n in nodes
        if n.op not in LEAVES
    ]


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if marker in line)


# --------------------------------------------------------------------------- fixtures

_SETTINGS = ("XLA_IR_DEBUG", "XLA_HLO_DEBUG", "XLA_SAVE_TENSORS_FILE", "XLA_SAVE_TENSORS_FMT")


@pytest.fixture
def settings() -> Iterator[None]:
    saved = {name: config.get(name) for name in _SETTINGS}
    yield
    for name, v in saved.items():
        config.set(name, v)


@pytest.fixture
def small(dev: torch.device) -> torch.Tensor:
    """The reference's small expression, a and b materialized first."""
    torch.manual_seed(0)
    a = torch.randn(4, 2, device=dev)
    b = torch.ones(4, 2, device=dev)
    xlalab.mark_step()
    return (a * 2 + b).relu().sum(dim=1)


def _helper(a: torch.Tensor) -> torch.Tensor:
    return (a * 2 + 1.5).relu()  # HELPER-LINE


def _outer(a: torch.Tensor) -> torch.Tensor:
    return _helper(a).sum(dim=1)  # OUTER-LINE


# --------------------------------------------------------------------------- text / dot


def test_text_has_the_reference_shape(small: torch.Tensor) -> None:
    ref = parse_text(ref_section("03_ir_small.txt", "_get_xla_tensors_text([t])"))
    ours = parse_text(gd._get_xla_tensors_text([small]))
    assert ops(ours) == ops(ref) == ["aten::mul", "aten::add", "aten::relu", "aten::sum"]
    assert op_edges(ours) == op_edges(ref)
    for nodes in (ref, ours):
        assert [n.num for n in nodes] == list(range(len(nodes)))
        assert all(k < n.num for n in nodes for k, _ in n.operands)
        assert all(n.shape == n.xla_shape for n in nodes)
        assert nodes[-1].roots == [0] and nodes[-1].shape == "f32[4]{0}"
    assert {n.shape for n in ours if n.op == "aten::mul"} == {"f32[4,2]{1,0}"}


def test_dot_has_the_reference_shape(small: torch.Tensor) -> None:
    small_ref = (ref_section("03_ir_small.txt", f"_get_xla_tensors_{kind}([t])") for kind in ("dot", "text"))
    for text, listing in [
        tuple(small_ref),
        ((REF / "03_loss_forward_dot.txt").read_text(), (REF / "03_loss_forward_text.txt").read_text()),
        (gd.get_tensors_dot([small]), gd.get_tensors_text([small])),
    ]:
        nodes, edges = parse_dot(text)
        listed = parse_text(listing)
        assert [labels[0] for _, labels in sorted(nodes.items())] == [n.op for n in listed]
        assert all(f"xla_shape={n.xla_shape}" in nodes[n.num] for n in listed)
        # Edges: consumers from the last node back, operands in order, "i=" only with several.
        expected = []
        for n in reversed(listed):
            for i, (k, out) in enumerate(n.operands):
                label = ",".join(([f"i={i}"] if len(n.operands) > 1 else []) + ([f"o={out}"] if out else []))
                expected.append((k, n.num, label))
        assert edges == expected
        roots = [labels for labels in nodes.values() if labels[-1].startswith("ROOT=")]
        assert roots


def test_multi_output_nodes_read_like_torch_xla(dev: torch.device) -> None:
    ref = parse_text((REF / "03_loss_forward_text.txt").read_text())
    pool = next(n for n in ref if n.op == "aten::max_pool2d")
    assert pool.shape.startswith("(") and any(out == "0" for n in ref for _, out in n.operands)

    x = torch.randn(1, 1, 8, 8, device=dev)
    xlalab.mark_step()
    vals, idx = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    y = vals.relu() + idx
    ours = parse_text(gd.get_tensors_text([y]))
    multi = next(n for n in ours if n.op == "aten::max_pool2d_with_indices")
    assert multi.shape == "(f32[1,1,4,4]{3,2,1,0}, s64[1,1,4,4]{3,2,1,0})"
    assert [n for n in ours if n.op == "xla::getitem"] == []  # folded, as torch_xla writes them
    relu = next(n for n in ours if n.op == "aten::relu")
    assert relu.operands == [(multi.num, "0")]
    _, edges = parse_dot(gd.get_tensors_dot([y]))
    assert (multi.num, relu.num, "o=0") in edges


def test_scalar_inputs_print_as_zero_d_device_data(dev: torch.device) -> None:
    x = torch.ones(3, device=dev)
    xlalab.mark_step()
    quarter, half = gd.get_tensors_text([x * 0.25]), gd.get_tensors_text([x * 0.5])
    scalar = next(n for n in parse_text(quarter) if n.shape == "f64[]")
    assert scalar.op == "xla::device_data" and "input=scalar" in quarter
    assert quarter == half  # a value fed at run time: same graph, same text


def test_materialized_tensor_is_one_device_data_root(small: torch.Tensor) -> None:
    xlalab.mark_step()
    ref = parse_text(ref_section("03_ir_small.txt", "after sync, loss text:"))
    ours = parse_text(gd.get_tensors_text([small]))
    assert [(n.op, n.roots) for n in ref] == [("xla::device_data", [0])]
    assert [(n.op, n.roots) for n in ours] == [("xla::device_data", [0])]
    hlo = gd.get_tensors_hlo([small])
    assert "parameter(0)" in hlo and "ROOT %tuple" in hlo


# --------------------------------------------------------------------------- HLO / StableHLO


def test_hlo_has_the_reference_shape(small: torch.Tensor) -> None:
    ref = ref_section("03_ir_small.txt", "_get_xla_tensors_hlo([t])")
    for hlo in (ref, gd._get_xla_tensors_hlo([small])):
        assert hlo.startswith("HloModule ")
        assert "->(f32[4]{0})}" in hlo.splitlines()[0]  # a tuple of the roots
        assert re.search(r"^ENTRY %\S+ \(.*\) -> \(f32\[4\]\) \{$", hlo, re.M)
        assert re.search(r"^  ROOT %tuple\.\d+ = \(f32\[4\]\{0\}\) tuple\(f32\[4\]\{0\} %\S+\)$", hlo, re.M)
        assert re.search(r"multiply\(f32\[4,2\]\{1,0\} %\S+, f32\[4,2\]\{1,0\} %\S+\)", hlo)
        assert "metadata=" not in hlo  # only with XLA_HLO_DEBUG
    stablehlo = gd.get_tensors_stablehlo([small])
    assert stablehlo.startswith("module @") and "stablehlo.multiply" in stablehlo


def test_dumping_executes_nothing(small: torch.Tensor) -> None:
    names = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep")

    def snapshot() -> tuple[object, ...]:
        return tuple(met.counter_value(n) for n in names) + tuple(
            (met.metric_data(m) or (0,))[0] for m in ("CompileTime", "ExecuteTime")
        )

    before = snapshot()
    for dump in (gd.get_tensors_text, gd.get_tensors_dot, gd.get_tensors_hlo, gd.get_tensors_stablehlo):
        assert dump([small])
    assert snapshot() == before
    assert value(small).op is not ir.DATA  # type: ignore[arg-type]  # still pending


def test_non_xla_tensors_are_refused() -> None:
    with pytest.raises(TypeError, match="xla tensors"):
        gd.get_tensors_text([torch.ones(2)])


# --------------------------------------------------------------------------- XLA_IR_DEBUG / XLA_HLO_DEBUG


def test_ir_debug_locations_like_torch_xla(dev: torch.device, settings: None) -> None:
    ref = parse_text(ref_section("04_ir_debug_nested_fn.txt", "env: XLA_IR_DEBUG=1\n").split("\n\n")[0])
    ref_loc = {n.op: n.location for n in ref}
    assert ref_loc["aten::mul"] == ref_loc["aten::relu"] == "helper@s4_irdebug.py:5"
    assert ref_loc["aten::sum"] == "outer@s4_irdebug.py:7"

    config.set("XLA_IR_DEBUG", True)
    a = torch.ones(4, 2, device=dev, requires_grad=True)
    xlalab.mark_step()
    t = _outer(a)
    here, helper, outer = Path(__file__).name, line_of("HELPER-LINE"), line_of("OUTER-LINE")
    ours = {n.op: n for n in parse_text(gd.get_tensors_text([t]))}
    for op in ("aten::mul", "aten::add", "aten::relu"):
        assert ours[op].location == f"_helper@{here}:{helper}"
    assert ours["aten::sum"].location == f"_outer@{here}:{outer}"
    # xlalab keeps the callers too, with full paths, innermost first.
    frames = str(ours["aten::mul"].frames).split("|")
    assert frames[:2] == [f"_helper@{__file__}:{helper}", f"_outer@{__file__}:{outer}"]
    assert frames[2].startswith(f"test_ir_debug_locations_like_torch_xla@{__file__}:")

    t.sum().backward()
    grad = {n.op: n for n in parse_text(gd.get_tensors_text([a.grad]))}  # type: ignore[list-item]
    # torch_xla gives backward nodes no location; xlalab gives them their forward op's.
    assert grad["aten::threshold_backward"].location == f"_helper@{here}:{helper}"
    nodes, _ = parse_dot(gd.get_tensors_dot([a.grad]))  # type: ignore[list-item]
    assert any(f"location=_helper@{here}:{helper}" in labels for labels in nodes.values())


def test_hlo_debug_puts_source_lines_in_the_metadata(dev: torch.device, settings: None) -> None:
    ref = ref_section("04_ir_debug_nested_fn.txt", "XLA_IR_DEBUG=1 XLA_HLO_DEBUG=1")
    ref_mul = next(line for line in ref.splitlines() if " multiply(" in line)
    pattern = (
        r'metadata=\{op_type="aten__mul" op_name="[^"]*aten__mul[^"]*" '
        r'source_file="[^"]+" source_line=(\d+)\}'
    )
    assert re.search(pattern, ref_mul)

    config.set("XLA_IR_DEBUG", True)
    config.set("XLA_HLO_DEBUG", True)
    a = torch.ones(4, 2, device=dev)
    xlalab.mark_step()
    hlo = gd.get_tensors_hlo([_outer(a)])
    mul = next(line for line in hlo.splitlines() if " multiply(" in line)
    m = re.search(pattern, mul)
    assert m and int(m[1]) == line_of("HELPER-LINE"), mul
    assert f'source_file="{__file__}"' in mul
    reduce = next(line for line in hlo.splitlines() if " reduce(" in line)
    assert f"source_line={line_of('OUTER-LINE')}" in reduce
    assert "stack_frame_id" not in hlo and "FileNames" not in hlo
    stablehlo = gd.get_tensors_stablehlo([_outer(a)])
    assert f'"{__file__}":{line_of("HELPER-LINE")}' in stablehlo


# --------------------------------------------------------------------------- XLA_SAVE_TENSORS_FILE

BLOCK = re.compile(
    r"\[ScheduleSyncTensorsGraph\]\nTensorsGraphInfo:\n(?P<frames>(?:  [^\n]+\n)*)\n"
    r"Root Hashes: \((?P<roots>[0-9a-f, ]*)\)\n\n## BEGIN_GRAPH\n(?P<graph>[\s\S]*?)\n"
    r"Graph Hash: (?P<hash>[0-9a-f]+)\n\n## END_GRAPH\n\n"
)
FRAME = re.compile(r"^  (\S+) \((.+):(\d+)\)$")


def test_reference_save_file_parses_with_the_block_parser() -> None:
    text = (REF / "04_save_tensors_text_FULL.txt").read_text()
    blocks = list(BLOCK.finditer(text))
    assert len(blocks) == 3 and sum(len(b[0]) for b in blocks) == len(text)
    assert all(FRAME.match(line) for b in blocks for line in b["frames"].splitlines())


HEADS = [("text", "IR {"), ("dot", "digraph G {"), ("hlo", "HloModule "), ("stablehlo", "module @")]


@pytest.mark.parametrize(("fmt", "head"), HEADS)
def test_save_tensors_file_appends_a_block_per_sync(
    dev: torch.device, tmp_path: Path, settings: None, fmt: str, head: str
) -> None:
    xlalab.mark_step()  # earlier tests' pending tensors go elsewhere
    seen: list[events.SyncEvent] = []
    unsubscribe = events.subscribe(lambda e: seen.append(e) if isinstance(e, events.SyncEvent) else None)
    base = tmp_path / "graphs.txt"
    config.set("XLA_SAVE_TENSORS_FMT", fmt)
    config.set("XLA_SAVE_TENSORS_FILE", str(base))
    try:
        w = torch.ones(3, 2, device=dev)
        for step in range(3):
            loss = (torch.ones(4, 3, device=dev) @ w * (0.5 + step)).relu().sum()
            xlalab.mark_step()  # SAVE-SYNC
    finally:
        config.set("XLA_SAVE_TENSORS_FILE", "")
        unsubscribe()
    assert loss.shape == ()
    assert not base.exists() and (tmp_path / "graphs.txt.0").exists()  # the ordinal is appended
    text = (tmp_path / "graphs.txt.0").read_text()
    blocks = list(BLOCK.finditer(text))
    assert len(blocks) == len(seen) == 3 and sum(len(b[0]) for b in blocks) == len(text)
    for block, ev in zip(blocks, seen):
        frames = [FRAME.match(line) for line in block["frames"].splitlines()]
        assert frames[0] and frames[0][2] == __file__ and int(frames[0][3]) == line_of("SAVE-SYNC")
        assert len(frames) == len(ev.frames)
        assert block["hash"] == f"{ev.graph_hash:x}"
        assert len(block["roots"].split(", ")) == len(ev.graph.roots)
        assert block["graph"].startswith(head)
    # The first step also materializes w; the next two are one graph (the scalar is an input),
    # and print the same, so blocks of two syncs diff cleanly.
    assert blocks[0]["hash"] != blocks[1]["hash"] == blocks[2]["hash"]
    assert blocks[1]["graph"] == blocks[2]["graph"]


def test_save_tensors_subscribes_only_while_set(settings: None) -> None:
    save_tensors.install()  # idempotent: already installed by xlalab.debug
    config.set("XLA_SAVE_TENSORS_FILE", "")
    assert not save_tensors._unsubscribe
    config.set("XLA_SAVE_TENSORS_FILE", "/nonexistent-dir/x.txt")
    assert len(save_tensors._unsubscribe) == 1
    config.set("XLA_SAVE_TENSORS_FILE", "")
    assert not save_tensors._unsubscribe


# --------------------------------------------------------------------------- large graphs


def _chain(n_ops: int) -> ir.Node:
    """A chain of adds built straight from IR nodes: the dump's cost, not recording's."""
    leaf = ir.data(jnp.zeros(4, jnp.float32), (4,), torch.float32, 0)
    node = leaf
    for _ in range(n_ops):
        node = ir.Node(aten.add.Tensor, (node, leaf), None, (4,), torch.float32, 0)
    return node


def test_large_graphs_dump_in_linear_time() -> None:
    g = linearize([_chain(12_000)])
    t0 = time.perf_counter()
    text = gd.graph_text(g)
    dot = gd.graph_dot(g)
    elapsed = time.perf_counter() - t0
    assert elapsed < 3.0, elapsed
    assert len(parse_text(text)) == 12_001 and dot.count(" -> ") == 24_000

    summary = gd.graph_text(g, max_nodes=100)
    nodes = parse_text(summary)
    assert len(nodes) == 100 and nodes[-1].roots == [0]
    assert "  # ... %50..%11950: 11901 nodes omitted (max_nodes=100)" in summary
    assert "  # ops: aten::add=12000, xla::device_data=1" in summary
    small_dot = gd.graph_dot(g, max_nodes=100)
    assert small_dot.count("\n") < 400 and "omitted50 -> node11951 [style=dashed]" in small_dot
