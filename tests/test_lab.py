"""The notebook layer in a real IPython shell: magics, per-cell warnings, live views.

Cells run through ``InteractiveShell.run_cell``, exactly as a terminal IPython or a kernel runs
them, so file names, execution counts and frames are IPython's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from xlalab.runtime import config, events, metrics

SETUP = """\
import torch, xlalab.core.xla_model as xm
dev = xm.xla_device()
torch.manual_seed(0)
model = torch.nn.Linear(8, 4).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

def step(batch):
    data = torch.randn(batch, 8).to(dev)
    loss = model(data).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    xm.mark_step()
    return loss
"""


def setup(width: int) -> str:
    """SETUP with a model of its own width: every test compiles its own graphs (the compile cache
    is shared by the whole test session)."""
    return SETUP.replace("Linear(8, 4)", f"Linear(8, {width})")


class Shell:
    def __init__(self, sh: InteractiveShell) -> None:
        self.sh = sh

    def run(self, code: str) -> tuple[Any, str]:
        with capture_output() as out:
            result = self.sh.run_cell(code, store_history=True)
        text = out.stdout + "".join(
            o.data.get("text/plain", "") for o in out.outputs if isinstance(getattr(o, "data", None), dict)
        )
        return result, text

    def ok(self, code: str) -> str:
        result, text = self.run(code)
        if result.error_in_exec is not None or result.error_before_exec is not None:
            raise AssertionError(f"cell failed: {result.error_in_exec or result.error_before_exec}\n{text}")
        return text

    def error(self, code: str) -> BaseException:
        result, _ = self.run(code)
        err = result.error_in_exec or result.error_before_exec
        assert err is not None, f"expected {code!r} to fail"
        return err


@pytest.fixture
def shell() -> Iterator[Shell]:
    sh = InteractiveShell.instance()
    s = Shell(sh)
    s.ok("%load_ext xlalab")
    try:
        yield s
    finally:
        s.run("%unload_ext xlalab")
        config.set("XLA_IR_DEBUG", False)
        config.set("PT_XLA_DEBUG", False)


def test_load_and_unload_register_and_remove_everything() -> None:
    sh = InteractiveShell.instance()
    s = Shell(sh)
    listeners = len(events._subscribers)
    pre = list(sh.events.callbacks["post_run_cell"])
    s.ok("%load_ext xlalab")
    try:
        for name in ("xla_graph", "xla_metrics", "xla_debug", "xla_counters", "xla_step", "xla_sharding"):
            assert name in sh.magics_manager.magics["line"], name
        assert "xla_metrics" in sh.magics_manager.magics["cell"]
        assert len(events._subscribers) == listeners + 1
        # Loading twice is harmless: IPython says so, and a direct call replaces the session.
        s.ok("%load_ext xlalab")
        import xlalab.lab

        xlalab.lab.load_ipython_extension(sh)
        assert len(events._subscribers) == listeners + 1
    finally:
        s.ok("%unload_ext xlalab")
    assert "xla_graph" not in sh.magics_manager.magics["line"]
    assert "xla_metrics" not in sh.magics_manager.magics["cell"]
    assert len(events._subscribers) == listeners
    assert list(sh.events.callbacks["post_run_cell"]) == pre
    assert "not found" in str(s.error("%xla_graph"))


def test_a_batch_change_two_cells_later_warns_naming_the_line_and_the_shape(shell: Shell) -> None:
    shell.ok(setup(11))
    assert "xlalab" not in shell.ok("for _ in range(3):\n    step(16)")
    assert "xlalab" not in shell.ok("x = 1")
    out = shell.ok("# the last batch of the epoch\nloss = step(15)")
    count = shell.sh.execution_count - 1
    made = f"cell [{count - 3}], line 8"  # in step(), defined in the setup cell
    assert "Recompiled: an input's shape changed" in out
    assert "data: f32[16,8] → f32[15,8]" in out
    # The line: the one that made the changed input; the barrier and the caller are context.
    assert f"  at {made} in step: data = torch.randn(batch, 8).to(dev)" in out
    assert f"data was sent to the device at {made}: data = torch.randn(batch, 8).to(dev)" in out
    assert "line 13 in step: xm.mark_step()" in out  # the barrier inside step()
    assert f"cell [{count}], line 2 in <module>: loss = step(15)" in out
    # The same batch again hits the cache: quiet.
    assert "xlalab" not in shell.ok("loss = step(15)")


def test_a_batch_change_that_recompiles_every_graph_of_the_step_is_one_finding(shell: Shell) -> None:
    """A read inside the forward (transformers' padding check) splits the step in two graphs;
    padding to the longest sequence changes both inputs, and every graph recompiles: the user
    sees one finding at the line that sent them, naming both and each place that recompiled."""
    shell.ok(
        "import torch, xlalab.core.xla_model as xm\n"
        "dev = xm.xla_device()\n"
        "model = torch.nn.Linear(8, 13).to(dev)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "def step(n):\n"
        "    x, mask = torch.randn(n, 8), torch.ones(n, 1)\n"
        "    x, mask = x.to(dev), mask.to(dev)\n"
        "    if mask.all():  # a library's check\n"
        "        pass\n"
        "    loss = (model(x) * mask).pow(2).mean()\n"
        "    loss.backward()\n"
        "    opt.step(); opt.zero_grad()\n"
        "    xm.mark_step()\n"
    )
    shell.ok("for _ in range(3):\n    step(6)")
    out = shell.ok("for n in (5, 4):\n    step(n)")
    assert out.count("Recompiled") == 1, out
    setup_cell = shell.sh.execution_count - 3
    assert "mask: f32[6,1] → f32[5,1] → f32[4,1]; x: f32[6,8] → f32[5,8] → f32[4,8]" in out
    assert f"mask was sent to the device at cell [{setup_cell}], line 7" in out
    assert f"x was sent to the device at cell [{setup_cell}], line 7" in out
    assert f"at cell [{setup_cell}], line 8;" in out and f"at cell [{setup_cell}], line 13;" in out, out


def test_a_layer_that_runs_in_some_steps_only_is_another_path_not_a_shape_change(shell: Shell) -> None:
    """Layer drop (wav2vec2's, HuBERT's): a layer skipped in one step reads other inputs at the
    same place in the graph; that must read as another code path, never as an input's shape."""
    shell.ok(
        "import torch, xlalab.core.xla_model as xm\n"
        "dev = xm.xla_device()\n"
        "hidden, head = torch.nn.Linear(32, 32).to(dev), torch.nn.Linear(32, 251).to(dev)\n"
        "opt = torch.optim.SGD([*hidden.parameters(), *head.parameters()], lr=0.1)\n"
        "def step(run_hidden):\n"
        "    h = torch.randn(4, 32).to(dev)\n"
        "    if run_hidden:\n"
        "        h = hidden(h)  # THE-LAYER\n"
        "    loss = head(h).pow(2).mean()\n"
        "    opt.zero_grad(); loss.backward(); opt.step(); xm.mark_step()\n"
    )
    assert "xlalab" not in shell.ok("for _ in range(3):\n    step(False)")
    out = shell.ok("step(True)")
    assert "Recompiled: the graph's structure changed" in out, out
    assert "shape changed" not in out, out
    assert "the code took another path" in out, out
    assert "line 8 in step: h = hidden(h)  # THE-LAYER" in out, out


def test_quiet_when_nothing_is_wrong(shell: Shell) -> None:
    shell.ok(setup(12))
    for _ in range(3):
        assert shell.ok("for _ in range(2):\n    step(8)").strip() == ""


def test_a_cpu_fallback_names_its_line_and_counts(shell: Shell) -> None:
    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    out = shell.ok("x = torch.tensor([0.0, 1.0, 2.0], device=dev)\nnz = torch.nonzero(x)")
    count = shell.sh.execution_count - 1
    assert "aten::nonzero ran on the CPU (once)" in out
    assert "torch.nonzero_static(x, size=N) keeps a fixed shape" in out, out
    assert f"at cell [{count}], line 2 in <module>: nz = torch.nonzero(x)" in out
    out = shell.ok("for _ in range(3):\n    nz = torch.nonzero(x * 2)")
    assert "aten::nonzero ran on the CPU (3 times)" in out


def test_a_fallback_a_library_calls_names_the_librarys_line_too(shell: Shell) -> None:
    # torch.unique is Python in torch/functional.py, which calls aten::_unique2 (no lowering): the
    # finding stays at the user's call and names the line in the library that made the op.
    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    out = shell.ok("x = torch.tensor([3, 1, 3, 2], device=dev)\nu = torch.unique(x)\nnz = torch.nonzero(x)")
    unique, nonzero = out.split("aten::nonzero ran on the CPU", 1)
    assert "aten::_unique2 ran on the CPU (once)" in unique, out
    assert "the call is inside torch/functional.py:" in unique and "torch._unique2(" in unique, out
    assert "line 2 in <module>: u = torch.unique(x)" in unique, out
    assert "the call is inside" not in nonzero, out  # the user's own line called it


POLICY = """\
import torch, xlalab.core.xla_model as xm
from torch.distributions import Normal
dev = xm.xla_device()
policy = torch.nn.Linear(4, 2).to(dev)
opt = torch.optim.SGD(policy.parameters(), lr=0.1)

def step(validate):
    mean = policy(torch.randn(8, 4).to(dev))
    dist = Normal(mean, torch.ones_like(mean), validate_args=validate)  # THE-DIST
    loss = -dist.log_prob(torch.randn(8, 2).to(dev)).mean()  # THE-LOSS
    opt.zero_grad()
    loss.backward()
    opt.step()
    xm.mark_step()
"""


def test_a_distributions_argument_check_cuts_the_step_and_says_how_to_turn_it_off(shell: Shell) -> None:
    # torch.distributions validates by default (validate_args follows __debug__, until the
    # first torch.compile turns the default off for the process): each check reads a bool from
    # the device, mid-step, inside torch's code.
    shell.ok(POLICY)
    cell = shell.sh.execution_count - 1
    out = shell.ok("for _ in range(3):\n    step(True)")
    assert "cut the step" in out, out
    assert "the read is inside torch/distributions/distribution.py" in out, out
    assert "validate_args=False" in out and "set_default_validate_args(False)" in out, out
    assert f"at cell [{cell}], line 9 in step: dist = Normal(" in out, out  # the constructor's checks
    assert f"at cell [{cell}], line 10 in step: loss = -dist.log_prob(" in out, out  # the sample's
    # Without the checks the step is another graph (a true recompile, named at its line): the
    # words looked for are kept off that line, which the finding quotes.
    quiet = shell.ok("for _ in range(3):\n    step(False)")
    assert "cut the step" not in quiet, quiet


BERT = """\
import torch, xlalab.core.xla_model as xm
from transformers import BertConfig, BertModel
dev = xm.xla_device()
config = BertConfig(
    vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
)
bert = BertModel(config).to(dev)
ids = torch.randint(0, 50, (2, 8)).to(dev)
padded = torch.ones(2, 8, dtype=torch.bool)
padded[1, 6:] = False
mask_2d = padded.long().to(dev)
lowest = torch.finfo(torch.float32).min
mask_4d = torch.zeros(2, 1, 8, 8).masked_fill(~padded[:, None, None, :], lowest).to(dev)
"""


def test_a_transformers_attention_mask_read_says_how_to_avoid_it(shell: Shell) -> None:
    # transformers reads a 2-d attention_mask each forward (whether any token is padded): a read
    # inside the library, so the advice is what to pass instead, and the 4-d form cuts nothing.
    shell.ok(BERT)
    step = "for _ in range(2):\n    total = bert(input_ids=ids, attention_mask={}).last_hidden_state.sum()\n"
    step += "    xm.mark_step()"
    out = shell.ok(step.format("mask_2d"))
    assert "cut the step" in out and "the read is inside transformers/masking_utils.py" in out, out
    assert "attention_mask=None" in out and "expanded to 4-d" in out, out
    assert "cut the step" not in shell.ok(step.format("mask_4d"))


def test_generate_is_said_in_one_read_finding_and_one_recompile_with_each_caches_run(shell: Shell) -> None:
    """transformers' generate reads its stopping check after every token: each token's graphs
    differ from the last (the sequence and every layer's KV cache grow by one), said once per kind
    of finding, with the caches that grew alike named together, not once per token."""
    shell.ok(
        "import torch, transformers, xlalab\n"
        "cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,\n"
        "    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)\n"
        "torch.manual_seed(0)\n"
        "llama = transformers.LlamaForCausalLM(cfg).eval()\n"
        "prompt = torch.randint(0, 64, (1, 5))\n"
        "want = llama.generate(prompt, max_new_tokens=6, do_sample=False)\n"
        "llama = llama.to(xlalab.device())"
    )
    out = shell.ok("got = llama.generate(prompt.to(xlalab.device()), max_new_tokens=6, do_sample=False)")
    assert shell.ok("print(torch.equal(got.cpu(), want))").strip() == "True"
    assert "the read is inside transformers/generation/" in out, out
    assert out.count("so the rest of the step is another graph") == 1, out
    assert out.count("xlalab: Recompiled: an input's shape changed") == 1, out
    # The four KV caches (2 layers, keys and values) ran alike: one run, their names together.
    caches = r"(input \d+, ){3}input \d+: f32\[1,2,5,8\] → f32\[1,2,6,8\] → \.\.\. → f32\[1,2,9,8\]"
    assert re.search(caches, out), out


def test_an_item_inside_a_step_cuts_it_and_says_where(shell: Shell) -> None:
    shell.ok(setup(13))
    # One look at a value in a cell that runs no steps is how notebooks work: quiet.
    assert "cut the step" not in shell.ok("y = model(torch.ones(2, 8, device=dev)).sum()\nv = y.item()")
    out = shell.ok(
        "for _ in range(3):\n    loss = step(4)\n    v = model(torch.ones(2, 8, device=dev)).sum().item()"
    )
    assert ".item() cut the step (3 times)" in out
    assert "line 3 in <module>: v = model(" in out
    assert "the read is inside" not in out  # the user's own read: their line says it all
    # Reading a value that is already computed (after mark_step) is not a cut.
    assert "cut the step" not in shell.ok("loss = step(4)\nloss.item()")


def test_a_read_inside_a_library_names_the_librarys_line_too(shell: Shell) -> None:
    """torch's clip_grad_norm_(error_if_nonfinite=True) reads the norm to decide whether to raise:
    the finding points at the user's call and names the line in torch that read."""
    shell.ok(setup(19))
    out = shell.ok(
        "for _ in range(3):\n"
        "    loss = model(torch.ones(2, 8, device=dev)).sum()\n"
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)\n"
        "    xm.mark_step()"
    )
    assert "cut the step (3 times)" in out, out
    assert "line 4 in <module>: torch.nn.utils.clip_grad_norm_(" in out, out
    assert "the read is inside torch/nn/utils/clip_grad.py:" in out, out
    assert "error_if_nonfinite" in out.split("the read is inside", 1)[1].splitlines()[0], out


def test_a_python_branch_on_a_tensor_cuts_the_step_and_points_to_torch_cond(shell: Shell) -> None:
    shell.ok(setup(17))
    out = shell.ok(
        "for _ in range(3):\n    loss = step(4)\n    y = model(torch.ones(2, 8, device=dev)).sum()\n"
        "    if y > 0:\n        y = y * 2"
    )
    assert "a Python branch on a tensor's value cut the step (3 times)" in out
    assert "line 4 in <module>: if y > 0:" in out
    assert "torch.cond(pred, true_fn, false_fn, operands)" in out


def test_xla_graph_shows_the_pending_ir_and_runs_nothing(shell: Shell) -> None:
    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    shell.ok("a = torch.ones(3, 4, device=dev)\nb = (a * 2).relu().sum(0)")
    before = metrics.snapshot()
    text = shell.ok("%xla_graph b")
    assert "IR {" in text and "aten::relu" in text and "ROOT=0" in text
    assert "pending graph of b" in text
    everything = shell.ok("%xla_graph --all")
    assert "every pending tensor" in everything
    assert metrics.snapshot()["counters"] == before["counters"]
    assert {k: v["count"] for k, v in metrics.snapshot()["metrics"].items()} == {
        k: v["count"] for k, v in before["metrics"].items()
    }


def test_xla_graph_dot_is_a_graph_bundle_with_source_lines_under_ir_debug(shell: Shell) -> None:
    from xlalab.lab.graphs import MIME

    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()\n%xla_debug on")
    shell.ok("a = torch.ones(3, 4, device=dev)\nb = (a * 2).relu()")
    cell = shell.sh.execution_count - 1
    with capture_output() as out:
        shell.sh.run_cell("%xla_graph b --format dot", store_history=True)
    bundle = next(o.data for o in out.outputs if MIME in o.data)
    payload = bundle[MIME]
    assert payload["dot"].startswith("digraph G {")
    assert payload["num_nodes"] == payload["shown_nodes"] == len(payload["nodes"])
    relu = next(n for n in payload["nodes"] if n["op"] == "aten::relu")
    assert relu["shape"].startswith("f32[3,4]")
    assert relu["frames"][0]["label"] == f"cell [{cell}], line 2"
    assert relu["frames"][0]["cell"]["execution_count"] == cell
    assert "IR {" in bundle["text/plain"]


def test_xla_graph_save_and_formats(shell: Shell, tmp_path: Any) -> None:
    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    shell.ok("b = torch.ones(2, device=dev) + 1")
    path = tmp_path / "g.hlo"
    out = shell.ok(f"%xla_graph b --format hlo --save {path}")
    assert f"saved the hlo dump to {path}" in out
    assert "HloModule" in path.read_text()
    assert "stablehlo.add" in shell.ok("%xla_graph b -f stablehlo")


def test_xla_graph_bad_input_is_a_clear_error(shell: Shell) -> None:
    from IPython.core.error import UsageError

    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()\nc = torch.ones(2)")
    shell.ok("xm.mark_step()")
    err = shell.error("%xla_graph nope")
    assert isinstance(err, UsageError) and "no variable named 'nope'" in str(err)
    err = shell.error("%xla_graph c")
    assert isinstance(err, UsageError) and "is on cpu, not an xla device" in str(err)
    err = shell.error("%xla_graph")
    assert isinstance(err, UsageError) and "nothing is pending" in str(err)
    shell.ok("d = torch.ones(2, device=dev)\nxm.mark_step()")
    err = shell.error("%xla_graph d")
    assert isinstance(err, UsageError) and "nothing is pending for d: holds computed device data" in str(err)
    err = shell.error("%xla_graph --format svg")
    assert isinstance(err, UsageError)
    help_text = shell.ok("%xla_graph --help")
    assert "--format" in help_text and "--save PATH" in help_text
    assert "2" in shell.ok("1 + 1")  # the shell lives on


def test_a_huge_graph_is_summarised_fast(shell: Shell) -> None:
    import time

    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    shell.ok("h = torch.ones(4, device=dev)\nfor _ in range(10000):\n    h = h + 1")
    t0 = time.perf_counter()
    out = shell.ok("%xla_graph h --format dot")
    assert time.perf_counter() - t0 < 15
    assert "nodes omitted" in out
    shell.ok("xm.mark_step()")


def test_cell_magic_shows_what_the_cell_did_even_when_it_raises(shell: Shell) -> None:
    shell.ok(setup(14))
    out = shell.ok(
        "%%xla_metrics\nfor _ in range(3):\n    step(8)\nz = torch.nonzero(torch.ones(3, device=dev))"
    )
    assert "this cell did:" in out
    assert "aten::nonzero x 1" in out
    assert "executions" in out
    result, out = shell.run("%%xla_metrics\nstep(8)\nraise ValueError('boom')")
    assert isinstance(result.error_in_exec, ValueError)
    assert "this cell did:" in out
    assert "4" in shell.ok("2 + 2")


def test_metrics_magics(shell: Shell) -> None:
    shell.ok(setup(15))
    shell.ok("step(8)")
    since = shell.ok("%xla_metrics --since-cell")  # the step(8) cell: one new graph, run once
    assert "since the previous cell started:" in since
    assert re.search(r"compiles\s+1 new, 0 cache hits", since), since
    assert re.search(r"executions\s+1,", since), since
    assert "Metric: CompileTime" in shell.ok("%xla_metrics")
    assert "Counter: MarkStep" in shell.ok("%xla_metrics --counters")


def test_xla_debug_switches_at_run_time(shell: Shell) -> None:
    assert "XLA_IR_DEBUG=True, PT_XLA_DEBUG=True" in shell.ok("%xla_debug on")
    assert config.get("XLA_IR_DEBUG") and config.get("PT_XLA_DEBUG")
    assert "PT_XLA_DEBUG_LEVEL=1" in shell.ok("%xla_debug level 1")
    assert "level N takes" in str(shell.error("%xla_debug level 7"))
    shell.ok("%xla_debug off")
    assert not config.get("XLA_IR_DEBUG") and not config.get("PT_XLA_DEBUG")
    config.set("PT_XLA_DEBUG_LEVEL", 2)


def test_live_counters_follow_events_and_never_touch_tensors(shell: Shell) -> None:
    import xlalab.lab

    shell.ok(setup(16))
    widget = xlalab.lab.counters()
    view = xlalab.lab.session().views[-1]
    shell.ok("step(8)\nstep(8)")
    view.refresh()
    assert view.labels["compiles"].value == f"<b>{metrics.COUNTERS.get('UncachedCompile', 0)}</b>"
    assert view.labels["cache_hits"].value == f"<b>{metrics.COUNTERS.get('CachedCompile', 0)}</b>"
    assert widget is view.widget
    # Refreshing reads the registry only: no compile, execution or transfer.
    before = dict(metrics.COUNTERS)
    view.refresh()
    assert dict(metrics.COUNTERS) == before


def test_a_warning_event_reaches_listeners_in_protocol_shape(shell: Shell) -> None:
    import xlalab.lab

    got: list[dict[str, Any]] = []
    xlalab.lab.session().watcher.listeners.append(got.append)
    shell.ok(setup(17))
    setup_cell = shell.sh.execution_count - 1
    shell.ok("for _ in range(3):\n    step(16)")
    shell.ok("step(15)")
    kinds = {e["kind"] for e in got}
    assert {"compile_start", "compile", "execute", "sync", "transfer", "warning"} <= kinds
    warning = next(e["warning"] for e in got if e["kind"] == "warning")
    assert warning["category"] == "recompile"
    # The line that made the changed input, not the caller that ran the step.
    assert warning["where"]["cell"]["execution_count"] == setup_cell
    assert warning["where"]["line"] == 8  # data = torch.randn(batch, 8).to(dev)
    assert warning["cell"]["execution_count"] == shell.sh.execution_count - 1
    compiles = [e for e in got if e["kind"] == "compile" and not e["cached"]]
    assert warning["graph_hash"] == compiles[-1]["graph_hash"]
    assert warning["previous_graph_hash"] == compiles[-2]["graph_hash"]
    assert warning["previous_graph_hash"] != warning["graph_hash"]
    compiles = [e for e in got if e["kind"] == "compile"]
    assert all(isinstance(e["graph_hash"], str) for e in compiles)
    starts = [e for e in got if e["kind"] == "compile_start"]
    assert len(starts) == sum(1 for e in compiles if not e["cached"])


def test_the_runtime_never_imports_ipython() -> None:
    import subprocess
    import sys

    code = (
        "import xlalab, xlalab.runtime, xlalab.debug, sys; "
        "print([m for m in ('IPython', 'ipywidgets', 'graphviz') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_stripped_graphs_keep_no_device_data() -> None:
    from xlalab.debug.graph_dump import graph_of, graph_text
    from xlalab.lab.watcher import strip_graph
    from xlalab.runtime import ir

    dev = torch.device("xla:0")
    t = torch.ones(3, device=dev) * 2
    g = graph_of(t)
    s = strip_graph(g)
    assert all(n.value is None or n.op is ir.SCALAR for n in s.nodes)
    assert graph_text(s) == graph_text(g)


def test_the_throttle_coalesces_and_always_delivers_the_last_poke() -> None:
    import time

    from xlalab.lab.throttle import Throttle

    state = {"value": 0}
    seen: list[int] = []
    t = Throttle(0.1, lambda: seen.append(state["value"]))
    start = time.monotonic()
    for i in range(1, 2001):
        state["value"] = i
        t.poke()
    deadline = time.monotonic() + 5
    while (not seen or seen[-1] != 2000) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen[-1] == 2000  # the trailing call saw the latest state
    # At most one call per interval (plus the first, at once): a few calls, not 2000.
    assert len(seen) <= 2 + (time.monotonic() - start) / 0.1
    t.close()


NO_BARRIER = """\
def step_without_barrier(batch):
    data = torch.randn(batch, 8).to(dev)
    loss = model(data).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss
"""


def test_a_loop_without_a_step_barrier_is_named_at_the_cells_end(shell: Shell) -> None:
    shell.ok(setup(18))
    shell.ok(NO_BARRIER)
    defined = shell.sh.execution_count - 1
    before = dict(metrics.COUNTERS)
    out = shell.ok("for _ in range(4):\n    loss = step_without_barrier(8)")
    count = shell.sh.execution_count - 1
    # Looking compiled, ran and transferred nothing: the graph is still pending.
    for name in ("UncachedCompile", "CachedCompile", "ExecuteComputation", "xla::_to_cpu"):
        assert metrics.COUNTERS.get(name, 0) == before.get(name, 0), name
    assert "xlalab: No step barrier: the pending graph keeps growing (4 times)" in out, out
    m = re.search(r"optimizer.step\(\) ran 4 times with no xm.mark_step\(\) in between: nothing ran, and the "
                  r"pending graph has grown to (\d+) nodes", out)  # fmt: skip
    assert m is not None and int(m[1]) > 40, out
    assert f"  at cell [{defined}], line 6 in step_without_barrier: opt.step()" in out
    assert f"the loop's line: cell [{count}], line 2: loss = step_without_barrier(8)" in out
    # A barrier ends it: the same loop with mark_step is quiet, and so is one optimizer step.
    assert "No step barrier" not in shell.ok("xm.mark_step()\nfor _ in range(3):\n    step(8)")
    assert "No step barrier" not in shell.ok("loss = step_without_barrier(8)")
    shell.ok("xm.mark_step()")


def _cell_line(code: str, marker: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.endswith(f"# {marker}"))


CAUSES = """\
import torch, xlalab.core.xla_model as xm
dev = xm.xla_device()
w = torch.ones(4, 8, device=dev) * WIDTH
kept = []

def head(n):
    out = (w * 2)[:, :n].sum()  # SLICE
    xm.mark_step()
    return out

def branch(flag):
    y = w * 3
    if flag:
        y = y.relu()  # BRANCH
    s = y.sum()
    xm.mark_step()
    return s

def outputs(keep):
    y = w * 5  # KEPT
    s = y.sum()
    if keep:
        kept.append(y)
    del y
    xm.mark_step()
    return s

def train(read):
    h = w * 7
    loss = h.sum()
    if read:
        loss.item()  # READ
    out = (h * 2).sum()
    xm.mark_step()
    return out

def unrolled(k):
    y = w
    for _ in range(k):
        y = y * 2  # LOOP
    s = y.sum()
    xm.mark_step()
    return s

def dynamic(x):
    idx = torch.nonzero(x > 0)  # NONZERO
    total = (idx * 4 - 1).sum()
    xm.mark_step()
    return total

def masked(x):
    kept = x[x > 0]  # MASK
    total = (kept * 4 - 1).sum()
    xm.mark_step()
    return total

def masked_backward(x):
    kept = x[x > 0]  # MASKED-FORWARD
    kept.sum().backward()
    xm.mark_step()

def window(i, n):
    out = (w * 6)[i : i + 2, :n].sum()  # WINDOW
    xm.mark_step()
    return out

def batch(n):
    data = torch.ones(n, 8).to(dev)  # BATCH
    out = (data * w[0]).sum()
    xm.mark_step()
    return out
"""


@pytest.fixture
def causes(shell: Shell) -> tuple[Shell, int]:
    shell.ok(CAUSES.replace("WIDTH", "1.5"))
    return shell, shell.sh.execution_count - 1


def test_a_changed_slice_bound_names_the_op_both_values_and_its_line(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("for _ in range(2):\n    head(3)")
    out = shell.ok("head(5)")
    line = _cell_line(CAUSES, "SLICE")
    assert "xlalab: Recompiled: an integer baked into the graph changed (once)" in out, out
    assert f"  aten::slice end: 3 → 5 at cell [{defined}], line {line}: out = (w * 2)[:, :n].sum()" in out
    assert f"  at cell [{defined}], line {line} in head: out = (w * 2)[:, :n].sum()" in out


def test_a_different_code_path_names_the_first_different_op_and_its_line(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("for _ in range(2):\n    branch(False)")
    out = shell.ok("branch(True)")
    line = _cell_line(CAUSES, "BRANCH")
    assert "xlalab: Recompiled: the graph's structure changed (once)" in out, out
    at = f"cell [{defined}], line {line}"
    assert f"  the first different op: aten::sum became aten::relu at {at}: y = y.relu()" in out
    assert f"  at cell [{defined}], line {line} in branch: y = y.relu()" in out


def test_a_loop_with_another_trip_count_names_the_first_new_op(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("for _ in range(2):\n    unrolled(2)")
    out = shell.ok("unrolled(3)")
    at = f"cell [{defined}], line {_cell_line(CAUSES, 'LOOP')}"
    assert "xlalab: Recompiled: the graph's structure changed (once)" in out, out
    assert f"  the first different op: aten::sum became aten::mul at {at}: y = y * 2" in out


def test_a_tensor_kept_alive_names_the_extra_output_and_where_it_was_made(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("for _ in range(2):\n    outputs(False)")
    out = shell.ok("outputs(True)")
    line = _cell_line(CAUSES, "KEPT")
    assert "xlalab: Recompiled: the set of live outputs changed (once)" in out, out
    at = f"cell [{defined}], line {line}: y = w * 5"
    assert f"  1 output → 2 outputs; now also returned: aten::mul (f32[4,8]) at {at}" in out
    assert "a tensor of this step is still referenced (kept in a list" in out


def test_a_recompile_caused_by_a_read_is_folded_under_the_read(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("for _ in range(2):\n    train(False)")
    out = shell.ok("train(True)")
    assert "Recompiled" not in out, out
    assert "xlalab: .item() cut the step" in out, out
    assert f"  at cell [{defined}], line {_cell_line(CAUSES, 'READ')} in train: loss.item()" in out
    assert "so the rest of the step is another graph: it recompiled at cell" in out
    # The same step again: the read cuts it again, and its graphs are cached: no recompilation.
    again = shell.ok("train(True)")
    assert "xlalab: .item() cut the step (2 times)" in again, again
    assert "xlalab: Recompiled" not in again, again


def test_a_data_dependent_shape_names_the_op_that_made_it(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("x = torch.tensor([1.0, -1.0, 2.0, 3.0], device=dev)\nfor _ in range(2):\n    dynamic(x)")
    out = shell.ok("dynamic(torch.tensor([1.0, -1.0, -2.0, 3.0], device=dev))")
    line = _cell_line(CAUSES, "NONZERO")
    # The recompilation follows from the fallback already named: it is said under it.
    assert "xlalab: Recompiled" not in out and "xlalab: aten::nonzero ran on the CPU" in out, out
    assert (
        "so the step recompiles as that shape changes (Recompiled: an input's shape changed: "
        "idx: s64[3,1] → s64[2,1])"
    ) in out
    assert f"  at cell [{defined}], line {line} in dynamic: idx = torch.nonzero(x > 0)" in out


def test_a_boolean_mask_index_is_data_dependent_with_a_fixed_shape_form(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    shell.ok("x = torch.tensor([1.0, -1.0, 2.0, 3.0], device=dev)\nfor _ in range(2):\n    masked(x)")
    out = shell.ok("masked(torch.tensor([1.0, -1.0, -2.0, 3.0], device=dev))")
    assert "xlalab: Recompiled" not in out and "xlalab: aten::index ran on the CPU" in out, out
    assert "aten::index: indexing with a boolean mask: the result's shape depends on the mask's values" in out
    assert "has no XLA lowering" not in out, out
    assert "torch.where(mask, x, 0)" in out, out
    assert "so the step recompiles as that shape changes (Recompiled: an input's shape changed" in out, out
    assert f"  at cell [{defined}], line {_cell_line(CAUSES, 'MASK')} in masked: kept = x[x > 0]" in out


def test_a_fallback_inside_backward_names_the_forward_line(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    out = shell.ok("x = torch.tensor([1.0, -1.0, 2.0], device=dev, requires_grad=True)\nmasked_backward(x)")
    backward = out.split("xlalab: aten::index_put ran on the CPU", 1)[1]
    line = _cell_line(CAUSES, "MASKED-FORWARD")
    assert "it is the backward of a boolean-mask index (x[mask])" in backward, out
    assert f"  at cell [{defined}], line {line} in masked_backward: kept = x[x > 0]" in backward, out
    assert f"line {line + 1} in masked_backward: kept.sum().backward()" in backward, out


def test_a_shape_changing_every_step_is_one_finding_that_counts_the_steps(causes: tuple[Shell, int]) -> None:
    shell, defined = causes
    out = shell.ok("for n in range(2, 8):\n    batch(n)")
    assert out.count("xlalab: Recompiled") == 1, out
    # (the second graph at a place is warm-up, as the optimizer's state appearing at step 2)
    assert "xlalab: Recompiled: an input's shape changed (4 times)" in out, out
    assert "data: f32[3,8] → f32[4,8] → ... → f32[7,8]" in out, out
    assert "pad the input to a fixed size" in out, out
    assert f"  at cell [{defined}], line {_cell_line(CAUSES, 'BATCH')} in batch:" in out, out


def test_every_integer_that_changed_is_named_not_only_the_first(causes: tuple[Shell, int]) -> None:
    shell, _ = causes
    shell.ok("for _ in range(2):\n    window(0, 3)")
    out = shell.ok("window(1, 5)")
    assert "aten::slice start: 0 → 1" in out, out
    assert "also changed: end: 2 → 3; aten::slice end: 3 → 5" in out, out


def test_a_precision_warning_names_the_cell_not_a_temporary_file(shell: Shell) -> None:
    import warnings

    from xlalab.runtime import backend

    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    config.set("XLA_USE_BF16", True)
    backend._warned.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            # IPython writes warnings to stderr through warnings.showwarning.
            with capture_output() as out:
                shell.sh.run_cell("x = torch.tensor([4097.0], device=dev)\nv = x.cpu()", store_history=True)
        count = shell.sh.execution_count - 1
        err = out.stderr
        assert f"cell [{count}]:1: PrecisionWarning: XLA_USE_BF16=1: 4097.0 is stored as 4096.0" in err, err
        assert "  x = torch.tensor([4097.0], device=dev)" in err
        assert "ipykernel" not in err and "ipython-input" not in err
    finally:
        config.set("XLA_USE_BF16", False)
        backend._warned.clear()


def test_a_read_inside_an_installed_library_names_the_users_line(shell: Shell) -> None:
    """statistics.fmean (the standard library) reads the tensors: the finding is at the user's
    line; the library's line is named only as where the read happened."""
    shell.ok("import statistics, torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    out = shell.ok(
        "for k in range(3):\n"
        "    t = torch.ones(2, device=dev) * (k + 19)\n"
        "    m = statistics.fmean([t.sum(), t.mean()])\n"
        "    xm.mark_step()"
    )
    count = shell.sh.execution_count - 1
    assert "xlalab: reading a Python number (float(), int(), bool(), if tensor) cut the step" in out, out
    assert f"  at cell [{count}], line 3 in <module>: m = statistics.fmean([t.sum(), t.mean()])" in out
    located = [line for line in out.splitlines() if "statistics.py" in line]
    assert located, out
    assert all(line.strip().startswith("the read is inside statistics.py:") for line in located), out


def test_a_cell_that_leaves_a_huge_pending_graph_says_where_it_grew(shell: Shell) -> None:
    shell.ok("import torch, xlalab.core.xla_model as xm\ndev = xm.xla_device()")
    out = shell.ok("h = torch.ones(4, device=dev)\nfor _ in range(3000):\n    h = h * 1.01 + 1")
    count = shell.sh.execution_count - 1
    assert "xlalab: No step barrier: the pending graph keeps growing (once)" in out, out
    assert re.search(r"the pending graph has \d{4} nodes and this cell ran no barrier; 6000 of them made at "
                     rf"cell \[{count}\], line 3", out), out  # fmt: skip
    assert f"  at cell [{count}], line 3 in <module>: h = h * 1.01 + 1" in out
    assert "No step barrier" not in shell.ok("del h")  # dropped, not compiled: nothing is pending


COMPILED_STEP = """\
import torch, torch.nn.functional as F
import xlalab, xlalab.dynamo
dev = xlalab.device()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(8, WIDTH), torch.nn.BatchNorm1d(WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 4)
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

@torch.compile(backend="xlalab")
def train_step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss
"""


def test_a_compiled_train_step_that_creates_its_optimizer_state_is_not_a_recompilation(shell: Shell) -> None:
    """AdamW's state is created lazily at its first step, a graph per parameter, all synced at
    ``opt.step()`` as the compiled step's inputs: other tensors, not variants of one graph."""
    shell.ok(COMPILED_STEP.replace("WIDTH", "23"))
    out = shell.ok(
        "for _ in range(4):\n"
        "    x = torch.randn(16, 8).to(dev); y = torch.randint(0, 4, (16,)).to(dev)\n"
        "    loss = train_step(x, y)\n"
        "print(loss.item())"
    )
    assert "Recompiled" not in out, out
    from xlalab.lab import session

    assert [f.title for f in session().watcher.findings if f.category == "recompile"] == [], out


def test_one_read_after_the_last_barrier_or_in_an_inference_cell_cuts_nothing(shell: Shell) -> None:
    """A read cuts its step only when a barrier runs work after it: reading an accumulated total
    once after the loop, or the one value an inference cell computes, ends the work instead."""
    shell.ok(setup(29))
    out = shell.ok(
        "total = 0\n"
        "for _ in range(3):\n"
        "    total = total + step(4).detach()\n"
        "print('mean loss', (total / 3).item())"
    )
    assert "cut the step" not in out, out
    out = shell.ok("xm.mark_step()\ny2 = model(torch.randn(4, 8).to(dev)).sum()\nprint(y2.item())")
    assert "cut the step" not in out, out
    # A read with work after it in the same step, before the barrier, does cut it.
    out = shell.ok(
        "for _ in range(2):\n"
        "    loss = model(torch.randn(4, 8).to(dev)).pow(2).mean()\n"
        "    v = loss.item()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    xm.mark_step()"
    )
    assert "xlalab: .item() cut the step (2 times)" in out, out
    assert "line 3 in <module>: v = loss.item()" in out, out


def test_two_same_size_inputs_that_change_are_both_named_with_the_lines_that_sent_them(shell: Shell) -> None:
    shell.ok(
        "import torch, xlalab.core.xla_model as xm\n"
        "dev = xm.xla_device()\n"
        "emb = torch.nn.Embedding(100, 31).to(dev)"
    )
    out = shell.ok(
        "for L in [16, 16, 12]:\n"
        "    input_ids = torch.randint(1, 100, (4, L)).to(dev)\n"
        "    attention_mask = torch.ones(4, L, dtype=torch.long).to(dev)\n"
        "    h = (emb(input_ids) * attention_mask.unsqueeze(-1)).sum()\n"
        "    xm.mark_step()"
    )
    count = shell.sh.execution_count - 1
    assert "xlalab: Recompiled: an input's shape changed (once)" in out, out
    message = out.split("(once)\n", 1)[1].splitlines()[0]
    # The two ran alike: said once, both named.
    assert message.strip() == "attention_mask, input_ids: s64[4,16] → s64[4,12]", out
    sent = f"was sent to the device at cell [{count}], line"
    assert f"input_ids {sent} 2: input_ids = torch.randint(1, 100, (4, L)).to(dev)" in out, out
    assert f"attention_mask {sent} 3: attention_mask = torch.ones(4, L, dtype=torch.long).to(dev)" in out, out


def test_a_missing_barrier_is_said_once_in_the_cell_that_ran_the_steps(shell: Shell) -> None:
    shell.ok(setup(37))
    shell.ok(NO_BARRIER)
    out = shell.ok("for _ in range(3):\n    loss = step_without_barrier(8)")
    assert "xlalab: No step barrier: the pending graph keeps growing (3 times)" in out, out
    assert "xlalab" not in shell.ok("a = 1"), "said again in a cell that ran no step"
    assert "xlalab" not in shell.ok("%xla_graph --max-nodes 10")
    # More steps without a barrier in a later cell: that cell did it too, and says so.
    out = shell.ok("for _ in range(2):\n    loss = step_without_barrier(8)")
    assert "xlalab: No step barrier: the pending graph keeps growing (5 times)" in out, out
    shell.ok("xm.mark_step()")
    shell.ok("h = torch.ones(4, device=dev)\nfor _ in range(3000):\n    h = h * 1.01 + 1")
    assert "xlalab" not in shell.ok("b = 2"), "a huge pending graph said again in a cell that added nothing"
    shell.ok("del h")


def test_a_branch_or_a_float_read_says_so_in_plain_sentences(shell: Shell) -> None:
    shell.ok(setup(41))
    out = shell.ok(
        "for _ in range(2):\n"
        "    loss = model(torch.randn(4, 8).to(dev)).pow(2).mean()\n"
        "    if loss > 1.0:\n"
        "        loss = loss * 0.5\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    xm.mark_step()"
    )
    assert "xlalab: a Python branch on a tensor's value cut the step (2 times)" in out, out
    lines = out.split("cut the step (2 times)\n", 1)[1].splitlines()
    assert re.fullmatch(
        r"  the branch's read of a pending tensor compiled and ran its graph \(\d+ nodes\) "
        r"before the step's end",
        lines[0],
    ), out
    assert "torch.where" in lines[1] and "torch.cond(" in lines[2], out  # the simple fix first
    assert "read the value after xm.mark_step()" not in out, out
    out = shell.ok(
        "for _ in range(2):\n"
        "    loss = model(torch.randn(4, 8).to(dev)).pow(2).mean()\n"
        "    history = float(loss)\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    xm.mark_step()"
    )
    assert re.search(
        r"\n  reading a Python number from a pending tensor compiled and ran its graph \(\d+ nodes\) "
        r"before the step's end\n",
        out,
    ), out


def test_a_batch_change_dynamo_recompiles_for_folds_the_lazy_graphs_around_it(shell: Shell) -> None:
    shell.ok(
        "import torch, torch.nn.functional as F, xlalab, xlalab.dynamo\n"
        "import xlalab.core.xla_model as xm\n"
        "dev = xlalab.device()\n"
        "layers = [torch.nn.Linear(8, 43), torch.nn.ReLU(), torch.nn.Linear(43, 4)]\n"
        "model = torch.nn.Sequential(*layers).to(dev)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        'cmodel = torch.compile(model, backend="xlalab")'
    )
    out = shell.ok(
        "for bs in [8, 8, 6]:\n"
        "    x = torch.randn(bs, 8).to(dev); y = torch.randint(0, 4, (bs,)).to(dev)\n"
        "    opt.zero_grad()\n"
        "    loss = F.cross_entropy(cmodel(x), y)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    hits = (cmodel(x).argmax(1) == y).sum()\n"  # the step's lazy graph has the batch's shape
        "    xm.mark_step()"
    )
    assert "xlalab: Recompiled Sequential.forward (once)" in out, out
    assert out.count("xlalab: Recompiled") == 1, out  # the lazy graphs resize with it: said under it
    assert "so the lazy graph at cell" in out and "y: s64[8] → s64[6]" in out, out
