"""Lowerings of fake quantization (``torch.fake_quantize_per_tensor_affine`` and
``_per_channel_``, which quantization-aware training's ``FakeQuantize`` modules call).

Each value is quantized as torch's CPU kernel does: multiplied by the reciprocal of the scale
(``1 / scale`` in float32, not a division), rounded half to even, shifted by the zero point,
clamped to the quantized range and mapped back. The mask (kept for the backward, which passes
the gradient where it is set) marks the values whose quantized form was in range.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from xlalab.runtime.lowering.elementwise import compute_float
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array


def _fake_quantize(
    x: Array, scale: Array, zero_point: Array, quant_min: int, quant_max: int
) -> tuple[Array, Array]:
    """``scale`` and ``zero_point`` broadcast against ``x`` (one per tensor, or per channel)."""
    y = compute_float(x)
    scale = scale.astype(jnp.float32)
    inverse = jnp.float32(1) / scale
    if jnp.issubdtype(zero_point.dtype, jnp.floating):  # float zero points shift before rounding
        zero = zero_point.astype(jnp.float32)
        q = jnp.round(y * inverse + zero)
        out = (jnp.clip(q, quant_min, quant_max) - zero) * scale
        return out.astype(x.dtype), (q >= quant_min) & (q <= quant_max)
    zero = zero_point.astype(jnp.int64)
    q = (jnp.round(y * inverse) + zero.astype(jnp.float32)).astype(jnp.int64)
    out = (jnp.clip(q, quant_min, quant_max) - zero).astype(jnp.float32) * scale
    return out.astype(x.dtype), (q >= quant_min) & (q <= quant_max)


@lowering(aten.fake_quantize_per_tensor_affine_cachemask.default)
def _per_tensor(
    x: Array, scale: float, zero_point: int, quant_min: int, quant_max: int
) -> tuple[Array, Array]:
    return _fake_quantize(x, jnp.float32(scale), jnp.int64(zero_point), quant_min, quant_max)


@lowering(aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default)
def _per_tensor_qparams(
    x: Array, scale: Array, zero_point: Array, enabled: Array, quant_min: int, quant_max: int
) -> tuple[Array, Array]:
    # The module's switch is a tensor: off, the values pass through and every mask bit is set.
    out, mask = _fake_quantize(x, scale.reshape(()), zero_point.reshape(()), quant_min, quant_max)
    on = enabled.reshape(()) != 0
    return jnp.where(on, out, x), jnp.where(on, mask, True)


@lowering(aten.fake_quantize_per_channel_affine_cachemask.default)
def _per_channel(
    x: Array, scale: Array, zero_point: Array, axis: int, quant_min: int, quant_max: int
) -> tuple[Array, Array]:
    shape = [1] * x.ndim
    shape[axis % x.ndim] = -1
    return _fake_quantize(x, scale.reshape(shape), zero_point.reshape(shape), quant_min, quant_max)
