"""Factories recorded as IR (their arguments are baked in: they set the shape)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from ..dtypes import to_jnp
from .registry import lowering

aten = torch.ops.aten


def _dt(dtype: Any, default: Any) -> Any:
    return to_jnp(dtype) if dtype is not None else default


@lowering(aten.arange.default)
def _arange(end: Any, *, dtype: Any = None) -> Any:
    return jnp.arange(end, dtype=_dt(dtype, None))


@lowering(aten.arange.start)
def _arange_start(start: Any, end: Any, *, dtype: Any = None) -> Any:
    return jnp.arange(start, end, dtype=_dt(dtype, None))


@lowering(aten.arange.start_step)
def _arange_step(start: Any, end: Any, step: Any = 1, *, dtype: Any = None) -> Any:
    # torch computes the length as ceil((end - start) / step) in double precision.
    import math

    n = max(0, math.ceil((end - start) / step))
    return (
        start
        + jnp.arange(n, dtype=jnp.float64 if isinstance(start + end + step, float) else jnp.int64) * step
    )


@lowering(aten.linspace.default)
def _linspace(start: Any, end: Any, steps: int, *, dtype: Any = None) -> Any:
    return jnp.linspace(start, end, steps, dtype=jnp.float64)


@lowering(aten.eye.default)
def _eye(n: int, *, dtype: Any = None) -> Any:
    return jnp.eye(n)


@lowering(aten.eye.m)
def _eye_m(n: int, m: int, *, dtype: Any = None) -> Any:
    return jnp.eye(n, m)


@lowering(aten.scalar_tensor.default)
def _scalar_tensor(s: Any, *, dtype: Any = None) -> Any:
    return jnp.asarray(s)


@lowering(aten.full.default)
def _full(size: Any, fill_value: Any, *, dtype: Any = None) -> Any:
    return jnp.full(tuple(size), fill_value)


@lowering(aten.full_like.default)
def _full_like(x: Any, fill_value: Any, *, dtype: Any = None, **_: Any) -> Any:
    return jnp.full(x.shape, fill_value, _dt(dtype, x.dtype))


@lowering(aten.zeros_like.default, aten.empty_like.default)
def _zeros_like(x: Any, *, dtype: Any = None, **_: Any) -> Any:
    return jnp.zeros(x.shape, _dt(dtype, x.dtype))


@lowering(aten.ones_like.default)
def _ones_like(x: Any, *, dtype: Any = None, **_: Any) -> Any:
    return jnp.ones(x.shape, _dt(dtype, x.dtype))
