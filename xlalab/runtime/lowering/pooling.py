"""Pooling beyond the 2-d ops in nn.py: 3-d average and adaptive-average pooling, the
backward of max pooling with indices in 3-d, and ``index_reduce``/``searchsorted``.

Average pooling sums with ``lax.reduce_window`` and divides by trace-time divisors (torch's
rule per output position, per axis); adaptive averages are matrix products with the window
averaging matrices. Max pooling's backward routes each output's gradient to the flat input
position its index names: a scatter-add, whatever the window geometry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from xlalab.runtime.lowering.elementwise import compute_float, is_integral
from xlalab.runtime.lowering.nn import _adaptive_matrix, _avg_divisor, _expand, _pool_out
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array
Ints = int | Sequence[int]


# --- average pooling, 3-d ----------------------------------------------------------------


def avg_pool_nd(
    x: Array,
    nd: int,
    kernel_size: Ints,
    stride: Ints,
    padding: Ints,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> Array:
    k = _expand(kernel_size, nd)
    s = k if not isinstance(stride, int) and len(stride) == 0 else _expand(stride, nd)
    p = _expand(padding, nd)
    spatial = x.shape[-nd:]
    out = [_pool_out(n, kk, ss, pp, 1, ceil_mode) for n, kk, ss, pp in zip(spatial, k, s, p, strict=True)]
    xf = compute_float(x)
    lead = x.ndim - nd
    cfg = [(0, 0, 0)] * lead + [
        (pp, (o - 1) * ss + kk - n - pp, 0) for n, kk, ss, pp, o in zip(spatial, k, s, p, out, strict=True)
    ]
    xp = lax.pad(xf, jnp.zeros((), xf.dtype), cfg)
    sums = lax.reduce_window(xp, np.zeros((), xf.dtype), lax.add, (1,) * lead + k, (1,) * lead + s, "VALID")
    if divisor_override:
        divisor: np.ndarray | int = divisor_override
    else:
        divisor = np.ones(())
        for n, kk, ss, pp, o in zip(spatial, k, s, p, out, strict=True):
            divisor = np.multiply.outer(divisor, _avg_divisor(n, kk, ss, pp, o, count_include_pad))
    res = sums / jnp.asarray(divisor, xf.dtype)
    if is_integral(x):
        res = jnp.trunc(res)  # torch's integer average truncates
    return res.astype(x.dtype)


@lowering(aten.avg_pool3d.default)
def _avg_pool3d(
    x: Array,
    kernel_size: Ints,
    stride: Ints = (),
    padding: Ints = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Array:
    return avg_pool_nd(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@lowering(aten.avg_pool3d_backward.default)
def _avg_pool3d_backward(
    grad_output: Array,
    x: Array,
    kernel_size: Ints,
    stride: Ints,
    padding: Ints,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> Array:
    def forward(x_: Array) -> Array:
        return avg_pool_nd(
            x_, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
        )

    out, pullback = jax.vjp(forward, x)
    return pullback(grad_output.astype(out.dtype))[0]


# --- adaptive average pooling, 3-d -------------------------------------------------------


def adaptive_avg_nd(x: Array, output_size: Sequence[int]) -> Array:
    nd = len(output_size)
    xf = compute_float(x)
    for i, o in enumerate(output_size):
        axis = x.ndim - nd + i
        m = jnp.asarray(_adaptive_matrix(xf.shape[axis], o), xf.dtype)
        xf = jnp.moveaxis(jnp.tensordot(xf, m, axes=([axis], [1]), precision=lax.Precision.HIGHEST), -1, axis)
    return xf.astype(x.dtype)


@lowering(aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(x: Array, output_size: Ints) -> Array:
    return adaptive_avg_nd(x, _expand(output_size, 3))


@lowering(aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool3d_backward(grad_output: Array, x: Array) -> Array:
    out, pullback = jax.vjp(lambda x_: adaptive_avg_nd(x_, grad_output.shape[-3:]), x)
    return pullback(grad_output.astype(out.dtype))[0]


# --- max pooling's backward by index --------------------------------------------------------


def scatter_by_index(grad_output: Array, x: Array, indices: Array, nd: int) -> Array:
    """The gradient of a max pooling: each output's gradient added at its flat index."""
    lead, spatial = x.shape[:-nd], x.shape[-nd:]
    rows = math.prod(lead)
    g = compute_float(grad_output).reshape(rows, -1)
    idx = indices.reshape(rows, -1)
    out = jnp.zeros((rows, math.prod(spatial)), g.dtype).at[jnp.arange(rows)[:, None], idx].add(g)
    return out.reshape(x.shape).astype(grad_output.dtype)


@lowering(aten.max_pool3d_with_indices_backward.default)
def _max_pool3d_with_indices_backward(
    grad_output: Array,
    x: Array,
    kernel_size: Ints,
    stride: Ints,
    padding: Ints,
    dilation: Ints,
    ceil_mode: bool,
    indices: Array,
) -> Array:
    return scatter_by_index(grad_output, x, indices, 3)


# --- index_reduce ---------------------------------------------------------------------------


def _identity(reduce: str, dtype: jnp.dtype) -> float | int | bool:
    if reduce == "prod":
        return 1
    if reduce == "mean":
        return 0
    floating = jnp.issubdtype(dtype, jnp.floating)
    if reduce == "amax":
        return -math.inf if floating else int(jnp.iinfo(dtype).min)
    return math.inf if floating else int(jnp.iinfo(dtype).max)


@lowering(aten.index_reduce.default)
def _index_reduce(
    x: Array, dim: int, index: Array, source: Array, reduce: str, *, include_self: bool = True
) -> Array:
    if x.ndim == 0:
        out = _index_reduce(
            x.reshape(1), 0, index.reshape(-1), source.reshape(-1), reduce, include_self=include_self
        )
        return out.reshape(())
    dim = dim % x.ndim
    where = (slice(None),) * dim + (index.reshape(-1),)
    source = source.astype(x.dtype)
    base = x if include_self else x.at[where].set(jnp.asarray(_identity(reduce, x.dtype), x.dtype))
    if reduce == "prod":
        return base.at[where].multiply(source)
    if reduce == "amax":
        return base.at[where].max(source)
    if reduce == "amin":
        return base.at[where].min(source)
    # mean: the sum over the hits (and self, if included), divided by their count.
    total = base.at[where].add(source)
    ones = jnp.zeros(x.shape[dim], jnp.int64).at[index.reshape(-1)].add(1)
    count = (ones + int(include_self)).reshape((-1,) + (1,) * (x.ndim - dim - 1))
    count = jnp.maximum(count, 1).astype(x.dtype)
    mean = jnp.floor_divide(total, count) if is_integral(x) else total / count
    hit = (ones > 0).reshape((-1,) + (1,) * (x.ndim - dim - 1))
    return jnp.where(hit, mean, x)


# --- searchsorted -----------------------------------------------------------------------------


def _search(sorted_sequence: Array, values: Array, right: bool) -> Array:
    side = "right" if right else "left"
    if sorted_sequence.ndim == 1:
        return jnp.searchsorted(sorted_sequence, values, side=side)
    # Batched boundaries: one search per leading index.
    lead = sorted_sequence.shape[:-1]
    flat_seq = sorted_sequence.reshape(-1, sorted_sequence.shape[-1])
    flat_val = values.reshape(-1, values.shape[-1])
    out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(flat_seq, flat_val)
    return out.reshape(*lead, values.shape[-1])


@lowering(aten.searchsorted.Tensor)
def _searchsorted(
    sorted_sequence: Array,
    x: Array,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: Array | None = None,
) -> Array:
    if sorter is not None:
        sorted_sequence = jnp.take_along_axis(sorted_sequence, sorter, axis=-1)
    right = right or side == "right"
    if x.ndim == 0:
        return _search(sorted_sequence, x.reshape(1), right).reshape(())
    out = _search(sorted_sequence, x, right)
    return out.astype(jnp.int32 if out_int32 else jnp.int64)
