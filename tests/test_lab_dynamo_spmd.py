"""The notebook layer on compiled mode and SPMD, in a real IPython shell.

- a graph break in a ``torch.compile(backend="xlalab")`` function is a finding at the cell's
  end with dynamo's reason, the user's line and the function's graph count; a recompile says
  the failed guard in plain words; both reach the panel's listeners as warnings;
- ``%xla_sharding t`` draws which device holds which block of a sharded tensor (HTML and a
  text table) and the live data per device, and says what is wrong outside SPMD mode or for
  an unsharded tensor;
- a large all-gather the SPMD partitioner inserted is a finding naming the op's line;
- PT_XLA_DEBUG's blocks for compiled mode are tested in test_pt_xla_debug.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import test_lab
from tests.test_lab import Shell

shell = test_lab.shell  # the fixture: a real IPython shell with the lab loaded

COMPILED = """\
import torch, xlalab, xlalab.dynamo
import xlalab.core.xla_model as xm
dev = xm.xla_device()

def scale_rows(x):
    y = torch.tanh(x) * 2
    print("between graphs")
    return y.sum(dim=1) + x.shape[0]
"""
DEF_LINE, PRINT_LINE = 5, 7  # in the COMPILED cell


def test_a_graph_break_and_a_recompile_are_cell_findings_and_warnings(shell: Shell) -> None:
    import xlalab.lab

    got: list[dict[str, Any]] = []
    shell.ok(COMPILED)
    defined = shell.sh.execution_count - 1
    xlalab.lab.session().watcher.listeners.append(got.append)
    out = shell.ok('f = torch.compile(scale_rows, backend="xlalab")\nr = f(torch.ones(6, 3).to(dev))')
    assert "xlalab: Graph break in scale_rows (once)" in out, out
    assert "print" in out.split("Graph break in scale_rows", 1)[1].splitlines()[1]  # dynamo's reason
    assert f'at cell [{defined}], line {PRINT_LINE} in scale_rows: print("between graphs")' in out
    assert "2 graphs of scale_rows captured so far" in out  # the graph before the break and after
    warned = [e["warning"] for e in got if e["kind"] == "warning"]
    breaks = [w for w in warned if w["category"] == "graph_break"]
    assert breaks and breaks[0]["where"]["cell"]["execution_count"] == defined
    assert breaks[0]["where"]["line"] == PRINT_LINE

    # Another batch size: dynamo's size guard fails and the function compiles again.
    out = shell.ok("r = f(torch.ones(5, 3).to(dev))")
    assert "xlalab: Recompiled scale_rows (once)" in out, out
    assert "changed 6 → 5" in out
    assert "dynamo's failed guard:" in out
    warned = [e["warning"] for e in got if e["kind"] == "warning"]
    warnings = [w for w in warned if w["title"].startswith("Recompiled") and w["category"] == "recompile"]
    assert warnings and "6 → 5" in warnings[-1]["message"]
    # The same shapes again: quiet.
    assert "xlalab:" not in shell.ok("r = f(torch.ones(5, 3).to(dev))")


DYNAMIC = """\
import torch, xlalab.core.xla_model as xm
dev = xm.xla_device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 17), torch.nn.ReLU(), torch.nn.Linear(17, 2)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
fwd = torch.compile(lambda x: model(x).softmax(-1), backend="xlalab")
def step(n):
    x = torch.randn(n, 8).to(dev)
    p = fwd(x)
    p[:, 0].mean().backward()
    opt.step(); opt.zero_grad()
    xm.mark_step()
"""


def test_a_new_size_for_a_dynamic_compiled_graph_is_a_recompile_finding(shell: Shell) -> None:
    """After a second size dynamo makes the graph dynamic and stops recompiling, but XLA still
    compiles a program per shape: the user hears of each, at the line that sent the input,
    with the compiled function's forward and backward programs."""
    shell.ok(DYNAMIC)
    defined = shell.sh.execution_count - 1
    out = shell.ok("for n in (8, 8, 7):\n    step(n)")
    assert "xlalab: Recompiled <lambda> (once)" in out, out  # dynamo's own finding, at 8 → 7
    out = shell.ok("for n in (6, 5):\n    step(n)")
    assert out.count("xlalab: Recompiled") == 1, out
    assert "x: f32[7,8] → f32[6,8] → f32[5,8]" in out
    assert f"x was sent to the device at cell [{defined}], line 8" in out
    assert ", forward (" in out and ", backward (" in out  # both programs, shape by shape
    assert "XLA compiles one program per shape" in out
    assert "xlalab:" not in shell.ok("step(6)")  # a size seen before: every program is cached


ITEM = """\
import torch, xlalab, xlalab.dynamo
dev = xlalab.device()

def by_max(x):
    h = x * 2
    scale = h.abs().max().item()
    return h / scale
"""
ITEM_LINE = 6  # in the ITEM cell


def test_a_value_read_by_item_is_named_by_its_line_in_a_recompile(shell: Shell) -> None:
    shell.ok(ITEM)
    defined = shell.sh.execution_count - 1
    out = shell.ok('f = torch.compile(by_max, backend="xlalab")\nr = f(torch.ones(4).to(dev))')
    # Dynamo's reason, explanation and hint as sentences, not glued lines.
    reason = out.split("Graph break in by_max", 1)[1].splitlines()[1]
    assert "capture_scalar_outputs=False. Dynamo does not support tracing" in reason, out
    assert "Explanation:" not in reason and "Developer debug context" not in reason
    out = shell.ok("r = f(torch.full((4,), 3.0).to(dev))")
    assert "xlalab: Recompiled by_max (once)" in out, out
    read = f"the value read by `.item()` into `scale` at cell [{defined}], line {ITEM_LINE}"
    assert f"{read} is no longer" in out
    assert "___stack0`" not in out
    guard = next(line for line in out.splitlines() if "dynamo's failed guard:" in line)
    assert f"# cell [{defined}], line {ITEM_LINE + 1} in by_max" in guard, guard
    assert "<ipython-input" not in guard and "torch_dynamo_resume" not in guard
    summary = shell.ok("print(xlalab.dynamo.summary())")
    mine = summary.split("by_max (", 1)[1].split("\n", 1)[1]
    assert "capture_scalar_outputs=False. Dynamo does not support tracing" in mine, summary
    assert "recompiled: the value read by `.item()` into `scale` at <ipython-input-" in mine


# --------------------------------------------------------------------------- %xla_sharding

# SPMD needs its 8 devices before JAX starts, so the shell runs in a process of its own.
SHARDING_SCRIPT = '''
import json
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

sh = InteractiveShell.instance()
sh.run_cell("%load_ext xlalab")
sh.run_cell("import json")
out = {}

def run(name, code):
    with capture_output() as cap:
        r = sh.run_cell(code)
    err = r.error_in_exec or r.error_before_exec
    out[name] = {
        "error": None if err is None else f"{type(err).__name__}: {err}",
        "bundles": [o.data for o in cap.outputs],
        "stdout": cap.stdout,
    }

run("before_spmd", "import torch, xlalab\\nt = torch.ones(4, 4).to('xla')\\n%xla_sharding t")
run("setup", """
import numpy as np
xlalab.use_torch_xla_names()
import torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
xr.use_spmd()
mesh = xs.Mesh(np.arange(8), (4, 2), ("data", "model"))
w = torch.randn(8, 4).to('xla')
xs.mark_sharding(w, mesh, ("data", "model"))
rows = torch.randn(16, 6).to('xla')
xs.mark_sharding(rows, mesh, ("data", None))
plain = torch.ones(3, 3).to('xla')
cube = torch.ones(8, 2, 2).to('xla')
xs.mark_sharding(cube, mesh, ("data", None, "model"))
""")
run("w", "%xla_sharding w")
run("rows", "%xla_sharding rows")
run("plain", "%xla_sharding plain")
run("cube", "%xla_sharding cube")
run("missing", "%xla_sharding nope")
# Both operands sharded on columns, the product on rows: the partitioner all-gathers an operand.
run("reshard", """
row_mesh = xs.Mesh(np.arange(8), (8,), ("x",))
left, right = torch.randn(512, 512).to('xla'), torch.randn(512, 512).to('xla')
xs.mark_sharding(left, row_mesh, (None, "x"))
xs.mark_sharding(right, row_mesh, (None, "x"))
product = left @ right
xs.mark_sharding(product, row_mesh, ("x", None))
ok = bool(torch.allclose(product.cpu(), left.cpu() @ right.cpu(), atol=1e-3))
print("close", ok)
""")
# The graph viewer's payload: each node's sharding, and once compiled the collectives.
run("graph_setup", """
import torch_xla
def make_product():
    # Not the graph the reshard cell read (that one is compiled): the left operand doubled.
    p = (left + left) @ right
    xs.mark_sharding(p, row_mesh, ("x", None))
    return p
p1 = make_product()
""")
run("graph_pending", "%xla_graph --format dot p1")
run("graph_sync", "torch_xla.sync()")
run("graph_compiled", "p2 = make_product()\\n%xla_graph --format dot p2")
# What the panel gets: live bytes per device, and the collectives the runs since a clear carried.
run("usage", """
from xlalab.lab import render, session
session().watcher.clear()
for _ in range(3):
    p3 = make_product()
    torch_xla.sync()
print("SPMD", json.dumps(render.snapshot()["spmd"]))
""")
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def sharding_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    script = tmp_path_factory.mktemp("sharding") / "sharding_shell.py"
    script.write_text(SHARDING_SCRIPT)
    env = {**os.environ, "XLA_NUM_DEVICES": "8", "PJRT_DEVICE": "CPU"}
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=root, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_xla_sharding_draws_which_device_holds_which_block(sharding_run: dict[str, Any]) -> None:
    assert sharding_run["setup"]["error"] is None
    w = sharding_run["w"]
    assert w["error"] is None and len(w["bundles"]) == 1
    html, text = w["bundles"][0]["text/html"], w["bundles"][0]["text/plain"]
    # A 4x2 mesh over an 8x4 tensor: 4 rows of 2 blocks, device i at block (i // 2, i % 2).
    assert html.count("<tr>") == 4 and html.count("<td") == 8
    assert "{devices=[4,2]0,1,2,3,4,5,6,7}" in html
    table_rows = [line for line in text.splitlines() if "CPU" in line]
    assert [r.split() for r in table_rows] == [
        ["│", "CPU", "0", "│", "CPU", "1", "│"],
        ["│", "CPU", "2", "│", "CPU", "3", "│"],
        ["│", "CPU", "4", "│", "CPU", "5", "│"],
        ["│", "CPU", "6", "│", "CPU", "7", "│"],
    ]
    # Where the data is: the bytes of live device data, for each of the 8 devices.
    memory = text.strip().splitlines()[-1]
    assert memory.startswith("live device data: xla:0 ") and memory.count("xla:") == 8, memory
    assert "live device data: xla:0" in html
    # Sharded on rows only: each row block is held by the 2 devices of the "model" axis.
    rows = sharding_run["rows"]["bundles"][0]
    assert rows["text/html"].count("<td") == 4
    assert [line.split()[1:3] for line in rows["text/plain"].splitlines() if "CPU" in line] == [
        ["CPU", "0,1"], ["CPU", "2,3"], ["CPU", "4,5"], ["CPU", "6,7"]
    ]  # fmt: skip


def test_xla_sharding_bad_input_is_a_clear_usage_error(sharding_run: dict[str, Any]) -> None:
    before = sharding_run["before_spmd"]["error"]
    assert before.startswith("UsageError: %xla_sharding needs SPMD mode") and "use_spmd()" in before
    plain = sharding_run["plain"]["error"]
    assert plain.startswith("UsageError: plain has no sharding") and "xs.mark_sharding(plain, mesh" in plain
    cube = sharding_run["cube"]["error"]
    assert cube.startswith("UsageError:") and "3 dimensions" in cube
    assert sharding_run["missing"]["error"].startswith("UsageError: no variable named 'nope'")
    assert all(not r["bundles"] for k, r in sharding_run.items() if k in ("plain", "cube", "missing"))


# --------------------------------------------------------------------------- %xla_graph on compiled functions


def test_xla_graph_shows_a_compiled_functions_fx_graphs_and_hlo(shell: Shell) -> None:
    from xlalab.runtime import metrics

    shell.ok(COMPILED.replace("scale_rows", "scale_cols").replace("dim=1", "dim=0"))
    defined = shell.sh.execution_count - 1
    shell.ok('f = torch.compile(scale_cols, backend="xlalab")\nr = f(torch.ones(4, 7).to(dev))')
    before = dict(metrics.COUNTERS)
    out = shell.ok("%xla_graph f")
    assert dict(metrics.COUNTERS) == before  # lowering only: nothing compiled, ran or synced
    assert out.startswith(f"scale_cols (cell [{defined}], line {DEF_LINE}): 2 graphs")
    assert f"graph break at cell [{defined}], line {PRINT_LINE}:" in out
    # Each graph: dynamo's FX code, the aten graph, and the HLO of its program at the shapes it ran.
    assert "=== graph 0 (2 ops): FX graph" in out and "torch.tanh(" in out
    assert "=== graph 0: forward (aten)" in out and "aten.tanh.default" in out
    hlo0 = out.split("=== graph 0: forward HLO", 1)[1].split("===", 1)[0]
    assert "f32[4,7]" in hlo0 and "tanh(" in hlo0
    hlo1 = out.split("=== graph 1: forward HLO", 1)[1]
    assert "reduce(" in hlo1 and "f32[7]" in hlo1
    # The same report, from xlalab.dynamo.compiled_functions(), as StableHLO.
    reports = "[r for r in xlalab.dynamo.compiled_functions() if r.name == 'scale_cols'][0]"
    shell.ok(f"rep = {reports}")
    stable = shell.ok("%xla_graph rep --format stablehlo")
    assert "=== graph 0: forward StableHLO" in stable and "stablehlo.tanh" in stable


def test_a_loop_of_compiled_train_steps_needs_no_step_barrier(shell: Shell) -> None:
    # Each compiled step runs its programs (the optimizer's too) and leaves nothing pending:
    # the lazy-mode finding about a missing xm.mark_step() does not apply.
    shell.ok(
        "import torch, xlalab\nfrom xlalab.testing.workloads import WORKLOADS, train_step\n"
        "dev = xlalab.device()\nw = WORKLOADS['mlp']\nmodel = w.make_model(0).to(dev)\n"
        "opt = w.make_optimizer(model.parameters())\n"
        "step = torch.compile(train_step, backend='xlalab')\nbatch = w.make_batch(0, 4, dev)"
    )
    out = shell.ok("for _ in range(3):\n    loss = step(w, model, opt, *batch)")
    assert "No step barrier" not in out, out
    # The same loop run lazily, without its barrier, is still the mistake.
    out = shell.ok("for _ in range(3):\n    loss = train_step(w, model, opt, *batch)")
    assert "No step barrier: the pending graph keeps growing" in out, out
    shell.ok("xlalab.mark_step()")


def test_xla_graph_on_a_decorated_function_compiled_with_openxla(shell: Shell) -> None:
    # torch_xla's backend name, and a decorator (as on every Hugging Face forward): the graphs
    # are the decorated function's, under its own name and line.
    shell.ok(
        "import functools, torch, xlalab\nxlalab.use_torch_xla_names()\ndev = xlalab.device()\n"
        "def traced(fn):\n    @functools.wraps(fn)\n    def wrapper(*a):\n        return fn(*a)\n"
        "    return wrapper"
    )
    shell.ok("@traced\ndef shift(x):\n    return (x + 1).tanh()")
    defined = shell.sh.execution_count - 1
    shell.ok('h = torch.compile(shift, backend="openxla")\nr = h(torch.ones(3).to(dev))')
    out = shell.ok("%xla_graph h")
    assert out.startswith(f"shift (cell [{defined}], line 1): 1 graph"), out
    assert "aten.tanh.default" in out


def test_xla_graph_on_a_decorated_function_that_breaks_before_its_first_graph(shell: Shell) -> None:
    # Its own frame captures nothing before the break: every graph is the resume function's,
    # and still the function's, under its own first line (the decorator's).
    shell.ok("import torch, xlalab\ndev = xlalab.device()")
    shell.ok('@torch.compile(backend="xlalab")\ndef noisy(x):\n    print("start")\n    return (x * 2).tanh()')
    defined = shell.sh.execution_count - 1
    shell.ok("for _ in range(3):\n    r = noisy(torch.ones(3).to(dev))")
    out = shell.ok("%xla_graph noisy")
    assert out.startswith(f"noisy (cell [{defined}], line 1): 1 graph"), out
    assert "aten.tanh.default" in out


def test_xla_graph_on_a_compiled_function_says_what_is_wrong(shell: Shell) -> None:
    shell.ok(COMPILED.replace("scale_rows", "scale_both"))
    shell.ok('f = torch.compile(scale_both, backend="xlalab")\nr = f(torch.ones(2, 2).to(dev))')
    assert "compiled function's graphs show as text" in str(shell.error("%xla_graph f --format dot"))
    shell.ok('g = torch.compile(lambda x: x + 1, backend="xlalab")')
    assert "call it once" in str(shell.error("%xla_graph g"))


def test_a_large_reshard_is_a_finding_with_the_ops_line(sharding_run: dict[str, Any]) -> None:
    run = sharding_run["reshard"]
    assert run["error"] is None
    text = run["stdout"] + "".join(b.get("text/plain", "") for b in run["bundles"])
    assert "close True" in text
    assert "Resharded: the partitioner inserted an all-gather for aten::mm" in text, text
    assert "KiB per device" in text
    assert "in <module>: product = left @ right" in text  # the op that needed it
    assert "xs.mark_sharding" in text


def _graph_payload(run: dict[str, Any]) -> dict[str, Any]:
    assert run["error"] is None, run["error"]
    payload: dict[str, Any] = run["bundles"][0]["application/vnd.xlalab.graph+json"]
    return payload


def test_the_graph_viewer_gets_each_nodes_sharding_and_the_collectives(sharding_run: dict[str, Any]) -> None:
    cols, rows = "{devices=[1,8]0,1,2,3,4,5,6,7}", "{devices=[8,1]0,1,2,3,4,5,6,7}"
    pending = _graph_payload(sharding_run["graph_pending"])
    by_op = {n["op"]: n for n in pending["nodes"]}
    assert [n["sharding"] for n in pending["nodes"] if n["op"] == "xla::device_data"] == [cols, cols]
    assert by_op["xla::custom_sharding"]["sharding"] == rows and by_op["aten::mm"]["sharding"] is None
    assert pending["shardings"] == [{"spec": cols, "nodes": 2}, {"spec": rows, "nodes": 1}]
    assert f"sharding={rows}" in pending["dot"]
    assert pending["collectives"] is None  # not compiled yet: nothing known
    assert sharding_run["graph_sync"]["error"] is None
    compiled = _graph_payload(sharding_run["graph_compiled"])
    assert compiled["hash"] == pending["hash"]
    mm = next(n["id"] for n in compiled["nodes"] if n["op"] == "aten::mm")
    # Both operands split by columns, the product by rows: the partitioner gathers a whole
    # (512, 512) operand (1 MiB on each device) for the matmul.
    gathers = [c for c in compiled["collectives"] if c["kind"] == "all-gather"]
    assert gathers and gathers[0]["shape"].startswith("f32[512,512]") and gathers[0]["nbytes"] == 1 << 20
    assert all(c["op"] == "aten::mm" and c["nodes"] == [mm] for c in compiled["collectives"]), compiled


def test_the_panel_gets_device_memory_and_the_collectives_share(sharding_run: dict[str, Any]) -> None:
    run = sharding_run["usage"]
    assert run["error"] is None, run["error"]
    usage = json.loads(run["stdout"].split("SPMD ", 1)[1])
    devices = dict(usage["devices"])
    assert list(devices) == [f"xla:{i}" for i in range(8)]
    # left and right (512, 512) split by columns over 8 devices: 128 KiB of each on every device.
    assert all(b >= 2 * 128 * 1024 for b in devices.values()), devices
    assert usage["runs"] == 3  # counted from the clear
    gather = usage["collectives"]["all-gather"]
    assert gather["count"] >= 3 and gather["bytes"] >= 3 * (1 << 20)  # a 1 MiB operand per run
    assert 0 < usage["share"] < 1
    assert usage["collective_bytes"] == sum(k["bytes"] for k in usage["collectives"].values())
