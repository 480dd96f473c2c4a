"""Lowerings of p-norm distances between rows: ``torch.cdist`` (``_cdist_forward``) and
``F.pdist`` (``_pdist_forward``), and their backward ops.

Both compute every pair's difference, ``(..., P, R, M)``, and reduce it as torch's kernels do
per p: 0 counts nonzeros, 1 sums magnitudes, 2 is a root of squares, inf takes the largest,
any other p is ``(sum |d|**p) ** (1/p)``. (``cdist`` reaches ``_cdist_forward`` for p != 2 and
for small inputs; larger Euclidean ones go through ``_euclidean_dist``, a composite of matmuls.)

The backward ops are torch's formulas, not ``jax.vjp``: torch defines the gradient as zero
where a distance is zero (a root's derivative is infinite there) and, for inf, sends it to
every coordinate that attains the maximum.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array


def _differences(x1: Array, x2: Array) -> Array:
    """``x1[..., i, :] - x2[..., j, :]`` for every pair: ``(..., P, R, M)``."""
    return x1[..., :, None, :] - x2[..., None, :, :]


def _reduce(diff: Array, p: float) -> Array:
    mag = jnp.abs(diff)
    if p == 0:
        return jnp.sum((diff != 0).astype(diff.dtype), axis=-1)
    if p == 1:
        return jnp.sum(mag, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(diff * diff, axis=-1))
    if math.isinf(p):
        return jnp.max(mag, axis=-1, initial=0) if diff.shape[-1] else jnp.zeros(diff.shape[:-1], diff.dtype)
    return jnp.sum(mag**p, axis=-1) ** (1 / p)


def _pair_gradients(diff: Array, grad: Array, dist: Array, p: float) -> Array:
    """Each pair's gradient with respect to its first row, ``(..., P, R, M)``, as torch's
    distance kernels define it."""
    g, d = grad[..., None], dist[..., None]
    zero = jnp.zeros_like(diff)
    if p == 0:
        return zero
    if p == 1:
        return g * jnp.sign(diff)
    if math.isinf(p):
        return jnp.where(jnp.abs(diff) == d, g * jnp.sign(diff), zero)
    safe = jnp.where(d == 0, 1, d)
    if p == 2:
        return jnp.where(d == 0, zero, g * diff / safe)
    if p < 2:
        out = jnp.sign(diff) * jnp.abs(diff) ** (p - 1) * g / safe ** (p - 1)
        if p < 1:
            out = jnp.where(diff == 0, zero, out)
    else:
        out = diff * jnp.abs(diff) ** (p - 2) * g / safe ** (p - 1)
    return jnp.where(d == 0, zero, out)


def _broadcast_batch(x1: Array, x2: Array) -> tuple[Array, Array]:
    batch = jnp.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return jnp.broadcast_to(x1, (*batch, *x1.shape[-2:])), jnp.broadcast_to(x2, (*batch, *x2.shape[-2:]))


@lowering(aten._cdist_forward.default)
def _cdist_forward(x1: Array, x2: Array, p: float, compute_mode: int | None = None) -> Array:
    x1, x2 = _broadcast_batch(x1, x2)
    return _reduce(_differences(x1, x2), p)


@lowering(aten._cdist_backward.default)
def _cdist_backward(grad: Array, x1: Array, x2: Array, p: float, cdist: Array) -> Array:
    # The gradient of x1 as broadcast to x2's batch, as torch's kernel returns it (autograd
    # sums a broadcast dim back).
    b1, b2 = _broadcast_batch(x1, x2)
    return jnp.sum(_pair_gradients(_differences(b1, b2), grad, cdist, p), axis=-2)


@lowering(aten._pdist_forward.default)
def _pdist_forward(x: Array, p: float = 2) -> Array:
    i, j = np.triu_indices(x.shape[0], 1)  # pdist's pairs i < j, row by row
    return _reduce(x[i] - x[j], p)


@lowering(aten._pdist_backward.default)
def _pdist_backward(grad: Array, x: Array, p: float, pdist: Array) -> Array:
    i, j = np.triu_indices(x.shape[0], 1)
    per_pair = _pair_gradients(x[i] - x[j], grad, pdist, p)  # (pairs, M), towards row i
    return jnp.zeros_like(x).at[i].add(per_pair).at[j].add(-per_pair)
