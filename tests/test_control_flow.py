"""``torch.cond``, ``while_loop``, ``scan`` and ``map`` on xla: one XLA conditional or loop.

The branch is chosen and the loop runs on the device, so recording them never waits for it;
lazily and under ``torch.compile`` the results equal eager's. The samples of torch's own
higher-order-operator test suite (``hop_db``) run first, then what users rely on beyond them.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._higher_order_ops import scan
from torch._higher_order_ops.while_loop import while_loop

import xlalab.core.xla_model as xm
import xlalab.dynamo as dynamo
from tests.conftest import counter
from xlalab.testing import opinfo_sweep

HOPS = ("cond", "while_loop", "scan", "map", "invoke_subgraph", "invoke_quant", "auto_functionalize")
DTYPES = (torch.float32, torch.float16, torch.int64, torch.bool)


def _hop_samples() -> list[Any]:
    opinfo_sweep.load_op_db()  # torch's test helpers, importable without expecttest
    from torch.testing._internal.hop_db import hop_db

    out = []
    for info in hop_db:
        if info.name not in HOPS:
            continue
        for dtype in DTYPES:
            if dtype in info.dtypes:
                grads = (False, True) if info.supports_autograd and dtype.is_floating_point else (False,)
                for g in grads:
                    for compiled in (False, True):
                        if g and compiled and info.name == "invoke_quant":
                            continue  # AOTAutograd cannot split its joint graph (nor torch's aot_eager)
                        name = f"{info.name}.{info.variant_test_name}-{dtype}-{'grad' if g else 'value'}"
                        name += "-compiled" if compiled else "-lazy"
                        out.append(pytest.param(info, dtype, g, compiled, id=name))
    return out


def _to(x: Any, dev: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone().to(dev).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, dev) for v in x)
    return x


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _assert_same(eager: Any, lazy: Any) -> None:
    want, got = _tensors(eager), _tensors(lazy)
    assert len(want) == len(got)
    for a, b in zip(want, got):
        assert b.dtype == a.dtype and b.shape == a.shape
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-3, rtol=1e-3)


def _run(fn: Callable[..., Any], args: tuple[Any, ...], dev: Any, grad: bool) -> tuple[Any, list[Any]]:
    """``fn``'s outputs and, with ``grad``, the gradients of its inputs that require one."""
    out = fn(*args)
    if not grad:
        return out, []
    sum(t.float().sum() for t in _tensors(out) if t.requires_grad).backward()  # type: ignore[union-attr]
    return out, [t.grad for t in _tensors(args) if t.requires_grad]


@pytest.mark.parametrize(("info", "dtype", "grad", "compiled"), _hop_samples())
def test_hop_db_samples_match_eager(
    info: Any, dtype: torch.dtype, grad: bool, compiled: bool, dev: Any
) -> None:
    for sample in info.sample_inputs("cpu", dtype, requires_grad=grad):
        args = (sample.input, *sample.args)
        try:
            expected = _run(info.op, _to(args, "cpu"), "cpu", grad)
        except Exception as e:  # eager refuses this dtype: so must xla, with eager's error
            with pytest.raises(type(e)):
                _run(info.op, _to(args, dev), dev, grad)
            continue
        fn = info.op
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(info.op, backend=dynamo.backend)
        got = _run(fn, _to(args, dev), dev, grad)
        _assert_same(expected, got)


# ----------------------------------------------------------------------------- cond


def _gate(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.mean() > 0, lambda a: (a @ w).relu(), lambda a: a.sin() * 2, (x,))


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true", "false"])
def test_cond_records_both_branches_and_chooses_on_the_device(sign: float, dev: Any) -> None:
    x, w = torch.randn(4, 3).abs() * sign, torch.randn(3, 3)
    xd, wd = x.to(dev), w.to(dev)
    xm.mark_step()
    compiles = counter("UncachedCompile") + counter("CachedCompile")
    y = _gate(xd, wd)
    assert counter("UncachedCompile") + counter("CachedCompile") == compiles  # no sync to read the predicate
    torch.testing.assert_close(y.cpu(), _gate(x, w))


def test_cond_branches_may_read_outer_tensors_nest_and_return_tuples(dev: Any) -> None:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        def yes(a: torch.Tensor) -> Any:
            inner = torch.cond(a.sum() > 1, lambda t: t @ w + b, lambda t: t - b, (a,))
            return inner.argmax(1), inner.max()

        def no(a: torch.Tensor) -> Any:
            return (a * 0.5 + torch.ones(3, device=a.device)).argmin(1), a.min()

        return torch.cond(x[0, 0] > 0, yes, no, (x,))

    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        args = (torch.randn(4, 3, generator=g), torch.randn(3, 3, generator=g), torch.randn(3, generator=g))
        _assert_same(f(*args), f(*_to(args, dev)))


def test_cond_gradients_flow_through_the_branch_taken_lazily_and_compiled(dev: Any) -> None:
    class Gate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.cond(x.mean() > 0, lambda t: self.a(t).relu(), lambda t: self.b(t).tanh(), (x,))
            return out.sum(1)

    def train(device: Any, compiled: bool) -> tuple[list[float], list[torch.Tensor]]:
        torch.manual_seed(0)
        model = Gate().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()

        if compiled:
            torch._dynamo.reset()
            step = torch.compile(step, backend=dynamo.backend)
        g = torch.Generator().manual_seed(1)
        losses = []
        for i in range(4):  # the predicate alternates: both branches train
            x, y = torch.randn(3, 4, generator=g) + (1 if i % 2 else -1), torch.randn(3, generator=g)
            losses.append(step(x.to(device), y.to(device)))
            if device != "cpu":
                xm.mark_step()
        return [float(v) for v in losses], [p.detach().cpu() for p in model.parameters()]

    want = train("cpu", False)
    for compiled in (False, True):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="xlalab")  # as a compiled graph that runs lazily warns
            got = train(dev, compiled)
        assert got[0] == pytest.approx(want[0], abs=1e-5)
        for a, b in zip(got[1], want[1]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _checked_branch(a: torch.Tensor) -> torch.Tensor:
    torch._assert_async((a > 100).all(), "a must exceed 100")
    return a + 1


def test_an_assertion_in_the_branch_taken_fails_at_the_sync_naming_its_line(dev: Any) -> None:
    x = torch.ones(3, device=dev)
    y = torch.cond(x.sum() > 0, _checked_branch, lambda a: a - 1, (x,))
    lines, start = inspect.getsourcelines(_checked_branch)
    line = start + next(i for i, text in enumerate(lines) if "_assert_async" in text)
    where = rf"a must exceed 100 \(torch._assert_async at .*test_control_flow.py:{line}:"
    with pytest.raises(RuntimeError, match=where):
        y.cpu()
        xm.wait_device_ops()
        y.cpu()


def test_an_assertion_in_the_branch_not_taken_never_fails(dev: Any) -> None:
    x = torch.ones(3, device=dev)
    y = torch.cond(x.sum() < 0, _checked_branch, lambda a: a - 1, (x,))
    assert y.cpu().tolist() == [0.0, 0.0, 0.0]
    xm.wait_device_ops()
    assert (y + 1).cpu().tolist() == [1.0, 1.0, 1.0]


def test_reading_a_branch_value_on_the_host_says_why_it_cannot(dev: Any) -> None:
    x = torch.ones(3, device=dev)
    with pytest.raises(Exception, match="read on the host"):
        torch.cond(x.sum() > 0, lambda a: a * a.max().item(), lambda a: a.clone(), (x,))
    assert (x + 1).cpu().tolist() == [2.0, 2.0, 2.0]  # the device still works


# ----------------------------------------------------------------------------- while_loop


def _countdown(i: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Any:
    return while_loop(lambda i, x: i > 0, lambda i, x: (i - 1, (x @ w).tanh() + 0.1), (i, x))


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_while_loop_runs_on_the_device_as_many_rounds_as_eager(compiled: bool, dev: Any) -> None:
    fn = _countdown
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(_countdown, backend=dynamo.backend)
    for rounds in (0, 1, 5):
        args = (torch.tensor(rounds), torch.randn(2, 3), torch.randn(3, 3))
        _assert_same(_countdown(*args), fn(*_to(args, dev)))


def test_torch_xla_while_loop_example(dev: Any) -> None:
    # The example of torch_xla's while_loop guide: 3 plus one, ten times.
    _, res = while_loop(
        lambda iteri, x: iteri > 0,
        lambda iteri, x: (iteri - 1, torch.add(x, 1)),
        (torch.tensor(10, device=dev), torch.tensor(3, device=dev)),
    )
    assert res.cpu().item() == 13


def test_a_random_op_in_a_loop_body_draws_new_numbers_each_round(dev: Any) -> None:
    def body(i: torch.Tensor, last: torch.Tensor, now: torch.Tensor) -> Any:
        return i - 1, now.clone(), torch.rand(64, device=now.device)

    zeros = torch.zeros(64, device=dev)
    _, first, second = while_loop(lambda i, a, b: i > 0, body, (torch.tensor(2, device=dev), zeros, zeros))
    first, second = first.cpu(), second.cpu()
    assert ((first > 0) & (first < 1)).all() and ((second > 0) & (second < 1)).all()
    assert not torch.equal(first, second)


# ----------------------------------------------------------------------------- scan and map


def _rnn(h0: torch.Tensor, xs: torch.Tensor, w: torch.Tensor) -> Any:
    def step(h: torch.Tensor, x: torch.Tensor) -> Any:
        h2 = torch.tanh(h @ w + x)
        return h2, h2.sum(-1)

    return scan(step, h0, xs)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_scan_and_its_gradient_equal_eager(compiled: bool, dev: Any) -> None:
    args = (torch.randn(2, 4), torch.randn(5, 2, 4), torch.randn(4, 4))

    def run(device: Any, fn: Callable[..., Any]) -> list[torch.Tensor]:
        a = [t.clone().to(device).requires_grad_() for t in args]
        h, ys = fn(*a)
        (h.sum() + (ys**2).sum()).backward()
        return [h, ys, *(t.grad for t in a)]

    fn = _rnn
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(_rnn, backend=dynamo.backend)
    xm.mark_step()
    before = counter("xla::scan")
    got = run(dev, fn)
    assert counter("xla::scan") - before == 2  # the forward and the backward: two loops, nothing unrolled
    _assert_same(run("cpu", _rnn), got)


def test_view_copy_ops_of_functionalized_graphs_are_recorded(dev: Any) -> None:
    aten = torch.ops.aten
    x = torch.randn(3, 4, 5)
    for op, args in (
        (aten.select_copy.int, (1, 2)),
        (aten.slice_copy.Tensor, (2, 1, 4, 2)),
        (aten.detach_copy.default, ()),
        (aten.unbind_copy.int, (1,)),
    ):
        before = counter("aten::" + op._schema.name.split("::")[-1])
        _assert_same(op(x, *args), op(x.to(dev), *args))
        assert counter("aten::" + op._schema.name.split("::")[-1]) == before  # no CPU fallback


# ----------------------------------------------------------------------------- torch_xla's entry points


def test_torch_xla_scan_layers_equals_sequential_with_each_layers_gradient(dev: Any) -> None:
    from xlalab.experimental.scan_layers import scan_layers

    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(5)]
    x = torch.randn(3, 8)
    want = torch.nn.Sequential(*layers)(x)
    want.sum().backward()
    want_grads = [[p.grad.clone() for p in layer.parameters()] for layer in layers]  # type: ignore[union-attr]
    on_xla = [copy.deepcopy(layer).to(dev) for layer in layers]
    before = counter("xla::scan")
    got = scan_layers(on_xla, x.to(dev))
    got.sum().backward()
    assert counter("xla::scan") - before == 2  # one loop forward, one backward: the stack is never unrolled
    torch.testing.assert_close(got.cpu(), want.detach(), atol=1e-5, rtol=1e-5)
    for layer, grads in zip(on_xla, want_grads):
        for p, g in zip(layer.parameters(), grads):
            torch.testing.assert_close(p.grad.cpu(), g, atol=1e-5, rtol=1e-5)  # type: ignore[union-attr]


def test_torch_xla_scan_cumsum_example_and_fori_loop(dev: Any) -> None:
    from xlalab.experimental.fori_loop import fori_loop
    from xlalab.experimental.scan import scan as xla_scan

    init = torch.tensor([0.0, 0.0], device=dev)
    xs = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device=dev)
    carry, ys = xla_scan(lambda c, x: (c + x, c + x), init, xs)
    assert carry.cpu().tolist() == [9.0, 12.0]
    assert ys.cpu().tolist() == [[1.0, 2.0], [4.0, 6.0], [9.0, 12.0]]
    lower, upper = torch.tensor(0, device=dev), torch.tensor(5, device=dev)
    left, doubled = fori_loop(lower, upper, lambda v: v * 2, torch.ones(2, device=dev))
    assert left.cpu().item() == 0 and doubled.cpu().tolist() == [32.0, 32.0]


def test_a_random_value_made_before_the_loop_is_the_same_in_every_round(dev: Any) -> None:
    noise = torch.rand(16, device=dev)  # still pending: its draw must not move into the body
    start = (torch.tensor(3, device=dev), torch.zeros(16, device=dev))
    _, total = while_loop(lambda i, acc: i > 0, lambda i, acc: (i - 1, acc + noise), start)
    torch.testing.assert_close(total.cpu(), noise.cpu() * 3)


def test_the_ir_dump_names_what_runs_in_each_branch(dev: Any) -> None:
    from xlalab.debug.graph_dump import get_tensors_text

    x = torch.randn(4, 3, device=dev)
    y = torch.cond(x.sum() > 0, lambda a: a.sin(), lambda a: a.cos() * 2, (x,))
    assert "xla::cond(" in (text := get_tensors_text(y))
    assert "true=[aten::sin], false=[aten::cos, aten::mul]" in text


def test_eager_debug_mode_runs_the_conditional_as_one_op(dev: Any) -> None:
    from xlalab.runtime import config

    x = torch.randn(4, 3)
    config.set("XLA_USE_EAGER_DEBUG_MODE", True)
    try:
        y = torch.cond(x.to(dev).sum() > 0, lambda a: a.sin() + 1, lambda a: a.cos(), (x.to(dev),))
    finally:
        config.set("XLA_USE_EAGER_DEBUG_MODE", False)
    want = torch.cond(x.sum() > 0, lambda a: a.sin() + 1, lambda a: a.cos(), (x,))
    torch.testing.assert_close(y.cpu(), want)


def test_a_lazy_training_step_with_cond_and_scan_compiles_once_then_hits_the_cache(dev: Any) -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.drop = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            yes, no = (lambda t: self.drop(self.a(t)).relu()), (lambda t: self.b(t).tanh())
            h = torch.cond(x.mean() > 0, yes, no, (x,))
            c, ys = scan(lambda c, v: (torch.tanh(c + v), c.sum(-1)), torch.zeros(8, device=x.device), h)
            return c.sum() + ys.sum()

    torch.manual_seed(0)
    model = Model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    compiles = []
    for i in range(5):
        loss = model(torch.randn(4, 8).to(dev) * (1 if i % 2 else -1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        xm.mark_step()
        compiles.append(counter("UncachedCompile"))
    assert compiles[2:] == [compiles[1]] * 3  # later steps (either branch taken) reuse the program
