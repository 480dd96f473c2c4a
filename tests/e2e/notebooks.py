"""The notebooks the end-to-end tests open, and what the runtime says their cells should count.

Each notebook is a list of cell sources. The fixture writes them with nbformat into the
server's temporary root. ``expected_counts`` runs the same cells (magics left out) in a plain
Python process and reads the runtime's own counters after each cell, so the tests compare the
panel with the runtime rather than with numbers written down here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat

from .harness import die_with_parent, pythonpath_env

LOAD = "%load_ext xlalab"

SETUP = """\
import torch
import xlalab.core.xla_model as xm

dev = xm.xla_device()"""

# 1. A kernel that never loaded xlalab.
PLAIN = [
    "x = 40 + 2\nx",
]

# 2. Compile, hit the cache, recompile on a new batch size.
RECOMPILE_LINE = "loss = step(7)  # batch 7: a new input shape"
INPUT_LINE = "x = torch.randn(batch, 4).to(dev)"  # makes the input whose shape changes
COMPILE_RECOMPILE = [
    LOAD,
    SETUP
    + """
torch.manual_seed(0)
model = torch.nn.Linear(4, 2).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step(batch):
    """
    + INPUT_LINE
    + """
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    xm.mark_step()
    return loss""",
    "step(8)\nloss = step(8)",
    "# the same step, one sample fewer\n" + RECOMPILE_LINE,
    "import jax\n\nprint(jax.config.jax_compilation_cache_dir)  # what the panel's Compile cache row says",
    "loss = step(6)  # the same line recompiles again: one more shape",
    """import xlalab.dynamo


@torch.compile(backend="xlalab")
def scaled(t):
    return torch.tanh(t) * 2


out = scaled(torch.ones(3, 4, device=dev))
out = scaled(torch.ones(5, 4, device=dev))  # another batch size: dynamo's guard fails, one recompile""",
]
MODEL_CELL, RECOMPILE_CELL, CACHE_DIR_CELL, RECOMPILE_AGAIN_CELL, COMPILED_CELL = 1, 3, 4, 5, 6

# 3. A CPU fallback, and an .item() inside a training loop's step.
ITEM_LINE = "value = loss.item()  # reads a pending value before the step's end"
ITEM_CELL = f"""\
for _ in range(3):
    loss = (x * 2).sum()
    {ITEM_LINE}
    rest = x * value  # the step goes on after the read: the read cuts it in two
    xm.mark_step()
value"""
# ... and profiler regions, which the timeline draws as named spans.
REGIONS_CELL = """\
import time

import xlalab.debug.profiler as xp

with xp.StepTrace("train_step", step_num=0):
    with xp.Trace("forward"):
        y = (x * 3).sum()
    time.sleep(2)  # a step long enough to carry its name on the timeline"""
FALLBACK = [
    LOAD,
    SETUP
    + """
x = torch.tensor([0.0, 1.5, 0.0, 2.5], device=dev)
idx = torch.nonzero(x)  # no lowering: runs on the CPU""",
    ITEM_CELL,
    REGIONS_CELL,
]

# 4. The graph viewer, a small graph and a 10,000-node one.
GRAPH_NODES = 10_000
GRAPH = [
    LOAD,
    SETUP
    + """
a = torch.ones(3, 4, device=dev)
b = torch.full((4, 2), 0.5, device=dev)
y = torch.relu(a @ b).sum(0)""",
    "%xla_graph y --format dot",
    f"""big = torch.zeros(2, device=dev)
for _ in range({GRAPH_NODES}):
    big = big + 1""",
    "%xla_graph big --format dot --max-nodes 0",
]

# 5. Two notebooks, two kernels: A compiles one graph, B two.
TWO_A = [
    LOAD,
    SETUP + "\nu = (torch.ones(2, 2, device=dev) * 3).sum()\nxm.mark_step()",
]
TWO_B = [
    LOAD,
    SETUP
    + """
v = (torch.ones(3, 3, device=dev) + 1).sum()
xm.mark_step()
w = torch.ones(5, device=dev).exp().sum()
xm.mark_step()""",
]

# 7. Two pages watch one kernel; %unload_ext turns the panel off.
TWO_PAGES = [
    LOAD,
    SETUP + "\nq = (torch.ones(4, 4, device=dev) @ torch.ones(4, 4, device=dev)).sum()\nxm.mark_step()",
    "r = torch.ones(6, device=dev).cos().sum()\nxm.mark_step()",
    "%unload_ext xlalab",
]

# 6. Text from file names must reach the panel as text, never as markup.
EVIL = "<img src=x onerror=window.__xlalab_xss=1><b>bold<b>"
ESCAPING = [
    LOAD,
    SETUP
    + f"""
import threading

EVIL = {EVIL!r}
src = "def evil(t):\\n    return torch.nonzero(t)\\n"
ns = {{"torch": torch}}
exec(compile(src, EVIL + ".py", "exec"), ns)
t = torch.tensor([0.0, 3.0], device=dev)
# From a thread, the innermost user frame (the warning's place) is the evil file itself.
th = threading.Thread(target=ns["evil"], args=(t,))
th.start()
th.join()""",
    "%xla_debug on",
    """exec(compile("def evil_scale(t):\\n    return t * 3\\n", EVIL + ".py", "exec"), ns)
z = ns["evil_scale"](torch.ones(2, device=dev))""",
    "%xla_graph z --format dot",
]
ESCAPING_GRAPH_CELL = 4

# 8. Graphs a newcomer draws: a long chain (its labels must be legible at the first zoom, its
# nodes link to the line that made them), a graph with more outputs than --max-nodes, and one
# built with line recording off (the inspector says how to turn it on).
LEGIBLE_CHAIN = 80
MANY_ROOTS = 30
MAX_NODES = 20
FRAMES_LINE = "chain = chain + 1  # the line the inspector links to"
NEWCOMER_GRAPHS = [
    LOAD,
    SETUP
    + f"""
chain = torch.zeros(2, device=dev)
for _ in range({LEGIBLE_CHAIN}):
    {FRAMES_LINE}""",
    "%xla_graph chain --format dot --max-nodes 0",
    f"outs = [torch.ones(2, device=dev) * i for i in range({MANY_ROOTS})]",
    f"%xla_graph --format dot --max-nodes {MAX_NODES}",
    "%xla_debug off",
    "w = torch.ones(3, device=dev)\nv = (w * 2).exp()",
    "%xla_graph v --format dot",
]
FRAMES_CELL, CHAIN_GRAPH_CELL, ROOTS_GRAPH_CELL, NO_FRAMES_GRAPH_CELL = 1, 2, 4, 7

# 8. SPMD over 8 CPU devices (this kernel's own process): the viewer colours by sharding and
# marks the all-gather the partitioner inserts for the matmul.
SPMD_GRAPH = [
    "import os\n\nos.environ['XLA_NUM_DEVICES'] = '8'  # before xlalab starts JAX\n" + LOAD,
    """\
import numpy as np
import torch
import xlalab

xlalab.use_torch_xla_names()
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()
mesh = xs.Mesh(np.arange(8), (8,), ("x",))
left, right = torch.randn(64, 64).to("xla"), torch.randn(64, 64).to("xla")
xs.mark_sharding(left, mesh, (None, "x"))
xs.mark_sharding(right, mesh, (None, "x"))


def product():
    p = left @ right
    xs.mark_sharding(p, mesh, ("x", None))
    return p


p = product()
torch_xla.sync()
p = product()""",
    "%xla_graph p --format dot",
]
SPMD_GRAPH_CELL = 2

NOTEBOOKS: dict[str, list[str]] = {
    "plain.ipynb": PLAIN,
    "compile_recompile.ipynb": COMPILE_RECOMPILE,
    "fallback.ipynb": FALLBACK,
    "graph.ipynb": GRAPH,
    "two_a.ipynb": TWO_A,
    "two_b.ipynb": TWO_B,
    "escaping.ipynb": ESCAPING,
    "two_pages.ipynb": TWO_PAGES,
    "newcomer_graphs.ipynb": NEWCOMER_GRAPHS,
    "spmd_graph.ipynb": SPMD_GRAPH,
}


def write_notebook(path: Path, sources: list[str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    nbformat.write(nb, str(path))


def write_all(root: Path) -> None:
    for name, sources in NOTEBOOKS.items():
        write_notebook(root / name, sources)


# What the runtime counts after each cell, read in a plain Python process. The notebooks'
# graphs differ from each other, so one process can stand for several fresh kernels.
_COUNT_SCRIPT = r"""
import json, sys
notebooks = json.loads(sys.argv[1])
import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met


def n(name):
    return met.counter_value(name) or 0


def samples(name):
    data = met.metric_data(name)
    return data[0] if data else 0


result = {}
for name, cells in notebooks.items():
    xm.mark_step()
    met.clear_all()
    ns = {"__name__": "__main__"}
    out = result[name] = []
    for i, src in enumerate(cells):
        code = "\n".join("pass" if ln.lstrip().startswith("%") else ln for ln in src.splitlines())
        exec(compile(code, f"<{name} cell {i}>", "exec"), ns)
        out.append({
            "uncached": n("UncachedCompile"),
            "cached": n("CachedCompile"),
            "fallbacks": {k: n(k) for k in met.counter_names() if k.startswith("aten::") and n(k)},
            "transfers_to": samples("TransferToDeviceTime"),
            "transfers_from": samples("TransferFromDeviceTime"),
            "dynamo_graphs": n("DynamoExtractCompiledGraph"),
            "dynamo_recompiles": n("DynamoRecompile"),
        })
print("E2E-COUNTS " + json.dumps(result))
"""


class ExpectedCounts:
    """Runs notebooks' cells in a background Python process; ``get(name)`` waits for the result:
    the runtime's counters after each cell of that notebook."""

    def __init__(self, notebooks: dict[str, list[str]]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _COUNT_SCRIPT, json.dumps(notebooks)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=pythonpath_env(),
            text=True,
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._result: dict[str, list[dict[str, Any]]] | None = None

    def get(self, name: str, timeout: float = 300) -> list[dict[str, Any]]:
        if self._result is None:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("the reference run of the notebooks' cells did not finish") from None
            line = next((ln for ln in out.splitlines() if ln.startswith("E2E-COUNTS ")), None)
            if self.proc.returncode != 0 or line is None:
                raise AssertionError(
                    f"the reference run failed ({self.proc.returncode}):\n{out}\n{err[-4000:]}"
                )
            self._result = json.loads(line[len("E2E-COUNTS ") :])
        return self._result[name]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
