"""The notebook layer on programs written as a user writes them, not for xlalab: each plants one
mistake, and the finding must name its cause and the user's line (in a cell, or a file of theirs).

Cells run in a real IPython shell with the extension loaded (the fixture of tests/test_lab.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import test_lab
from tests.test_lab import Shell

shell = test_lab.shell  # the fixture: a real IPython shell with the lab loaded

PRELUDE = """\
import torch, xlalab.core.xla_model as xm
import torch.nn.functional as F
dev = xm.xla_device()
torch.manual_seed(0)
"""


def test_a_dropout_rate_that_changes_each_step_names_the_dropout_line(shell: Shell) -> None:
    """A dropout rate annealed by the loop is a float the op bakes into the graph: the finding says
    a float (not an integer) and names the user's F.dropout line, which IR debug recorded for the
    random op as for any other."""
    shell.ok(PRELUDE)
    out = shell.ok(
        "for i in range(4):\n"
        "    h = torch.randn(4, 8).to(dev)\n"
        "    h = F.dropout(h, p=0.125 * (i + 1))  # ANNEALED\n"
        "    xm.mark_step()\n"
    )
    loop = shell.sh.execution_count - 1
    assert "Recompiled: a Python float baked into the graph changed" in out, out
    assert "aten::native_dropout p: 0.375 → 0.5" in out, out
    line = "h = F.dropout(h, p=0.125 * (i + 1))  # ANNEALED"
    assert f"at cell [{loop}], line 3 in <module>: {line}" in out, out
    assert "a Python float that changes between calls" in out, out
    assert "%xla_debug on" not in out, out  # IR debug is on: the line is known


def test_a_factory_size_that_changes_names_the_factory_line(shell: Shell) -> None:
    """``torch.arange(n, device=dev)`` bakes n into the graph: its line is the cause."""
    shell.ok(PRELUDE)
    shell.ok(
        "def positions(n):\n"
        "    pos = torch.arange(n, device=dev)  # POSITIONS\n"
        "    out = (pos * 2).sum()\n"
        "    xm.mark_step()\n"
        "    return out\n"
    )
    defined = shell.sh.execution_count - 1
    shell.ok("for _ in range(2):\n    positions(6)")
    out = shell.ok("positions(7)")
    assert "Recompiled: an integer baked into the graph changed" in out, out
    assert "aten::arange end: 6 → 7" in out, out
    line = "pos = torch.arange(n, device=dev)  # POSITIONS"
    assert f"at cell [{defined}], line 2 in positions: {line}" in out, out


def test_a_fallback_in_a_function_of_an_earlier_cell_names_the_call_that_ran_it_now(shell: Shell) -> None:
    """A model's forward defined in one cell, called from two later cells: the finding stays at the
    forward's line, and its callers are the call that ran it this time, not the first cell's."""
    shell.ok(
        PRELUDE + "def forward(x):\n"
        "    idx = torch.nonzero(x > 0)  # DATA-DEPENDENT\n"
        "    return idx\n"
    )
    defined = shell.sh.execution_count - 1
    out = shell.ok("a = forward(torch.randn(4).to(dev))")
    assert f"cell [{defined + 1}], line 1 in <module>: a = forward(" in out, out
    out = shell.ok("def step(x):\n    return forward(x)  # CALLER\n\nb = step(torch.randn(4).to(dev))")
    now = shell.sh.execution_count - 1
    assert "aten::nonzero ran on the CPU" in out, out
    assert f"at cell [{defined}], line 6 in forward: idx = torch.nonzero(x > 0)  # DATA-DEPENDENT" in out, out
    assert f"cell [{now}], line 2 in step: return forward(x)  # CALLER" in out, out
    assert f"cell [{now}], line 4 in <module>: b = step(" in out, out
    assert f"cell [{defined + 1}]" not in out, out


USER_MODULE = '''\
import torch


class Head(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        positive = h[h > 0]  # MASKED
        return h, positive.sum()


def train_step(model, opt, x, xm):
    h, s = model(x)
    loss = h.pow(2).mean() + s
    loss.backward()
    opt.step()
    opt.zero_grad()
    xm.mark_step()
'''


def test_a_mask_index_in_a_users_module_file_names_the_file_line_and_the_input_it_made(
    shell: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model and its step in a .py file of the user's: the fallback is at file:line, and the
    inputs its data-dependent result resized (no variable holds them at the barrier: locals of a
    function that returned) are named by that line, not as 'input 0'."""
    (tmp_path / "heads_mod.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    shell.ok(PRELUDE + "import heads_mod\nhead = heads_mod.Head(7).to(dev)\n"
             "opt = torch.optim.SGD(head.parameters(), lr=0.1)\n")  # fmt: skip
    out = shell.ok("for i in range(4):\n    heads_mod.train_step(head, opt, torch.randn(2, 7).to(dev), xm)")
    loop = shell.sh.execution_count - 1
    assert "aten::index ran on the CPU (4 times)" in out, out
    assert "at heads_mod.py:11 in forward: positive = h[h > 0]  # MASKED" in out, out
    assert "heads_mod.py:16 in train_step: h, s = model(x)" in out, out
    assert f"cell [{loop}], line 2 in <module>: heads_mod.train_step(" in out, out
    assert "the input sent at heads_mod.py:11: f32[" in out, out
    assert "input 0" not in out, out


def test_torchs_own_machinery_is_never_named_as_the_library_that_called_a_fallback(shell: Shell) -> None:
    """The autograd engine that runs backward, and the Python reference torch.special.zeta runs
    as, are torch's plumbing: the finding names the user's line only, with no 'call is inside'."""
    shell.ok(PRELUDE)
    out = shell.ok(
        "x = torch.tensor([1.0, -1.0, 2.0, 0.5], device=dev, requires_grad=True)\n"
        "kept = x[x > 0]  # FORWARD\n"
        "kept.sum().backward()\n"
        "z = torch.special.zeta(x.detach() + 2, torch.full_like(x, 1.0))  # ZETA\n"
    )
    cell = shell.sh.execution_count - 1
    backward = out.split("xlalab: aten::index_put ran on the CPU", 1)[1].split("xlalab:", 1)[0]
    assert "it is the backward of a boolean-mask index (x[mask])" in backward, out
    assert f"at cell [{cell}], line 2 in <module>: kept = x[x > 0]  # FORWARD" in backward, out
    assert f"cell [{cell}], line 3 in <module>: kept.sum().backward()" in backward, out
    zeta = out.split("xlalab: aten::zeta ran on the CPU", 1)[1].split("xlalab:", 1)[0]
    assert f"at cell [{cell}], line 4 in <module>: z = torch.special.zeta(" in zeta, out
    assert "the call is inside" not in out, out


def test_a_size_passed_to_a_device_factory_is_an_integer_baked_at_its_line(shell: Shell) -> None:
    """``torch.randn(n, 8, device=dev)`` with n from the caller: the graph's empty tensor changed
    size because Python passed another size, said as the integer it is, at the factory's line."""
    shell.ok(PRELUDE)
    shell.ok(
        "w = torch.randn(8, 3).to(dev)\n"
        "def noisy(n):\n"
        "    noise = torch.randn(n, 8, device=dev)  # NOISE\n"
        "    out = (noise @ w).sum()\n"
        "    xm.mark_step()\n"
        "    return out\n"
    )
    defined = shell.sh.execution_count - 1
    shell.ok("for _ in range(2):\n    noisy(9)")
    out = shell.ok("noisy(10)")
    assert "Recompiled: an integer baked into the graph changed" in out, out
    line = "noise = torch.randn(n, 8, device=dev)  # NOISE"
    assert f"size: [9, 8] → [10, 8] at cell [{defined}], line 3: {line}" in out, out
    assert "output shape" not in out, out


def test_gradient_accumulation_is_warm_up_not_a_recompilation(shell: Shell) -> None:
    """Accumulating gradients over two batches steps the optimizer at the second graph: its state
    appears there, and the graph after it (the state read, not created) is warm-up as at step 2 of
    any loop. The loop settles on two graphs and says nothing; a real change later still warns."""
    shell.ok(
        PRELUDE + "model = torch.nn.Sequential(torch.nn.Linear(6, 17), torch.nn.ReLU(),\n"
        "                      torch.nn.Linear(17, 3))\n"
        "model = model.to(dev)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "def train(steps, batch=4):\n"
        "    for step in range(steps):\n"
        "        x, y = torch.randn(batch, 6).to(dev), torch.randint(0, 3, (batch,)).to(dev)\n"
        "        loss = F.cross_entropy(model(x), y) / 2\n"
        "        loss.backward()\n"
        "        if (step + 1) % 2 == 0:\n"
        "            opt.step()\n"
        "            opt.zero_grad()\n"
        "        xm.mark_step()\n"
    )
    assert "xlalab" not in shell.ok("train(8)"), "accumulation warned"
    out = shell.ok("train(2, batch=5)")
    # Each kind of step is compared with its own earlier graph, not with the other kind.
    assert out.count("xlalab: Recompiled") == 1, out
    assert "Recompiled: an input's shape changed" in out, out
    assert "x: f32[4,6] → f32[5,6]" in out and "y: s64[4] → s64[5]" in out, out


COMPILED_MODULE = '''\
import torch


def normalize(x):
    m = x.mean(dim=1, keepdim=True)
    if m.sum() > 0:  # BRANCH
        x = x - m
    return x / (x.std(dim=1, keepdim=True) + 1e-5)
'''


def test_a_graph_break_in_a_users_file_says_the_branch_in_words_and_the_call_that_ran_it(
    shell: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiled function of the user's .py file branches on a tensor: dynamo's only words are
    'generic_jump TensorVariable()'; the finding says what that is, at file:line, then the cell's
    call that ran the function."""
    (tmp_path / "norm_mod.py").write_text(COMPILED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    shell.ok(PRELUDE + "import xlalab.dynamo, norm_mod\n"
             "norm = torch.compile(norm_mod.normalize, backend='xlalab')\n")  # fmt: skip
    out = shell.ok("a = norm(torch.randn(4, 7).to(dev))")
    cell = shell.sh.execution_count - 1
    assert "Graph break in normalize" in out, out
    assert "a Python if/while on a tensor's value (dynamo: generic_jump TensorVariable" in out, out
    assert "at norm_mod.py:6 in normalize: if m.sum() > 0:  # BRANCH" in out, out
    assert f"cell [{cell}], line 1 in <module>: a = norm(torch.randn(4, 7).to(dev))" in out, out
