"""Scaled dot-product attention as eager's CPU runs it: the fused (flash) kernel.

``F.scaled_dot_product_attention`` picks a kernel per call by device. For the CPU, torch picks
its flash kernel for most 4-d inputs (``torch._fused_sdp_choice``), and a device of its own
choosing has no way to pick from Python: torch's math path is all it gets, which raises for an
``attn_mask`` with ``is_causal=True`` (the flash kernel applies both) and lays the output out
row-major (the flash kernel lays it out as the query is: ``(B, L, H, E)`` for the usual
``x.view(B, L, H, E).transpose(1, 2)``, which ``.transpose(1, 2).view(B, L, H * E)`` then needs).

So the xla device answers the op itself (``route``, an autograd-level kernel), with the kernel
eager's CPU would pick for the same shapes, dtypes and flags: the flash op (lowered here, with
its backward) or torch's math decomposition, as before. The flash op's result strides come from
torch's meta kernel, as every op's do.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax.numpy as jnp
import torch

from xlalab.runtime import tensor as rt
from xlalab.runtime.lowering.elementwise import Array, compute_float
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten
_FLASH = 1  # torch's SDPBackend.flash_attention


def _scores(q: Array, k: Array, is_causal: bool, mask: Array | None, scale: float | None) -> Array:
    """``q @ k^T * scale`` in the kernel's accumulation type (float32 for half types), masked:
    ``-inf`` where the causal mask (top-left aligned, as the kernel's) or a float mask's ``-inf``
    excludes."""
    s = jnp.einsum("...le,...se->...ls", compute_float(q), compute_float(k)) * _factor(q, scale)
    if mask is not None:
        s = s + mask.astype(s.dtype)
    if is_causal:
        L, S = s.shape[-2], s.shape[-1]
        keep = jnp.arange(S)[None, :] <= jnp.arange(L)[:, None]
        s = jnp.where(keep, s, -jnp.inf)
    return s


def _factor(q: Array, scale: float | None) -> float:
    return scale if scale is not None else 1 / math.sqrt(q.shape[-1])


def _probabilities(s: Array) -> tuple[Array, Array]:
    """Softmax over keys and its log-sum-exp; a row with every key excluded gives zeros and a
    log-sum-exp of 0, as the kernel's does."""
    top = jnp.max(s, axis=-1, keepdims=True)
    empty = top == -jnp.inf
    e = jnp.exp(s - jnp.where(empty, 0.0, top))
    total = jnp.sum(e, axis=-1, keepdims=True)
    p = jnp.where(empty, 0.0, e / jnp.where(empty, 1.0, total))
    lse = jnp.where(empty, 0.0, top + jnp.log(jnp.where(empty, 1.0, total)))
    return p, lse[..., 0]


@lowering(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash(
    q: Array,
    k: Array,
    v: Array,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    attn_mask: Array | None = None,
    scale: float | None = None,
) -> tuple[Array, Array]:
    k, v = _grouped(q, k), _grouped(q, v)
    p, lse = _probabilities(_scores(q, k, is_causal, attn_mask, scale))
    # The kernel multiplies the values by the probabilities rounded to a half type's.
    p = compute_float(p.astype(q.dtype))
    out = jnp.einsum("...ls,...se->...le", p, compute_float(v))
    return out.astype(q.dtype), lse


def _grouped(q: Array, kv: Array) -> Array:
    """Keys or values with fewer heads than the query (grouped-query attention, which the kernel
    takes as it is): each head repeated for the query heads that read it."""
    repeats = q.shape[-3] // kv.shape[-3]
    return kv if repeats == 1 else jnp.repeat(kv, repeats, axis=-3)


def _ungrouped(kv: Array, grad: Array) -> Array:
    """The gradient of repeated keys or values summed back onto their heads."""
    heads = kv.shape[-3]
    if grad.shape[-3] == heads:
        return grad
    *lead, h, s, e = grad.shape
    return grad.reshape(*lead, heads, h // heads, s, e).sum(axis=-3)


@lowering(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _flash_backward(
    grad_out: Array,
    q: Array,
    k: Array,
    v: Array,
    out: Array,
    logsumexp: Array,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    attn_mask: Array | None = None,
    scale: float | None = None,
) -> tuple[Array, Array, Array]:
    k_all, v_all = _grouped(q, k), _grouped(q, v)
    s = _scores(q, k_all, is_causal, attn_mask, scale)
    p = jnp.where(s == -jnp.inf, 0.0, jnp.exp(s - logsumexp[..., None]))
    g = compute_float(grad_out)
    gv = jnp.einsum("...ls,...le->...se", p, g)
    gp = jnp.einsum("...le,...se->...ls", g, compute_float(v_all))
    gs = p * (gp - jnp.sum(gp * p, axis=-1, keepdims=True))
    gq = jnp.einsum("...ls,...se->...le", gs, compute_float(k_all)) * _factor(q, scale)
    gk = jnp.einsum("...ls,...le->...se", gs, compute_float(q)) * _factor(q, scale)
    return gq.astype(q.dtype), _ungrouped(k, gk).astype(k.dtype), _ungrouped(v, gv).astype(v.dtype)


def _key(t: torch.Tensor | None) -> Any:
    """What torch's CPU kernel choice looks at in a tensor (None where a size is symbolic)."""
    if t is None:
        return ()
    shape, stride = tuple(t.shape), tuple(t.stride())
    if not all(type(n) is int for n in shape + stride):
        return None
    return shape, stride, t.dtype, t.requires_grad


@functools.lru_cache(maxsize=256)
def _cpu_picks_flash(q: Any, k: Any, v: Any, mask: Any, is_causal: bool, gqa: bool) -> bool:
    """Whether eager's CPU picks its flash kernel for tensors like these (asked of torch with
    uninitialized CPU tensors of the same layout: their pages are never touched)."""

    def make(key: Any) -> torch.Tensor:
        shape, stride, dtype, grad = key
        return torch.empty_strided(shape, stride, dtype=dtype).requires_grad_(grad)

    with torch.utils._python_dispatch._disable_current_modes():
        choice = torch._fused_sdp_choice(
            make(q), make(k), make(v), make(mask) if mask != () else None, 0.0, is_causal, enable_gqa=gqa
        )
    return bool(choice == _FLASH)


def route(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``aten::scaled_dot_product_attention`` on xla tensors: the flash op where eager's CPU
    picks its flash kernel (and dropout is off: the device's random ops run in the math path),
    else torch's math decomposition."""
    keys = [_key(t) for t in (query, key, value, attn_mask)]
    flash = (
        dropout_p == 0.0
        and None not in keys
        and query.dim() == 4
        and _cpu_picks_flash(*keys, is_causal, enable_gqa)
    )
    if not flash:
        return aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # As torch does before its fused kernels: a boolean mask becomes an additive one.
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(~attn_mask, -math.inf)
    return aten._scaled_dot_product_flash_attention_for_cpu.default(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


def _route_in_dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The op met below autograd (under inference_mode, or inside another op's decomposition)."""
    return route(*args, **kwargs)


rt._SPECIAL[aten.scaled_dot_product_attention.default] = _route_in_dispatch
