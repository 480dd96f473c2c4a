"""Dtype semantics on xla against eager PyTorch on the CPU, on edge values (signed zeros, NaN,
infinities, integers a half type cannot hold): the same dtype and the same bits.

Classes: a half-type op with a 0-d integer tensor of the device (eager's kernel reads some as
float32 numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import xlalab

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def dev() -> torch.device:
    return xlalab.device()


def _on(dev: torch.device, a: Any) -> Any:
    return a.to(dev) if isinstance(a, torch.Tensor) else a


def _assert_same_bits(fn: Callable[..., torch.Tensor], dev: torch.device, *args: Any) -> None:
    """``fn`` on xla gives eager's dtype, shape and values, signed zeros and NaNs included (or
    eager's error)."""
    try:
        eager = fn(*args)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e)[:40]):
            fn(*[_on(dev, a) for a in args]).cpu()
        return
    lazy = fn(*[_on(dev, a) for a in args]).cpu()
    assert (lazy.dtype, lazy.shape) == (eager.dtype, eager.shape)
    e, x = (torch.view_as_real(t) if t.is_complex() else t for t in (eager, lazy))
    if e.is_floating_point():
        same = ((e == x) & (e.signbit() == x.signbit())) | (e.isnan() & x.isnan())
        assert bool(same.all()), f"eager {eager.tolist()}\nxla   {lazy.tolist()}"
    else:
        assert torch.equal(e, x), f"eager {eager.tolist()}\nxla   {lazy.tolist()}"


_HALF_VALUES = [0.0, -0.0, 1.0, -1.0, 3.0, INF, -INF, NAN, 65504.0]


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("itype", [torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize(
    "op",
    [
        *(torch.mul, torch.div, torch.add, torch.sub, torch.eq, torch.maximum),
        *(lambda x, z: z * x, lambda x, z: z / x),
    ],
    ids=["mul", "div", "add", "sub", "eq", "maximum", "rmul", "rdiv"],
)
def test_half_op_with_integer_zero_dim_tensor_of_the_device(
    dev: torch.device, half: torch.dtype, itype: torch.dtype, op: Callable[..., torch.Tensor]
) -> None:
    """A 0-d integer tensor of the device is what eager's CPU kernel sees as a 0-d CPU tensor: ``mul``
    and ``div`` read it as a float32 number (float16 ``x * tensor(2**40)`` is 0 at 0, not 0 * inf),
    ``add`` as a number rounded to the half type."""
    x = torch.tensor(_HALF_VALUES, dtype=half)
    for value in (2**40, 70000, 2049, -3):
        if not torch.iinfo(itype).min <= value <= torch.iinfo(itype).max:
            continue
        _assert_same_bits(op, dev, x, torch.tensor(value, dtype=itype))
