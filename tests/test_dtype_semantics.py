"""Dtype semantics on xla against eager PyTorch on the CPU, on edge values (signed zeros, NaN,
infinities, integers a half type cannot hold): the same dtype and the same bits.

Classes: a half-type op with a 0-d integer tensor of the device (eager's kernel reads some as
float32 numbers), complex arithmetic with numbers (products XLA would fold), and ``add``/``sub``
whose number or ``alpha`` makes a zero XLA would fold away.
"""

from __future__ import annotations

import re
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
        with pytest.raises(RuntimeError, match=f"^{re.escape(str(e))}$"):
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


_COMPLEX_VALUES = [
    complex(-0.0, -0.0),
    complex(0.0, -0.0),
    complex(NAN, NAN),
    complex(NAN, 1.0),
    complex(1.0, INF),
    complex(INF, 0.0),
    complex(-0.0, 1.0),
    complex(2.5, -1.5),
]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("number", [1, True, -1, 2, 1.0, 1 + 0j, 1j, -0.0])
@pytest.mark.parametrize(
    "op",
    [torch.mul, lambda x, s: s * x, torch.add, lambda x, s: s + x, torch.sub, lambda x, s: s - x],
    ids=["mul", "rmul", "add", "radd", "sub", "rsub"],
)
def test_complex_arithmetic_with_a_number(
    dev: torch.device, dtype: torch.dtype, number: Any, op: Callable[..., torch.Tensor]
) -> None:
    """Eager computes a complex tensor with a number as a complex product or sum in full: ``(1+infj)
    * 1`` is ``nan+infj`` (XLA folds a product by a constant ``1+0j`` away), and ``(-0-0j) + (-1)``
    is ``-1+0j`` (XLA folds ``1 * 0 + v`` into ``v``, which keeps -0.0)."""
    _assert_same_bits(op, dev, torch.tensor(_COMPLEX_VALUES, dtype=dtype), number)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.float32])
def test_complex_product_with_a_zero_dim_tensor(dev: torch.device, dtype: torch.dtype) -> None:
    """So does a product with a 0-d complex tensor, of the device or the CPU."""
    x = torch.tensor(_COMPLEX_VALUES, dtype=torch.complex64)
    if not dtype.is_complex:
        x = torch.tensor([-0.0, 0.0, NAN, INF, 1.5])
    one = torch.tensor(1 + 0j)
    _assert_same_bits(torch.mul, dev, x, one)
    _assert_same_bits(lambda x, z: z * x, dev, x, one)
    _assert_same_bits(lambda x: x * one, dev, x)  # a 0-d CPU tensor with a device tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "op",
    [
        lambda x, y: torch.sub(x, y, alpha=0),
        lambda x, y: torch.rsub(x, y, alpha=0),
        lambda x, y: torch.sub(x, 3, alpha=0),
        lambda x, y: torch.add(x, 3, alpha=0),
        lambda x, y: torch.add(x, y, alpha=0),
        lambda x, y: torch.rsub(x, 0, alpha=0),
    ],
    ids=["sub", "rsub", "sub_number", "add_number", "add", "rsub_zero"],
)
def test_add_and_sub_with_an_integer_zero_alpha(
    dev: torch.device, dtype: torch.dtype, op: Callable[..., torch.Tensor]
) -> None:
    """``sub`` is eager's ``add`` of ``-alpha``; an integer 0 negated stays +0, so ``-0.0 - y * 0``
    is ``-0.0 + y * 0``: -0.0 for a negative zero ``y``. And ``-0.0 + 3 * 0`` is 0.0, where XLA
    would fold the number's zero product away."""
    x = torch.tensor([-0.0, 0.0, 1.0, INF, NAN, -0.0], dtype=dtype)
    y = torch.tensor([-0.0, 0.0, 2.0, 1.0, -0.0, 0.0], dtype=dtype)
    _assert_same_bits(op, dev, x, y)


@pytest.mark.parametrize(
    ("dtype", "op"),
    [
        (torch.int32, lambda a: a.add_(1.5)),
        (torch.uint8, lambda a: a.mul_(torch.tensor([1.5, 2.0, 3.0]))),
        (torch.int16, lambda a: a.add_(torch.tensor(1.5, dtype=torch.float64))),
        (torch.int8, lambda a: a.div_(2)),
        (torch.int64, lambda a: a.add_(1j)),
        (torch.float32, lambda a: a.add_(1j)),
        (torch.bool, lambda a: a.mul_(2)),
        (torch.uint8, lambda a: a.sub_(torch.tensor(0.5))),
    ],
)
def test_in_place_result_that_the_tensor_cannot_hold(
    dev: torch.device, dtype: torch.dtype, op: Callable[..., torch.Tensor]
) -> None:
    """An in-place op whose result type the tensor cannot hold raises eager's error, worded as
    eager's (c10's type names: ``result type Float can't be cast to the desired output type
    Byte``)."""
    _assert_same_bits(op, dev, torch.tensor([1, 2, 3], dtype=dtype))


def test_histc_refuses_bool_tensors(dev: torch.device) -> None:
    """``histc`` takes integer tensors as CUDA does (``ACCELERATOR_DTYPES``), but not bool ones,
    which CUDA refuses too: eager's error, not a histogram of bools."""
    x = torch.tensor([True, False, True])
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.histc(x, 4)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.histc(x.to(dev), 4).cpu()
