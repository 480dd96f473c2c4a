"""Lowerings of ``F.grid_sample`` (``grid_sampler_2d``/``_3d``) and their backward ops.

One algorithm serves 2 and 3 spatial dims: each grid coordinate is unnormalized from [-1, 1],
passed through the padding mode (zeros, border, reflection) and read at its 2**n neighbours
(bilinear/trilinear), its rounded position (nearest) or a 4x4 neighbourhood (bicubic, 2-d),
each read one gather from the flattened input. Out-of-range reads weigh zero.

The backward is ``jax.vjp`` of the forward. torch's backward kernels differentiate the same
formulas by hand, with two conventions the forward here writes out so that the pullback
follows them: a coordinate clipped to the border (or sitting on it) gets no gradient, and a
reflected one flips its gradient's sign on every fold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import torch

from xlalab.runtime.lowering.elementwise import compute_float
from xlalab.runtime.lowering.registry import lowering
from xlalab.runtime.lowering.upsample import cubic_coefficients

aten = torch.ops.aten

Array = jax.Array

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2


def _unnormalize(coord: Array, size: int, align_corners: bool) -> Array:
    """[-1, 1] to pixel units: [0, size - 1] with aligned corners, else [-0.5, size - 0.5]."""
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    return (coord + 1) * (size / 2) - 0.5


def _clip(coord: Array, size: int) -> Array:
    # Written as selects rather than a clamp: on the border itself the gradient is zero, as in
    # torch's backward (a clamp's gradient there would be one, or a half). A NaN (a NaN or
    # infinite grid value, reflected) reads at 0, as eager's max(coord, 0) does.
    high = size - 1
    inside = jnp.where(coord >= high, high, coord).astype(coord.dtype)
    return jnp.where(coord > 0, inside, jnp.zeros_like(coord))


def _reflect(coord: Array, twice_low: int, twice_high: int) -> Array:
    """Fold ``coord`` into [low, high] by reflections (bounds given doubled, so halves are exact)."""
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    dist = coord - low
    dist = jnp.where(dist < 0, -dist, dist)
    extra = jnp.fmod(dist, span)
    flips = jnp.floor(dist / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad(coord: Array, size: int, padding: int, align_corners: bool) -> Array:
    """Where a pixel coordinate reads under the padding mode (zeros: as it is)."""
    if padding == BORDER:
        return _clip(coord, size)
    if padding == REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(coord, *twice), size)
    return coord


def _read(flat: Array, spatial: Sequence[int], at: Sequence[Array], weight: Array | None) -> Array:
    """``weight * input[n, c, at...]`` for coordinates ``at`` (one integral-valued float array
    per spatial axis, each ``(N, *out)``), zero where any coordinate is out of range."""
    inside = None
    for a, size in zip(at, spatial, strict=True):
        ok = (a >= 0) & (a < size)
        inside = ok if inside is None else inside & ok
    assert inside is not None
    index = None
    for a, size in zip(at, spatial, strict=True):
        i = jnp.where(inside, a, 0).astype(jnp.int32)
        index = i if index is None else index * size + i
    assert index is not None
    n, out = index.shape[0], index.shape[1:]
    values = jnp.take_along_axis(flat, index.reshape(n, 1, math.prod(out)), axis=2)
    values = values.reshape(n, flat.shape[1], *out)
    w = jnp.where(inside, 1 if weight is None else weight, 0).astype(flat.dtype)
    return values * w[:, None]


def grid_sample(
    x: Array, grid: Array, interpolation: int, padding: int, align_corners: bool
) -> Array:
    nd = x.ndim - 2
    spatial = x.shape[2:]
    y = compute_float(x)
    g = compute_float(grid).astype(y.dtype)
    flat = y.reshape(y.shape[0], y.shape[1], math.prod(spatial))  # not -1: the batch may be empty
    # The grid's last axis lists x (the last spatial axis) first; ``coords`` is in axis order.
    coords = [_unnormalize(g[..., nd - 1 - a], spatial[a], align_corners) for a in range(nd)]
    if interpolation == BICUBIC:
        return _bicubic(flat, spatial, coords, padding, align_corners).astype(x.dtype)
    coords = [_pad(c, size, padding, align_corners) for c, size in zip(coords, spatial, strict=True)]
    if interpolation == NEAREST:
        return _read(flat, spatial, [jnp.round(c) for c in coords], None).astype(x.dtype)
    low = [jnp.floor(c) for c in coords]
    out = None
    # torch's corner order: x varies fastest, then y, then z.
    for corner in itertools.product((0, 1), repeat=nd):
        weight = None
        for a in reversed(range(nd)):  # the weight multiplies x's factor first, as torch's does
            c, lo = coords[a], low[a]
            f = (c - lo) if corner[a] else (lo + 1 - c)
            weight = f if weight is None else weight * f
        assert weight is not None
        term = _read(flat, spatial, [lo + b for lo, b in zip(low, corner, strict=True)], weight)
        out = term if out is None else out + term
    assert out is not None
    return out.astype(x.dtype)


def _bicubic(
    flat: Array, spatial: Sequence[int], coords: Sequence[Array], padding: int, align_corners: bool
) -> Array:
    """2-d bicubic: four cubic interpolations along x, one along y; each tap's position goes
    through the padding mode on its own."""
    (cy, cx), (height, width) = coords, spatial
    y0, x0 = jnp.floor(cy), jnp.floor(cx)
    wy, wx = cubic_coefficients(cy - y0), cubic_coefficients(cx - x0)
    rows = []
    for j in range(4):
        ty = _pad(y0 - 1 + j, height, padding, align_corners)
        row = None
        for i in range(4):
            tx = _pad(x0 - 1 + i, width, padding, align_corners)
            term = _read(flat, spatial, [ty, tx], wx[i])
            row = term if row is None else row + term
        rows.append(row)
    out = None
    for j, row in enumerate(rows):
        term = row * wy[j][:, None]
        out = term if out is None else out + term
    assert out is not None
    return out


@lowering(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def _grid_sampler(x: Array, grid: Array, interpolation: int, padding: int, align_corners: bool) -> Array:
    return grid_sample(x, grid, interpolation, padding, align_corners)


@lowering(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def _grid_sampler_backward(
    grad_output: Array,
    x: Array,
    grid: Array,
    interpolation: int,
    padding: int,
    align_corners: bool,
    output_mask: Sequence[bool],
) -> tuple[Array | None, Array]:
    def forward(x_: Array, grid_: Array) -> Array:
        return grid_sample(x_, grid_, interpolation, padding, align_corners)

    out, pullback = jax.vjp(forward, x, grid)
    grad_x, grad_grid = pullback(grad_output.astype(out.dtype))
    return (grad_x if output_mask[0] else None, grad_grid)
