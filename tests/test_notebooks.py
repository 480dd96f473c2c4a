"""The example notebooks run headless, and show what their readers rely on.

Each notebook in examples/ is copied to a temporary directory and executed in a real
``python3`` Jupyter kernel with nbclient (one kernel per notebook, run once for all its tests);
the tests then read the outputs a user would read: the per-cell warnings with their cell and
line, the graph bundles, the metrics, the stepper's divergence. A last test drives the
extension's lifecycle (load twice, reload, unload, a cell that raises inside %%xla_metrics)
in a kernel of its own.

Cells are found by their ids (``recompile-batch-change``), and line numbers are computed from
the cell's source, so editing a notebook's text does not break the tests; changing what a
cell does should.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
NOTEBOOKS = ("quickstart.ipynb", "recompilation_hunt.ipynb", "fallback_hunt.ipynb", "stepping.ipynb")
GRAPH_MIME = "application/vnd.xlalab.graph+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --------------------------------------------------------------------------- running


def _kernel_env() -> dict[str, str]:
    """The kernel imports this checkout's xlalab even where another copy is installed, and
    starts with xlalab's defaults: a debug or precision switch left in the environment
    (XLA_IR_DEBUG, XLA_USE_BF16, PT_XLA_DEBUG...) would change what the notebooks show."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k == "XLA_FLAGS" or not k.startswith(("XLA_", "PT_XLA_", "XLALAB_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _execute(nb: Any, workdir: Path) -> Any:
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute(env=_kernel_env())
    return nb


@pytest.fixture(scope="module")
def run_example(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``run_example(name)``: the notebook executed in a copy, once per module (a notebook that
    fails fails every test that reads it, without running again)."""
    done: dict[str, Any] = {}

    def run(name: str) -> Any:
        if name not in done:
            workdir = tmp_path_factory.mktemp(Path(name).stem)
            shutil.copy(EXAMPLES / name, workdir / name)
            nb = nbformat.read(workdir / name, as_version=4)
            try:
                done[name] = _execute(nb, workdir)
            except Exception as e:
                done[name] = e
        if isinstance(done[name], Exception):
            pytest.fail(f"{name} did not run: {done[name]}", pytrace=False)
        return done[name]

    return run


# --------------------------------------------------------------------------- reading outputs


def cell(nb: Any, cell_id: str) -> Any:
    for c in nb.cells:
        if c.get("id") == cell_id:
            return c
    raise AssertionError(f"no cell with id {cell_id!r}")


def texts(c: Any) -> list[str]:
    """Everything a cell showed as text: streams, and the text/plain of displays and results."""
    out = []
    for o in c.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("display_data", "execute_result"):
            out.append(o.data.get("text/plain", ""))
        elif o.output_type == "error":
            out.append(ANSI.sub("", "\n".join(o.traceback)))
    return out


def warnings_of(c: Any) -> str:
    """The xlalab warnings shown after a cell (a text/plain + text/html display)."""
    found = []
    for o in c.get("outputs", []):
        if o.output_type == "display_data" and o.data.get("text/plain", "").startswith("xlalab: "):
            assert "xlalab-finding" in o.data.get("text/html", ""), "the warning has no HTML view"
            found.append(o.data["text/plain"])
    return "\n".join(found)


def stdout_of(c: Any) -> str:
    return "".join(o.text for o in c.get("outputs", []) if o.output_type == "stream" and o.name == "stdout")


def line_of(c: Any, snippet: str) -> int:
    """The 1-based line of ``snippet`` in a cell (a cell magic's line is line 1)."""
    for n, line in enumerate(c.source.splitlines(), 1):
        if snippet in line:
            return n
    raise AssertionError(f"{snippet!r} is not in cell {c.get('id')}")


def at(c: Any, snippet: str) -> str:
    """How a warning names the line of ``snippet`` in executed cell ``c``."""
    return f"cell [{c.execution_count}], line {line_of(c, snippet)}"


def bundles(c: Any, mime: str) -> list[Any]:
    return [
        o.data[mime]
        for o in c.get("outputs", [])
        if o.output_type in ("display_data", "execute_result") and mime in o.data
    ]


# --------------------------------------------------------------------------- stored notebooks


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_clean(name: str) -> None:
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata["kernelspec"]["name"] == "python3"
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == "%load_ext xlalab"
    for c in code:
        assert c.outputs == [] and c.execution_count is None, f"{name}: cell {c.id} has outputs"


# --------------------------------------------------------------------------- quickstart


def test_quickstart(run_example: Any) -> None:
    nb = run_example("quickstart.ipynb")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not warnings_of(c) for c in code), "the quickstart should warn about nothing"

    losses = stdout_of(cell(nb, "quickstart-train"))
    assert losses.startswith("losses: [")

    text = "".join(texts(cell(nb, "quickstart-graph-text")))
    assert "pending graph of err" in text and "IR {" in text and "aten::mse_loss" in text

    dot = cell(nb, "quickstart-graph-dot")
    (payload,) = bundles(dot, GRAPH_MIME)
    assert payload["v"] == 1 and payload["dot"].startswith("digraph")
    ops = [n["op"] for n in payload["nodes"]]
    assert ops and len(ops) == payload["num_nodes"] == payload["shown_nodes"]
    assert "aten::addmm" in ops and "aten::mse_loss" in ops
    assert all(n["id"].startswith("node") for n in payload["nodes"])
    assert "IR {" in "".join(texts(dot))  # the text a frontend without the extension shows

    assert stdout_of(cell(nb, "quickstart-eval")).startswith("eval loss ")
    short = "".join(texts(cell(nb, "quickstart-metrics-short")))
    assert "Metric: CompileTime" in short and "Metric: ExecuteTime" in short

    measured = "".join(texts(cell(nb, "quickstart-cell-metrics")))
    assert "this cell did:" in measured
    assert re.search(r"compiles\s+0 new, 3 cache hits", measured), measured
    assert re.search(r"executions\s+3,", measured), measured

    (widget,) = bundles(cell(nb, "quickstart-counters"), WIDGET_MIME)
    assert widget["model_id"]


# --------------------------------------------------------------------------- recompilation hunt


def test_recompilation_warmup_is_quiet(run_example: Any) -> None:
    nb = run_example("recompilation_hunt.ipynb")
    for cid in ("recompile-setup", "recompile-step", "recompile-warmup", "recompile-since-cell"):
        assert not warnings_of(cell(nb, cid)), cid
    since = "".join(texts(cell(nb, "recompile-since-cell")))
    assert re.search(r"compiles\s+2 new, 2 cache hits", since), since


def test_batch_size_change_warns_with_shapes_and_line(run_example: Any) -> None:
    nb = run_example("recompilation_hunt.ipynb")
    step = cell(nb, "recompile-step")
    changed = cell(nb, "recompile-batch-change")
    assert changed.execution_count == cell(nb, "recompile-warmup").execution_count + 2
    w = warnings_of(changed)
    assert "xlalab: Recompiled: an input's shape changed (once)" in w, w
    assert "data: f32[16,8] → f32[15,8]" in w
    assert f"sent to the device at {at(step, 'data.to(dev)')}" in w
    assert f"{at(step, 'xm.mark_step()')} in train_step" in w  # context, after the line that made the input
    assert f"{at(changed, 'loss = train_step(data, target)')} in <module>" in w
    assert w.count("xlalab: ") == 1


def test_drop_last_rerun_is_quiet(run_example: Any) -> None:
    nb = run_example("recompilation_hunt.ipynb")
    fixed = cell(nb, "recompile-fixed")
    assert "drop_last=True" in fixed.source
    assert not warnings_of(fixed)
    measured = "".join(texts(fixed))
    assert re.search(r"compiles\s+0 new, 4 cache hits", measured), measured


def test_item_in_the_step_warns_and_the_fix_is_quiet(run_example: Any) -> None:
    nb = run_example("recompilation_hunt.ipynb")
    step = cell(nb, "recompile-item-step")
    called = cell(nb, "recompile-item")
    w = warnings_of(called)
    assert "xlalab: .item() cut the step (4 times)" in w, w
    assert f"at {at(step, 'loss.item()')} in train_step: history.append(loss.item())" in w
    assert f"{at(called, 'train_step(data, target)')} in <module>" in w
    assert "Recompiled" not in w
    assert re.search(r"executions\s+8,", "".join(texts(called)))  # two programs a step

    fixed = cell(nb, "recompile-item-fixed")
    assert not warnings_of(fixed) and not warnings_of(cell(nb, "recompile-item-fixed-step"))
    measured = "".join(texts(fixed))
    assert re.search(r"compiles\s+0 new, 4 cache hits", measured), measured
    assert re.search(r"executions\s+4,", measured), measured


# --------------------------------------------------------------------------- fallback hunt


def test_nonzero_falls_back_and_the_fix_stays_on_device(run_example: Any) -> None:
    nb = run_example("fallback_hunt.ipynb")
    step = cell(nb, "fallback-step")
    called = cell(nb, "fallback-nonzero")
    w = warnings_of(called)
    assert "xlalab: aten::nonzero ran on the CPU (4 times)" in w, w
    assert f"at {at(step, 'torch.nonzero')} in train_step: keep = torch.nonzero(y >= 0)" in w
    assert f"{at(called, 'train_step(x, y)')} in <module>" in w
    # The indices' length follows the data: the step recompiles as it changes.
    assert "Recompiled: an input's shape changed" in w and "s64[8,1] → s64[7,1]" in w

    counters = "".join(texts(cell(nb, "fallback-counters")))
    assert re.search(r"Counter: aten::nonzero\n  Value: 4", counters), counters

    fixed = cell(nb, "fallback-fixed")
    assert not warnings_of(fixed) and not warnings_of(cell(nb, "fallback-fixed-step"))
    measured = "".join(texts(fixed))
    assert re.search(r"CPU fallbacks\s+none", measured), measured
    assert re.search(r"compiles\s+1 new, 3 cache hits", measured), measured
    assert stdout_of(cell(nb, "fallback-loss")).startswith("loss ")


# --------------------------------------------------------------------------- stepping


def test_stepping_finds_the_bf16_divergence(run_example: Any) -> None:
    nb = run_example("stepping.ipynb")
    listing = stdout_of(cell(nb, "stepping-listing"))
    assert listing.startswith("Stepper over ") and "-> %0" in listing and "aten::add" in listing

    exact = stdout_of(cell(nb, "stepping-run-to"))
    assert re.search(r"aten::arange f32\[4\]: max abs diff 0,", exact), exact

    out = stdout_of(cell(nb, "stepping-divergence"))
    m = re.search(r"%(\d+) (aten::\w+) f32\[8\]: max abs diff ([0-9.e+-]+), rel diff ([0-9.e+-]+)", out)
    assert m is not None, out
    assert m[2] == "aten::add" and float(m[3]) > 0 and float(m[4]) > 0
    assert f"%{m[1]} = f32[8] aten::add" in listing  # the row the listing showed
    assert "4096., 4096., 4096." in out and "4097." in out  # XLA's values, then eager's

    table = stdout_of(cell(nb, "stepping-compare-all"))
    assert re.search(rf"%{m[1]} aten::add f32\[8\]\s+max abs diff 7 ", table), table

    (widget,) = bundles(cell(nb, "stepping-widget"), WIDGET_MIME)
    assert widget["model_id"]

    fused = stdout_of(cell(nb, "stepping-fused"))
    assert "fused == stepped: True" in fused, fused
    far = re.search(r"max \|fused - float32 eager\|: ([0-9.]+)", fused)
    assert far is not None and float(far[1]) > 0.5
    fixed = re.search(r"max \|fixed - float32 eager\|: ([0-9.]+)", stdout_of(cell(nb, "stepping-fix")))
    assert fixed is not None and float(fixed[1]) < 0.01

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not warnings_of(c) for c in code), "stepping compiles nothing the user wrote"


# --------------------------------------------------------------------------- the extension's lifecycle


def test_load_twice_reload_unload_and_a_raising_cell(tmp_path: Path) -> None:
    """In a real kernel: %load_ext twice is harmless, %reload_ext does not double the warnings,
    a cell that raises inside %%xla_metrics still reports and the kernel lives on, and
    %unload_ext takes the magics and warnings away until the next %load_ext."""
    nonzero = "idx = torch.nonzero(torch.tensor([0.0, 1.5, 0.0], device=dev))"
    sources = {
        "load": "%load_ext xlalab",
        "load-again": "%load_ext xlalab",
        "reload": "%reload_ext xlalab",
        "setup": "import torch\nimport xlalab.core.xla_model as xm\n\ndev = xm.xla_device()",
        "fallback": nonzero,
        "raises": '%%xla_metrics\nx = torch.ones(3, device=dev) * 2\nraise ValueError("boom")',
        "alive": "1 + 1",
        "graph": "%xla_graph x",
        "unload": "%unload_ext xlalab",
        "gone": "%xla_graph x",
        "fallback-unloaded": nonzero,
        "load-back": "%load_ext xlalab",
        "graph-back": "%xla_graph x --format dot",
        "fallback-back": nonzero,
    }
    cells = []
    for cid, src in sources.items():
        c = nbformat.v4.new_code_cell(src)
        c.id = cid
        if cid in ("raises", "gone"):
            c.metadata["tags"] = ["raises-exception"]  # expected: nbclient goes on
        cells.append(c)
    nb = nbformat.v4.new_notebook(
        cells=cells,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    _execute(nb, tmp_path)

    assert "already loaded" in stdout_of(cell(nb, "load-again"))
    assert not cell(nb, "reload").outputs
    w = warnings_of(cell(nb, "fallback"))
    assert w.count("xlalab: aten::nonzero ran on the CPU (once)") == 1, w  # once, not once per load
    assert f"at cell [{cell(nb, 'fallback').execution_count}], line 1 in <module>" in w

    raised = cell(nb, "raises")
    errors = [o for o in raised.outputs if o.output_type == "error"]
    assert [(e.ename, e.evalue) for e in errors] == [("ValueError", "boom")]
    assert f"Cell In[{raised.execution_count}], line 3" in "".join(texts(raised))
    assert "this cell did:" in "".join(texts(raised))  # reported although the cell raised
    assert texts(cell(nb, "alive")) == ["2"]
    assert "IR {" in "".join(texts(cell(nb, "graph")))

    assert "Line magic function `%xla_graph` not found" in "".join(texts(cell(nb, "gone")))
    assert not warnings_of(cell(nb, "fallback-unloaded"))

    assert bundles(cell(nb, "graph-back"), GRAPH_MIME)
    assert warnings_of(cell(nb, "fallback-back")).count("xlalab: ") == 1
