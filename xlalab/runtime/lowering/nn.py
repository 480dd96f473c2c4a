"""Lowerings of neural-network aten ops and their backward ops.

Convolution, pooling (the algorithms are in pooling.py), normalization, softmax, losses,
embedding and activations. Where a backward op is a plain linear function of its forward, it
is lowered as ``jax.vjp`` of the forward lowering (conv, average pooling, glu): one formula
to get right, not two. Normalization and loss backward ops are written out, since torch
hands them the saved statistics and expects exactly its own formulas.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.dtypes import convert
from xlalab.runtime.lowering import pooling
from xlalab.runtime.lowering.elementwise import (
    HALF,
    Scalar,
    compute_float,
    exact_divisor,
    larger,
    log1p,
    safe_exp,
    smaller,
    tanh,
)
from xlalab.runtime.lowering.pooling import expand
from xlalab.runtime.lowering.reductions import axes, shifted_mean
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array
Ints = int | Sequence[int]


def _channel(v: Array, ndim: int) -> Array:
    """A per-channel vector shaped to broadcast against an (N, C, *spatial) array."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


# --- convolution --------------------------------------------------------------------


def _conv_precision() -> lax.Precision:
    # Mirror torch's default: cuDNN convolutions may use TF32 unless the user forbids it.
    return lax.Precision.DEFAULT if torch.backends.cudnn.allow_tf32 else lax.Precision.HIGHEST


def _conv_dimension_numbers(nd: int) -> tuple[str, str, str]:
    spatial = "DHW"[3 - nd :]
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


@lowering(aten.convolution.default)
def conv(
    x: Array,
    weight: Array,
    bias: Array | None,
    stride: Ints,
    padding: Ints,
    dilation: Ints,
    transposed: bool,
    output_padding: Ints,
    groups: int,
) -> Array:
    nd = weight.ndim - 2
    stride, padding, dilation = expand(stride, nd), expand(padding, nd), expand(dilation, nd)
    dn = _conv_dimension_numbers(nd)
    # Half convolutions accumulate in float32 and round once, as torch's CPU kernels do.
    acc = jnp.float32 if x.dtype in HALF else None
    if jnp.issubdtype(x.dtype, jnp.integer):
        out = _integer_conv(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    elif not transposed:
        pads = [(p, p) for p in padding]
        out = lax.conv_general_dilated(
            x, weight, stride, pads, rhs_dilation=dilation, dimension_numbers=dn,
            feature_group_count=groups, precision=_conv_precision(), preferred_element_type=acc,
        )  # fmt: skip
    else:
        w, pads = _as_forward_conv(weight, padding, dilation, output_padding, groups)
        out = lax.conv_general_dilated(
            x, w, (1,) * nd, pads, lhs_dilation=stride, rhs_dilation=dilation, dimension_numbers=dn,
            feature_group_count=groups, precision=_conv_precision(), preferred_element_type=acc,
        )  # fmt: skip
    if bias is not None:
        out = out + _channel(bias, out.ndim)
    return out if acc is None else out.astype(x.dtype)


def _as_forward_conv(
    weight: Array, padding: Sequence[int], dilation: Sequence[int], output_padding: Ints, groups: int
) -> tuple[Array, list[tuple[int, int]]]:
    """The kernel and padding of the plain convolution that computes a transposed one.

    A transposed conv is the gradient of a conv: dilate the input by the stride, convolve with
    the spatially flipped kernel whose in/out channels are swapped within each group, and pad
    so that torch's ``padding`` crops the full output."""
    nd = weight.ndim - 2
    k = weight.shape[2:]
    cin, cout_g = weight.shape[0], weight.shape[1]
    w = weight.reshape(groups, cin // groups, cout_g, *k)
    w = jnp.swapaxes(w, 1, 2).reshape(groups * cout_g, cin // groups, *k)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
    out_pad = expand(output_padding, nd)
    pads = [
        (d * (kk - 1) - p, d * (kk - 1) - p + op)
        for kk, p, d, op in zip(k, padding, dilation, out_pad, strict=True)
    ]
    return w, pads


def _integer_conv(
    x: Array,
    weight: Array,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Ints,
    groups: int,
) -> Array:
    """An integer convolution as a sum over kernel offsets of strided slices times weights.

    XLA:GPU compiles convolutions of floating types only (they go to cuDNN), where torch's CPU
    kernels convolve integers exactly, wrapping on overflow. This form uses slices, products and
    sums, which every backend has; integer sums wrap the same in any order, so it is exact.
    It runs on every platform, so the CPU tests check what a GPU runs."""
    nd = x.ndim - 2
    if transposed:
        weight, pads = _as_forward_conv(weight, padding, dilation, output_padding, groups)
        lhs_dilation, stride = list(stride), [1] * nd
    else:
        pads, lhs_dilation = [(p, p) for p in padding], [1] * nd
    # Padding and input dilation in one pad (interior padding dilates; negative pads crop).
    spatial_pads = [(lo, hi, d - 1) for (lo, hi), d in zip(pads, lhs_dilation, strict=True)]
    x = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), (0, 0, 0), *spatial_pads])
    n, c, *size = x.shape
    o, k = weight.shape[0], weight.shape[2:]
    span = [d * (kk - 1) + 1 for kk, d in zip(k, dilation, strict=True)]
    out_size = [max(0, (si - sp) // s + 1) for si, sp, s in zip(size, span, stride, strict=True)]
    xg = x.reshape(n, groups, 1, c // groups, *size)  # N G 1 Cg *S: broadcasts against Og
    wg = weight.reshape(groups, o // groups, c // groups, *k)  # G Og Cg *K
    out = jnp.zeros((n, groups, o // groups, *out_size), x.dtype)
    if 0 in out_size:
        return out.reshape(n, o, *out_size)
    for offset in itertools.product(*(range(kk) for kk in k)):
        start = [0, 0, 0, 0] + [i * d for i, d in zip(offset, dilation, strict=True)]
        limit = [n, groups, 1, c // groups] + [
            st + (m - 1) * s + 1 for st, m, s in zip(start[4:], out_size, stride, strict=True)
        ]
        window = lax.slice(xg, start, limit, [1, 1, 1, 1, *stride])  # N G 1 Cg *out
        w_at = wg[(slice(None),) * 3 + offset].reshape(1, groups, o // groups, c // groups, *(1,) * nd)
        out = out + jnp.sum(window * w_at, axis=3, dtype=x.dtype)
    return out.reshape(n, o, *out_size)


@lowering(aten.convolution_backward.default)
def _convolution_backward(
    grad_output: Array, x: Array, weight: Array, bias_sizes: Sequence[int] | None, *rest: Any
) -> tuple[Array | None, Array | None, Array | None]:
    *geometry, output_mask = rest  # conv's stride ... groups, then which gradients to return
    out, pullback = jax.vjp(lambda x_, w_: conv(x_, w_, None, *geometry), x, weight)
    # Under jit XLA drops whichever of the two gradients the mask throws away.
    grad_x, grad_w = pullback(grad_output.astype(out.dtype))
    grad_b = jnp.sum(grad_output, axis=(0, *range(2, grad_output.ndim))) if output_mask[2] else None
    return (grad_x if output_mask[0] else None, grad_w if output_mask[1] else None, grad_b)


# --- pooling ------------------------------------------------------------------------
# One algorithm per family lives in pooling.py, its first argument the number of spatial
# dims; each op below binds that number. (1-d pooling reaches these as 2-d ops.)


def _spatial(nd: int, algorithm: Callable[..., Any]) -> Callable[..., Any]:
    """``algorithm`` as the lowering of an op over ``nd`` spatial dims."""

    def lowered(*args: Any, **kwargs: Any) -> Any:
        return algorithm(nd, *args, **kwargs)

    lowered.__name__ = lowered.__qualname__ = f"{algorithm.__name__}_{nd}d"
    return lowered


lowering(aten.max_pool2d.default)(_spatial(2, pooling.max_pool))
lowering(aten.max_pool2d_with_indices.default)(_spatial(2, pooling.max_pool_with_indices))
lowering(aten.max_pool3d_with_indices.default)(_spatial(3, pooling.max_pool_with_indices))
lowering(aten.max_pool2d_with_indices_backward.default)(_spatial(2, pooling.max_pool_backward))
lowering(aten.max_pool3d_with_indices_backward.default)(_spatial(3, pooling.max_pool_backward))
lowering(aten.avg_pool2d.default)(_spatial(2, pooling.avg_pool))
lowering(aten.avg_pool3d.default)(_spatial(3, pooling.avg_pool))
lowering(aten.avg_pool2d_backward.default)(_spatial(2, pooling.avg_pool_backward))
lowering(aten.avg_pool3d_backward.default)(_spatial(3, pooling.avg_pool_backward))
lowering(aten._adaptive_avg_pool2d.default)(_spatial(2, pooling.adaptive_avg_pool))
lowering(aten._adaptive_avg_pool3d.default)(_spatial(3, pooling.adaptive_avg_pool))
lowering(aten._adaptive_avg_pool2d_backward.default)(_spatial(2, pooling.adaptive_avg_pool_backward))
lowering(aten._adaptive_avg_pool3d_backward.default)(_spatial(3, pooling.adaptive_avg_pool_backward))
lowering(aten.adaptive_max_pool2d.default)(_spatial(2, pooling.adaptive_max_pool))
lowering(aten.adaptive_max_pool3d.default)(_spatial(3, pooling.adaptive_max_pool))
lowering(aten.adaptive_max_pool2d_backward.default)(_spatial(2, pooling.scatter_by_index))
lowering(aten.adaptive_max_pool3d_backward.default)(_spatial(3, pooling.scatter_by_index))
lowering(aten.fractional_max_pool2d.default)(_spatial(2, pooling.fractional_max_pool))
lowering(aten.fractional_max_pool3d.default)(_spatial(3, pooling.fractional_max_pool))
lowering(aten.fractional_max_pool2d_backward.default)(_spatial(2, pooling.fractional_max_pool_backward))
lowering(aten.fractional_max_pool3d_backward.default)(_spatial(3, pooling.fractional_max_pool_backward))


# --- batch / layer / group norm -------------------------------------------------------


@lowering(aten._native_batch_norm_legit_functional.default)
def _batch_norm(
    x: Array,
    weight: Array | None,
    bias: Array | None,
    running_mean: Array | None,
    running_var: Array | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[Array, Array, Array, Array | None, Array | None]:
    """(out, save_mean, save_invstd, new_running_mean, new_running_var): the functional
    overload's outputs; the other overloads return the first three."""
    xf = compute_float(x)
    reduce = (0, *range(2, x.ndim))
    if training:
        mean = jnp.mean(xf, axis=reduce)
        centered = xf - _channel(mean, x.ndim)
        var = jnp.mean(centered * centered, axis=reduce)  # biased, for normalizing
        n = x.size // x.shape[1]
        if running_mean is not None:
            running_mean = ((1 - momentum) * running_mean + momentum * mean).astype(running_mean.dtype)
        if running_var is not None:
            # The running variance is the unbiased one.
            new_var = (1 - momentum) * running_var + momentum * var * (n / max(n - 1, 1))
            running_var = new_var.astype(running_var.dtype)
    else:
        assert running_mean is not None and running_var is not None, "eval batch_norm needs running stats"
        mean, var = running_mean.astype(xf.dtype), running_var.astype(xf.dtype)
        centered = xf - _channel(mean, x.ndim)
    invstd = 1 / jnp.sqrt(var + eps)
    out = centered * _channel(invstd, x.ndim)
    if weight is not None:
        out = out * _channel(weight, x.ndim)
    if bias is not None:
        out = out + _channel(bias, x.ndim)
    # In eval mode torch's CPU kernel returns empty save_mean/save_invstd, but the meta
    # kernel (which the runtime trusts for shapes) says (C,): give the running stats.
    return out.astype(x.dtype), mean, invstd, running_mean, running_var


@lowering(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _native_batch_norm(*args: Any) -> tuple[Array, Array, Array]:
    # These overloads take the functional one's arguments and update running_mean/var in
    # place; the runtime writes them back from the functional overload's last two outputs.
    return _batch_norm(*args)[:3]


@lowering(aten._native_batch_norm_legit.no_stats)
def _native_batch_norm_legit_no_stats(
    x: Array, weight: Array | None, bias: Array | None, training: bool, momentum: float, eps: float
) -> tuple[Array, Array, Array]:
    return _batch_norm(x, weight, bias, None, None, True, momentum, eps)[:3]


@lowering(aten._native_batch_norm_legit_no_training.default)
def _native_batch_norm_legit_no_training(
    x: Array,
    weight: Array | None,
    bias: Array | None,
    running_mean: Array,
    running_var: Array,
    momentum: float,
    eps: float,
) -> tuple[Array, Array, Array]:
    return _batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@lowering(aten.native_batch_norm_backward.default)
def _native_batch_norm_backward(
    grad_out: Array,
    x: Array,
    weight: Array | None,
    running_mean: Array | None,
    running_var: Array | None,
    save_mean: Array | None,
    save_invstd: Array | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> tuple[Array | None, Array | None, Array | None]:
    xf, g = compute_float(x), compute_float(grad_out)
    reduce = (0, *range(2, x.ndim))
    if train:
        assert save_mean is not None and save_invstd is not None
        mean, invstd = save_mean, save_invstd
    else:
        assert running_mean is not None and running_var is not None
        mean, invstd = running_mean, 1 / jnp.sqrt(running_var.astype(xf.dtype) + eps)
    xhat = (xf - _channel(mean, x.ndim)) * _channel(invstd, x.ndim)
    grad_bias = jnp.sum(g, axis=reduce)
    grad_weight = jnp.sum(g * xhat, axis=reduce)
    scale = invstd if weight is None else invstd * weight
    if train:
        # Batch statistics depend on x: subtract the mean gradient and its projection on xhat.
        n = x.size // x.shape[1]
        gi = (g - _channel(grad_bias / n, x.ndim) - xhat * _channel(grad_weight / n, x.ndim)) * _channel(
            scale, x.ndim
        )
    else:
        gi = g * _channel(scale, x.ndim)
    return (
        gi.astype(x.dtype) if output_mask[0] else None,
        grad_weight if output_mask[1] else None,
        grad_bias if output_mask[2] else None,
    )


@lowering(aten.native_layer_norm.default)
def _native_layer_norm(
    x: Array, normalized_shape: Sequence[int], weight: Array | None, bias: Array | None, eps: float
) -> tuple[Array, Array, Array]:
    xf = compute_float(x)
    norm_axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = shifted_mean(xf, norm_axes)  # a constant row normalizes to exactly 0, as in eager
    centered = xf - mean
    rstd = 1 / jnp.sqrt(jnp.mean(centered * centered, axis=norm_axes, keepdims=True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.astype(x.dtype), mean, rstd


@lowering(aten.native_layer_norm_backward.default)
def _native_layer_norm_backward(
    grad_out: Array,
    x: Array,
    normalized_shape: Sequence[int],
    mean: Array,
    rstd: Array,
    weight: Array | None,
    bias: Array | None,
    output_mask: Sequence[bool],
) -> tuple[Array | None, Array | None, Array | None]:
    xf, g = compute_float(x), compute_float(grad_out)
    k = len(normalized_shape)
    norm_axes = tuple(range(x.ndim - k, x.ndim))
    batch_axes = tuple(range(x.ndim - k))
    xhat = (xf - mean) * rstd
    gxhat = g if weight is None else g * weight
    gi = rstd * (
        gxhat
        - jnp.mean(gxhat, axis=norm_axes, keepdims=True)
        - xhat * jnp.mean(gxhat * xhat, axis=norm_axes, keepdims=True)
    )
    return (
        gi.astype(x.dtype) if output_mask[0] else None,
        jnp.sum(g * xhat, axis=batch_axes) if output_mask[1] else None,
        jnp.sum(g, axis=batch_axes) if output_mask[2] else None,
    )


@lowering(aten._weight_norm_interface_backward.default)
def _weight_norm_interface_backward(
    grad_w: Array, v: Array, g: Array, norms: Array, dim: int
) -> tuple[Array, Array]:
    """Gradients of ``w = v * g / |v|`` (the norm over every axis but ``dim``, saved by the
    forward) for ``v`` and ``g``, as torch's kernel writes them."""
    others = tuple(i for i in range(v.ndim) if i != dim % v.ndim)
    gw, vf, gf, nf = (compute_float(a) for a in (grad_w, v, g, norms))
    dot = jnp.sum(gw * vf, axis=others, keepdims=True)
    grad_v = (gf / nf) * (gw - vf * (dot / (nf * nf)))
    return grad_v.astype(v.dtype), (dot / nf).astype(g.dtype)


def _by_group(x: Array, group: int) -> Array:
    """``(N, C, *spatial)`` as ``(N, group, elements per group)``; sized explicitly, as an empty
    batch leaves nothing to infer a ``-1`` from."""
    return x.reshape(x.shape[0], group, math.prod(x.shape[1:]) // group)


def _group_norm(
    x: Array, weight: Array | None, bias: Array | None, group: int, eps: float
) -> tuple[Array, Array, Array]:
    xf = _by_group(compute_float(x), group)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    centered = xf - mean
    rstd = 1 / jnp.sqrt(jnp.mean(centered * centered, axis=-1, keepdims=True) + eps)
    out = (centered * rstd).reshape(x.shape)
    if weight is not None:
        out = out * _channel(weight, x.ndim)
    if bias is not None:
        out = out + _channel(bias, x.ndim)
    return out.astype(x.dtype), mean[..., 0], rstd[..., 0]


@lowering(aten.native_group_norm.default)
def _native_group_norm(
    x: Array, weight: Array | None, bias: Array | None, N: int, C: int, HxW: int, group: int, eps: float
) -> tuple[Array, Array, Array]:
    return _group_norm(x, weight, bias, group, eps)


@lowering(aten.native_group_norm_backward.default)
def _native_group_norm_backward(
    grad_out: Array,
    x: Array,
    mean: Array,
    rstd: Array,
    weight: Array | None,
    N: int,
    C: int,
    HxW: int,
    group: int,
    output_mask: Sequence[bool],
) -> tuple[Array | None, Array | None, Array | None]:
    # Layer norm's backward over each (sample, group) block, with a per-channel weight.
    g = compute_float(grad_out)
    xhat = ((_by_group(compute_float(x), group) - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    gxhat = _by_group(g if weight is None else g * _channel(weight, x.ndim), group)
    xh = _by_group(xhat, group)
    gi = rstd[..., None] * (
        gxhat - jnp.mean(gxhat, axis=-1, keepdims=True) - xh * jnp.mean(gxhat * xh, axis=-1, keepdims=True)
    )
    reduce = (0, *range(2, x.ndim))
    return (
        gi.reshape(x.shape).astype(x.dtype) if output_mask[0] else None,
        jnp.sum(g * xhat, axis=reduce) if output_mask[1] else None,
        jnp.sum(g, axis=reduce) if output_mask[2] else None,
    )


# --- softmax ------------------------------------------------------------------------


def _out_dtype(x: Array, half_to_float: bool) -> jnp.dtype:
    return jnp.float32 if half_to_float else x.dtype


def _half_along_last(x: Array, ax: tuple[int, ...] | None, half_to_float: bool) -> bool:
    """Whether eager's half-precision last-dim kernel runs: it keeps intermediates in the
    input's dtype where the other kernels keep float32."""
    last = x.ndim <= 1 or ax == (x.ndim - 1,)
    return x.dtype in (jnp.float16, jnp.bfloat16) and last and not half_to_float


def _rounded(v: Array, x: Array) -> Array:
    return v.astype(x.dtype).astype(v.dtype)


@lowering(aten._softmax.default)
def _softmax(x: Array, dim: int, half_to_float: bool = False) -> Array:
    if x.size == 0:  # nothing to normalise (a max over no elements has no identity)
        return x.astype(_out_dtype(x, half_to_float))
    xf, ax = compute_float(x), axes(x, dim)
    shifted = xf - jnp.max(xf, axis=ax, keepdims=True)
    exp = safe_exp(shifted)
    # In float32 and rounded once, as eager's kernels do (its last-dim half kernel included).
    return (exp / jnp.sum(exp, axis=ax, keepdims=True)).astype(_out_dtype(x, half_to_float))


@lowering(aten._log_softmax.default)
def _log_softmax(x: Array, dim: int, half_to_float: bool = False) -> Array:
    if x.size == 0:
        return x.astype(_out_dtype(x, half_to_float))
    xf, ax = compute_float(x), axes(x, dim)
    shifted = xf - jnp.max(xf, axis=ax, keepdims=True)
    total = jnp.sum(safe_exp(shifted), axis=ax, keepdims=True)
    half_last = _half_along_last(x, ax, half_to_float)
    # Eager's half last-dim kernel stores the sum, then its log, in the input's dtype before
    # the subtraction; its other kernels keep both in float32. The same roundings give its bits.
    log_sum = jnp.log(_rounded(total, x) if half_last else total)
    return (shifted - (_rounded(log_sum, x) if half_last else log_sum)).astype(_out_dtype(x, half_to_float))


@lowering(aten._softmax_backward_data.default)
def _softmax_backward_data(grad_output: Array, output: Array, dim: int, input_dtype: torch.dtype) -> Array:
    g, y = compute_float(grad_output), compute_float(output)
    return (y * (g - jnp.sum(g * y, axis=axes(y, dim), keepdims=True))).astype(grad_output.dtype)


@lowering(aten._log_softmax_backward_data.default)
def _log_softmax_backward_data(
    grad_output: Array, output: Array, dim: int, input_dtype: torch.dtype
) -> Array:
    g, y = compute_float(grad_output), compute_float(output)
    return (g - safe_exp(y) * jnp.sum(g, axis=axes(y, dim), keepdims=True)).astype(grad_output.dtype)


# --- losses -------------------------------------------------------------------------


def _margin_scale(grad_output: Array, grad: Array, reduction: int) -> Array:
    """A margin loss's per-element gradient times the incoming one: one number, or one per
    sample (``reduction='none'``)."""
    if reduction == 0 and grad_output.ndim:
        return grad * grad_output.reshape(-1, 1).astype(grad.dtype)
    return grad * grad_output.astype(grad.dtype)


@lowering(aten.multi_margin_loss_backward.default)
def _multi_margin_loss_backward(
    grad_output: Array,
    x: Array,
    target: Array,
    p: Scalar,
    margin: Scalar,
    weight: Array | None = None,
    reduction: int = 1,
) -> Array:
    # torch's kernel: each class whose margin term is positive (strictly) gets g (p = 1) or
    # 2 g z (p = 2), scaled by the target's weight, and the target class minus their sum.
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)  # a 0-d input is one class
    n, c = rows.shape
    t = target.reshape(n)
    g = jnp.asarray(1.0 / (n * c) if reduction == 1 else 1.0 / c, rows.dtype)
    z = margin - jnp.take_along_axis(rows, t[:, None], axis=1) + rows
    is_target = jnp.arange(c)[None, :] == t[:, None]
    h = g if p == 1 else 2 * g * z
    h = jnp.where((z > 0) & ~is_target, h, jnp.zeros((), rows.dtype))
    if weight is not None:
        h = h * weight[t][:, None]
    grad = jnp.where(is_target, -jnp.sum(h, axis=1, keepdims=True), h)
    return _margin_scale(grad_output, grad, reduction).reshape(x.shape)


def _listed_targets(target: Array, n: int, c: int) -> tuple[Array, Array]:
    """A multilabel target's rows: which entries are targets (those before the row's first -1;
    what follows it is padding, ignored) and the entries made safe to index with."""
    targets = target.reshape(n, c)
    listed = jnp.cumprod(targets >= 0, axis=1).astype(bool)
    return listed, jnp.where(listed, targets, 0)


@lowering(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss_forward(x: Array, target: Array, reduction: int) -> tuple[Array, Array]:
    # Per sample, each listed target against each class that is not a target: the mean over the
    # classes of max(0, 1 - x[target] + x[class]). (torch's decomposition also counts the padding
    # after a row's -1 as targets.)
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)  # a 0-d input is one class
    n, c = rows.shape
    listed, safe = _listed_targets(target, n, c)
    is_target = jnp.zeros((n, c), bool).at[jnp.arange(n)[:, None], safe].max(listed)
    z = 1 - jnp.take_along_axis(rows, safe, axis=1)[:, :, None] + rows[:, None, :]  # (N, J, C)
    active = listed[:, :, None] & ~is_target[:, None, :] & (z > 0)
    per_sample = jnp.sum(jnp.where(active, z, jnp.zeros((), rows.dtype)), axis=(1, 2)) / c
    loss = per_sample.reshape(x.shape[:-1]) if reduction == 0 else _reduce_loss(per_sample, reduction)
    return loss.astype(x.dtype), is_target.astype(x.dtype).reshape(target.shape)


@lowering(aten.multilabel_margin_loss_backward.default)
def _multilabel_margin_loss_backward(
    grad_output: Array, x: Array, target: Array, reduction: int, is_target: Array
) -> Array:
    # Each target class (the row's indices up to its first -1) against each class that is not
    # a target: where 1 - x[target] + x[class] > 0, the class gains g and the target loses it.
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)  # a 0-d input is one class
    n, c = rows.shape
    listed, safe = _listed_targets(target, n, c)
    g = jnp.asarray(1.0 / (n * c) if reduction == 1 else 1.0 / c, rows.dtype)
    z = 1 - jnp.take_along_axis(rows, safe, axis=1)[:, :, None] + rows[:, None, :]  # (N, J, C)
    others = ~(is_target.reshape(n, c) != 0)
    active = listed[:, :, None] & others[:, None, :] & (z > 0)
    gains = jnp.sum(active, axis=1).astype(rows.dtype) * g  # per class
    losses = jnp.sum(active, axis=2).astype(rows.dtype) * g  # per listed target
    grad = gains - jnp.zeros_like(rows).at[jnp.arange(n)[:, None], safe].add(losses)
    return _margin_scale(grad_output, grad, reduction).reshape(x.shape)


def _nll_weights(
    x: Array, target: Array, weight: Array | None, ignore_index: int
) -> tuple[Array, Array, int]:
    """(per-target weight, with 0 where ignored; target made safe to index; class axis)."""
    class_axis = 1 if x.ndim >= 2 else 0
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)  # ignored targets may be out of range (e.g. -100)
    w = jnp.ones((), x.dtype) if weight is None else weight[safe]
    return jnp.where(valid, w, jnp.zeros((), x.dtype)).astype(x.dtype), safe, class_axis


@lowering(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def _nll_forward(
    x: Array, target: Array, weight: Array | None, reduction: int, ignore_index: int
) -> tuple[Array, Array]:
    w, safe, class_axis = _nll_weights(x, target, weight, ignore_index)
    picked = jnp.take_along_axis(x, jnp.expand_dims(safe, class_axis), axis=class_axis)
    losses = -jnp.squeeze(picked, class_axis) * w
    total_weight = jnp.sum(w)
    if reduction == 0:
        # Per-sample losses; torch then reports a zero total_weight, except for a single
        # sample (1-d input), where it is that sample's weight.
        return losses, total_weight if x.ndim == 1 else jnp.zeros((), x.dtype)
    total = jnp.sum(losses)
    return (total / total_weight if reduction == 1 else total), total_weight


@lowering(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def _nll_backward(
    grad_output: Array,
    x: Array,
    target: Array,
    weight: Array | None,
    reduction: int,
    ignore_index: int,
    total_weight: Array,
) -> Array:
    w, safe, class_axis = _nll_weights(x, target, weight, ignore_index)
    scale = grad_output / total_weight if reduction == 1 else grad_output
    # An ignored target's row stays 0 as eager's kernel skips it, even when the scale is not a
    # number (every target ignored: 0 / 0): a NaN there reached every parameter.
    valid = target != ignore_index
    coeff = jnp.expand_dims(jnp.where(valid, -w * scale, jnp.zeros((), x.dtype)), class_axis)
    hit = jnp.expand_dims(safe, class_axis) == lax.broadcasted_iota(safe.dtype, x.shape, class_axis)
    return jnp.where(hit, coeff, jnp.zeros((), x.dtype)).astype(x.dtype)


def _reduce_loss(loss: Array, reduction: int) -> Array:
    if reduction == 1:
        return jnp.mean(loss)
    return jnp.sum(loss) if reduction == 2 else loss


@lowering(aten.mse_loss.default)
def _mse_loss(x: Array, target: Array, reduction: int = 1) -> Array:
    diff = x - target
    return _reduce_loss(diff * diff, reduction)


@lowering(aten.mse_loss_backward.default)
def _mse_loss_backward(grad_output: Array, x: Array, target: Array, reduction: int) -> Array:
    norm = 2 / x.size if reduction == 1 else 2
    return norm * (x - target) * grad_output


def _loss_norm(x: Array, reduction: int) -> float:
    """The factor a reduction puts on each element's gradient."""
    return 1 / x.size if reduction == 1 else 1.0


@lowering(aten.binary_cross_entropy.default)
def _binary_cross_entropy(x: Array, target: Array, weight: Array | None = None, reduction: int = 1) -> Array:
    # torch clamps both logs at -100 so that probabilities of exactly 0 or 1 stay finite.
    loss = (target - 1) * jnp.maximum(log1p(-x), -100) - target * jnp.maximum(jnp.log(x), -100)
    return _reduce_loss(loss if weight is None else loss * weight, reduction)


@lowering(aten.binary_cross_entropy_backward.default)
def _binary_cross_entropy_backward(
    grad_output: Array, x: Array, target: Array, weight: Array | None = None, reduction: int = 1
) -> Array:
    grad = grad_output * (x - target) / jnp.maximum((1 - x) * x, 1e-12) * _loss_norm(x, reduction)
    return grad if weight is None else grad * weight


@lowering(aten.binary_cross_entropy_with_logits.default)
def _binary_cross_entropy_with_logits(
    x: Array, target: Array, weight: Array | None = None, pos_weight: Array | None = None, reduction: int = 1
) -> Array:
    # softplus(-x) written so that neither exp overflows: log1p(exp(-|x|)) + max(-x, 0).
    softplus_neg = log1p(safe_exp(-jnp.abs(x))) + jnp.maximum(-x, 0)
    log_weight = 1 if pos_weight is None else (pos_weight - 1) * target + 1
    loss = (1 - target) * x + log_weight * softplus_neg
    return _reduce_loss(loss if weight is None else loss * weight, reduction)


@lowering(aten.smooth_l1_loss.default)
def _smooth_l1_loss(x: Array, target: Array, reduction: int = 1, beta: float = 1.0) -> Array:
    d = jnp.abs(x - target)
    if beta == 0:  # torch falls back to plain L1
        return _reduce_loss(d, reduction)
    return _reduce_loss(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


@lowering(aten.smooth_l1_loss_backward.default)
def _smooth_l1_loss_backward(
    grad_output: Array, x: Array, target: Array, reduction: int, beta: float
) -> Array:
    d = x - target
    slope = jnp.sign(d) if beta == 0 else jnp.where(jnp.abs(d) < beta, d / beta, jnp.sign(d))
    return slope * grad_output * _loss_norm(x, reduction)


@lowering(aten.huber_loss.default)
def _huber_loss(x: Array, target: Array, reduction: int = 1, delta: float = 1.0) -> Array:
    d = jnp.abs(x - target)
    return _reduce_loss(jnp.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


@lowering(aten.huber_loss_backward.default)
def _huber_loss_backward(grad_output: Array, x: Array, target: Array, reduction: int, delta: float) -> Array:
    d = x - target
    return jnp.clip(d, -delta, delta) * grad_output * _loss_norm(x, reduction)


# --- embedding ----------------------------------------------------------------------


@lowering(aten.embedding.default)
def _embedding(
    weight: Array,
    indices: Array,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Array:
    return jnp.take(weight, indices, axis=0, mode="clip")  # out of range: clamped (JAX fills NaN)


@lowering(aten.embedding_dense_backward.default)
def _embedding_dense_backward(
    grad_output: Array, indices: Array, num_weights: int, padding_idx: int, scale_grad_by_freq: bool
) -> Array:
    idx = indices.reshape(-1)
    # Accumulated in float for half types; sized, not -1, as no index may be given.
    g = compute_float(grad_output).reshape(idx.shape[0], grad_output.shape[-1])
    if padding_idx >= 0:
        g = jnp.where((idx == padding_idx)[:, None], jnp.zeros((), g.dtype), g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), g.dtype).at[idx].add(1)
        g = g / counts[idx][:, None]
    out = jnp.zeros((num_weights, g.shape[1]), g.dtype).at[idx].add(g)
    return out.astype(grad_output.dtype)


# --- activations --------------------------------------------------------------------

_SQRT1_2 = 1 / math.sqrt(2)
_GELU_PDF = 0.5 * (2 / math.sqrt(math.pi)) * _SQRT1_2  # 1/sqrt(2*pi)
_GELU_TANH_BETA = math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5  # sqrt(2/pi)
_GELU_TANH_KAPPA = 0.044715


@lowering(aten.gelu.default)
def _gelu(x: Array, approximate: str = "none") -> Array:
    xf = compute_float(x)
    if approximate == "tanh":
        inner = _GELU_TANH_BETA * (xf + _GELU_TANH_KAPPA * xf * xf * xf)
        return (0.5 * xf * (1 + tanh(inner))).astype(x.dtype)
    return (xf * 0.5 * (1 + lax.erf(xf * _SQRT1_2))).astype(x.dtype)


@lowering(aten.gelu_backward.default)
def _gelu_backward(grad_output: Array, x: Array, approximate: str = "none") -> Array:
    xf, g = compute_float(x), compute_float(grad_output)
    if approximate == "tanh":
        x_sq = xf * xf
        t = tanh(_GELU_TANH_BETA * (xf + _GELU_TANH_KAPPA * x_sq * xf))
        d_inner = _GELU_TANH_BETA * (1 + 3 * _GELU_TANH_KAPPA * x_sq)
        out = g * (0.5 * (1 + t) + 0.5 * xf * (1 - t * t) * d_inner)
    else:
        cdf = 0.5 * (1 + lax.erf(xf * _SQRT1_2))
        pdf = safe_exp(-0.5 * xf * xf) * _GELU_PDF
        out = g * (cdf + xf * pdf)
    return out.astype(grad_output.dtype)


@lowering(aten.silu.default)
def _silu(x: Array) -> Array:
    xf = compute_float(x)
    return (xf / (1 + safe_exp(-xf))).astype(x.dtype)


@lowering(aten.silu_backward.default)
def _silu_backward(grad_output: Array, x: Array) -> Array:
    xf, g = compute_float(x), compute_float(grad_output)
    sig = 1 / (1 + safe_exp(-xf))
    return (g * sig * (1 + xf * (1 - sig))).astype(grad_output.dtype)


@lowering(aten.mish.default)
def _mish(x: Array) -> Array:
    xf = compute_float(x)
    return (xf * tanh(jax.nn.softplus(xf))).astype(x.dtype)


@lowering(aten.mish_backward.default)
def _mish_backward(grad_output: Array, x: Array) -> Array:
    xf, g = compute_float(x), compute_float(grad_output)
    t = tanh(jax.nn.softplus(xf))
    return (g * (t + xf * jax.nn.sigmoid(xf) * (1 - t * t))).astype(grad_output.dtype)


# For complex numbers autograd passes the conjugate of the derivative (as torch's kernels do);
# jnp.conj leaves real numbers alone. Half types compute in float32 and round once, as torch's
# CPU kernels do: rounding 1 - y * y to bfloat16 first moved gradients by an ulp.
@lowering(aten.tanh_backward.default)
def _tanh_backward(grad_output: Array, output: Array) -> Array:
    g, y = compute_float(grad_output), compute_float(output)
    return (g * jnp.conj(1 - y * y)).astype(grad_output.dtype)


@lowering(aten.sigmoid_backward.default)
def _sigmoid_backward(grad_output: Array, output: Array) -> Array:
    if jnp.iscomplexobj(output):
        return grad_output * jnp.conj((1 - output) * output)
    # torch's CPU kernel goes through float32 for bfloat16 only; float16 rounds at every step.
    if output.dtype == jnp.float16:
        return grad_output * (1 - output) * output
    g, y = compute_float(grad_output), compute_float(output)
    return (g * (1 - y) * y).astype(grad_output.dtype)


@lowering(aten.threshold.default)
def _threshold(x: Array, threshold: Scalar, value: Scalar) -> Array:
    return jnp.where(x <= threshold, jnp.asarray(value, x.dtype), x)


@lowering(aten.threshold_backward.default)
def _threshold_backward(grad_output: Array, x: Array, threshold: Scalar) -> Array:
    # relu's backward is threshold_backward(g, relu_out, 0): the gradient at 0 is 0.
    return jnp.where(x <= threshold, jnp.zeros((), grad_output.dtype), grad_output)


@lowering(aten.hardtanh.default)
def _hardtanh(x: Array, min_val: Scalar = -1, max_val: Scalar = 1) -> Array:
    return smaller(larger(x, min_val), max_val)  # relu6's -0.0 stays -0.0, as in eager


@lowering(aten.hardtanh_backward.default)
def _hardtanh_backward(grad_output: Array, x: Array, min_val: Scalar, max_val: Scalar) -> Array:
    return jnp.where((x <= min_val) | (x >= max_val), jnp.zeros((), grad_output.dtype), grad_output)


@lowering(aten.softshrink.default)
def _softshrink(x: Array, lambd: Scalar = 0.5) -> Array:
    # torch's kernel: +0.0 inside [-lambd, lambd] and NaN through. (Its decomposition's
    # ``x * 0`` gives -0.0 for a negative x there.)
    y = compute_float(x)
    inside = jnp.where(jnp.isnan(y), y, jnp.zeros((), y.dtype))
    return jnp.where(y > lambd, y - lambd, jnp.where(y < -lambd, y + lambd, inside)).astype(x.dtype)


@lowering(aten.hardshrink_backward.default, aten.softshrink_backward.default)
def _shrink_backward(grad_output: Array, x: Array, lambd: Scalar) -> Array:
    # Both shrinks are flat on [-lambd, lambd] and slope 1 outside (NaN takes the gradient, as
    # in torch's kernels).
    flat = (x >= -lambd) & (x <= lambd)
    return jnp.where(flat, jnp.zeros((), grad_output.dtype), grad_output)


@lowering(aten.leaky_relu.default)
def _leaky_relu(x: Array, negative_slope: Scalar = 0.01) -> Array:
    return jnp.where(x > 0, x, x * negative_slope)


@lowering(aten.leaky_relu_backward.default)
def _leaky_relu_backward(grad_output: Array, x: Array, negative_slope: Scalar, self_is_result: bool) -> Array:
    return jnp.where(x > 0, grad_output, grad_output * negative_slope)


@lowering(aten.elu.default)
def _elu(x: Array, alpha: Scalar = 1, scale: Scalar = 1, input_scale: Scalar = 1) -> Array:
    # torch tests x <= 0 (so NaN takes the linear branch, in the backward too)
    return jnp.where(x <= 0, jnp.expm1(x * input_scale) * (alpha * scale), x * scale)


@lowering(aten.elu_backward.default)
def _elu_backward(
    grad_output: Array,
    alpha: Scalar,
    scale: Scalar,
    input_scale: Scalar,
    is_result: bool,
    self_or_result: Array,
) -> Array:
    y = self_or_result
    neg_coef = alpha * scale
    if is_result:  # y = neg_coef * (exp(x * input_scale) - 1) where x <= 0
        neg = grad_output * input_scale * (y + neg_coef)
    else:
        neg = grad_output * input_scale * neg_coef * safe_exp(y * input_scale)
    return jnp.where(y <= 0, neg, grad_output * scale)


@lowering(aten.softplus.default)
def _softplus(x: Array, beta: Scalar = 1, threshold: Scalar = 20) -> Array:
    # Above the threshold softplus is linear; torch returns x itself there. In float opmath for
    # half precision, as torch's kernel: exp(x) of a half overflows from x = 11.1.
    xf = compute_float(x)
    return jnp.where(xf * beta > threshold, xf, log1p(safe_exp(xf * beta)) / beta).astype(x.dtype)


@lowering(aten.softplus_backward.default)
def _softplus_backward(grad_output: Array, x: Array, beta: Scalar, threshold: Scalar) -> Array:
    xf, g = compute_float(x), compute_float(grad_output)
    z = safe_exp(xf * beta)
    return jnp.where(xf * beta > threshold, g, g * z / (z + 1)).astype(grad_output.dtype)


# The hard activations compute in float opmath for half types, as torch's kernels do, and
# round once: in float16, hardswish's x * 6 overflows from x = 10923.


@lowering(aten.hardsigmoid.default)
def _hardsigmoid(x: Array) -> Array:
    xf = compute_float(x)
    clipped = jnp.minimum(jnp.maximum(xf + 3, 0), 6)
    return (clipped / exact_divisor(6.0, clipped)).astype(x.dtype)  # eager divides


@lowering(aten.hardsigmoid_backward.default)
def _hardsigmoid_backward(grad_output: Array, x: Array) -> Array:
    g = compute_float(grad_output)
    slope = g * jnp.asarray(1 / 6, g.dtype)  # eager's backward multiplies by 1/6 (its forward divides)
    return jnp.where((x > -3) & (x < 3), slope, jnp.zeros((), g.dtype)).astype(grad_output.dtype)


@lowering(aten.hardswish.default)
def _hardswish(x: Array) -> Array:
    xf = compute_float(x)
    product = xf * jnp.minimum(jnp.maximum(xf + 3, 0), 6)
    return (product / exact_divisor(6.0, product)).astype(x.dtype)


@lowering(aten.hardswish_backward.default)
def _hardswish_backward(grad_output: Array, x: Array) -> Array:
    # torch's vectorized kernel: 0 up to -3 (included), the gradient itself from 3 on, the slope
    # between (NaN included). x / 3 divides, where XLA would multiply by a rounded 1/3 and make
    # the slope at -1.5 a tiny number instead of 0.
    xf, g = compute_float(x), compute_float(grad_output)
    slope = g * (xf / exact_divisor(3.0, xf) + 0.5)
    inner = jnp.where(xf <= -3, jnp.zeros((), g.dtype), slope)
    return jnp.where(xf >= 3, g, inner).astype(grad_output.dtype)


@lowering(aten.log_sigmoid_forward.default)
def _log_sigmoid_forward(x: Array) -> tuple[Array, Array]:
    # log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)); the buffer is exp(-|x|), as torch's
    # CPU kernel saves it (our backward does not need it, so XLA usually drops it).
    buffer = safe_exp(-jnp.abs(x))
    return jnp.minimum(x, 0) - log1p(buffer), buffer


@lowering(aten.log_sigmoid_backward.default)
def _log_sigmoid_backward(grad_output: Array, x: Array, buffer: Array) -> Array:
    return grad_output * jax.nn.sigmoid(-x)


@lowering(aten.glu.default)
def _glu(x: Array, dim: int = -1) -> Array:
    a, b = jnp.split(x, 2, axis=dim)
    return a * jax.nn.sigmoid(b)


@lowering(aten.glu_backward.default)
def _glu_backward(grad_output: Array, x: Array, dim: int) -> Array:
    out, pullback = jax.vjp(lambda x_: _glu(x_, dim), x)
    return pullback(grad_output.astype(out.dtype))[0]


@lowering(aten.native_dropout_backward.default)
def _native_dropout_backward(grad_output: Array, mask: Array, scale: float) -> Array:
    return grad_output * convert(mask, grad_output.dtype) * scale  # -0.0 * a dropped 0 is -0.0
