"""Factories recorded as IR (their arguments are baked in: they set the shape)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..dtypes import to_jnp
from ..promotion import python_number
from .registry import lowering

aten = torch.ops.aten


def _dt(dtype: Any, default: Any) -> Any:
    return to_jnp(dtype) if dtype is not None else default


def filled(shape: tuple[int, ...], value: Any, dtype: Any = None) -> jax.Array:
    """``shape`` filled with ``value``. A floating zero goes through an optimization barrier:
    XLA's simplifier folds ``x + 0`` into ``x``, which turns IEEE's ``-0.0 + 0.0 = 0.0`` into
    -0.0 wherever a tensor of zeros (``torch.zeros``, ``zero_()``, ``new_zeros``) is added to.
    The barrier holds a scalar, so the broadcast still fuses into its users."""
    if isinstance(value, (int, float, complex, np.number)) and value == 0:
        zero = jnp.zeros((), dtype if dtype is not None else jnp.result_type(value))
        if jnp.issubdtype(zero.dtype, jnp.inexact):
            return jnp.broadcast_to(lax.optimization_barrier(zero), shape)
    return jnp.full(shape, value, dtype)


@lowering(aten.arange.default)
def _arange(end: Any, *, dtype: Any = None) -> Any:
    return arange(0, end, 1, dtype)


@lowering(aten.arange.start)
def _arange_start(start: Any, end: Any, *, dtype: Any = None) -> Any:
    return arange(start, end, 1, dtype)


@lowering(aten.arange.start_step)
def _arange_step(start: Any, end: Any, step: Any = 1, *, dtype: Any = None) -> Any:
    return arange(start, end, step, dtype)


def arange(start: Any, end: Any, step: Any, dtype: torch.dtype | None) -> Any:
    """torch's arange, as its CPU kernel computes it (and its reference, ``torch._refs.arange``).

    For an integer dtype the bounds and step are truncated to integers; the length then comes
    from the truncated values for int64 (or all-integer arguments) and from the original ones
    for other dtypes, so ``arange(0, 5, 1.5, dtype=int64)`` is ``0..4`` and ``arange(-2.5, 2.5,
    0.5, dtype=int32)`` is ten -2s. Floating results are ``start + step * i`` in torch's
    accumulation type (double, float for half precision), then cast."""
    integer_args = all(isinstance(a, int) for a in (start, end, step))
    integer = dtype is not None and not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
    istart, iend, istep = int(start), int(end), int(step)
    if integer_args or dtype == torch.int64:
        sign = (istep > 0) - (istep < 0)
        length = (iend - istart + istep - sign) // istep
    else:
        length = math.ceil((end - start) / step)
    if integer or integer_args:
        return istart + istep * jnp.arange(length, dtype=jnp.int64)
    half = dtype in (torch.float16, torch.bfloat16)
    return start + step * jnp.arange(length, dtype=jnp.float32 if half else jnp.float64)


@lowering(aten.linspace.default)
def _linspace(start: Any, end: Any, steps: int, *, dtype: Any = None) -> Any:
    if dtype in (torch.float16, torch.bfloat16):
        return _half_linspace(start, end, steps, to_jnp(dtype))
    complex_ = (dtype is not None and dtype.is_complex) or complex in (type(start), type(end))
    return jnp.linspace(start, end, steps, dtype=jnp.complex128 if complex_ else jnp.float64)


def _half_linspace(start: Any, end: Any, steps: int, half: Any) -> Any:
    """linspace as eager's CPU kernel computes it in a half type: in that type's arithmetic,
    each operation rounded (``step``, ``step * i``, the sum), the first half of the points
    counted up from ``start`` and the rest down from ``end``. Computing in float32 and rounding
    once is closer to the true points, but 4% off eager's near zero."""
    f32 = jnp.float32

    def rounded(v: Any) -> Any:  # also keeps XLA from fusing a product into an addition
        return jnp.asarray(v, f32).astype(half).astype(f32)

    first, last = rounded(start), rounded(end)
    if steps <= 1:
        return jnp.broadcast_to(first, (steps,))
    step = rounded(rounded(last - first) / rounded(steps - 1))
    i = jnp.arange(steps)
    up = rounded(first + rounded(step * rounded(i)))
    down = rounded(last - rounded(step * rounded(steps - 1 - i)))
    return jnp.where(i < steps // 2, up, down)


@lowering(aten.eye.default)
def _eye(n: int, *, dtype: Any = None) -> Any:
    return jnp.eye(n)


@lowering(aten.eye.m)
def _eye_m(n: int, m: int, *, dtype: Any = None) -> Any:
    return jnp.eye(n, m)


@lowering(aten.scalar_tensor.default)
def _scalar_tensor(s: Any, *, dtype: Any = None) -> Any:
    if type(s) is int and s >= 2**63:  # a uint64 number, which JAX would read as int64
        return jnp.asarray(python_number(s, torch.uint64)).astype(_dt(dtype, jnp.uint64))
    return jnp.asarray(s)


@lowering(aten.full.default)
def _full(size: Any, fill_value: Any, *, dtype: Any = None) -> Any:
    return filled(tuple(size), fill_value, _dt(dtype, None))


@lowering(aten.full_like.default)
def _full_like(x: Any, fill_value: Any, *, dtype: Any = None, **_: Any) -> Any:
    return filled(x.shape, fill_value, _dt(dtype, x.dtype))


@lowering(aten.zeros_like.default, aten.empty_like.default)
def _zeros_like(x: Any, *, dtype: Any = None, **_: Any) -> Any:
    return filled(x.shape, 0, _dt(dtype, x.dtype))


@lowering(aten.ones_like.default)
def _ones_like(x: Any, *, dtype: Any = None, **_: Any) -> Any:
    return jnp.ones(x.shape, _dt(dtype, x.dtype))


# The coordinates of a matrix's lower (upper) triangle: static, so a constant of the program, in
# torch's order (row by row).
@lowering(aten.tril_indices.default)
def _tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None) -> Any:
    return jnp.asarray(np.stack(np.tril_indices(row, offset, col)).astype(np.int64))


@lowering(aten.triu_indices.default)
def _triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None) -> Any:
    return jnp.asarray(np.stack(np.triu_indices(row, offset, col)).astype(np.int64))
