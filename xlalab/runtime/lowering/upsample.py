"""Lowerings of interpolation (``F.interpolate``): nearest, nearest-exact and (bi/tri)linear
in 1, 2 and 3 spatial dims, bicubic in 2, antialiased bilinear and bicubic (``antialias=True``,
torchvision's resize) in 2, and their backward ops.

Shapes are static, so every source index and weight is a trace-time NumPy constant computed
the way torch's kernels compute them (``area_pixel_compute_source_index``, in float64 for a
float64 input and in float32 for the rest, as torch's ``opmath`` type). uint8 images, which
eager resamples in fixed point, run on the CPU fallback (``tensor.FALLBACK_IF``).
Interpolation is separable: one gather (nearest) or two gathers and a weighted sum (linear)
per spatial axis (four for bicubic, which goes from the last axis to the first so that its
sums associate as torch's kernel's do; antialiased resizing as many as its stretched filter
covers). A backward is ``jax.vjp`` of its forward: the
transpose of the gathers; nearest's is one scatter-add in output order, as torch's kernel adds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from xlalab.runtime.lowering.elementwise import compute_float
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array
Scales = Sequence[float | None]


def _scale(size: int, out: int, align_corners: bool, scale: float | None, dtype: Any = np.float32) -> Any:
    """torch's area_pixel_compute_scale."""
    if align_corners:
        return dtype((size - 1) / (out - 1)) if out > 1 else dtype(0)
    return dtype(1.0 / scale) if scale is not None and scale > 0 else dtype(size / out)


def _nearest_index(out: int, size: int, scale: float | None, exact: bool, shortcuts: bool) -> np.ndarray:
    """Source indices of nearest resizing. With ``shortcuts``, as torch's legacy ``nearest_idx``
    (which 2-d forward kernels and every nearest backward kernel use), an axis that keeps its
    size copies and one that doubles repeats, whatever the scale factor says."""
    if shortcuts and out == size:
        return np.arange(out)
    if shortcuts and out == 2 * size:
        return np.arange(out) // 2
    ratio = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(size / out)
    dst = np.arange(out, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * ratio) if exact else np.floor(dst * ratio)
    return np.minimum(src.astype(np.int64), size - 1)


def _opmath(x: Array) -> Any:
    """The float type torch's kernels compute source positions and weights in for ``x``."""
    return np.float64 if x.dtype == jnp.float64 else np.float32


def _linear_taps(
    out: int, size: int, align_corners: bool, scale: float | None, dtype: Any = np.float32
) -> tuple[np.ndarray, ...]:
    """(index0, index1, weight0, weight1) along one axis."""
    ratio = _scale(size, out, align_corners, scale, dtype)
    dst = np.arange(out, dtype=dtype)
    if align_corners:
        src = ratio * dst
    else:
        src = np.maximum(ratio * (dst + dtype(0.5)) - dtype(0.5), dtype(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    i1 = np.minimum(i0 + 1, size - 1)
    w1 = (src - i0.astype(dtype)).astype(dtype)
    return i0, i1, dtype(1) - w1, w1


def _keys_near(x: Any, a: Any) -> Any:
    """Keys' cubic convolution kernel for 0 <= x <= 1 (NumPy or JAX values)."""
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _keys_far(x: Any, a: Any) -> Any:
    """Keys' cubic convolution kernel for 1 < x < 2."""
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def cubic_coefficients(t: Any) -> list[Any]:
    """The four weights of Keys' cubic convolution (A = -0.75, torch's) at fraction ``t``
    (a NumPy or JAX array: the taps at offsets -1, 0, 1, 2)."""
    a = -0.75
    return [_keys_far(t + 1, a), _keys_near(t, a), _keys_near(1 - t, a), _keys_far(2 - t, a)]


def _cubic_taps(
    out: int, size: int, align_corners: bool, scale: float | None, dtype: Any = np.float32
) -> tuple[np.ndarray, ...]:
    """(indices, weights), each ``(out, 4)``, along one axis; taps past the edge read the edge."""
    ratio = _scale(size, out, align_corners, scale, dtype)
    dst = np.arange(out, dtype=dtype)
    src = ratio * dst if align_corners else ratio * (dst + dtype(0.5)) - dtype(0.5)  # not clamped
    low = np.floor(src)
    t = (src - low).astype(dtype)
    index = np.clip(low.astype(np.int64)[:, None] + np.arange(-1, 3), 0, size - 1)
    return index, np.stack(cubic_coefficients(t), axis=1).astype(dtype)


def cubic(x: Array, output_size: Sequence[int], align_corners: bool, scales: Scales) -> Array:
    nd = len(output_size)
    y = compute_float(x)
    for i in reversed(range(nd)):
        axis = x.ndim - nd + i
        index, weight = _cubic_taps(output_size[i], y.shape[axis], align_corners, scales[i], _opmath(x))
        shape = [1] * y.ndim
        shape[axis] = output_size[i]
        taps = [jnp.take(y, jnp.asarray(index[:, k]), axis=axis) for k in range(4)]
        w = [jnp.asarray(weight[:, k].reshape(shape), y.dtype) for k in range(4)]
        y = taps[0] * w[0] + taps[1] * w[1] + taps[2] * w[2] + taps[3] * w[3]
    return y.astype(x.dtype)


def _aa_filter(cubic: bool, dtype: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The kernel antialiased resizing weighs taps by: a triangle, or Keys' cubic with A = -0.5
    (PIL's, where plain bicubic takes torch's -0.75)."""
    a = dtype(-0.5)

    def triangle(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        return np.where(x < 1, 1 - x, 0).astype(dtype)

    def keys(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        return np.where(x < 1, _keys_near(x, a), np.where(x < 2, _keys_far(x, a), 0)).astype(dtype)

    return keys if cubic else triangle


def _aa_taps(
    out: int, size: int, align_corners: bool, scale: float | None, cubic: bool, dtype: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each ``(out, taps)``, of antialiased resizing along one axis, as
    torch's separable kernel computes them (in the input's float type): a filter stretched by
    the downscale factor, its taps normalized to sum to one (unused taps weigh zero)."""
    ratio = _scale(size, out, align_corners, scale, dtype)
    one, half = dtype(1), dtype(0.5)
    support = dtype((4 if cubic else 2) * 0.5) * (ratio if ratio >= one else one)
    taps = int(np.ceil(support)) * 2 + 1
    inverse = one / ratio if ratio >= one else one
    center = ratio * (np.arange(out, dtype=dtype) + half)
    low = np.maximum(np.trunc(center - support + half).astype(np.int64), 0)
    count = np.clip(np.minimum(np.trunc(center + support + half).astype(np.int64), size) - low, 0, taps)
    j = np.arange(taps)
    offsets = ((j[None, :] + low[:, None]).astype(dtype) - center[:, None] + half) * inverse
    weights = np.where(j[None, :] < count[:, None], _aa_filter(cubic, dtype)(offsets), dtype(0))
    total = weights.sum(axis=1, dtype=dtype, keepdims=True)
    weights = np.where(total != 0, weights / np.where(total != 0, total, one), weights).astype(dtype)
    return np.minimum(low[:, None] + j[None, :], size - 1), weights


def _antialiased(cubic: bool) -> Callable[..., Array]:
    def resize(x: Array, output_size: Sequence[int], align_corners: bool, scales: Scales) -> Array:
        """Separable passes from the last axis to the first, each rounded to the input's dtype
        as torch's kernel stores it between passes; an axis that keeps its size is left alone."""
        nd = len(output_size)
        y = x
        for i in reversed(range(nd)):
            axis = x.ndim - nd + i
            if y.shape[axis] == output_size[i]:
                continue
            index, weight = _aa_taps(
                output_size[i], y.shape[axis], align_corners, scales[i], cubic, _opmath(x)
            )
            shape = [1] * y.ndim
            shape[axis] = output_size[i]
            wide = compute_float(y)
            acc = None
            for k in range(index.shape[1]):
                term = jnp.take(wide, jnp.asarray(index[:, k]), axis=axis) * jnp.asarray(
                    weight[:, k].reshape(shape), wide.dtype
                )
                acc = term if acc is None else acc + term
            assert acc is not None
            y = acc.astype(x.dtype)
        return y

    return resize


def nearest(
    x: Array, output_size: Sequence[int], scales: Scales, exact: bool = False, shortcuts: bool = False
) -> Array:
    nd = len(output_size)
    for i, (out, scale) in enumerate(zip(output_size, scales, strict=True)):
        axis = x.ndim - nd + i
        index = _nearest_index(out, x.shape[axis], scale, exact, shortcuts)
        x = jnp.take(x, jnp.asarray(index), axis=axis)
    return x


def _nearest_backward(
    grad_output: Array, input_size: Sequence[int], scales: Scales, exact: bool, shortcuts: bool
) -> Array:
    """One scatter-add of every output's gradient at its flat source position, in output order
    and in float32 for half types: the order and type torch's backward kernel adds in (the
    transposes of per-axis gathers would add an input's gradients in another association)."""
    nd = len(scales)
    spatial, out = tuple(input_size[-nd:]), grad_output.shape[-nd:]
    axes = [_nearest_index(o, n, s, exact, shortcuts) for o, n, s in zip(out, spatial, scales, strict=True)]
    where = np.ravel_multi_index(np.ix_(*axes), spatial).reshape(-1)
    rows = math.prod(input_size[:-nd])
    g = compute_float(grad_output).reshape(rows, len(where))
    acc = jnp.zeros((rows, math.prod(spatial)), g.dtype)
    return acc.at[:, jnp.asarray(where)].add(g).reshape(tuple(input_size)).astype(grad_output.dtype)


def linear(x: Array, output_size: Sequence[int], align_corners: bool, scales: Scales) -> Array:
    nd = len(output_size)
    y = compute_float(x)
    for i, (out, scale) in enumerate(zip(output_size, scales, strict=True)):
        axis = x.ndim - nd + i
        i0, i1, w0, w1 = _linear_taps(out, y.shape[axis], align_corners, scale, _opmath(x))
        shape = [1] * y.ndim
        shape[axis] = out
        a = jnp.take(y, jnp.asarray(i0), axis=axis)
        b = jnp.take(y, jnp.asarray(i1), axis=axis)
        y = a * jnp.asarray(w0.reshape(shape), y.dtype) + b * jnp.asarray(w1.reshape(shape), y.dtype)
    return y.astype(x.dtype)


def _size_from(
    x: Array, output_size: Sequence[int] | None, scale_factors: Sequence[float] | None
) -> list[int]:
    if output_size is not None:
        return list(output_size)
    assert scale_factors is not None
    nd = len(scale_factors)
    return [math.floor(n * f) for n, f in zip(x.shape[-nd:], scale_factors, strict=True)]


def _backward(forward: Callable[[Array], Array], grad_output: Array, input_size: Sequence[int]) -> Array:
    zeros = jnp.zeros(tuple(input_size), grad_output.dtype)
    out, pullback = jax.vjp(forward, zeros)
    return pullback(grad_output.astype(out.dtype))[0]


# --- nearest ----------------------------------------------------------------------------------


def _register_nearest(nd: int, exact: bool) -> None:
    prefix = "_upsample_nearest_exact" if exact else "upsample_nearest"
    packet = getattr(aten, f"{prefix}{nd}d")
    backward = getattr(aten, f"{prefix}{nd}d_backward").default

    # Eager's 2-d nearest forward and every nearest backward take torch's legacy shortcuts; its
    # 1-d and 3-d forwards do not, so their gradients are not those of their forwards.
    shortcuts = not exact and nd == 2

    def forward(x: Array, output_size: Sequence[int], *scales: float | None) -> Array:
        return nearest(x, output_size, _pad(scales, nd), exact, shortcuts)

    def vec(x: Array, output_size: Sequence[int] | None, scale_factors: Sequence[float] | None) -> Array:
        size = _size_from(x, output_size, scale_factors)
        scales = scale_factors if output_size is None else (None,) * nd
        return nearest(x, size, scales, exact, shortcuts)  # type: ignore[arg-type]

    def grad(
        grad_output: Array, output_size: Sequence[int], input_size: Sequence[int], *scales: float | None
    ) -> Array:
        return _nearest_backward(grad_output, input_size, _pad(scales, nd), exact, not exact)

    lowering(packet.default)(forward)
    lowering(packet.vec)(vec)
    lowering(backward)(grad)


def _pad(scales: Sequence[float | None], nd: int) -> list[float | None]:
    return list(scales) + [None] * (nd - len(scales))


# --- linear and cubic -----------------------------------------------------------------------------------


def _register_linear(
    name: str, nd: int, interpolate: Callable[..., Array] = linear, prefix: str = "upsample"
) -> None:
    packet = getattr(aten, f"{prefix}_{name}")
    backward = getattr(aten, f"{prefix}_{name}_backward").default

    def forward(x: Array, output_size: Sequence[int], align_corners: bool, *scales: float | None) -> Array:
        return interpolate(x, output_size, align_corners, _pad(scales, nd))

    def vec(
        x: Array,
        output_size: Sequence[int] | None,
        align_corners: bool,
        scale_factors: Sequence[float] | None,
    ) -> Array:
        size = _size_from(x, output_size, scale_factors)
        scales = scale_factors if output_size is None else (None,) * nd
        return interpolate(x, size, align_corners, scales)  # type: ignore[arg-type]

    def grad(
        grad_output: Array,
        output_size: Sequence[int],
        input_size: Sequence[int],
        align_corners: bool,
        *scales: float | None,
    ) -> Array:
        return _backward(
            lambda x_: interpolate(x_, output_size, align_corners, _pad(scales, nd)), grad_output, input_size
        )

    lowering(packet.default)(forward)
    lowering(packet.vec)(vec)
    lowering(backward)(grad)


for _nd in (1, 2, 3):
    _register_nearest(_nd, exact=False)
    _register_nearest(_nd, exact=True)
for _name, _nd in (("linear1d", 1), ("bilinear2d", 2), ("trilinear3d", 3)):
    _register_linear(_name, _nd)
_register_linear("bicubic2d", 2, cubic)
_register_linear("bilinear2d_aa", 2, _antialiased(cubic=False), prefix="_upsample")
_register_linear("bicubic2d_aa", 2, _antialiased(cubic=True), prefix="_upsample")
