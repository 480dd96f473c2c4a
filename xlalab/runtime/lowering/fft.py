"""Lowerings of the three FFT primitives every ``torch.fft`` function decomposes into.

``normalization`` is torch's enum: 0 leaves the transform unscaled, 1 scales by
1/sqrt(n), 2 by 1/n, where n is the number of points transformed. The JAX transforms are
called unnormalized (``norm="backward"`` for forward transforms, ``norm="forward"`` for
inverse ones) and scaled here, so that both directions follow the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import torch

from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array


def _scaled(x: Array, n: int, normalization: int) -> Array:
    """``x`` times the norm's factor, which torch computes in float64 and rounds to the
    result's type before pocketfft multiplies by it."""
    if normalization == 0:
        return x
    factor = 1 / math.sqrt(n) if normalization == 1 else 1 / n
    return x * jnp.asarray(factor, x.real.dtype)


def _axes(x: Array, dim: Sequence[int]) -> tuple[int, ...]:
    return tuple(d % x.ndim for d in dim)


def _complex(x: Array) -> Array:
    return x if jnp.iscomplexobj(x) else x.astype(jnp.complex128 if x.dtype == jnp.float64 else jnp.complex64)


@lowering(aten._fft_r2c.default)
def _fft_r2c(x: Array, dim: Sequence[int], normalization: int, onesided: bool) -> Array:
    axes = _axes(x, dim)
    n = math.prod(x.shape[a] for a in axes)
    out = jnp.fft.rfftn(x, axes=axes) if onesided else jnp.fft.fftn(_complex(x), axes=axes)
    return _scaled(out, n, normalization)


@lowering(aten._fft_c2c.default)
def _fft_c2c(x: Array, dim: Sequence[int], normalization: int, forward: bool) -> Array:
    axes = _axes(x, dim)
    n = math.prod(x.shape[a] for a in axes)
    if not axes:
        return x
    out = jnp.fft.fftn(x, axes=axes) if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scaled(out, n, normalization)


@lowering(aten._fft_c2r.default)
def _fft_c2r(x: Array, dim: Sequence[int], normalization: int, last_dim_size: int) -> Array:
    axes = _axes(x, dim)
    sizes = [x.shape[a] for a in axes[:-1]] + [last_dim_size]
    out = jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")
    return _scaled(out, math.prod(sizes), normalization)
