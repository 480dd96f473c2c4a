"""The notebook layer on compiled mode and SPMD, in a real IPython shell.

- a graph break in a ``torch.compile(backend="xlalab")`` function is a finding at the cell's
  end with dynamo's reason and the user's line; a recompile says the failed guard in plain
  words; both reach the panel's listeners as warnings;
- PT_XLA_DEBUG's blocks for compiled mode are tested in test_pt_xla_debug.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.test_lab import Shell

# An analysis that fails on an event fails the test that caused it (users get a log line instead).
os.environ.setdefault("XLALAB_ANALYSIS_ERRORS", "raise")


@pytest.fixture
def shell() -> Iterator[Shell]:
    sh = InteractiveShell.instance()
    s = Shell(sh)
    s.ok("%load_ext xlalab")
    try:
        yield s
    finally:
        s.run("%unload_ext xlalab")


COMPILED = """\
import torch, xlalab, xlalab.dynamo
import xlalab.core.xla_model as xm
xlalab.dynamo.reset()
dev = xm.xla_device()

def scale_rows(x):
    y = torch.tanh(x) * 2
    print("between graphs")
    return y.sum(dim=1) + x.shape[0]
"""


def test_a_graph_break_and_a_recompile_are_cell_findings_and_warnings(shell: Shell) -> None:
    import xlalab.lab

    got: list[dict[str, Any]] = []
    shell.ok(COMPILED)
    defined = shell.sh.execution_count - 1
    xlalab.lab.session().watcher.listeners.append(got.append)
    out = shell.ok('f = torch.compile(scale_rows, backend="xlalab")\nr = f(torch.ones(6, 3).to(dev))')
    assert "xlalab: Graph break in scale_rows (once)" in out, out
    assert "print" in out.split("Graph break in scale_rows", 1)[1].splitlines()[1]  # dynamo's reason
    assert f"at cell [{defined}], line 8 in scale_rows: print(\"between graphs\")" in out
    warned = [e["warning"] for e in got if e["kind"] == "warning"]
    breaks = [w for w in warned if w["category"] == "graph_break"]
    assert breaks and breaks[0]["where"]["cell"]["execution_count"] == defined
    assert breaks[0]["where"]["line"] == 8

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
