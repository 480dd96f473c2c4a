"""Compiled mode: ``torch.compile(..., backend="xlalab")`` on xla tensors, against eager PyTorch.

- the reference workloads' whole train step compiled (forward, loss, backward, clip, optimizer)
  gives eager CPU's losses and parameters, and a steady step runs one program per graph with
  no compile;
- a Hugging Face GPT-2 from a tiny config trains compiled with eager's losses;
- in-place updates of inputs (batch norm's running statistics), views, random ops;
- a graph break and a recompile are reported with dynamo's reason, the guard in plain words,
  and the user's line; ``backend="openxla"`` works under torch_xla's names.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

import xlalab
import xlalab.debug.metrics as met
import xlalab.dynamo as dynamo
from xlalab.runtime import events
from xlalab.testing.workloads import WORKLOADS, train_step

STEPS = 4


def _losses(
    name: str, device: torch.device | str, compiled: bool
) -> tuple[list[float], list[torch.Tensor], list[dict[str, int]]]:
    w = WORKLOADS[name]
    model = w.make_model(0, dropout=0.0).to(device)
    opt = w.make_optimizer(model.parameters())
    step = torch.compile(train_step, backend="xlalab") if compiled else train_step
    losses: list[torch.Tensor] = []
    counts: list[dict[str, int]] = []
    for i in range(STEPS):
        inputs, targets = w.make_batch(i, 4, device)
        before = {k: met.counter_value(k) or 0 for k in ("UncachedCompile", "ExecuteComputation")}
        losses.append(step(w, model, opt, inputs, targets).detach())
        counts.append({k: (met.counter_value(k) or 0) - v for k, v in before.items()})
    values = [float(x) for x in torch.stack([x.cpu() for x in losses])]
    state = [p.detach().cpu() for p in model.parameters()] + [b.cpu() for b in model.buffers()]
    return values, state, counts


@pytest.mark.parametrize("name", ["mnist", "mlp"])
def test_compiled_train_step_matches_eager(name: str, dev: torch.device) -> None:
    dynamo.reset()
    eager_losses, eager_state, _ = _losses(name, "cpu", compiled=False)
    xlalab.mark_step()
    losses, state, counts = _losses(name, dev, compiled=True)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager_losses), rtol=1e-4, atol=1e-5)
    for got, want in zip(state, eager_state):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=5e-5)
    # Steady steps compile nothing; the step's graphs run as a handful of programs.
    assert [c["UncachedCompile"] for c in counts[2:]] == [0] * (STEPS - 2), counts
    assert counts[-1]["ExecuteComputation"] == counts[-2]["ExecuteComputation"], counts


def test_gpt2_from_tiny_config_trains_compiled(dev: torch.device) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    cpu_model = transformers.GPT2LMHeadModel(config)
    xla_model = copy.deepcopy(cpu_model).to(dev)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))

    def step(model: nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    xla_opt = torch.optim.SGD(xla_model.parameters(), lr=0.1)
    compiled = torch.compile(step, backend="xlalab")
    for _ in range(3):
        want = step(cpu_model, cpu_opt, tokens)
        got = compiled(xla_model, xla_opt, tokens.to(dev))
        torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        xla_model.lm_head.weight.detach().cpu(), cpu_model.lm_head.weight.detach(), rtol=1e-4, atol=1e-5
    )


def test_inplace_updates_of_inputs_and_views(dev: torch.device) -> None:
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(3)
    xbn = copy.deepcopy(bn).to(dev)
    x = torch.randn(5, 3)
    f = torch.compile(xbn, backend="xlalab")
    for _ in range(2):
        torch.testing.assert_close(f(x.to(dev)).cpu(), bn(x).detach())
    torch.testing.assert_close(xbn.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(xbn.running_var.cpu(), bn.running_var)
    assert int(xbn.num_batches_tracked.cpu()) == 2

    def scale_rows(buf: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        buf[1:].mul_(2)  # a write through a view of an input
        buf.t()[0].add_(y)  # through a transposed view
        return buf.view(-1)

    g = torch.compile(scale_rows, backend="xlalab")
    a, y = torch.arange(12.0).reshape(4, 3), torch.ones(4)
    ax = a.to(dev)
    out = g(ax, y.to(dev))
    want = scale_rows(a, y)
    torch.testing.assert_close(ax.cpu(), a)
    torch.testing.assert_close(out.cpu(), want)


def test_written_inputs_keep_values_others_still_read(dev: torch.device) -> None:
    """An input the graph writes to is updated in place (its buffer is donated to XLA) only
    when nothing else reads its old value: a pending op, an alias or a view keep theirs."""

    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    f = torch.compile(bump, backend="xlalab")
    x = torch.zeros(3, device=dev)
    xlalab.mark_step()
    f(x)
    before = x * 1  # pending: reads the value x has now
    alias, view = x.detach(), x[1:]
    doubled = f(x)
    f(x)
    torch.testing.assert_close(before.cpu(), torch.ones(3))
    torch.testing.assert_close(doubled.cpu(), torch.full((3,), 4.0))
    torch.testing.assert_close(alias.cpu(), torch.full((3,), 3.0))
    torch.testing.assert_close(view.cpu(), torch.full((2,), 3.0))
    snapshot = x.cpu()
    del before, view
    for _ in range(3):  # nothing else holds x's buffer now: the program takes it over
        out = f(x)
    torch.testing.assert_close(x.cpu(), torch.full((3,), 6.0))
    torch.testing.assert_close(alias.cpu(), torch.full((3,), 6.0))
    torch.testing.assert_close(out.cpu(), torch.full((3,), 12.0))
    torch.testing.assert_close(snapshot, torch.full((3,), 3.0))


def test_random_ops_draw_fresh_numbers_each_call(dev: torch.device) -> None:
    f = torch.compile(lambda x: F.dropout(x, 0.5, training=True), backend="xlalab")
    x = torch.ones(4096, device=dev)
    first, second = f(x).cpu(), f(x).cpu()
    assert not torch.equal(first, second)
    for out in (first, second):
        kept = (out != 0).float().mean().item()
        assert 0.45 < kept < 0.55
        assert set(out.unique().tolist()) <= {0.0, 2.0}
    torch.manual_seed(7)
    again = f(x).cpu()
    torch.manual_seed(7)
    assert torch.equal(f(x).cpu(), again)


def test_graph_break_and_recompile_are_reported(dev: torch.device) -> None:
    dynamo.reset()
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)

    def breaks(x: torch.Tensor) -> torch.Tensor:
        y = x.relu()
        if y.sum().item() > 0:  # dynamo cannot trace a data-dependent branch
            y = y + 1
        return y * 2

    break_line = inspect.getsourcelines(breaks)[1] + 2
    try:
        f = torch.compile(breaks, backend="xlalab")
        x = torch.arange(-3.0, 13.0, device=dev)
        torch.testing.assert_close(f(x).cpu(), breaks(x.cpu()))
        call_line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        f(torch.arange(-3.0, 12.0, device=dev))  # 16 -> 15 elements: a new shape
    finally:
        unsubscribe()
    (rep,) = [r for r in dynamo.compiled_functions() if r.name.endswith("breaks")]
    assert rep.num_graphs >= 2
    reason, where = rep.breaks[0]
    assert reason.startswith("Unsupported Tensor.item() call"), reason
    assert where is not None and where.line == break_line and where.file == __file__
    guard, words, call = rep.recompiles[0]
    assert words == "`x.size(0)` changed 16 → 15", (guard, words)
    assert call is not None and call.line == call_line
    kinds = {e.kind for e in seen}
    assert {"graph_break", "dynamo_recompile", "dynamo_graph", "compile", "execute"} <= kinds
    recompile = next(e for e in seen if isinstance(e, dynamo.RecompileEvent))
    assert recompile.frames[0].line == call_line
    text = dynamo.summary()
    assert f"graph break at test_dynamo.py:{break_line}: Unsupported Tensor.item() call" in text
    assert f"recompiled: `x.size(0)` changed 16 → 15, at test_dynamo.py:{call_line}" in text
    # What to change, beside dynamo's reason (the lab shows it under the finding).
    brk = next(e for e in seen if isinstance(e, dynamo.GraphBreakEvent))
    assert "keep it as a tensor" in brk.advice and brk.advice in text


def test_breaks_in_a_train_step_name_the_users_lines(dev: torch.device) -> None:
    # The backward break and torch.optim's own break around step(), each at the user's line
    # (not inside torch.optim), with what to change or that nothing needs to.
    dynamo.reset()
    w = WORKLOADS["mlp"]
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    torch.compile(train_step, backend="xlalab")(w, model, opt, *w.make_batch(0, 4, dev))
    (rep,) = [r for r in dynamo.compiled_functions() if r.name == "train_step"]
    lines, first = inspect.getsourcelines(train_step)
    line_of = {text.split("#")[0].strip(): first + i for i, text in enumerate(lines)}
    where = {reason.split(". ", 1)[0]: w for reason, w in rep.breaks}
    backward = where["Unsupported Tensor.backward() call"]
    assert backward is not None and backward.line == line_of["loss.backward()"]
    step = where["Call to `torch._dynamo.graph_break()`"]
    assert step is not None and step.line == line_of["opt.step()"] and step.file.endswith("workloads.py")
    text = dynamo.summary()
    assert "a torch.optim step is always a graph of its own" in text
    assert "backward() runs between graphs" in text



class _BreakInForward(nn.Module):
    """A forward with a graph break inside (as ``nn.LSTM``'s makes under dynamo)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h)


def _sgd_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = model(x).square().mean()
    value = loss.detach()
    loss.backward()
    opt.step()
    return value


@pytest.mark.parametrize("forward_breaks", [True, False])
def test_backward_traced_into_the_graph_trains_as_eager(forward_breaks: bool, dev: torch.device) -> None:
    # With dynamo's trace_autograd_ops, backward() is traced into the graph. A loss made before
    # the graph began (a break in the forward) must still give every parameter its gradient:
    # dynamo alone traced that backward() as nothing, and the step left the model as it was.
    dynamo.reset()
    torch.manual_seed(0)
    eager = _BreakInForward() if forward_breaks else nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    model = copy.deepcopy(eager).to(dev)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        step = torch.compile(_sgd_step, backend="xlalab")
        for i in range(2):
            x = torch.randn(5, 4, generator=torch.Generator().manual_seed(i))
            torch.testing.assert_close(step(model, opt, x.to(dev)).cpu(), _sgd_step(eager, eager_opt, x))
    for p, q in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach())
    (rep,) = [r for r in dynamo.compiled_functions() if r.name == "_sgd_step"]
    reasons = [reason for reason, _ in rep.breaks]
    traced = not any("backward()" in r for r in reasons)
    assert traced is not forward_breaks, reasons
    if forward_breaks:
        assert "autograd's engine runs its backward()" in dynamo.summary()

def _logged(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@_logged
def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_logged
def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


def test_decorated_functions_are_reported_under_their_own_names(dev: torch.device) -> None:
    # Two functions under one decorator run the same wrapper code; each is reported as itself,
    # at its own line. So is a Hugging Face model, whose forward carries such decorators.
    transformers = pytest.importorskip("transformers")
    dynamo.reset()
    # A recompile names the argument as the function's own parameter, not the wrapper's
    # ``args[0]`` / ``kwargs['input_ids']``.
    double = torch.compile(_double, backend="xlalab")
    double(torch.ones(3, device=dev))
    double(torch.ones(5, device=dev))
    torch.compile(_halve, backend="xlalab")(torch.ones(3, device=dev))
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    model = torch.compile(transformers.GPT2LMHeadModel(config).to(dev), backend="xlalab")
    model(input_ids=torch.zeros(1, 4, dtype=torch.long, device=dev))
    model(input_ids=torch.zeros(1, 6, dtype=torch.long, device=dev))
    reports = {r.name: r for r in dynamo.compiled_functions()}
    for fn in (_double, _halve):
        rep = reports[fn.__qualname__]
        assert rep.num_graphs == (2 if fn is _double else 1) and rep.file == __file__
        assert rep.line == inspect.unwrap(fn).__code__.co_firstlineno
    assert [words for _, words, _ in reports["_double"].recompiles] == ["`x.size(0)` changed 3 → 5"]
    forward = inspect.unwrap(transformers.GPT2LMHeadModel.forward)
    rep = reports["GPT2LMHeadModel.forward"]
    assert (rep.file, rep.line) == (forward.__code__.co_filename, forward.__code__.co_firstlineno)
    assert [words for _, words, _ in rep.recompiles] == ["`input_ids.size(1)` changed 4 → 6"]


def test_a_train_step_that_starts_with_zero_grad_reports_its_recompile(dev: torch.device) -> None:
    # opt.zero_grad() first breaks the graph at once: the step's forward is in the part after
    # that break, so that part's recompile is the function's, said once, at the user's call.
    dynamo.reset()
    w = WORKLOADS["mlp"]
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    step = torch.compile(train_step, backend="xlalab")
    step(w, model, opt, *w.make_batch(0, 4, dev))
    step(w, model, opt, *w.make_batch(1, 3, dev))  # CALL-WITH-3
    (rep,) = [r for r in dynamo.compiled_functions() if r.name == "train_step"]
    lines, first = inspect.getsourcelines(test_a_train_step_that_starts_with_zero_grad_reports_its_recompile)
    call = first + next(i for i, t in enumerate(lines) if "# CALL-WITH-3" in t)
    assert [(words, where.line if where else None) for _, words, where in rep.recompiles] == [
        ("`inputs.size(0)` changed 4 → 3", call)
    ]


def test_explain_guard_in_plain_words() -> None:
    from xlalab.dynamo.report import guard_advice

    assert dynamo.explain_guard("0/0: tensor 'x' size mismatch at index 0. expected 16, actual 15") == (
        "`x.size(0)` changed 16 → 15"
    )
    assert dynamo.explain_guard(
        "tensor 'L['self']._modules['fc'].weight' dtype mismatch. expected Float, actual Half"
    ) == ("`self.fc.weight.dtype` changed Float → Half")
    assert dynamo.explain_guard("L['n'] == 3") == "`n` is no longer 3 (a Python value baked into the graph)"
    # As dynamo prints them for torch.optim and for a resume function after a graph break.
    grad = "28/0: self.param_groups[0]['params'][13].grad is None    # has_sparse_grad = self._init_group("
    assert dynamo.explain_guard(grad) == (
        "`self.param_groups[0].params[13].grad` is now a tensor where the graph was compiled for None "
        "(no gradient)"
    )
    assert "layer drop" in guard_advice(grad)
    assert dynamo.explain_guard("L['mask'] is not None") == (
        "`mask` is now None where the graph was compiled for a value"
    )
    assert dynamo.explain_guard("25/0: not ___stack0.hidden_states    #   # <string>:5 in __init__") == (
        "`hidden_states` (a value carried across a graph break) is no longer false or empty: "
        "the code branched on it"
    )


def test_a_layer_that_runs_on_some_steps_only_names_the_gradient_that_appeared(dev: torch.device) -> None:
    """Layer drop: a step that skipped a layer leaves its parameters without a gradient, and the
    compiled optimizer step recompiles when they have one again."""
    dynamo.reset()
    torch.manual_seed(0)
    body, extra = nn.Linear(4, 4).to(dev), nn.Linear(4, 4).to(dev)
    opt = torch.optim.SGD([*body.parameters(), *extra.parameters()], lr=0.1, momentum=0.9)

    @torch.compile(backend="xlalab")
    def step(x: torch.Tensor, run_extra: bool) -> torch.Tensor:
        opt.zero_grad()
        h = body(x)
        if run_extra:
            h = extra(h)
        loss = h.pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    x = torch.randn(2, 4).to(dev)
    step(x, False)
    step(x, False)  # the optimizer's state exists from here on
    step(x, True)
    words = [(words, guard) for r in dynamo.compiled_functions() for guard, words, _ in r.recompiles]
    grads = [w for w, guard in words if ".grad" in w]
    assert grads and "is now a tensor where the graph was compiled for None" in grads[0], words
    summary = dynamo.summary()
    assert "layer drop" in summary and "set_to_none=False" in summary, summary


def _recompile_explanation(
    fn: Any, first: tuple[Any, ...], second: tuple[Any, ...], context: Any = None
) -> str:
    """The plain words for the recompile a second call with other arguments causes."""
    import contextlib

    dynamo.reset()
    f = torch.compile(fn, backend="xlalab")
    f(*first)
    with context or contextlib.nullcontext():
        f(*second)
    (rep,) = [r for r in dynamo.compiled_functions() if r.recompiles]
    return rep.recompiles[0][1]


def test_recompiles_of_type_and_global_state_in_plain_words(dev: torch.device) -> None:
    # Guards dynamo words in its own terms (a tensor-type check, a global-state flag), as a
    # user changed them: the device of an argument, a float for a tensor, no_grad, autocast.
    x = torch.randn(4, 3, device=dev)

    def double(a: torch.Tensor) -> torch.Tensor:
        return a * 2

    assert _recompile_explanation(double, (x,), (torch.randn(4, 3),)) == (
        "`a` is now a CPU tensor: the graph was compiled for a tensor of another device or type"
    )
    assert _recompile_explanation(double, (torch.randn(4, 3),), (x,)).startswith("`a` is now an xla tensor")
    assert _recompile_explanation(double, (x,), (3.0,)) == (
        "`a` is now a float where the graph was compiled for a tensor"
    )
    assert _recompile_explanation(double, (x,), (x,), torch.no_grad()).startswith("grad mode changed")
    assert _recompile_explanation(lambda a: a @ a.t(), (x,), (x,), torch.autocast("cpu")) == (
        "autocast on cpu changed (enabled) since the graph was compiled"
    )


def test_each_kind_of_recompile_says_what_to_change(dev: torch.device) -> None:
    # A new size cannot be fixed by a dynamic dim on XLA (a program per shape): pad instead.
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        x = torch.randn(4, 3, device=dev)
        _recompile_explanation(lambda a: a * 2, (x,), (torch.randn(5, 3, device=dev),))
        _recompile_explanation(lambda a, n: a * n, (x, 2), (x, 3))
        _recompile_explanation(lambda a: a * 2, (x,), (x,), torch.no_grad())
    finally:
        unsubscribe()
    size, value, grad_mode = [e.advice for e in seen if isinstance(e, dynamo.RecompileEvent)]
    assert "pad to a few fixed sizes" in size and "mark_dynamic" in size
    assert "pass it as a tensor on the device" in value
    assert "compiles once per setting" in grad_mode
    text = dynamo.summary()
    assert "compiles once per setting" in text  # the summary says it under the recompile


def test_a_graph_without_a_lowering_runs_lazily_with_a_warning(dev: torch.device) -> None:
    dynamo.reset()

    def middle(x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x * 2, 1.0)[0] + x.sum()  # no lowering: zeta runs on the CPU

    f = torch.compile(middle, backend="xlalab")
    x = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0])
    with pytest.warns(UserWarning, match=r"aten::zeta has no XLA lowering"):
        got = f(x.to(dev))
    assert float(got.cpu()) == float(middle(x))
    assert float(f((x + 1).to(dev)).cpu()) == float(middle(x + 1))  # later calls: lazily, same values
    (rep,) = [r for r in dynamo.compiled_functions() if r.name.endswith("middle")]
    assert rep.lazy and "aten::zeta" in rep.lazy[0]


def test_openxla_backend_under_torch_xla_names(dev: torch.device) -> None:
    xlalab.use_torch_xla_names()
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    xlin = copy.deepcopy(lin).to(dev)
    f = torch.compile(xlin, backend="openxla")
    x = torch.randn(2, 4)
    got = f(x.to(dev))
    got.sum().backward()
    lin(x).sum().backward()
    torch.testing.assert_close(got.detach().cpu(), lin(x).detach())
    torch.testing.assert_close(xlin.weight.grad.cpu(), lin.weight.grad)


def test_openxla_train_step_is_reported_and_updates_in_place(dev: torch.device) -> None:
    # torch_xla's backend name gives what backend="xlalab" gives: the function's name, its
    # breaks at the user's lines, and an optimizer step that writes parameters in the program
    # (torch's own openxla entry would copy each one back after it, every step).
    xlalab.use_torch_xla_names()
    dynamo.reset()
    w = WORKLOADS["mlp"]
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    step = torch.compile(train_step, backend="openxla")
    for i in range(3):
        batch = w.make_batch(i, 4, dev)
        before = met.counter_value("xla::copy_") or 0
        step(w, model, opt, *batch)
    assert (met.counter_value("xla::copy_") or 0) == before
    (rep,) = [r for r in dynamo.compiled_functions() if r.name == "train_step"]
    assert rep.num_graphs == 2 and len(rep.breaks) == 2
    lines, first = inspect.getsourcelines(train_step)
    backward_line = first + next(i for i, t in enumerate(lines) if "loss.backward()" in t)
    assert any(where is not None and where.line == backward_line for _, where in rep.breaks)
    assert any(r.name == "Adam.step" for r in dynamo.compiled_functions())


def test_hlo_of_a_compiled_graph(dev: torch.device) -> None:
    dynamo.reset()
    f = torch.compile(lambda x: (x * 2).sin(), backend="xlalab")
    f(torch.ones(3, device=dev))
    (rep,) = [r for r in dynamo.compiled_functions() if r.graphs and "sin" in r.graphs[-1].fx_code]
    graph = rep.graphs[-1]
    assert "forward" in graph.aot_code and "aten.sin" in graph.aot_code["forward"]
    assert "sine" in graph.compiled[-1].hlo() and "stablehlo.sine" in graph.compiled[-1].hlo("stablehlo")


def test_outputs_aliasing_an_input_in_a_dynamic_graph(dev: torch.device) -> None:
    # AOTAutograd rebuilds outputs that alias an input from their strides and storage offset.
    f = torch.compile(lambda t, n: torch.split(t, n), backend="xlalab", dynamic=True)
    y = torch.randn(5, 5, 5)
    yx = y.to(dev)
    for got, want in zip(f(yx, 2), torch.split(y, 2)):
        torch.testing.assert_close(got.cpu(), want)
        assert got.storage_offset() == want.storage_offset()
    got = f(yx, 2)[1]
    got.mul_(0)  # a view of the input, as in eager: the write reaches it
    assert float(yx[2:4].abs().sum().cpu()) == 0.0


def _script_lines(script: str) -> list[str]:
    """What a fresh Python process running ``script`` printed, line by line (it must succeed)."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()


def test_backend_registers_when_dynamo_loads() -> None:
    # ``import xlalab.dynamo`` does not pay for dynamo's import; torch.compile's import installs it.
    lines = _script_lines(
        "import sys, torch, xlalab, xlalab.dynamo\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "f = torch.compile(lambda x: (x * 2).relu(), backend='xlalab')\n"
        "print(f(torch.tensor([-1.0, 2.0], device=xlalab.device())).cpu().tolist())\n"
    )
    assert lines[-1] == "[0.0, 4.0]"
    # torch_xla's backend name without torch_xla's names: say how to get them, not torch's
    # "install torch_xla"; then the same process compiles with it.
    error, result = _script_lines(
        "import torch, xlalab\n"
        "f = lambda x: (x * 2).relu()\n"
        "x = torch.tensor([-1.0, 2.0], device=xlalab.device())\n"
        "try:\n    torch.compile(f, backend='openxla')(x)\n"
        "except Exception as e:\n    print('ERROR', ' '.join(str(e).split()))\n"
        "xlalab.use_torch_xla_names()\n"
        "torch._dynamo.reset()\n"
        "print(torch.compile(f, backend='openxla')(x).cpu().tolist())\n"
    )[-2:]
    assert "xlalab.use_torch_xla_names()" in error and 'backend="xlalab"' in error
    assert result == "[0.0, 4.0]"


def test_compiled_function_in_eager_mode(dev: torch.device) -> None:
    from xlalab.experimental import eager_mode_context

    f = torch.compile(lambda x: (x + 1).exp().sum(), backend="xlalab")
    x = torch.arange(4.0)
    with eager_mode_context(True):
        got = f(x.to(dev))  # traced as one graph even in eager mode, then one program
        again = f(x.to(dev))
    torch.testing.assert_close(got.cpu(), (x + 1).exp().sum())
    torch.testing.assert_close(again.cpu(), got.cpu())


@pytest.mark.parametrize(
    "index",
    [
        lambda x: x[[1, 2]],
        lambda x: x[[3, 0], [2, 1]],
        lambda x: x[[[0, 1], [2, 1]]],
        lambda x: x[:, [2, 0, 2]],
        lambda x: x[[True, False, True, False]],  # a mask: a graph break, then runs lazily
    ],
    ids=["list", "two-lists", "nested-list", "list-in-second-dim", "bool-list"],
)
def test_index_lists_in_a_compiled_function(index: object, dev: torch.device) -> None:
    # torch builds an index list's tensor in C++, below the Python key; under dynamo's fake
    # tensors that tensor must become a fake one, and its values the graph's constant. A mask
    # breaks the graph; the eager part after the break makes xlalab's events, whose generated
    # dataclass methods dynamo must not trace as user code.
    fn = index  # type: ignore[assignment]

    def step(x: torch.Tensor) -> torch.Tensor:
        return (fn(x) * 2).sum()  # type: ignore[operator]

    x = torch.arange(12.0).reshape(4, 3)
    want_value = step(x.clone().requires_grad_())
    leaf = x.clone().requires_grad_()
    step(leaf).backward()
    f = torch.compile(step, backend="xlalab")
    xd = x.to(dev).requires_grad_()
    got = f(xd)
    got.backward()
    torch.testing.assert_close(got.detach().cpu(), want_value.detach())
    torch.testing.assert_close(xd.grad.cpu(), leaf.grad)  # type: ignore[union-attr]


def test_the_default_backend_names_the_ones_that_compile_for_xla(dev: torch.device) -> None:
    # Inductor has no code generator for xla: instead of its KeyError, what to pass.
    f = torch.compile(lambda x: (x * 2).sin())
    with pytest.raises(Exception, match='backend="xlalab"') as caught:
        f(torch.ones(3, device=dev))
    assert "cannot compile for xla tensors" in str(caught.value)


@pytest.mark.parametrize(
    "write",
    [
        lambda y: y.as_strided((2,), (3,), 1).mul_(10),
        lambda y: y.as_strided((2, 2), (3, 1), 2).fill_(-1.0),
        lambda y: y.diagonal().add_(5),
    ],
    ids=["strided-pair", "strided-block", "diagonal"],
)
def test_writes_through_strided_views_compile_as_one_program(write: Any, dev: torch.device) -> None:
    # Functionalization makes a write through as_strided an as_strided_scatter: lowered, so the
    # graph is one program (no lazy fallback, no warning), with eager's values.
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        write(y)
        return y

    x = torch.arange(9.0).reshape(3, 3)
    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "runs lazily" would be a warning
        got = torch.compile(f, backend="xlalab")(x.to(dev))
    torch.testing.assert_close(got.cpu(), f(x.clone()))
    assert not [r for r in dynamo.compiled_functions() if r.lazy]


def test_an_error_tracing_a_backward_on_xla_is_the_one_torch_gives_on_the_cpu(dev: torch.device) -> None:
    # An op failing on fake xla tensors inside autograd's engine (AOTAutograd tracing the
    # backward) reaches the user as itself, as on the CPU: torch used to lose it on the way out
    # of the engine (a SystemError, or an aborted process). In torch 2.13 the decomposition of
    # mse_loss_backward divides by the element count, so an empty input fails this way.
    def f(v: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(v, v).double().sum()

    def outcome(x: torch.Tensor, backend: str) -> str:
        dynamo.reset()
        try:
            torch.compile(f, backend=backend)(x).backward()
        except Exception as e:
            return next((line for line in str(e).splitlines() if "Error" in line), type(e).__name__)
        return "ok"

    empty = torch.empty(0, dtype=torch.bfloat16)
    on_cpu = outcome(empty.clone().requires_grad_(), "aot_eager")
    on_xla = outcome(empty.to(dev).requires_grad_(), "xlalab")
    assert on_xla == on_cpu and "SystemError" not in on_xla, (on_xla, on_cpu)


@pytest.mark.parametrize(
    "draw, on_cpu",
    [
        (lambda x: F.dropout(x, 0.5, training=True), False),  # the device RNG, in the program
        (lambda x: x.bernoulli(0.5) + torch.rand(x.shape, device=x.device), False),
        (lambda x: x + torch.randperm(x.numel(), device=x.device), False),
        (lambda x: x + torch.randperm(x.numel()).to(x.device), True),  # a CPU tensor: the CPU's RNG
    ],
    ids=["dropout", "bernoulli-rand", "randperm", "randperm-on-cpu"],
)
def test_compiled_random_ops_draw_as_lazy_mode_does(draw: Any, on_cpu: bool, dev: torch.device) -> None:
    # The same seed gives the same numbers on every call, the first included (tracing the
    # graph runs its random ops once and throws their draws away, and every RNG they drew from
    # goes back), and each call draws new ones (a CPU tensor's draw is not frozen into the
    # program: such a graph runs lazily), as lazy mode does.
    dynamo.reset()
    x = torch.ones(64)
    f = torch.compile(draw, backend="xlalab")

    def two_calls(fn: Any, device: torch.device | str) -> list[torch.Tensor]:
        torch.manual_seed(3)
        return [fn(x.to(device)).cpu() for _ in range(2)]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a CPU draw's graph runs lazily, and says so
        first, again = two_calls(f, dev), two_calls(f, dev)
    lazy = two_calls(draw, dev)
    for got in (first, again):
        for a, b in zip(got, lazy):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(lazy[0], lazy[1])
    (rep,) = dynamo.compiled_functions()
    if not on_cpu:
        assert not rep.lazy
    else:
        assert rep.lazy and "aten::randperm" in rep.lazy[0]  # the op, not the copy it needed
        for a, b in zip(first, two_calls(draw, "cpu")):  # the CPU's own numbers
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def _clear_first_rows(a: torch.Tensor) -> None:
    a[[0, 1]] = 1.0


def _negate_ends(a: torch.Tensor) -> None:
    a[..., [0, -1]] *= -1


def _write_a_mask(a: torch.Tensor) -> None:
    a[[True, False, True]] = -2.0


def _add_through_range_and_tuple(a: torch.Tensor) -> None:
    a[range(2)] += 1
    a[:, (3, 1)] -= a[(0, 2, 1),][:, :2]


@pytest.mark.parametrize(
    "write",
    [_clear_first_rows, _negate_ends, _write_a_mask, _add_through_range_and_tuple],
    ids=["list", "ellipsis-list-imul", "bool-list", "range-and-tuple"],
)
def test_index_sequences_written_in_a_compiled_function(write: Any, dev: torch.device) -> None:
    # A written index sequence is an index_put whose index tensor torch makes in C++ on xla:
    # the graph makes it on the CPU instead, so the function is one program (no fake constant
    # reaches the device), with eager's values and gradients.
    def step(x: torch.Tensor) -> torch.Tensor:
        a = x * 1
        write(a)
        return (a * a).sum()

    x = torch.arange(12.0).reshape(3, 4)
    leaf = x.clone().requires_grad_()
    want = step(leaf)
    want.backward()
    dynamo.reset()
    xd = x.to(dev).requires_grad_()
    got = torch.compile(step, backend="xlalab")(xd)
    got.backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(xd.grad.cpu(), leaf.grad)  # type: ignore[union-attr]
    assert not [r for r in dynamo.compiled_functions() if r.lazy]


def test_a_compiled_function_of_cpu_inputs_computes_on_xla(dev: torch.device) -> None:
    # Every input is a CPU tensor and the function moves them to xla itself: the graph is one
    # XLA program all the same (the device is the one its values are on), not run op by op.
    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x.to(dev) @ w.to(dev)).sin().sum(0)

    x, w = torch.randn(3, 4), torch.randn(4, 2)
    dynamo.reset()
    got = torch.compile(step, backend="xlalab")(x, w)
    assert got.device.type == "xla"
    torch.testing.assert_close(got.cpu(), (x @ w).sin().sum(0))
    (rep,) = dynamo.compiled_functions()
    assert not rep.lazy and "sine" in rep.graphs[-1].compiled[-1].hlo()


@pytest.mark.parametrize("solve", [torch.linalg.inv, torch.linalg.cholesky], ids=["inv", "cholesky"])
def test_linalg_on_cpu_inputs_moved_to_xla_in_a_compiled_function(solve: Any, dev: torch.device) -> None:
    # linalg's ops check their inputs through an effectful op (``with_effects``); the graph
    # runs on xla even though its inputs come from the CPU. (linalg has no XLA lowering yet: the
    # graph runs lazily, with the op's CPU kernel.)
    m = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    spd = m @ m.T + 4 * torch.eye(4)
    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(lambda a: solve(a.to(dev)), backend="xlalab")(spd)
    torch.testing.assert_close(got.cpu(), solve(spd))


def test_a_branch_on_a_tensor_value_says_what_to_change(dev: torch.device) -> None:
    dynamo.reset()

    @torch.compile(backend="xlalab")
    def f(x: torch.Tensor) -> torch.Tensor:
        if torch.rand([]) < 0.5:  # layer drop's draw
            x = x * 2
        return x + 1

    f(torch.ones(3).to(dev))
    summary = dynamo.summary()
    assert "graph break at test_dynamo.py" in summary and "torch.where" in summary, summary
    assert "layer drop" in summary, summary


# Every optimizer of torch.optim that steps from ``.grad`` alone (LBFGS needs a closure,
# SparseAdam sparse gradients), per-tensor and foreach where it has both: the compiled
# optimizers take code paths of their own (tensor step counters, ``_foreach_*`` overloads with
# numbers, in-place ops dynamo rewrites as inductor's ``prims.fma``).
def _optimizer_cases() -> list[tuple[str, bool | None]]:
    cases: list[tuple[str, bool | None]] = []
    for name, cls in sorted(vars(torch.optim).items()):
        if not inspect.isclass(cls) or not issubclass(cls, torch.optim.Optimizer):
            continue
        if cls is torch.optim.Optimizer or name in ("LBFGS", "SparseAdam"):
            continue
        foreach = "foreach" in inspect.signature(cls).parameters
        cases += [(name, f) for f in ((False, True) if foreach else (None,))]
    return cases


def _optimizer_steps(
    name: str,
    foreach: bool | None,
    device: Any,
    backend: str | None,
    lr: float | torch.Tensor = 0.01,
    schedule: bool = False,
) -> list[torch.Tensor]:
    """The parameters after a few steps of ``torch.optim.<name>``, compiled with ``backend``
    (uncompiled for None), with a cosine learning-rate schedule if asked."""
    torch.manual_seed(0)
    model = nn.Linear(3, 4, bias=name != "Muon").to(device)  # Muon takes matrices only
    kwargs: dict[str, Any] = {"lr": lr} if foreach is None else {"lr": lr, "foreach": foreach}
    opt = getattr(torch.optim, name)(model.parameters(), **kwargs)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10) if schedule else None

    def step(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    run = step if backend is None else torch.compile(step, backend=backend)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4 if schedule else 3):
        run(torch.randn(5, 3, generator=gen).to(device))
        if sched is not None:
            sched.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize(("name", "foreach"), _optimizer_cases())
def test_every_optimizer_steps_compiled_as_one_program(
    name: str, foreach: bool | None, dev: torch.device
) -> None:
    torch._dynamo.reset()
    met.clear_all()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_xla = _optimizer_steps(name, foreach, dev, "xlalab")
    # Adafactor reads a number with .item() (a graph break, and torch_xla's counter for a read).
    assert [op for op in met.executed_fallback_ops() if op != "aten::_local_scalar_dense"] == []
    assert not [str(w.message) for w in caught if "runs lazily" in str(w.message)]
    torch._dynamo.reset()
    # The same compiled graphs run by torch's kernels: what the graph says, to a few ulps (XLA
    # contracts a multiply and an add into one fused multiply-add where torch's kernels round twice).
    graphs = _optimizer_steps(name, foreach, "cpu", "eager")
    eager = _optimizer_steps(name, foreach, "cpu", None)
    for x, g, e in zip(on_xla, graphs, eager):
        torch.testing.assert_close(x, g, rtol=1e-6, atol=1e-7)
        # The compiled optimizers compute some steps in another order than eager's.
        torch.testing.assert_close(x, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_inplace_ops_dynamo_writes_as_fma(dtype: torch.dtype, dev: torch.device) -> None:
    # x.addcmul_(a, b, value=v), x.addcdiv_(a, b, value=v) and x.add_(y, alpha=tensor) reach the
    # backend as inductor's prims.fma: one program, the values of the graph run by torch's kernels
    # (to an ulp: XLA fuses a multiply and an add, and keeps bfloat16 products in float32).
    def update(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        x.addcmul_(a, b, value=0.3)
        x.addcdiv_(a, b, value=1.7)
        x.add_(a, alpha=alpha)
        return x * 2

    gen = torch.Generator().manual_seed(0)
    # Positive terms: a result that cancels would turn an ulp of difference into many.
    inputs = [(torch.rand(64, generator=gen) + 1).to(dtype) for _ in range(3)]
    inputs.append(torch.tensor(0.7, dtype=dtype))
    torch._dynamo.reset()
    met.clear_all()
    on_xla = [t.to(dev) for t in inputs]
    out = torch.compile(update, backend="xlalab")(*on_xla)
    assert met.executed_fallback_ops() == []
    torch._dynamo.reset()
    on_cpu = [t.clone() for t in inputs]
    expected = torch.compile(update, backend="eager")(*on_cpu)
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(out.cpu(), expected, rtol=2 * ulp, atol=0)
    torch.testing.assert_close(on_xla[0].cpu(), on_cpu[0], rtol=2 * ulp, atol=0)


def test_a_learning_rate_schedule_says_to_make_the_rate_a_tensor(dev: torch.device) -> None:
    # A float rate is baked into the compiled optimizer step: a scheduler recompiles it every
    # step. With a tensor rate the step compiles once and trains as eager does.
    eager = _optimizer_steps("AdamW", None, "cpu", None, schedule=True)
    torch._dynamo.reset()
    dynamo.reset()
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        _optimizer_steps("AdamW", None, dev, "xlalab", schedule=True)
    finally:
        unsubscribe()
    recompiles = [e for e in seen if isinstance(e, dynamo.RecompileEvent)]
    assert recompiles and all("lr=torch.tensor(" in e.advice for e in recompiles)
    assert "is no longer 0.01" in recompiles[0].explanation
    torch._dynamo.reset()
    dynamo.reset()
    on_xla = _optimizer_steps("AdamW", None, dev, "xlalab", lr=torch.tensor(0.01), schedule=True)
    assert not [r for r in dynamo.compiled_functions() if r.recompiles]
    for x, e in zip(on_xla, eager):
        torch.testing.assert_close(x, e, rtol=1e-5, atol=1e-6)


def test_a_cpu_parameter_meeting_an_xla_input_is_named(dev: torch.device) -> None:
    # A model left on the CPU: eager names the devices; compiled, torch's tracer of the backward
    # would stop on an internal assert instead. The error names the op, the line and the tensor.
    torch._dynamo.reset()
    up = nn.ConvTranspose2d(3, 4, 3, stride=2)
    x = torch.randn(1, 3, 5, 5, device=dev, requires_grad=True)
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    f = torch.compile(lambda t: up(t), backend="xlalab")
    with pytest.raises(Exception, match=r"conv_transpose2d at .*test_dynamo.py:\d+ takes an xla") as err:
        f(x)
    assert "the CPU tensor `up.weight` (shape [3, 4, 3, 3])" in str(err.value)
    assert f"test_dynamo.py:{line}" in str(err.value)
    assert "Move it to the xla device" in str(err.value)


def test_a_random_op_in_a_checkpointed_layer_is_refused_with_what_works() -> None:
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    def step(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = checkpoint(lambda a, w: F.dropout(a * w, 0.5, training=True), a, w, use_reentrant=False)
        (h * h).sum().backward()
        return h.detach()

    dev = torch.device("xla")
    a, w = torch.randn(8).to(dev), torch.ones(8, device=dev, requires_grad=True)
    refused = r"inside torch\.utils\.checkpoint cannot be compiled.*Run the step lazily"
    with pytest.raises(Exception, match=refused):
        torch.compile(step, backend="xlalab")(a, w)


def test_a_view_argument_keeps_its_strides_and_offset_under_dynamic_shapes() -> None:
    # The graph's stand-in for a view argument had contiguous strides and no offset: under
    # dynamic shapes the graph read those (a.stride() gave (3, 2) for (6, 2)), and an output
    # that is a view of the argument was rebuilt at the storage's start (x[6:10].flatten()
    # gave x[0:4]'s values).
    data = torch.arange(40.0).view(10, 4)
    flatten = torch.compile(lambda x: x.flatten(), backend="xlalab", dynamic=True)
    for start, length in [(0, 3), (3, 3), (6, 4)]:
        got = flatten(data.to("xla")[start : start + length]).cpu()
        assert torch.equal(got, data[start : start + length].flatten())
    chunk = torch.compile(lambda a: a.chunk(2, 1)[1], backend="xlalab", dynamic=True)
    rows = torch.arange(24.0).view(4, 6)
    assert torch.equal(chunk(rows.to("xla")[1:3]).cpu(), rows[1:3].chunk(2, 1)[1])
    layout = torch.compile(lambda a: (a.stride(), a.storage_offset()), backend="xlalab", dynamic=True)
    assert layout(rows.to("xla")[:, 1::2]) == ((6, 2), 1)


def test_inductor_modes_and_options_are_accepted_with_a_warning(dev: torch.device) -> None:
    # torch.compile hands mode= and options= to the backend; they are inductor's settings.
    dynamo.reset()
    backend_module = importlib.import_module("xlalab.dynamo.backend")  # the package exports the function
    settings: list[dict[str, Any]] = [{"mode": "reduce-overhead"}, {"mode": "max-autotune"}]
    for kwargs in [*settings, {"options": {"shape_padding": True}}]:
        backend_module._WARNED_SETTINGS.clear()
        f = torch.compile(lambda x: x.sin() + 1, backend="xlalab", **kwargs)
        with pytest.warns(UserWarning, match="has no effect with backend='xlalab'"):
            got = f(torch.arange(3.0, device=dev))
        assert torch.equal(got.cpu(), torch.arange(3.0).sin() + 1)
        dynamo.reset()


def test_an_output_that_is_a_view_of_another_output_stays_its_view(dev: torch.device) -> None:
    # Eager (and AOTAutograd on the CPU) return y[0] and y[1:] as views of y: a later write to y
    # shows through them. A compiled program computes each output; these are made views of y.
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        return y, y[0], y[1:], y.t()

    dynamo.reset()
    results = []
    for fn, d in ((f, "cpu"), (torch.compile(f, backend="xlalab"), dev)):
        y, first, rest, t = fn(torch.arange(6.0, device=d).reshape(3, 2))
        y.add_(1)
        results.append([first.cpu(), rest.cpu(), t.cpu(), torch.tensor([first._base is y, t._base is y])])
    for want, got in zip(*results, strict=True):
        assert torch.equal(want, got), (want, got)
