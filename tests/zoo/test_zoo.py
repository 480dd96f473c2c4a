"""The model zoo in a real IPython shell with ``%load_ext xlalab``.

For each model (tests/zoo/models.py): a setup cell, a cell that trains three steps (quiet: the
first two compilations are warm-up), a later cell whose batch changes one input's shape (the
warning names that input, both shapes and the setup cell's line that made it), then every view
of a pending graph (``%xla_graph`` as text, dot, hlo and stablehlo, ``%xla_step`` and a few
stepped nodes). PT_XLA_DEBUG is on throughout (its blocks go to a file); the conftest turns
any analysis failure into a test failure. One ``xlalab debug-run`` (PT_XLA_DEBUG=1, IR and HLO
debug, graph dumps) trains one model of each family in a child process: compiling is what the
zoo's time goes to, and the notebook run already covers every model.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from xlalab.debug import pt_xla_debug
from xlalab.lab.graphs import MIME
from xlalab.runtime import config

from .models import ZOO, Zoo

# One of each family: convnets with max and average pooling, a recurrent net, a HF transformer.
DEBUG_RUN = ("mnist_convnet", "batchnorm_avgpool_dropout_convnet", "lstm", "hf_gpt2")
# each changed input, on the message's line: "x: f32[4,1,28,28] → f32[3,1,28,28], y: s64[4] → s64[3]"
_RECOMPILE = re.compile(r"(?P<name>\w+): (?P<old>\w+\[[\d,]*\]) → (?P<new>\w+\[[\d,]*\])")


class Shell:
    def __init__(self, sh: InteractiveShell) -> None:
        self.sh = sh

    def ok(self, code: str) -> str:
        with capture_output() as out:
            result = self.sh.run_cell(code, store_history=True)
        text = out.stdout + "".join(
            o.data.get("text/plain", "") for o in out.outputs if isinstance(getattr(o, "data", None), dict)
        )
        err = result.error_in_exec or result.error_before_exec
        if err is not None:
            raise AssertionError(f"cell failed: {err!r}\n{code}\n{text}")
        return text


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    s = Shell(InteractiveShell.instance())
    s.ok("%load_ext xlalab")
    debug_file = tmp_path_factory.mktemp("zoo") / "pt_xla_debug.txt"
    config.set("PT_XLA_DEBUG_FILE", str(debug_file))
    config.set("PT_XLA_DEBUG_LEVEL", 1)
    config.set("PT_XLA_DEBUG", True)
    try:
        yield s
        text = debug_file.read_text()
        assert "Compilation Analysis" in text and "internal error" not in text
        assert "xlalab analysis:" in pt_xla_debug.report()
    finally:
        config.set("PT_XLA_DEBUG", False)
        for name in ("PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE"):
            config.set(name, config.SETTINGS[name].default)
        s.ok("%unload_ext xlalab")


def _env() -> dict[str, str]:
    """The environment for a child process: this checkout importable however it was installed."""
    root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))


def _args(a: tuple[int, int]) -> str:
    return f"{a[0]}, {a[1]}"


@pytest.mark.parametrize("zoo", ZOO, ids=[z.name for z in ZOO])
def test_zoo_model_in_the_notebook(shell: Shell, zoo: Zoo) -> None:
    shell.ok(zoo.setup)
    setup_cell = shell.sh.execution_count - 1
    trained = shell.ok(f"for _ in range(3):\n    loss = step(*batch({_args(zoo.before)}))")
    assert "Recompiled" not in trained, trained  # warm-up, then the cache

    out = shell.ok(f"# a batch of another shape\nloss = step(*batch({_args(zoo.after)}))")
    assert "xlalab: Recompiled: an input's shape changed (once)" in out, out
    changed = list(_RECOMPILE.finditer(out))
    assert changed, out
    for i, m in enumerate(changed):  # every input whose shape changed, with the line that sent it
        name = m["name"]
        assert name in ("x", "y"), out
        assert m["old"] != m["new"]
        made = f"cell [{setup_cell}], line {zoo.line_of(f'MADE-{name}')}"
        line = next(s for s in zoo.setup.splitlines() if s.endswith(f"# MADE-{name}")).strip()
        assert f"{name} was sent to the device at {made}: {line}" in out, out
        if i == 0:  # the finding points at the first one
            assert f"  at {made} in batch: {line}" in out, out

    # Every view of a pending graph: the forward pass of the next batch.
    shell.ok(f"out = loss_of(*batch({_args(zoo.before)}))")
    assert "IR {" in shell.ok("%xla_graph out")
    with capture_output() as shown:
        shell.sh.run_cell("%xla_graph out --format dot", store_history=True)
    payload = next(o.data[MIME] for o in shown.outputs if MIME in o.data)
    assert payload["dot"].startswith("digraph G {") and payload["num_nodes"] > 10
    assert "HloModule" in shell.ok("%xla_graph out --format hlo")
    assert "stablehlo." in shell.ok("%xla_graph out --format stablehlo")
    shell.ok("%xla_step out")
    stepped = shell.ok(
        "from xlalab.debug.stepper import Stepper\n"
        "stepper = Stepper([out])\nstepper.step(3)\nprint(stepper.listing())"
    )
    assert "aten::" in stepped or "xla::" in stepped
    shell.ok("del out, stepper\nxm.mark_step()")


def test_debug_run_trains_the_zoo_under_pt_xla_debug(tmp_path: Path) -> None:
    script = tmp_path / "zoo_train.py"
    body = [
        "import gc",
        "for setup, before, after in CASES:",
        "    scope = {}",
        "    exec(setup, scope)",
        "    for _ in range(3):",
        "        scope['step'](*scope['batch'](*before))",
        "    scope['step'](*scope['batch'](*after))",
        "    del scope",
        "    gc.collect()",
        "print('zoo trained')",
    ]
    cases = [(z.setup, z.before, z.after) for z in ZOO if z.name in DEBUG_RUN]
    script.write_text(f"CASES = {cases!r}\n" + "\n".join(body) + "\n")
    archive = tmp_path / "zoo.tar.gz"
    proc = subprocess.run(
        [sys.executable, "-m", "xlalab.tools.debug_run", "--outfile", str(archive), "--tidy", "--",
         sys.executable, "-u", str(script)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    files: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            f: Any = tar.extractfile(member)
            if f is not None:
                files[Path(member.name).name] = f.read().decode(errors="replace")
    assert "zoo trained" in files["output.txt"]
    debug = files["pt_xla_debug.txt"]
    assert "Compilation Analysis" in debug
    for text in (debug, files["output.txt"], files["summary.txt"]):
        assert "internal error" not in text and "could not analyse" not in text
    # Each model's changed batch is a new graph at the barrier inside step().
    assert debug.count("Compilation Analysis: Compilation Cause") >= 2 * len(DEBUG_RUN)
