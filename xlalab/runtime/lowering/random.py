"""Random ops: each receives ``key``, a JAX PRNG key made from the device RNG's seed and
a per-op offset (both graph inputs, so a step with dropout compiles once)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from .registry import lowering

aten = torch.ops.aten


def _float(x: Any) -> Any:
    return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32


def _complex(parts: Any) -> Any:
    """Complex numbers from draws whose last axis holds each one's real and imaginary part."""
    return jax.lax.complex(parts[..., 0], parts[..., 1])


@lowering(aten.normal_.default)
def _normal(x: Any, mean: float = 0.0, std: float = 1.0, *, key: Any) -> Any:
    if jnp.iscomplexobj(x):  # each part is normal, with std / sqrt(2), as eager draws them
        parts = jax.random.normal(key, (*x.shape, 2), jnp.finfo(x.dtype).dtype)
        return _complex(parts * (std / 2**0.5) + mean).astype(x.dtype)
    return (jax.random.normal(key, x.shape, _float(x)) * std + mean).astype(x.dtype)


@lowering(aten.uniform_.default)
def _uniform(x: Any, low: float = 0.0, high: float = 1.0, *, key: Any) -> Any:
    if jnp.iscomplexobj(x):  # each part uniform in [low, high), as eager draws them
        part = jnp.finfo(x.dtype).dtype
        return _complex(jax.random.uniform(key, (*x.shape, 2), part, low, high)).astype(x.dtype)
    return jax.random.uniform(key, x.shape, _float(x), low, high).astype(x.dtype)


@lowering(aten.bernoulli_.float, aten.bernoulli.p)
def _bernoulli_p(x: Any, p: float = 0.5, *, key: Any) -> Any:
    return jax.random.bernoulli(key, p, x.shape).astype(x.dtype)


@lowering(aten.bernoulli_.Tensor)
def _bernoulli_t(x: Any, p: Any, *, key: Any) -> Any:
    return jax.random.bernoulli(key, jnp.broadcast_to(p, x.shape)).astype(x.dtype)


@lowering(aten.bernoulli.default)
def _bernoulli(x: Any, *, key: Any) -> Any:
    return jax.random.bernoulli(key, x).astype(x.dtype)


@lowering(aten.exponential_.default)
def _exponential(x: Any, lambd: float = 1.0, *, key: Any) -> Any:
    return (jax.random.exponential(key, x.shape, _float(x)) / lambd).astype(x.dtype)


@lowering(getattr(aten.random_, "from"))
def _random_from(x: Any, low: int, high: Any = None, *, key: Any) -> Any:
    hi = high if high is not None else jnp.iinfo(jnp.int64).max
    return jax.random.randint(key, x.shape, low, hi, jnp.int64).astype(x.dtype)


@lowering(aten.random_.to)
def _random_to(x: Any, high: int, *, key: Any) -> Any:
    return jax.random.randint(key, x.shape, 0, high, jnp.int64).astype(x.dtype)


@lowering(aten.random_.default)
def _random(x: Any, *, key: Any) -> Any:
    hi = 2 ** min(jnp.finfo(x.dtype).nmant + 1, 53) if jnp.issubdtype(x.dtype, jnp.floating) else 2**31
    return jax.random.randint(key, x.shape, 0, hi, jnp.int64).astype(x.dtype)


@lowering(aten.native_dropout.default)
def _native_dropout(x: Any, p: float, train: Any = True, *, key: Any) -> Any:
    if train is False or p == 0:
        return x, jnp.ones(x.shape, jnp.bool_)
    keep = jax.random.bernoulli(key, 1.0 - p, x.shape)
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    return jnp.where(keep, x * scale, 0).astype(x.dtype), keep


@lowering(aten.multinomial.default)
def _multinomial(p: Any, num_samples: int, replacement: bool = False, *, key: Any) -> Any:
    """Category indices drawn with probabilities ``p`` (rows of weights, not normalized): with
    replacement, independent categorical draws; without, the top ``num_samples`` of the
    log-weights perturbed by Gumbel noise, which samples without replacement."""
    logits = jnp.log(p.astype(_float(p)))  # a zero weight is -inf: never drawn while others remain
    if replacement:
        draws = jax.random.categorical(key, logits[..., None, :], axis=-1, shape=(*p.shape[:-1], num_samples))
    else:
        _, draws = jax.lax.top_k(logits + jax.random.gumbel(key, p.shape, logits.dtype), num_samples)
    return draws.astype(jnp.int64)
