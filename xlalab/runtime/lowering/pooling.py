"""Pooling in 1, 2 or 3 spatial dims, and ``index_reduce``/``searchsorted``.

Each pooling family is one algorithm whose first argument is the number of spatial dims
``nd``; nn.py registers every aten pooling op as one of them with its ``nd`` bound. Shapes
are static, so window geometry (torch's ``pooling_output_shape``) and average divisors are
trace-time constants. Max pooling takes one strided slice per kernel offset, so a scan over
offsets picks the element torch's loop keeps (``scan_argmax``). Its gradient is a
scatter-add at the saved indices in the gradient's own dtype and in output order: how torch's
CPU kernels add, so the sums over overlapping windows round as eager's do. Average pooling's
backward is ``jax.vjp`` of its forward: one formula to get right, not two.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from xlalab.runtime.lowering.elementwise import Scalar, compute_float, is_integral, rounded_to
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array
Ints = int | Sequence[int]
Geometry = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


# --- window geometry ---------------------------------------------------------------------


def expand(v: Ints, n: int) -> tuple[int, ...]:
    """Torch accepts one value for every spatial dim (``stride=[2]``); spell it out."""
    v = (v,) if isinstance(v, int) else tuple(v)
    return v * n if len(v) == 1 else v


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling_output_shape, including its ceil_mode rule that the last window
    must start inside the input or its left padding."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _geometry(
    nd: int,
    x: Array,
    kernel_size: Ints,
    stride: Ints = (),
    padding: Ints = 0,
    dilation: Ints = 1,
    ceil_mode: bool = False,
) -> Geometry:
    """(kernel, stride, padding, dilation, output size), one entry per spatial dim, from
    the window arguments of torch's max pooling ops (with their defaults)."""
    k = expand(kernel_size, nd)
    empty_stride = not isinstance(stride, int) and len(stride) == 0
    s = k if empty_stride else expand(stride, nd)  # torch: an empty stride means kernel_size
    p, d = expand(padding, nd), expand(dilation, nd)
    out = tuple(_pool_out(*dim, ceil_mode) for dim in zip(x.shape[-nd:], k, s, p, d, strict=True))
    return k, s, p, d, out


def _frame(out: int, k: int, s: int, d: int) -> int:
    """Extent of the padded input that the ``out`` windows cover."""
    return (out - 1) * s + d * (k - 1) + 1


def _pad_to_frame(x: Array, geometry: Geometry, value: Scalar) -> Array:
    """Pad the spatial dims by ``p`` below and to the windows' frame above (cropping when
    ceil_mode leaves trailing positions unused)."""
    k, s, p, d, out = geometry
    cfg = [(0, 0, 0)] * (x.ndim - len(k))
    for n, kk, ss, pp, dd, o in zip(x.shape[-len(k) :], k, s, p, d, out, strict=True):
        cfg.append((pp, _frame(o, kk, ss, dd) - n - pp, 0))
    return lax.pad(x, jnp.asarray(value, x.dtype), cfg)


def _full(x: Array, spatial: Sequence[int]) -> tuple[int, ...]:
    """A per-spatial-dim window argument extended with 1s over the leading dims."""
    return (1,) * (x.ndim - len(spatial)) + tuple(spatial)


def lowest(dtype: jnp.dtype) -> Scalar:
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf
    if dtype == jnp.bool_:
        return False
    return jnp.iinfo(dtype).min


def _pullback(forward: Callable[[Array], Array], grad_output: Array, x: Array) -> Array:
    """The gradient of a linear ``forward`` at ``x``: its transpose applied to ``grad_output``."""
    out, pullback = jax.vjp(forward, x)
    return pullback(grad_output.astype(out.dtype))[0]


def scan_argmax(values: Array, axis: int) -> Array:
    """The element of a window eager's pooling loops keep, windows scanned along ``axis``: the
    first maximum, or where a window holds NaNs its last NaN (a NaN replaces the running
    maximum, and nothing compares greater than it)."""
    if not jnp.issubdtype(values.dtype, jnp.floating):
        return jnp.argmax(values, axis=axis)
    nan = jnp.isnan(values)
    last_nan = values.shape[axis] - 1 - jnp.argmax(jnp.flip(nan, axis), axis=axis)
    first_max = jnp.argmax(jnp.where(nan, jnp.asarray(-jnp.inf, values.dtype), values), axis=axis)
    return jnp.where(jnp.any(nan, axis=axis), last_nan, first_max)


def _first_inside(size: int, k: int, s: int, p: int, d: int, out: int) -> np.ndarray:
    """Per output position along one axis, the first kernel offset that lands inside the input
    (not in the padding): where eager's max pooling starts its window."""
    first = []
    for o in range(out):
        start = o * s - p
        first.append(next((i for i in range(k) if 0 <= start + i * d < size), 0))
    return np.asarray(first, dtype=np.int64)


# --- average pooling -----------------------------------------------------------------------


def _avg_divisor(size: int, k: int, s: int, p: int, out: int, count_include_pad: bool) -> np.ndarray:
    """Per-output-position divisor along one axis, as torch's avg_pool kernels compute it."""
    div = []
    for o in range(out):
        start = o * s - p
        end = min(start + k, size + p)
        if count_include_pad:
            div.append(end - start)
        else:
            div.append(min(end, size) - max(start, 0))
    return np.asarray(div, dtype=np.float64)


def avg_pool(
    nd: int,
    x: Array,
    kernel_size: Ints,
    stride: Ints = (),
    padding: Ints = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Array:
    geometry = _geometry(nd, x, kernel_size, stride, padding, 1, ceil_mode)
    k, s, p, _, out = geometry
    xf = compute_float(x)
    sums = lax.reduce_window(
        _pad_to_frame(xf, geometry, 0), np.zeros((), xf.dtype), lax.add, _full(x, k), _full(x, s), "VALID"
    )
    if divisor_override:
        divisor: np.ndarray | int = divisor_override
    else:
        divisor = np.ones(())
        for n, kk, ss, pp, o in zip(x.shape[-nd:], k, s, p, out, strict=True):
            divisor = np.multiply.outer(divisor, _avg_divisor(n, kk, ss, pp, o, count_include_pad))
    # An integer average truncates, as the cast does.
    return (sums / jnp.asarray(divisor, xf.dtype)).astype(x.dtype)


def avg_pool_backward(nd: int, grad_output: Array, x: Array, *forward_args: Any) -> Array:
    return _pullback(lambda x_: avg_pool(nd, x_, *forward_args), grad_output, x)


# --- max pooling ---------------------------------------------------------------------------


def max_pool(nd: int, x: Array, *window: Any, **named: Any) -> Array:
    geometry = _geometry(nd, x, *window, **named)
    k, s, _, d, _ = geometry
    low = lowest(x.dtype)
    return lax.reduce_window(
        _pad_to_frame(x, geometry, low), np.asarray(low, x.dtype), lax.max, _full(x, k), _full(x, s),
        "VALID", window_dilation=_full(x, d),
    )  # fmt: skip


def max_pool_with_indices(nd: int, x: Array, *window: Any, **named: Any) -> tuple[Array, Array]:
    geometry = _geometry(nd, x, *window, **named)
    k, s, p, d, out = geometry
    xp = _pad_to_frame(x, geometry, lowest(x.dtype))
    lead = x.ndim - nd

    def at_offset(offset: Sequence[int]) -> Array:
        start = [i * dd for i, dd in zip(offset, d, strict=True)]
        limit = [st + (o - 1) * ss + 1 for st, o, ss in zip(start, out, s, strict=True)]
        return lax.slice(xp, (0,) * lead + tuple(start), (*x.shape[:lead], *limit), _full(x, s))

    # One strided slice per kernel offset: (K, ..., *out), scanned in row-major kernel order.
    windows = jnp.stack([at_offset(offset) for offset in itertools.product(*map(range, k))])
    which = scan_argmax(windows, axis=0)
    best = jnp.max(windows, axis=0)
    offsets = _unravel(which, k)
    # A window whose elements are all the lowest value (-inf) keeps its first element inside
    # the input, which eager's loop starts from: not the padding, whose -inf ties with them.
    low = best == jnp.asarray(lowest(x.dtype), x.dtype)
    for a in range(nd):
        first = _first_inside(x.shape[lead + a], k[a], s[a], p[a], d[a], out[a])
        shape = [1] * which.ndim
        shape[lead + a] = out[a]
        offsets[a] = jnp.where(low, jnp.asarray(first.reshape(shape)), offsets[a])
    # torch's indices are flat positions within each spatial plane (or volume).
    index = jnp.zeros(which.shape, jnp.int64)
    for a in range(nd):
        position = lax.broadcasted_iota(jnp.int64, which.shape, lead + a) * s[a] - p[a] + offsets[a] * d[a]
        index = index * x.shape[lead + a] + position
    return best, index


def _unravel(flat: Array, shape: Sequence[int]) -> list[Array]:
    """Row-major coordinates of in-range flat positions, in plain lax: jnp.unravel_index is a
    nested jit whose first trace in a process costs ~0.1 s (a warm-cache first step pays it)."""
    coords = []
    for a in range(len(shape)):
        inner = math.prod(shape[a + 1 :])
        q = lax.div(flat, np.asarray(inner, flat.dtype)) if inner > 1 else flat
        coords.append(lax.rem(q, np.asarray(shape[a], flat.dtype)) if a > 0 else q)
    return coords


def scatter_by_index(nd: int, grad_output: Array, x: Array, indices: Array) -> Array:
    """The gradient of a max pooling: each output's gradient added at its flat index."""
    rows = math.prod(x.shape[:-nd])  # sizes given, not -1: an empty batch leaves nothing to infer
    g = grad_output.reshape(rows, math.prod(grad_output.shape[-nd:]))
    out = jnp.zeros((rows, math.prod(x.shape[-nd:])), g.dtype)
    where = indices.reshape(rows, math.prod(indices.shape[-nd:]))
    return out.at[jnp.arange(rows)[:, None], where].add(g).reshape(x.shape)


def max_pool_backward(nd: int, grad_output: Array, x: Array, *window_then_indices: Any) -> Array:
    # The indices say where each gradient goes; the window that chose them is not needed.
    return scatter_by_index(nd, grad_output, x, window_then_indices[-1])


# --- fractional max pooling -----------------------------------------------------------------


def _fractional_starts(sample: Array, size: int, out: int, kernel: int) -> Array:
    """Where each window starts along one dim (eager's ``generate_intervals``): from the
    plane's sample ``u`` in [0, 1), ``trunc((i + u) * alpha) - trunc(u * alpha)`` with
    ``alpha = (size - kernel) / (out - 1)`` in the input's dtype; the last window ends the dim."""
    last = jnp.full((*sample.shape, 1), size - kernel, jnp.int64)
    if out == 1:
        return last
    dtype = np.dtype(sample.dtype)
    alpha = dtype.type(size - kernel) / dtype.type(out - 1)
    # Half types round after each operation, as c10's Half and BFloat16 arithmetic does (XLA
    # would keep a float32 intermediate); float32 and float64 compute in their own type.
    rounded = rounded_to(dtype)
    wide = compute_float(sample)
    i = jnp.arange(out - 1, dtype=wide.dtype)
    u = wide[..., None]
    offsets = rounded(rounded(i + u) * wide.dtype.type(alpha))
    starts = offsets.astype(jnp.int64) - rounded(u * wide.dtype.type(alpha)).astype(jnp.int64)
    return jnp.concatenate([starts, last], axis=-1)


def fractional_max_pool(
    nd: int, x: Array, kernel_size: Sequence[int], output_size: Sequence[int], samples: Array
) -> tuple[Array, Array]:
    """Max over windows placed by each plane's random samples (``samples``: batch, planes, nd;
    the last spatial dim takes the first sample). As eager's loop: the first maximum of a window
    in scan order, a NaN over any number, the last NaN where there are several."""
    spatial = x.shape[-nd:]
    # (batch, planes, flat), sized explicitly (as below): a -1 cannot be inferred from an empty batch.
    planes = x.reshape(math.prod(x.shape[: -nd - 1]), x.shape[-nd - 1], math.prod(spatial))
    u = samples.astype(x.dtype).reshape(planes.shape[0], planes.shape[1], nd)
    coords = []
    for d in range(nd):
        which = nd - 1 - d if nd == 2 else d  # eager's 2-d kernel reads (w, h), its 3-d one (t, h, w)
        starts = _fractional_starts(u[..., which], spatial[d], output_size[d], kernel_size[d])
        coords.append(starts[..., :, None] + jnp.arange(kernel_size[d]))  # (batch, planes, out, k)
    # Flat input index of every (output position, kernel offset), both in row-major scan order.
    flat = jnp.zeros((), jnp.int64)
    for d in range(nd):
        shape = [planes.shape[0], planes.shape[1]] + [1] * (2 * nd)
        shape[2 + d], shape[2 + nd + d] = output_size[d], kernel_size[d]
        stride = math.prod(spatial[d + 1 :])
        flat = flat + coords[d].reshape(shape) * stride
    flat = flat.reshape(planes.shape[0], planes.shape[1], math.prod(output_size), math.prod(kernel_size))
    windows = flat.reshape(*flat.shape[:2], math.prod(flat.shape[2:]), 1)
    values = jnp.take_along_axis(planes[:, :, :, None], windows, axis=2)
    values = values.reshape(flat.shape)
    pick = scan_argmax(values, axis=-1)[..., None]
    out_shape = (*x.shape[:-nd], *output_size)
    best = jnp.take_along_axis(values, pick, axis=-1).reshape(out_shape)
    return best, jnp.take_along_axis(flat, pick, axis=-1).reshape(out_shape)


def fractional_max_pool_backward(
    nd: int, grad_output: Array, x: Array, kernel_size: Any, output_size: Any, indices: Array
) -> Array:
    return scatter_by_index(nd, grad_output, x, indices)


# --- adaptive pooling ----------------------------------------------------------------------


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) averaging matrix with torch's adaptive windows [floor(i*n/o), ceil((i+1)*n/o))."""
    m = np.zeros((out, size))
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


def adaptive_avg_pool(nd: int, x: Array, output_size: Ints) -> Array:
    out = expand(output_size, nd)
    spatial = x.shape[-nd:]
    xf = compute_float(x)
    if all(n % o == 0 for n, o in zip(spatial, out, strict=True)):
        # Equal windows (global pooling included): a reshape and a mean, as torch sums and divides.
        tiles = xf.reshape(*x.shape[:-nd], *itertools.chain(*((o, n // o) for n, o in zip(spatial, out))))
        return jnp.mean(tiles, axis=tuple(range(1 - 2 * nd, 0, 2))).astype(x.dtype)
    # One averaging matrix per axis, contracted in one einsum: "...ab,xa,yb->...xy" in 2-d.
    ins, outs = "abc"[:nd], "xyz"[:nd]
    spec = f"...{ins}," + ",".join(o + i for o, i in zip(outs, ins)) + f"->...{outs}"
    mats = [jnp.asarray(_adaptive_matrix(n, o), xf.dtype) for n, o in zip(spatial, out, strict=True)]
    return jnp.einsum(spec, xf, *mats, precision=lax.Precision.HIGHEST).astype(x.dtype)


def adaptive_avg_pool_backward(nd: int, grad_output: Array, x: Array) -> Array:
    return _pullback(lambda x_: adaptive_avg_pool(nd, x_, grad_output.shape[-nd:]), grad_output, x)


def _adaptive_windows(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """(out, kmax) input positions of each adaptive window, and which of them are real
    (windows differ in length: the short ones repeat their last position, masked off)."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-(-((i + 1) * size) // out) for i in range(out)]
    kmax = max(e - s for s, e in zip(starts, ends))
    offsets = np.arange(kmax)
    idx = np.minimum(np.asarray(starts)[:, None] + offsets, np.asarray(ends)[:, None] - 1)
    valid = offsets[None, :] < (np.asarray(ends) - np.asarray(starts))[:, None]
    return idx.astype(np.int64), valid


def adaptive_max_pool(nd: int, x: Array, output_size: Ints) -> tuple[Array, Array]:
    """Values and torch's indices (flat positions within each spatial plane or volume), as
    ``scan_argmax`` picks them."""
    output_size = expand(output_size, nd)
    lead, spatial = x.shape[:-nd], x.shape[-nd:]
    windows = [_adaptive_windows(n, o) for n, o in zip(spatial, output_size, strict=True)]
    vals = x
    for a, (idx, _) in enumerate(windows):
        axis = len(lead) + 2 * a
        taken = jnp.take(vals, jnp.asarray(idx.reshape(-1)), axis=axis)
        vals = taken.reshape(vals.shape[:axis] + idx.shape + vals.shape[axis + 1 :])
    # (..., o1, k1, o2, k2, ...) -> (..., o1, o2, ..., k1 * k2 * ...)
    perm = (
        list(range(len(lead)))
        + [len(lead) + 2 * a for a in range(nd)]
        + [len(lead) + 2 * a + 1 for a in range(nd)]
    )
    vals = jnp.transpose(vals, perm)
    ks = tuple(w[0].shape[1] for w in windows)
    valid = np.ones((), bool)
    for a, (_, v) in enumerate(windows):
        shape = [1] * (2 * nd)
        shape[a], shape[nd + a] = v.shape
        valid = valid & v.reshape(shape)
    vals = jnp.where(jnp.asarray(valid), vals, jnp.asarray(lowest(x.dtype), x.dtype))
    flat = vals.reshape(*vals.shape[: len(lead) + nd], math.prod(ks))
    which = scan_argmax(flat, axis=-1)
    values = jnp.max(flat, axis=-1)
    index = jnp.zeros(which.shape, jnp.int64)
    stride = 1
    for a in reversed(range(nd)):
        k = _unravel(which, ks)[a]
        o = lax.broadcasted_iota(jnp.int64, which.shape, len(lead) + a)
        pos = jnp.asarray(windows[a][0])[o, k]
        index = index + pos * stride
        stride *= spatial[a]
    return values, index


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
    """torch's binary search, step for step: the lower bound moves past ``mid`` while
    ``!(seq[mid] >= value)`` (``>`` for the right side). A NaN fails every comparison, so it
    sends the search right, in the sequence and as a value, where JAX's search orders NaN as
    the largest number ([0, 1, nan] puts a NaN at 3 in torch, at 2 in JAX)."""
    n = sorted_sequence.shape[-1]
    if n == 0 or values.size == 0:
        return jnp.zeros(values.shape, jnp.int64)
    seq = sorted_sequence if sorted_sequence.ndim > 1 else sorted_sequence[None]
    vals = values.reshape(-1, values.shape[-1]) if sorted_sequence.ndim > 1 else values.reshape(1, -1)
    seq = seq.reshape(-1, n)
    start = jnp.zeros(vals.shape, jnp.int64)
    end = jnp.full(vals.shape, n, jnp.int64)
    for _ in range(n.bit_length()):
        going = start < end
        mid = start + ((end - start) >> 1)
        at_mid = jnp.take_along_axis(seq, jnp.minimum(mid, n - 1), axis=-1)
        past = ~(at_mid > vals) if right else ~(at_mid >= vals)
        start = jnp.where(going & past, mid + 1, start)
        end = jnp.where(going & ~past, mid, end)
    return start.reshape(values.shape)


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
