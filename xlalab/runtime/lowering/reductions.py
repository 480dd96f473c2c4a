"""Lowerings of aten reductions and scans (sum, mean, max, var, norms, cumsum...)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.dtypes import to_jnp
from xlalab.runtime.lowering.elementwise import (
    Scalar,
    compute_float,
    exact_divisor,
    is_integral,
    plus_zero,
    refuse_bool,
    rounded_to,
)
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array
Dims = int | Sequence[int] | None


def axes(x: Array, dim: Dims) -> tuple[int, ...] | None:
    """Torch's ``dim`` argument as a jnp ``axis``.

    ``None`` and ``[]`` both mean "every dim" in torch's reductions, and a 0-d tensor
    accepts dim 0 / -1, which jnp would reject.
    """
    if dim is None:
        return None
    if isinstance(dim, int):
        dim = (dim,)
    if len(dim) == 0 or x.ndim == 0:
        return None
    return tuple(d % x.ndim for d in dim)


def _accumulate_as(x: Array, dtype: torch.dtype | None) -> Array:
    """Input of sum/prod/cumsum: the requested dtype, else int64 for integral inputs;
    half types widened to float32.

    Torch accumulates bool and every integer type in int64; JAX would keep int32 (and
    overflow) unless told.
    """
    if dtype is not None:
        x = x.astype(to_jnp(dtype))
    elif is_integral(x):
        return x.astype(jnp.int64)
    # Half types accumulate in float32 (torch's opmath); the result is rounded once.
    return compute_float(x)


def _as_float(x: Array) -> Array:
    return x.astype(jnp.float32) if is_integral(x) else x


# Each reduction serves its whole-tensor overload (no ``dim``) and its ``dim`` overload;
# ``dtype`` is keyword-only in both.


@lowering(aten.sum.default, aten.sum.dim_IntList)
def _sum(x: Array, dim: Dims = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Array:
    return plus_zero(jnp.sum(_accumulate_as(x, dtype), axis=axes(x, dim), keepdims=keepdim))


@lowering(aten.prod.default, aten.prod.dim_int)
def _prod(x: Array, dim: Dims = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Array:
    return jnp.prod(_accumulate_as(x, dtype), axis=axes(x, dim), keepdims=keepdim)


@lowering(aten.mean.default, aten.mean.dim)
def _mean(x: Array, dim: Dims = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Array:
    x = compute_float(x if dtype is None else x.astype(to_jnp(dtype)))
    reduced = axes(x, dim)
    total = jnp.sum(x, axis=reduced, keepdims=keepdim)
    count = math.prod(x.shape[d] for d in (range(x.ndim) if reduced is None else reduced))
    # Eager divides the sum by the count; XLA would multiply by a rounded reciprocal.
    return plus_zero(total / exact_divisor(jnp.asarray(count, total.dtype), total))


@lowering(aten.amax.default, aten.max.default)
def _amax(x: Array, dim: Dims = (), keepdim: bool = False) -> Array:
    return jnp.max(x, axis=axes(x, dim), keepdims=keepdim)


@lowering(aten.amin.default, aten.min.default)
def _amin(x: Array, dim: Dims = (), keepdim: bool = False) -> Array:
    return jnp.min(x, axis=axes(x, dim), keepdims=keepdim)


def _value_at(x: Array, index: Array, dim: int, keepdim: bool) -> tuple[Array, Array]:
    """(the element ``index`` points at along ``dim``, index): torch's max/min.dim pair.

    The value is read at the index rather than reduced separately: 0.0 and -0.0 tie, and
    torch returns the one at the first maximal index.
    """
    if x.ndim == 0:
        return x, index
    ax = dim % x.ndim
    kept = index if keepdim else jnp.expand_dims(index, ax)
    value = jnp.take_along_axis(x, kept, axis=ax)
    return (value if keepdim else jnp.squeeze(value, ax)), index


@lowering(aten.max.dim)
def _max_dim(x: Array, dim: int, keepdim: bool = False) -> tuple[Array, Array]:
    return _value_at(x, _arg_extreme(jnp.argmax, x, dim, keepdim), dim, keepdim)


@lowering(aten.min.dim)
def _min_dim(x: Array, dim: int, keepdim: bool = False) -> tuple[Array, Array]:
    return _value_at(x, _arg_extreme(jnp.argmin, x, dim, keepdim), dim, keepdim)


def _arg_extreme(fn: Callable[..., Array], x: Array, dim: int | None, keepdim: bool) -> Array:
    # jnp.argmax/argmin, like torch, return the first extreme index and treat NaN as extreme.
    ax = axes(x, dim)
    if ax is None:
        out = fn(x.reshape(-1))
        return out.reshape((1,) * x.ndim) if keepdim else out
    return fn(x, axis=ax[0], keepdims=keepdim)


@lowering(aten.argmax.default)
def _argmax(x: Array, dim: int | None = None, keepdim: bool = False) -> Array:
    refuse_bool("argmax", x)  # (max over a dim does take bools)
    return _arg_extreme(jnp.argmax, x, dim, keepdim)


@lowering(aten.argmin.default)
def _argmin(x: Array, dim: int | None = None, keepdim: bool = False) -> Array:
    refuse_bool("argmin", x)
    return _arg_extreme(jnp.argmin, x, dim, keepdim)


# _is_all_true/_is_any_true: torch.distributions' argument and support checks reduce a mask
# with them before reading one bool; reduced here, only that bool leaves the device.
@lowering(aten.all.default, aten.all.dim, aten.all.dims, aten._is_all_true.default)
def _all(x: Array, dim: Dims = None, keepdim: bool = False) -> Array:
    return jnp.all(x != 0, axis=axes(x, dim), keepdims=keepdim)


@lowering(aten.any.default, aten.any.dim, aten.any.dims, aten._is_any_true.default)
def _any(x: Array, dim: Dims = None, keepdim: bool = False) -> Array:
    return jnp.any(x != 0, axis=axes(x, dim), keepdims=keepdim)


@lowering(aten.count_nonzero.default, aten.count_nonzero.dim_IntList)
def _count_nonzero(x: Array, dim: Dims = None) -> Array:
    return jnp.sum(x != 0, axis=axes(x, dim), dtype=jnp.int64)


# --- moments ------------------------------------------------------------------------


def shifted_mean(x: Array, ax: tuple[int, ...] | None) -> Array:
    """The mean over ``ax`` (kept), taken as ``x0 + mean(x - x0)`` with ``x0`` each slice's first
    element. Eager's moments are exact for a constant slice (float32's in double, layer norm's
    by Welford's updates); a float32 sum of 768 copies of 0.1 is not 768 * 0.1, and the plain
    mean left a std of 1.5e-8 where eager's is 0, and a variance of 1e30s that overflowed."""
    ax = tuple(range(x.ndim)) if ax is None else ax
    if any(x.shape[a] == 0 for a in ax):
        return jnp.mean(x, axis=ax, keepdims=True)
    first = x[tuple(slice(0, 1) if a in ax else slice(None) for a in range(x.ndim))]
    return first + jnp.mean(x - first, axis=ax, keepdims=True)


def _var(x: Array, dim: Dims, correction: Scalar | None, keepdim: bool) -> tuple[Array, Array]:
    """(variance, mean) over ``dim`` with torch's ``correction`` (default 1: unbiased)."""
    if is_integral(x):
        raise TypeError("std and var only support floating point and complex dtypes (as in eager PyTorch)")
    x = compute_float(_as_float(x))
    ax = axes(x, dim)
    mean = shifted_mean(x, ax)
    centered = x - mean
    n = x.size if ax is None else math.prod(x.shape[a] for a in ax)
    correction = 1 if correction is None else correction
    # torch clamps the divisor at 0 (giving inf/nan) rather than going negative.
    divisor = jnp.maximum(n - correction, 0)
    # |x - mean|^2: a complex tensor's variance is real (the real and imaginary parts' summed).
    squared = jnp.real(centered * jnp.conj(centered)) if jnp.iscomplexobj(centered) else centered * centered
    var = jnp.sum(squared, axis=ax, keepdims=keepdim) / divisor
    return var, mean if keepdim else jnp.squeeze(mean, ax)


@lowering(aten.var.correction)
def _var_correction(
    x: Array, dim: Dims = None, correction: Scalar | None = None, keepdim: bool = False
) -> Array:
    return _var(x, dim, correction, keepdim)[0]


@lowering(aten.std.correction)
def _std_correction(
    x: Array, dim: Dims = None, correction: Scalar | None = None, keepdim: bool = False
) -> Array:
    return jnp.sqrt(_var(x, dim, correction, keepdim)[0])


@lowering(aten.var_mean.correction)
def _var_mean(
    x: Array, dim: Dims = None, correction: Scalar | None = None, keepdim: bool = False
) -> tuple[Array, Array]:
    return _var(x, dim, correction, keepdim)


@lowering(aten.std_mean.correction)
def _std_mean(
    x: Array, dim: Dims = None, correction: Scalar | None = None, keepdim: bool = False
) -> tuple[Array, Array]:
    var, mean = _var(x, dim, correction, keepdim)
    return jnp.sqrt(var), mean


@lowering(aten.logsumexp.default)
def _logsumexp(x: Array, dim: Dims, keepdim: bool = False) -> Array:
    return jax.nn.logsumexp(compute_float(_as_float(x)), axis=axes(x, dim), keepdims=keepdim)


# --- norms --------------------------------------------------------------------------


def _static_ord(ord: Scalar) -> float | None:
    """The norm order as a Python number, or None when it is a traced 0-d array."""
    if isinstance(ord, (bool, int, float)):
        return float(ord)
    return None


def vector_norm(x: Array, ord: Scalar = 2, dim: Dims = None, keepdim: bool = False) -> Array:
    ax = axes(x, dim)
    a = jnp.abs(compute_float(_as_float(x)))  # half norms accumulate in float32, like torch

    def by_order(p: float) -> Array:
        if p == 2:
            return jnp.sqrt(jnp.sum(a * a, axis=ax, keepdims=keepdim))
        if p == 1:
            return jnp.sum(a, axis=ax, keepdims=keepdim)
        if p == float("inf"):
            return jnp.max(a, axis=ax, keepdims=keepdim)
        if p == float("-inf"):
            return jnp.min(a, axis=ax, keepdims=keepdim)
        if p == 0:
            return jnp.sum(a != 0, axis=ax, keepdims=keepdim).astype(a.dtype)
        return jnp.sum(a**p, axis=ax, keepdims=keepdim) ** (1 / p)

    p = _static_ord(ord)
    if p is not None:
        return by_order(p)
    # A traced order (floats are graph inputs) cannot pick a formula at trace time:
    # compute the special cases and select, so 2 / inf / 0 stay exact.
    general = jnp.sum(a**ord, axis=ax, keepdims=keepdim) ** (1 / ord)
    out = jnp.where(ord == 2, by_order(2), general)
    out = jnp.where(ord == 1, by_order(1), out)
    out = jnp.where(ord == 0, by_order(0), out)
    out = jnp.where(ord == jnp.inf, by_order(float("inf")), out)
    return jnp.where(ord == -jnp.inf, by_order(float("-inf")), out)


@lowering(aten.linalg_vector_norm.default, static=("ord",))
def _linalg_vector_norm(
    x: Array, ord: Scalar = 2, dim: Dims = None, keepdim: bool = False, dtype: torch.dtype | None = None
) -> Array:
    if dtype is not None:
        x = x.astype(to_jnp(dtype))
    return vector_norm(x, ord, dim, keepdim)


@lowering(aten.norm.Scalar, static=("p",))
def _norm(x: Array, p: Scalar = 2) -> Array:
    return vector_norm(x, p)


@lowering(aten.norm.ScalarOpt_dim, static=("p",))
def _norm_dim(x: Array, p: Scalar | None, dim: Dims, keepdim: bool = False) -> Array:
    return vector_norm(x, 2 if p is None else p, dim, keepdim)


@lowering(aten.norm.ScalarOpt_dtype, static=("p",))
def _norm_dtype(x: Array, p: Scalar | None, dtype: torch.dtype) -> Array:
    return vector_norm(x.astype(to_jnp(dtype)), 2 if p is None else p)


@lowering(aten.norm.ScalarOpt_dim_dtype, static=("p",))
def _norm_dim_dtype(x: Array, p: Scalar | None, dim: Dims, keepdim: bool, dtype: torch.dtype) -> Array:
    return vector_norm(x.astype(to_jnp(dtype)), 2 if p is None else p, dim, keepdim)


# --- scans --------------------------------------------------------------------------


@lowering(aten.cumsum.default)
def _cumsum(x: Array, dim: int, dtype: torch.dtype | None = None) -> Array:
    x = _accumulate_as(x, dtype)
    # Half types accumulate in float32 (torch's opmath); the runtime rounds each partial sum once.
    # Eager's sums start from 0.0, so none is -0.0 (XLA's first partial sum is the element).
    return plus_zero(x if x.ndim == 0 else jnp.cumsum(x, axis=dim))


@lowering(aten.logcumsumexp.default)
def _logcumsumexp(x: Array, dim: int) -> Array:
    # In float64, rounded once, as accurate as eager's (torch's backward formula reads this
    # result). Complex inputs run on the CPU fallback (tensor.FALLBACK_IF): eager's running sum
    # lets the imaginary part leave (-pi, pi], where a scan of log-add-exps would wrap it.
    if x.ndim == 0:
        return x
    return lax.cumlogsumexp(x.astype(jnp.float64), axis=dim % x.ndim).astype(x.dtype)


@lowering(aten.cumprod.default)
def _cumprod(x: Array, dim: int, dtype: torch.dtype | None = None) -> Array:
    x = _accumulate_as(x, dtype)
    return x if x.ndim == 0 else jnp.cumprod(x, axis=dim)


def _cumulative_extreme(x: Array, dim: int, better: Callable[[Array, Array], Array]) -> tuple[Array, Array]:
    """cummax/cummin: running extreme and the index where it was last reached (torch keeps
    the later index on ties, and a NaN, once seen, wins from there on)."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    dim = dim % x.ndim
    index = lax.broadcasted_iota(jnp.int64, x.shape, dim)

    def combine(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
        (va, ia), (vb, ib) = a, b
        if jnp.issubdtype(va.dtype, jnp.floating):
            take_b = jnp.isnan(vb) | (~jnp.isnan(va) & better(vb, va))
        else:
            take_b = better(vb, va)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    _, where = lax.associative_scan(combine, (x, index), axis=dim)
    # The values are read at the indices: the scan merges its halves by adding zeros, which turns
    # a -0.0 into 0.0.
    return jnp.take_along_axis(x, where, axis=dim), where


@lowering(aten.cummax.default)
def _cummax(x: Array, dim: int) -> tuple[Array, Array]:
    return _cumulative_extreme(x, dim, lambda b, a: b >= a)


@lowering(aten.cummin.default)
def _cummin(x: Array, dim: int) -> tuple[Array, Array]:
    return _cumulative_extreme(x, dim, lambda b, a: b <= a)


# --- histograms ------------------------------------------------------------------------------


@lowering(aten.histc.default, static=("bins", "min", "max"))
def _histc(x: Array, bins: int = 100, min: Scalar = 0, max: Scalar = 0) -> Array:
    # Equal-width bins over [min, max] (the data's range when min == max), a value equal to max in
    # the last bin, values outside (and NaN) left out. The bin is computed as eager's kernels do:
    # (x - min) * bins / (max - min), truncated, in the input's type (integers divide as integers,
    # as CUDA's kernel takes them; half types round after each step).
    flat = x.reshape(-1)
    integral = is_integral(flat)
    lo: Array | Scalar = min
    hi: Array | Scalar = max
    if min == max:
        if flat.size:
            lo, hi = jnp.min(flat), jnp.max(flat)
            same = lo == hi
            lo, hi = jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)
        else:
            lo, hi = min - 1, max + 1
    if integral:
        wide = flat.astype(jnp.int64)
        pos = (wide - lo) * bins // (hi - lo)
    else:
        step = rounded_to(flat.dtype)
        wide = compute_float(flat)
        lo = step(jnp.asarray(lo, wide.dtype))
        hi = step(jnp.asarray(hi, wide.dtype))
        pos = jnp.trunc(step(step(step(wide - lo) * bins) / step(hi - lo))).astype(jnp.int64)
    pos = jnp.where(pos == bins, bins - 1, pos)
    inside = (flat >= lo) & (flat <= hi)
    counts = jnp.zeros(bins, jnp.int64).at[jnp.where(inside, pos, bins)].add(1, mode="drop")
    return counts.astype(x.dtype)
