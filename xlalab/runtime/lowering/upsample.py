"""Lowerings of interpolation (``F.interpolate``): nearest, nearest-exact and (bi/tri)linear
in 1, 2 and 3 spatial dims, bicubic in 2, and their backward ops.

Shapes are static, so every source index and weight is a trace-time NumPy constant computed
the way torch's kernels compute them (in float32, ``area_pixel_compute_source_index``).
Interpolation is separable: one gather (nearest) or two gathers and a weighted sum (linear)
per spatial axis (four for bicubic, which goes from the last axis to the first so that its
sums associate as torch's kernel's do). A backward is ``jax.vjp`` of its forward: the
transpose of the gathers.
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


def _scale(size: int, out: int, align_corners: bool, scale: float | None) -> np.float32:
    """torch's area_pixel_compute_scale."""
    if align_corners:
        return np.float32((size - 1) / (out - 1)) if out > 1 else np.float32(0)
    return np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(size / out)


def _nearest_index(out: int, size: int, scale: float | None, exact: bool) -> np.ndarray:
    ratio = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(size / out)
    dst = np.arange(out, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * ratio) if exact else np.floor(dst * ratio)
    return np.minimum(src.astype(np.int64), size - 1)


def _linear_taps(out: int, size: int, align_corners: bool, scale: float | None) -> tuple[np.ndarray, ...]:
    """(index0, index1, weight0, weight1) along one axis."""
    ratio = _scale(size, out, align_corners, scale)
    dst = np.arange(out, dtype=np.float32)
    if align_corners:
        src = ratio * dst
    else:
        src = np.maximum(ratio * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    i1 = np.minimum(i0 + 1, size - 1)
    w1 = (src - i0.astype(np.float32)).astype(np.float32)
    return i0, i1, np.float32(1) - w1, w1


def cubic_coefficients(t: Any) -> list[Any]:
    """The four weights of Keys' cubic convolution (A = -0.75, torch's) at fraction ``t``
    (a NumPy or JAX array: the taps at offsets -1, 0, 1, 2)."""
    a = -0.75

    def near(x: Any) -> Any:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: Any) -> Any:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_taps(out: int, size: int, align_corners: bool, scale: float | None) -> tuple[np.ndarray, ...]:
    """(indices, weights), each ``(out, 4)``, along one axis; taps past the edge read the edge."""
    ratio = _scale(size, out, align_corners, scale)
    dst = np.arange(out, dtype=np.float32)
    src = ratio * dst if align_corners else ratio * (dst + np.float32(0.5)) - np.float32(0.5)  # not clamped
    low = np.floor(src)
    t = (src - low).astype(np.float32)
    index = np.clip(low.astype(np.int64)[:, None] + np.arange(-1, 3), 0, size - 1)
    return index, np.stack(cubic_coefficients(t), axis=1).astype(np.float32)


def cubic(x: Array, output_size: Sequence[int], align_corners: bool, scales: Scales) -> Array:
    nd = len(output_size)
    y = compute_float(x)
    for i in reversed(range(nd)):
        axis = x.ndim - nd + i
        index, weight = _cubic_taps(output_size[i], y.shape[axis], align_corners, scales[i])
        shape = [1] * y.ndim
        shape[axis] = output_size[i]
        taps = [jnp.take(y, jnp.asarray(index[:, k]), axis=axis) for k in range(4)]
        w = [jnp.asarray(weight[:, k].reshape(shape), y.dtype) for k in range(4)]
        y = taps[0] * w[0] + taps[1] * w[1] + taps[2] * w[2] + taps[3] * w[3]
    return y.astype(x.dtype)


def nearest(x: Array, output_size: Sequence[int], scales: Scales, exact: bool = False) -> Array:
    nd = len(output_size)
    for i, (out, scale) in enumerate(zip(output_size, scales, strict=True)):
        axis = x.ndim - nd + i
        x = jnp.take(x, jnp.asarray(_nearest_index(out, x.shape[axis], scale, exact)), axis=axis)
    return x


def linear(x: Array, output_size: Sequence[int], align_corners: bool, scales: Scales) -> Array:
    nd = len(output_size)
    y = compute_float(x)
    for i, (out, scale) in enumerate(zip(output_size, scales, strict=True)):
        axis = x.ndim - nd + i
        i0, i1, w0, w1 = _linear_taps(out, y.shape[axis], align_corners, scale)
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

    def forward(x: Array, output_size: Sequence[int], *scales: float | None) -> Array:
        return nearest(x, output_size, _pad(scales, nd), exact)

    def vec(x: Array, output_size: Sequence[int] | None, scale_factors: Sequence[float] | None) -> Array:
        size = _size_from(x, output_size, scale_factors)
        return nearest(x, size, scale_factors if output_size is None else (None,) * nd, exact)  # type: ignore[arg-type]

    def grad(
        grad_output: Array, output_size: Sequence[int], input_size: Sequence[int], *scales: float | None
    ) -> Array:
        return _backward(
            lambda x_: nearest(x_, output_size, _pad(scales, nd), exact), grad_output, input_size
        )

    if exact or nd != 2:  # nearest 2d forward/backward live in nn.py
        lowering(packet.default)(forward)
        lowering(packet.vec)(vec)
        lowering(backward)(grad)


def _pad(scales: Sequence[float | None], nd: int) -> list[float | None]:
    return list(scales) + [None] * (nd - len(scales))


# --- linear and cubic -----------------------------------------------------------------------------------


def _register_linear(name: str, nd: int, interpolate: Callable[..., Array] = linear) -> None:
    packet = getattr(aten, f"upsample_{name}")
    backward = getattr(aten, f"upsample_{name}_backward").default

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
