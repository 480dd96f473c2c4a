"""Autograd's edges on xla tensors behave as in eager PyTorch: inference tensors and views
made inside and outside ``torch.inference_mode()``, in-place views and re-pointed tensors."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
import torch

aten = torch.ops.aten

# A view's kind (inference tensor or normal) is its base's, in or out of inference mode; a dtype
# view is a new tensor in eager, of the mode's kind.
VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda a: a.view(6),
    "getitem": lambda a: a[0],
    "t": lambda a: a.t(),
    "unbind": lambda a: a.unbind()[1],
    "split": lambda a: a.split(1)[0],
    "detach": lambda a: a.detach(),
    "alias": lambda a: aten.alias(a),
    "view_dtype": lambda a: a.view(torch.int32),
}


def _kinds(dev: torch.device | str) -> dict[str, tuple[bool, bool, bool]]:
    x = torch.ones(2, 3, device=dev)
    leaf = torch.ones(2, 3, device=dev, requires_grad=True)
    out = {}
    with torch.inference_mode():
        inf = torch.ones(2, 3, device=dev)
        for name, f in VIEWS.items():
            for base_name, base in (("normal", x), ("leaf", leaf), ("inference", inf)):
                v = f(base)
                out[f"{name} of {base_name}, inside"] = (v.is_inference(), v.requires_grad, v._is_view())
    for name, f in VIEWS.items():
        v = f(inf)
        out[f"{name} of inference, outside"] = (v.is_inference(), v.requires_grad, v._is_view())
    return out


def test_views_inside_and_outside_inference_mode_are_eagers_kind(dev: torch.device) -> None:
    # A view of a normal xla tensor inside inference mode raised "Cannot set version_counter for
    # inference tensor"; the view of an inference tensor outside it was a normal tensor.
    assert _kinds(dev) == _kinds("cpu")


def _written_in_inference_mode(dev: torch.device | str) -> tuple[object, ...]:
    x = torch.zeros(2, 3, device=dev)
    leaf = torch.ones(3, device=dev, requires_grad=True)
    with torch.inference_mode():
        x[1].add_(2)
        v = x.view(6)
        v.mul_(3)
        w = leaf[1:]
    (w * 2).sum().backward()
    grad = None if leaf.grad is None else leaf.grad.cpu().tolist()
    return x._version, v._version, x.cpu().tolist(), w.requires_grad, grad


def test_a_view_made_in_inference_mode_writes_through_and_counts(dev: torch.device) -> None:
    assert _written_in_inference_mode(dev) == _written_in_inference_mode("cpu")


def test_an_inference_tensors_view_refuses_what_eager_refuses(dev: torch.device) -> None:
    for d in ("cpu", dev):
        with torch.inference_mode():
            t = torch.ones(2, 3, device=d)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
            t[0].add_(1)
        leaf = torch.ones(3, device=d, requires_grad=True)
        with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
            leaf * t.view(2, 3)[0]


def test_set_resize_and_inplace_views_in_inference_mode_keep_a_normal_tensor(dev: torch.device) -> None:
    # set_ and out= resizing re-point the tensor: it took the inference kind of what was made
    # inside the mode, and an in-place update after the mode raised where eager's works.
    for d in ("cpu", dev):
        a, out, w = torch.zeros(3, device=d), torch.empty(0, device=d), torch.zeros(2, 3, device=d)
        b = torch.arange(4.0).to(d)
        with torch.inference_mode():
            a.set_(b)
            torch.add(b, 1, out=out)
            w.t_()
        assert not (a.is_inference() or out.is_inference() or w.is_inference())
        a.add_(1)
        out.add_(1)
        assert a.cpu().tolist() == [1, 2, 3, 4] and out.cpu().tolist() == [2, 3, 4, 5]
        assert w.stride() == (1, 3)


def test_an_inplace_view_takes_eagers_layout(dev: torch.device) -> None:
    # t_() kept the row-major layout of the tensor before it, so view() worked where eager raises.
    for d in ("cpu", dev):
        x = torch.arange(6.0).reshape(2, 3).to(d)
        x.t_()
        assert not x.is_contiguous()
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            x.view(6)
        assert x.reshape(6).cpu().tolist() == [0, 3, 1, 4, 2, 5]


def _raise(*args: object) -> None:
    raise KeyError("from the hook")


def _interrupt(*args: object) -> None:
    raise KeyboardInterrupt


# Python hooks autograd's engine calls, each raising (or returning what is no gradient).
HOOKS: dict[str, Callable[[torch.Tensor], object]] = {
    "tensor": lambda x: (y := x * 2, y.register_hook(_raise), y.sum().backward()),
    "leaf": lambda x: (x.register_hook(_raise), (x * 2).sum().backward()),
    "autograd.grad": lambda x: (y := x * 2, y.register_hook(_raise), torch.autograd.grad(y.sum(), x)),
    "retain_grad": lambda x: (y := x * 2, y.retain_grad(), y.register_hook(_raise), y.sum().backward()),
    "not a tensor": lambda x: (y := x * 2, y.register_hook(lambda g: "grad"), y.sum().backward()),
    "interrupt": lambda x: (y := x * 2, y.register_hook(_interrupt), y.sum().backward()),
    "post accumulate": lambda x: (x.register_post_accumulate_grad_hook(_raise), (x * 2).sum().backward()),
    "multi grad": lambda x: (
        torch.autograd.graph.register_multi_grad_hook((x,), _raise),
        (x * 2).sum().backward(),
    ),
    "module backward": lambda x: (
        m := torch.nn.Linear(3, 2).to(x.device),
        m.register_full_backward_hook(_raise),
        m(x).sum().backward(),
    ),
    "module backward pre": lambda x: (
        m := torch.nn.Linear(3, 2).to(x.device),
        m.register_full_backward_pre_hook(_raise),
        m(x).sum().backward(),
    ),
}


def _hook_error(
    run: Callable[[torch.Tensor], object], dev: torch.device | str
) -> tuple[str, str, list[float]]:
    x = torch.tensor([1.0, 2.0, 3.0], device=dev, requires_grad=True)
    with pytest.raises(BaseException) as e:
        run(x)
    # The next backward runs as usual: nothing of the failed one is left over.
    z = torch.tensor([1.0, 2.0], device=dev, requires_grad=True)
    (z * 3).sum().backward()
    assert z.grad is not None
    return type(e.value).__name__, str(e.value), z.grad.cpu().tolist()


@pytest.mark.parametrize("case", list(HOOKS))
def test_a_hook_raising_in_backward_raises_as_in_eager(case: str, dev: torch.device) -> None:
    # The process aborted ("terminate called without an active exception"): torch leaves the
    # hook's Python error set while the engine unwinds, past the xla device's Python guard.
    assert _hook_error(HOOKS[case], dev) == _hook_error(HOOKS[case], "cpu")


def test_ctrl_c_during_backward_is_raised_when_backward_returns(dev: torch.device) -> None:
    """A SIGINT that lands inside the autograd engine, in a callback torch cannot unwind through
    (the device guard's), aborted the process: it waits for backward to return instead."""
    x = torch.ones(3, device=dev, requires_grad=True)
    y = x * 2
    ran: list[str] = []

    def interrupted(grad: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # Python handles the signal at the next call: here, held
        ran.append("to its end")
        return grad

    y.register_hook(interrupted)
    with pytest.raises(KeyboardInterrupt):
        y.sum().backward()
    assert ran == ["to its end"]
    assert torch.equal(x.grad.cpu(), torch.full((3,), 2.0))
    (x * 3).sum().backward()  # the handler in place before is back
    assert torch.equal(x.grad.cpu(), torch.full((3,), 5.0))
