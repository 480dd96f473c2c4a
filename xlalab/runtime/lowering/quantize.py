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
import numpy as np
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


# --------------------------------------------------------------------------- the fused observer

# eager's cutoff, a float constant compared in double (numpy: a JAX value at import would start
# JAX's backends before XLA_NUM_DEVICES can take effect)
SMALL_SCALE = float(np.float32(6.1e-5))


def choose_qparams(
    lo: Array, hi: Array, quant_min: int, quant_max: int, symmetric: bool
) -> tuple[Array, Array]:
    """(scale as float32, zero point as int32) from float32 ranges, elementwise, as eager's
    ``ChooseQuantizationParams`` (fbgemm's) computes them: float where it keeps floats, double
    where it widens, the zero point rounded half to even and clamped to the range."""
    f32, f64 = jnp.float32, jnp.float64
    lo, hi = lo.astype(f32), hi.astype(f32)
    span = quant_max - quant_min
    straddles = (lo < 0) & (hi > 0)
    if symmetric:
        sym_min, sym_max = -(span // 2 + 1), span // 2
        # Divided, not multiplied by a reciprocal (XLA's rewrite of a division by a constant).
        below, above = (jax.lax.optimization_barrier(jnp.full(lo.shape, f32(q))) for q in (sym_min, sym_max))
        widest = jnp.maximum(jnp.abs(lo / below), jnp.abs(hi / above))
        lo = jnp.where(straddles, (widest.astype(f64) * sym_min).astype(f32), lo)
        hi = jnp.where(straddles, (widest.astype(f64) * sym_max).astype(f32), hi)
    lo, hi = jnp.minimum(lo, f32(0)), jnp.maximum(hi, f32(0))
    scale = (hi.astype(f64) - lo.astype(f64)) / span
    narrow = scale.astype(f32)
    scale = jnp.where((narrow == 0) | jnp.isinf(f32(1) / narrow), f64(0.1), scale)
    small = scale < SMALL_SCALE
    amplifier = f32(SMALL_SCALE) / scale.astype(f32)
    # The range grows to the new scale: from 0 if it starts at 0, else to 0 if it ends there, else both ways.
    lo_small = jnp.where(lo == 0, lo, jnp.where(hi == 0, f32(-SMALL_SCALE * span), lo * amplifier))
    hi_small = jnp.where(lo == 0, f32(SMALL_SCALE * span), jnp.where(hi == 0, hi, hi * amplifier))
    lo, hi = jnp.where(small, lo_small, lo), jnp.where(small, hi_small, hi)
    scale = jnp.where(small, f64(SMALL_SCALE), scale)
    from_min = quant_min - lo.astype(f64) / scale
    from_max = quant_max - hi.astype(f64) / scale
    error_min = abs(quant_min) - jnp.abs(lo.astype(f64) / scale)
    error_max = abs(quant_max) - jnp.abs(hi.astype(f64) / scale)
    zero = jnp.where(error_min < error_max, from_min, from_max)
    if symmetric:
        zero = jnp.where((lo < 0) & (hi > 0), f64((quant_min + quant_max) / 2), zero)
    zero = jnp.where(zero < quant_min, quant_min, jnp.where(zero > quant_max, quant_max, jnp.round(zero)))
    return scale.astype(f32), zero.astype(jnp.int32)


@lowering(aten._fused_moving_avg_obs_fq_helper_functional.default)
def _fused_observer_fake_quantize(
    x: Array, observer_on: Array, fake_quant_on: Array, running_min: Array, running_max: Array,
    scale: Array, zero_point: Array, averaging_const: Array, quant_min: int, quant_max: int, ch_axis: int,
    per_row_fake_quant: bool = False, symmetric_quant: bool = False,
) -> tuple[Array, ...]:  # fmt: skip
    """QAT's fused observer and fake quantization (``FusedMovingAvgObsFakeQuantize``): when the
    observer is on, the running min and max move toward this batch's (or start at it); when fake
    quantization is on, the scale and zero point are chosen from them and ``x`` is quantized
    with them. Per row, the rows are ``x``'s first dimension."""
    if per_row_fake_quant:
        rows = x.reshape(x.shape[0], -1)
        now_min, now_max = jnp.min(rows, axis=1), jnp.max(rows, axis=1)
    else:
        now_min, now_max = jnp.min(x).reshape(running_min.shape), jnp.max(x).reshape(running_max.shape)
    c = jnp.asarray(averaging_const).astype(jnp.float32)

    def moved(running: Array, now: Array) -> Array:
        # float32 arithmetic rounded after each operation, as eager's loop does: XLA on the CPU
        # contracts a float32 multiply and the add after it into one fused multiply-add (one
        # rounding), so the product is taken in float64 and rounded to float32's precision on its
        # own (reduce_precision, which XLA keeps; a float32 round trip it would drop), and the
        # sum of two float32 values is exact in float64 before its one rounding.
        product = c.astype(jnp.float64) * (now - running).astype(jnp.float64)
        step = jax.lax.reduce_precision(product, exponent_bits=8, mantissa_bits=23)
        return jnp.where(jnp.isinf(running), now, (running.astype(jnp.float64) + step).astype(jnp.float32))

    observe = observer_on.reshape(-1)[0] != 0
    running_min = jnp.where(observe, moved(running_min, now_min), running_min)
    running_max = jnp.where(observe, moved(running_max, now_max), running_max)
    quantize = fake_quant_on.reshape(-1)[0] != 0
    new_scale, new_zero = choose_qparams(running_min, running_max, quant_min, quant_max, symmetric_quant)
    new_scale = new_scale.reshape(scale.shape).astype(scale.dtype)
    new_zero = new_zero.reshape(zero_point.shape).astype(zero_point.dtype)
    if per_row_fake_quant:
        shape = [1] * x.ndim
        shape[ch_axis % x.ndim] = -1
        out, mask = _fake_quantize(x, new_scale.reshape(shape), new_zero.reshape(shape), quant_min, quant_max)
    else:
        out, mask = _fake_quantize(x, new_scale.reshape(()), new_zero.reshape(()), quant_min, quant_max)
    return (
        jnp.where(quantize, out, x),
        jnp.where(quantize, mask, True),
        running_min,
        running_max,
        jnp.where(quantize, new_scale, scale),
        jnp.where(quantize, new_zero, zero_point),
    )
