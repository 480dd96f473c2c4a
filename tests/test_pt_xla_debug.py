"""PT_XLA_DEBUG: torch_xla 2.9's analysis blocks line for line, levels, file, frames, and the analysis.

One regex parser reads both torch_xla's captures and xlalab's output, so "the layout matches" is
checked by the same code on both. Two small training scripts run in subprocesses (the settings
from the environment, the exit summary at exit); the rest runs in-process through
``config.set``, as a notebook would, which is much faster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import xlalab
import xlalab.debug  # installs the debugger, as a user's import would
import xlalab.debug.metrics as met
from xlalab.debug import pt_xla_debug as pxd
from xlalab.runtime import config

# What torch_xla 2.9 printed (tests/reference/README.md).
REFERENCE = Path(__file__).parent / "reference" / "torch_xla-2.9-cpu"

# --------------------------------------------------------------------------- the shared parser

RULE = "=" * 80
DASH = "-" * 80
_HEAD = re.compile(r"^(Compilation|Execution|Post Compilation) Analysis: ={80}$")
_FRAME = re.compile(r"^  (?P<fn>\S+) \((?P<file>.+):(?P<line>\d+)\)$")
_SIZES = ("Graph input size", "Graph output size", "Aliased Input size", "Intermediate tensor size",
          "Compiled program size")  # fmt: skip
_SIZE = re.compile(r"^(?P<what>[A-Za-z ]+): (?P<gb>\d+\.\d{6}) GB$")
_COMPUTATION = re.compile(r"^Computation hash: [0-9a-f]{32}$")


@dataclass
class Block:
    kind: str  # Compilation, Execution or Post Compilation
    cause: list[str] = field(default_factory=list)
    graph_hash: str = ""
    inputs: int = -1
    outputs: int = -1
    frames: list[tuple[str, str, int]] = field(default_factory=list)
    sizes: dict[str, float] = field(default_factory=dict)


def parse_blocks(text: str) -> list[Block]:
    """Every analysis block in ``text``, checked against torch_xla 2.9's grammar (asserts on any
    deviation). A Compilation block must be followed by its computation hash and a Post
    Compilation block, exactly as torch_xla prints them."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _HEAD.match(lines[i])
        if m is None:
            i += 1
            continue
        kind = m[1]
        prefix = f"{kind} Analysis: "
        assert i > 0 and lines[i - 1] == "", f"no blank line before the block at line {i + 1}"
        body: list[str] = []
        i += 1
        while True:
            assert i < len(lines) and lines[i].startswith(prefix), (
                f"line {i + 1} breaks the block: {lines[i]!r}"
            )
            rest = lines[i][len(prefix) :]
            i += 1
            if rest == RULE:
                break
            body.append(rest)
        assert body and body[-1] == DASH, f"{kind} block ends without its dashed rule"
        blocks.append(_parse_body(kind, body[:-1]))
        if kind == "Compilation":
            assert lines[i] == "" and _COMPUTATION.match(lines[i + 1]) and lines[i + 2] == "", lines[
                i : i + 3
            ]
            assert _HEAD.match(lines[i + 3]) and lines[i + 3].startswith("Post Compilation"), lines[i + 3]
    return blocks


def _parse_body(kind: str, body: list[str]) -> Block:
    b = Block(kind)
    if kind == "Post Compilation":
        assert [(_SIZE.match(x) or {"what": x})["what"] for x in body] == list(_SIZES), body
        b.sizes = {m["what"]: float(m["gb"]) for m in map(_SIZE.match, body) if m}
        return b
    assert body[0] == f"{kind} Cause", body[0]
    k = body.index("Graph Info: ")  # the trailing space is torch_xla's
    b.cause = [c.strip() for c in body[1:k]]
    assert b.cause and all(re.match(r"^  \S", c) for c in body[1:k]), body[1:k]
    rest = body[k + 1 :]
    if rest[0].startswith("  Graph Name: "):
        rest = rest[1:]
    assert re.match(r"^  Graph Hash: [0-9a-f]+$", rest[0]), rest[0]
    b.graph_hash = rest[0].split(": ")[1]
    assert re.match(r"^  Number of Graph Inputs: \d+$", rest[1]), rest[1]
    assert re.match(r"^  Number of Graph Outputs: \d+$", rest[2]), rest[2]
    b.inputs, b.outputs = int(rest[1].split(": ")[1]), int(rest[2].split(": ")[1])
    assert rest[3] == "Python Frame Triggered Execution: ", rest[3]
    for line in rest[4:]:
        m = _FRAME.match(line)
        assert m is not None, f"not a frame line: {line!r}"
        b.frames.append((m["fn"], m["file"], int(m["line"])))
    return b


def skeleton(text: str) -> list[str]:
    """The blocks' lines with values (hashes, counts, sizes, frames) blanked: the layout alone."""
    out: list[str] = []
    for line in text.splitlines():
        if not (_HEAD.match(line) or " Analysis: " in line or line.startswith("Computation hash")):
            continue
        # Hashes print without leading zeros (as torch_xla's do), so any long hex run is one.
        line = re.sub(r"(?<=Hash: )[0-9a-f]+$|(?<=hash: )[0-9a-f]+$|[0-9a-f]{16,}", "<hash>", line)
        line = re.sub(r"\d+\.\d{6} GB", "<n> GB", line)
        line = re.sub(r": \d+$", ": <n>", line)
        line = re.sub(r"^(.* Analysis: )  \S+ \(.+:\d+\)$", r"\1  <frame>", line)
        if not (out and out[-1] == line and line.endswith("<frame>")):  # stacks differ in depth
            out.append(line)
    return out


# torch_xla 2.9 on a step barrier (04_pt_xla_debug_cached_print_compile.txt, iter 0).
REFERENCE_SYNC = """
Compilation Analysis: ================================================================================
Compilation Analysis: Compilation Cause
Compilation Analysis:   user torch_xla.sync
Compilation Analysis: Graph Info:
Compilation Analysis:   Graph Hash: 91398c1554b884b9cd833780a73186ba
Compilation Analysis:   Number of Graph Inputs: 1
Compilation Analysis:   Number of Graph Outputs: 3
Compilation Analysis: Python Frame Triggered Execution:
Compilation Analysis:   sync (<site-packages>/torch_xla/torch_xla.py:87)
Compilation Analysis:   <module> (<scripts>/s4_cached.py:9)
Compilation Analysis: --------------------------------------------------------------------------------
Compilation Analysis: ================================================================================

Computation hash: 64a68b0b6a7ebf8848e98fbbf7f9a6d9

Post Compilation Analysis: ================================================================================
Post Compilation Analysis: Graph input size: 0.000000 GB
Post Compilation Analysis: Graph output size: 0.000000 GB
Post Compilation Analysis: Aliased Input size: 0.000000 GB
Post Compilation Analysis: Intermediate tensor size: 0.000000 GB
Post Compilation Analysis: Compiled program size: 0.000000 GB
Post Compilation Analysis: --------------------------------------------------------------------------------
Post Compilation Analysis: ================================================================================

Execution Analysis: ================================================================================
Execution Analysis: Execution Cause
Execution Analysis:   user torch_xla.sync
Execution Analysis: Graph Info:
Execution Analysis:   Graph Hash: 91398c1554b884b9cd833780a73186ba
Execution Analysis:   Number of Graph Inputs: 1
Execution Analysis:   Number of Graph Outputs: 3
Execution Analysis: Python Frame Triggered Execution:
Execution Analysis:   sync (<site-packages>/torch_xla/torch_xla.py:87)
Execution Analysis:   <module> (<scripts>/s4_cached.py:9)
Execution Analysis: --------------------------------------------------------------------------------
Execution Analysis: ================================================================================
"""
# torch_xla ends these two lines with a space (kept out of the source, where editors strip it).
REFERENCE_SYNC = re.sub(r"(Graph Info:|Python Frame Triggered Execution:)\n", r"\1 \n", REFERENCE_SYNC)

def _access_cause(barrier: str | None = None) -> str:
    # torch_xla 2.9 names its barrier torch_xla.sync; so does the report once torch_xla's names
    # are imported in the process (an earlier test may have done it in this one).
    return f"most likely user code trying to access tensor value before {barrier or pxd._barrier_name()}"


def test_the_parser_reads_torch_xlas_captures() -> None:
    blocks = parse_blocks(REFERENCE_SYNC)
    assert [b.kind for b in blocks] == ["Compilation", "Post Compilation", "Execution"]
    assert blocks[0].cause == ["user torch_xla.sync"] and blocks[0].frames[-1][2] == 9
    captures = sorted(REFERENCE.glob("04_pt_xla_debug_*.txt"))
    assert len(captures) == 6
    for path in captures:
        parsed = parse_blocks(path.read_text())
        assert sum(b.kind == "Compilation" for b in parsed) >= 4, path.name


# --------------------------------------------------------------------------- in-process


def _line_of(marker: str) -> int:
    return next(
        i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if f"# {marker}" in line
    )


@pytest.fixture
def debug(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], str]]:
    """PT_XLA_DEBUG on (as a notebook turns it on); returns a function reading what it printed."""
    pxd.install()
    xlalab.mark_step()  # nothing pending from earlier tests leaks into ours
    pxd.reset()
    capsys.readouterr()
    config.set("PT_XLA_DEBUG", True)
    yield lambda: capsys.readouterr().err
    for name in ("PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "PT_XLA_DEBUG_MAX_FRAME"):
        config.set(name, config.SETTINGS[name].default)
    config.set("PT_XLA_DEBUG", False)  # last: an explicit off also drops an explicit level
    pxd.reset()
    assert not pxd.enabled()


def test_a_step_barrier_prints_torch_xlas_blocks_line_for_line(
    dev: torch.device, debug: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script written against torch_xla's names gets torch_xla 2.9's words for the barrier.
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))
    w = torch.ones(5, 9, device=dev)
    y = (w * 3).relu()
    xlalab.mark_step()  # BARRIER-A
    out = debug()
    assert skeleton(out) == skeleton(REFERENCE_SYNC)
    comp, post, exe = parse_blocks(out)
    assert comp.frames[0][1:] == (__file__, _line_of("BARRIER-A"))
    assert comp.graph_hash == exe.graph_hash and comp.outputs == exe.outputs >= 1
    assert post.sizes["Graph output size"] >= 0
    assert y.shape == (5, 9)


def test_causes_for_mark_step_item_print_and_fallback(dev: torch.device, debug: Callable[[], str]) -> None:
    x = torch.ones(3, 11, device=dev) * 2
    value = x.sum().item()  # ITEM-B
    print(x + 1)  # PRINT-B
    picked = torch.nonzero(x - 2)  # FALLBACK-B
    z = x * 4
    xlalab.mark_step()  # BARRIER-B
    out = debug()
    blocks = [b for b in parse_blocks(out) if b.kind != "Post Compilation"]
    by_line = {b.frames[0][2]: b.cause for b in blocks}
    assert by_line[_line_of("ITEM-B")][0] == _access_cause()
    assert ".item()" in by_line[_line_of("ITEM-B")][1]
    assert by_line[_line_of("PRINT-B")] == [_access_cause(), by_line[_line_of("PRINT-B")][1]]
    assert "user code trying to access tensor value with print" in by_line[_line_of("PRINT-B")][1]
    assert by_line[_line_of("FALLBACK-B")][0].startswith("aten::nonzero has no XLA lowering")
    assert by_line[_line_of("BARRIER-B")] == [f"user {pxd._barrier_name()}"]
    assert value == 66.0 and picked.shape == (0, 2) and z.shape == (3, 11)


def test_level_1_compilations_only_and_a_level_alone_prints_no_analysis(
    dev: torch.device, debug: Callable[[], str]
) -> None:
    config.set("PT_XLA_DEBUG_LEVEL", 1)
    for _ in range(2):  # the second step is cached: torch_xla prints nothing for it at level 1
        y = torch.ones(4, 12, device=dev) * 5
        xlalab.mark_step()
    kinds = [b.kind for b in parse_blocks(debug())]
    assert kinds == ["Compilation", "Post Compilation"]
    # As torch_xla 2.9: the level without PT_XLA_DEBUG prints blocks, but no pt-xla-profiler lines.
    config.set("PT_XLA_DEBUG", False)
    config.set("PT_XLA_DEBUG_LEVEL", 2)
    for _ in range(2):
        y = torch.ones(4, 12, device=dev) * 5
        _ = y.sum().item()
        xlalab.mark_step()
    out = debug()
    assert [b.kind for b in parse_blocks(out)].count("Execution") == 4
    assert "pt-xla-profiler" not in out
    config.set("PT_XLA_DEBUG_LEVEL", 0)
    config.set("PT_XLA_DEBUG", True)
    y = torch.ones(4, 13, device=dev) * 5
    xlalab.mark_step()
    assert parse_blocks(debug()) == []  # level 0: analysis only


def _deep(dev: torch.device, depth: int) -> torch.Tensor:
    if depth:
        return _deep(dev, depth - 1)
    return (torch.ones(2, 14, device=dev) * 3).sum().cpu()  # DEEP


def test_max_frame_limits_the_frames(dev: torch.device, debug: Callable[[], str]) -> None:
    config.set("PT_XLA_DEBUG_MAX_FRAME", 2)
    _deep(dev, 4)
    blocks = [b for b in parse_blocks(debug()) if b.kind != "Post Compilation"]
    assert blocks and all(len(b.frames) == 2 for b in blocks)
    assert blocks[0].frames[0] == ("_deep", __file__, _line_of("DEEP"))
    assert "the value was copied to the CPU" in blocks[0].cause[1]


def test_debug_file_gets_everything_instead_of_stderr(
    dev: torch.device, debug: Callable[[], str], tmp_path: Path
) -> None:
    target = tmp_path / "pt_xla_debug.txt"
    config.set("PT_XLA_DEBUG_FILE", str(target))
    y = torch.ones(6, 15, device=dev) + 1
    xlalab.mark_step()
    config.set("PT_XLA_DEBUG_FILE", "")  # closes the file
    assert debug() == ""
    assert [b.kind for b in parse_blocks(target.read_text())] == [
        "Compilation",
        "Post Compilation",
        "Execution",
    ]
    assert y.shape == (6, 15)


def test_analysis_names_the_line_whose_graph_keeps_changing(
    dev: torch.device, debug: Callable[[], str]
) -> None:
    w = torch.ones(17, device=dev)
    for batch in range(41, 47):
        x = torch.randn(batch, 17).to(dev)  # UPLOAD-C
        y = (x * w).sum(0)
        xlalab.mark_step()  # BARRIER-C
    text = pxd.report()
    here = f"{__file__}:{_line_of('BARRIER-C')} (test_analysis_names_the_line_whose_graph_keeps_changing)"
    assert f"{here}: recompilation: the graph synced here compiled 4 times in 4 steps after warm-up" in text
    assert f"an input's shape, sent to the device at {__file__}:{_line_of('UPLOAD-C')}" in text
    assert "f32[43,17] -> f32[44,17]" in text
    assert "CompileTime too frequent" in debug()
    assert y.shape == (17,)


def test_analysis_names_an_item_inside_the_step_loop(dev: torch.device, debug: Callable[[], str]) -> None:
    w = torch.ones(18, device=dev)
    for _ in range(4):
        loss = (w * 2).sum()
        print_me = loss.item()  # ITEM-D
        w = w - 0.1
        xlalab.mark_step()
    text = pxd.report()
    assert f"{__file__}:{_line_of('ITEM-D')} (" in text
    assert (
        ": transfer: .item() copied device values to the host 4 times in 4 of 4 steps (1.0 per step)" in text
    )
    assert "recompilation" not in text  # same shapes every step: cached after the first
    assert "TransferFromDeviceTime too frequent: 4 counts during 4 steps" in debug()
    assert print_me > 0


def test_analysis_names_an_op_without_lowering(dev: torch.device, debug: Callable[[], str]) -> None:
    for _ in range(2):
        x = torch.ones(3, 19, device=dev) - 1
        idx = torch.nonzero(x)  # FALLBACK-E
        z = x + 1  # something for the barrier to run: empty barriers publish no event
        xlalab.mark_step()
    text = pxd.report()
    assert f"{__file__}:{_line_of('FALLBACK-E')} (" in text
    assert "not lowered: aten::nonzero ran on the CPU 2 times (in 2 of 2 steps)" in text
    assert 'Unlowered Op: "nonzero"' in text
    assert "Op(s) not lowered: aten::nonzero" in debug()
    assert idx.shape == (0, 2) and z.shape == (3, 19)


def test_slow_compiles_are_reported_with_their_line(
    dev: torch.device, debug: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pxd, "SLOW_COMPILE_SECONDS", 0.0)
    y = torch.ones(7, 20, device=dev) * 9
    xlalab.mark_step()  # SLOW-F
    assert (
        f"{__file__}:{_line_of('SLOW-F')} (test_slow_compiles_are_reported_with_their_line): slow compile"
        in (pxd.report())
    )
    assert y.shape == (7, 20)


def _workload(dev: torch.device, width: int) -> None:
    x = torch.ones(3, width, device=dev) * 2
    _ = x.sum().item()
    print(x * 3, file=open(os.devnull, "w"))
    x.add_(1)  # the step's own work: the reads left x computed
    xlalab.mark_step()


def test_the_debugger_causes_no_compilation_or_transfer(dev: torch.device, debug: Callable[[], str]) -> None:
    names = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "xla::_to_cpu")

    def counts() -> list[int]:
        return [met.counter_value(n) or 0 for n in names]

    before = counts()
    _workload(dev, 21)  # PT_XLA_DEBUG on
    on = [b - a for a, b in zip(before, counts())]
    config.set("PT_XLA_DEBUG", False)
    before = counts()
    _workload(dev, 22)  # same program, other shapes: off
    off = [b - a for a, b in zip(before, counts())]
    assert on == off and on[0] == 3
    pxd.install()  # idempotent: still one subscription, one block per compilation
    config.set("PT_XLA_DEBUG", True)
    debug()
    _workload(dev, 23)
    assert [b.kind for b in parse_blocks(debug())].count("Compilation") == 3


# --------------------------------------------------------------------------- subprocesses

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from torch import nn
    import xlalab.core.xla_model as xm
    import xlalab.debug.metrics as met

    torch.manual_seed(0)
    dev = xm.xla_device()
    model = nn.Linear(6, 3).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)


    def train_step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        value = loss.item()  # ITEM
        xm.optimizer_step(opt)  # BARRIER
        return value


    for step, batch in enumerate([9, 8, 7, 6][: int(sys.argv[1])]):
        x = torch.randn(batch, 6).to(dev)  # UPLOAD-X
        y = torch.randn(batch, 3).to(dev)  # UPLOAD-Y
        train_step(x, y)
        picked = torch.nonzero(model(x)[:, 0] > 0)  # FALLBACK
    print(model.weight * 2)  # PRINT
    print("compiles", met.counter_value("UncachedCompile"))
    """
)


def _script_line(marker: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if line.endswith(f"# {marker}"))


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    """Both scripts at once (they spend their time importing and compiling, on separate cores)."""
    tmp = tmp_path_factory.mktemp("pt_xla_debug")
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PT_XLA_DEBUG")}
    debug_file = tmp / "debug.txt"
    plan = {
        "default": (dict(base, PT_XLA_DEBUG="1"), "4"),
        "level1": (
            dict(base, PT_XLA_DEBUG="1", PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(debug_file),
                 PT_XLA_DEBUG_MAX_FRAME="1"),
            "2",
        ),
    }  # fmt: skip
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(script), steps], env=env, cwd=tmp, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for name, (env, steps) in plan.items()
    }  # fmt: skip
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        out[name] = (subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), script)
    out["level1"] = (out["level1"][0], debug_file)
    return out


def test_script_with_pt_xla_debug_1(runs: dict[str, tuple[subprocess.CompletedProcess[str], Path]]) -> None:
    proc, script = runs["default"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr
    blocks = parse_blocks(err)
    kinds = [b.kind for b in blocks]
    assert kinds.count("Compilation") == kinds.count("Post Compilation") >= 10
    assert kinds.count("Execution") >= kinds.count("Compilation")
    first: dict[int, Block] = {}
    for b in blocks:
        if b.kind == "Compilation":
            first.setdefault(b.frames[0][2], b)
    item, barrier = first[_script_line("ITEM")], first[_script_line("BARRIER")]
    assert item.cause[0] == _access_cause("mark_step") and item.frames[0] == (  # no torch_xla there
        "train_step",
        str(script),
        _script_line("ITEM"),
    )
    assert item.frames[1][0] == "<module>" and item.outputs >= 1 and item.inputs >= 4
    assert barrier.cause == ["user mark_step"]
    assert first[_script_line("FALLBACK")].cause[0].startswith("aten::nonzero has no XLA lowering")
    assert "with print" in first[_script_line("PRINT")].cause[1]
    assert re.search(
        r"^pt-xla-profiler: TransferFromDeviceTime too frequent: \d+ counts during 1 steps", err, re.M
    )

    # The exit summary: torch_xla's unlowered-op block, then the findings, each naming its line.
    summary = [line.removeprefix("WARNING:pt-xla-profiler:") for line in err.splitlines()
               if line.startswith("WARNING:pt-xla-profiler:")]  # fmt: skip
    assert summary[:4] == [
        RULE,
        "Unlowered Op usage summary (more of these ops, lower performance)",
        "Note: _local_scalar_dense typically indicates CPU context access",
        DASH,
    ]
    assert "FRAME (count=4):" in summary and 'Unlowered Op: "nonzero"' in summary
    text = "\n".join(summary)
    at = {m: f"{script}:{_script_line(m)}" for m in ("ITEM", "BARRIER", "UPLOAD-X", "UPLOAD-Y", "FALLBACK")}
    assert f"{at['BARRIER']} (train_step): recompilation: the graph synced here compiled 2 times" in text
    # What changed: the first input whose shape differs, and the line that sent it to the device.
    changed = re.search(
        rf"{re.escape(at['BARRIER'])} .*\n"
        r"  changed 2x: an input's shape, sent to the device at "
        r"(?P<where>\S+) \(<module>\): (?P<shapes>.*)\n",
        text,
    )
    assert changed and changed["where"] in (at["UPLOAD-X"], at["UPLOAD-Y"]), text
    assert changed["shapes"] in (
        "f32[8,6] -> f32[7,6], f32[7,6] -> f32[6,6]",
        "f32[8,3] -> f32[7,3], f32[7,3] -> f32[6,3]",
    )
    assert f"{at['ITEM']} (train_step): transfer: .item() copied device values to the host 4 times" in text
    assert f"{at['FALLBACK']} (<module>): not lowered: aten::nonzero ran on the CPU 4 times" in text
    assert summary[-1] == RULE
    assert "compiles" in proc.stdout and "Compilation Analysis" not in proc.stdout


def test_script_with_level_1_file_and_max_frame(
    runs: dict[str, tuple[subprocess.CompletedProcess[str], Path]],
) -> None:
    proc, debug_file = runs["level1"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Analysis" not in proc.stderr and "pt-xla-profiler" not in proc.stderr
    text = debug_file.read_text()
    blocks = parse_blocks(text)
    assert {b.kind for b in blocks} == {"Compilation", "Post Compilation"}
    assert all(len(b.frames) == 1 for b in blocks if b.kind == "Compilation")
    assert "WARNING:pt-xla-profiler:Unlowered Op usage summary" in text
    assert "recompilation" not in text  # two steps are all warm-up


# --------------------------------------------------------------------------- analysis failures


def test_an_analysis_failure_warns_users_and_fails_tests(
    monkeypatch: pytest.MonkeyPatch, dev: torch.device, debug: Callable[[], str]
) -> None:
    from xlalab.debug import analysis_errors

    def broken(graph: object) -> tuple[()]:
        raise RuntimeError("broken analysis")

    monkeypatch.setattr(pxd, "signature", broken)
    before = len(analysis_errors.FAILURES)
    setting = config.get("XLALAB_ANALYSIS_ERRORS")
    config.set("XLALAB_ANALYSIS_ERRORS", "log")
    try:
        _workload(dev, 31)  # the user's program goes on
        assert "pt-xla-profiler: internal error while analysing SyncEvent" in debug()
        assert "broken analysis" in analysis_errors.FAILURES[before]
        del analysis_errors.FAILURES[before:]
        config.set("XLALAB_ANALYSIS_ERRORS", "raise")
        with pytest.raises(RuntimeError, match="broken analysis"):
            _workload(dev, 32)
    finally:
        config.set("XLALAB_ANALYSIS_ERRORS", setting)
    monkeypatch.undo()
    xlalab.mark_step()  # what the raise left pending
    del analysis_errors.FAILURES[before:]


def test_mnist_example_under_pt_xla_debug_has_no_internal_error(tmp_path: Path) -> None:
    """The seeds' convnet (MaxPool2d, Dropout, log_softmax) under PT_XLA_DEBUG=1."""
    script = Path(__file__).parents[1] / "examples" / "mnist_train.py"
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PT_XLA_DEBUG="1", XLALAB_ANALYSIS_ERRORS="raise", PYTHONPATH=root)
    proc = subprocess.run(
        [sys.executable, str(script), "--steps", "3", "--batch", "8"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "internal error" not in proc.stderr and "could not analyse" not in proc.stderr
    assert len([b for b in parse_blocks(proc.stderr) if b.kind == "Compilation"]) >= 2
    assert proc.stderr.count("Unlowered Op usage summary") == 1


def _train_without_barrier(dev: torch.device, steps: int) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.zeros((), device=dev)
    for _ in range(steps):
        loss = model(torch.ones(4, 5, device=dev)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()  # NO-BARRIER
    return loss


def test_analysis_names_a_loop_without_a_step_barrier(dev: torch.device, debug: Callable[[], str]) -> None:
    loss = _train_without_barrier(dev, 4)
    source = Path(__file__).read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if s.endswith("# NO-BARRIER"))
    where = f"{__file__}:{line} (_train_without_barrier)"
    loss.item()  # the read that finally runs the whole graph
    err = debug()
    m = re.search(
        r"^pt-xla-profiler: no step barrier: optimizer.step\(\) ran 4 times with no "
        rf"{re.escape(pxd._barrier_name())} in between: "
        r"nothing ran, and the pending graph has grown to (\d+) nodes \(about \d+ per step\) "
        rf"\(optimizer.step\(\) at {re.escape(where)}\)$",
        err,
        re.M,
    )
    assert m is not None and int(m[1]) > 40, err
    report = pxd.report()
    assert f"{where}: no step barrier: optimizer.step() ran 4 times" in report
    assert "called from " in report and "end every step with xm.mark_step()" in report
    # With a barrier per step: nothing to say.
    pxd.reset()
    for _ in range(3):
        _train_without_barrier(dev, 1)
        xlalab.mark_step()
    assert "no step barrier" not in pxd.report()


def test_a_printed_summary_is_not_printed_again_at_exit(tmp_path: Path) -> None:
    script = tmp_path / "printed.py"
    script.write_text(
        "import torch, xlalab\nfrom xlalab.debug import pt_xla_debug\n"
        "x = torch.ones(3, device=xlalab.device()) * 2\nxlalab.mark_step()\nprint(pt_xla_debug.report())\n"
    )
    env = dict(os.environ, PT_XLA_DEBUG="1", PT_XLA_DEBUG_LEVEL="0")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    both = proc.stdout + proc.stderr
    assert both.count("Unlowered Op usage summary") == 1 and "WARNING:pt-xla-profiler" not in both


def _count_positives(dev: torch.device, values: list[float]) -> torch.Tensor:
    x = torch.tensor(values, device=dev)
    idx = torch.nonzero(x > 0)  # DYNAMIC
    total = (idx * 2).sum()
    xlalab.mark_step()
    return total


def test_analysis_names_the_op_whose_data_dependent_shape_recompiles(
    dev: torch.device, debug: Callable[[], str]
) -> None:
    for k in range(1, 7):
        _count_positives(dev, [1.0] * k + [-1.0] * (7 - k))
    source = Path(__file__).read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if s.endswith("# DYNAMIC"))
    report = pxd.report()
    assert (
        f"an input's shape, sent to the device at {__file__}:{line} (_count_positives) by aten::nonzero, "
        "whose output shape depends on the data: s64[2,1] -> s64[3,1], s64[3,1] -> s64[4,1]"
    ) in report, report


def _head(dev: torch.device, n: int) -> torch.Tensor:
    w = torch.ones(4, 8, device=dev)
    out = (w * 3)[:, :n].sum()  # BAKED
    xlalab.mark_step()
    return out


def test_analysis_names_a_changed_baked_integer_with_both_values(
    dev: torch.device, debug: Callable[[], str]
) -> None:
    config.set("XLA_IR_DEBUG", True)
    try:
        for n in range(1, 7):
            _head(dev, n)
    finally:
        config.set("XLA_IR_DEBUG", False)
    source = Path(__file__).read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if s.endswith("# BAKED"))
    report = pxd.report()
    assert (
        f"an integer baked into the graph: aten::slice end created at {__file__}:{line} (_head) "
        "(keep it constant, or pass it as a tensor): 2 -> 3, 3 -> 4, 4 -> 5, ..."
    ) in report, report


# --------------------------------------------------------------------------- compiled mode


def _scaled_softplus(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(x @ w) * 0.5


def test_compiled_mode_prints_dynamos_causes(dev: torch.device, debug: Callable[[], str]) -> None:
    import xlalab.dynamo as dynamo

    dynamo.reset()
    step = torch.compile(_scaled_softplus, backend="xlalab")
    x, w = torch.randn(4, 6), torch.randn(6, 3)
    first = step(x.to(dev), w.to(dev))  # COMPILED-CALL-1
    compiled = parse_blocks(debug())
    second = step(x.to(dev), w.to(dev))  # COMPILED-CALL-2
    executed = parse_blocks(debug())
    torch.testing.assert_close(first.cpu(), _scaled_softplus(x, w))
    torch.testing.assert_close(second.cpu(), _scaled_softplus(x, w))

    kinds = [b.kind for b in compiled]
    assert kinds[:3] == ["Compilation", "Post Compilation", "Execution"], kinds
    comp, post, exe = compiled[:3]
    assert comp.cause == ["dynamo is compiling a FX graph to HLO"]
    assert exe.cause == ["dynamo is executing a compiled program"]
    assert comp.graph_hash == exe.graph_hash and comp.inputs >= 2 and comp.outputs >= 1
    assert post.sizes["Graph output size"] >= 0
    assert (__file__, _line_of("COMPILED-CALL-1")) in [f[1:] for f in comp.frames]
    # The second call reuses the program: an Execution block alone, at the user's line.
    assert [b.kind for b in executed] == ["Execution"]
    assert executed[0].cause == ["dynamo is executing a compiled program"]
    assert executed[0].graph_hash == comp.graph_hash
    assert (__file__, _line_of("COMPILED-CALL-2")) in [f[1:] for f in executed[0].frames]


def test_compiled_mode_level_1_prints_compilations_only(dev: torch.device, debug: Callable[[], str]) -> None:
    import xlalab.dynamo as dynamo

    dynamo.reset()
    config.set("PT_XLA_DEBUG_LEVEL", 1)
    step = torch.compile(_scaled_softplus, backend="xlalab")
    step(torch.randn(5, 6).to(dev), torch.randn(6, 3).to(dev))
    blocks = parse_blocks(debug())
    assert [b.kind for b in blocks] == ["Compilation", "Post Compilation"]
    assert blocks[0].cause == ["dynamo is compiling a FX graph to HLO"]
    assert " 1 compilations (" in pxd.report()  # counted in the exit summary


def _rows_with_a_break(x: torch.Tensor) -> torch.Tensor:
    y = torch.tanh(x) * 2
    print("between graphs")  # GRAPH-BREAK
    return y.sum(dim=1) + x.shape[0]


def test_analysis_names_dynamos_graph_breaks_and_recompiles(
    dev: torch.device, debug: Callable[[], str]
) -> None:
    import xlalab.dynamo as dynamo

    dynamo.reset()
    config.set("PT_XLA_DEBUG_LEVEL", 0)
    f = torch.compile(_rows_with_a_break, backend="xlalab")
    f(torch.ones(6, 3).to(dev))
    f(torch.ones(5, 3).to(dev))  # RECOMPILE-CALL
    text = pxd.report()
    graph_break = f"{__file__}:{_line_of('GRAPH-BREAK')} (_rows_with_a_break): graph break: dynamo split"
    assert graph_break in text and "print" in text.split(graph_break, 1)[1].splitlines()[0]
    recompile = f"{__file__}:{_line_of('RECOMPILE-CALL')} "
    line = next(x for x in text.splitlines() if x.startswith(recompile))
    assert "recompilation: dynamo compiled _rows_with_a_break again once: `x.size(0)` changed 6 → 5" in line
    assert "XLA compiles one program per shape" in text and "pad to a few fixed sizes" in text


def test_a_compiled_train_step_is_told_in_compiled_modes_words(
    dev: torch.device, debug: Callable[[], str]
) -> None:
    # A compiled program's input that is still pending lazy work (here a product made before
    # the call) is run first by the runtime, which is not user code reading a value. torch.optim's
    # own break is placed at the user's opt.step(), not inside torch.optim.
    import inspect

    import xlalab.dynamo as dynamo
    from xlalab.testing.workloads import WORKLOADS, train_step

    dynamo.reset()
    torch.compile(lambda x: x.sin(), backend="xlalab")(torch.ones(3, device=dev) * 2.5)
    blocks = debug()
    assert "dynamo is executing a compiled program whose input is still pending lazy work" in blocks
    assert "most likely user code trying to access tensor value" not in blocks
    w = WORKLOADS["mlp"]
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    torch.compile(train_step, backend="xlalab")(w, model, opt, *w.make_batch(0, 4, dev))
    lines, first = inspect.getsourcelines(train_step)
    opt_step = first + next(i for i, t in enumerate(lines) if t.strip() == "opt.step()")
    assert f"workloads.py:{opt_step} (train_step): graph break: dynamo split train_step here" in pxd.report()


def _reads_a_value(x: torch.Tensor) -> torch.Tensor:
    if x.sum().item() > 0:  # ITEM-BREAK
        return x * 2
    return x


def test_analysis_says_what_to_change_for_a_known_break(dev: torch.device, debug: Callable[[], str]) -> None:
    import xlalab.dynamo as dynamo

    dynamo.reset()
    config.set("PT_XLA_DEBUG_LEVEL", 0)
    torch.compile(_reads_a_value, backend="xlalab")(torch.ones(3).to(dev))
    lines = pxd.report().splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith(f"{__file__}:{_line_of('ITEM-BREAK')} "))
    assert "graph break" in lines[at] and "keep it as a tensor" in lines[at + 1], lines[at : at + 2]
