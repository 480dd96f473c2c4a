"""Lowerings of ``nn.EmbeddingBag`` (``_embedding_bag``, its forward-only twin) and its
backward ops, and of the renormalization ``max_norm`` asks of embeddings.

Each index belongs to the bag whose offset is the last one at or before its position, so
the bags are a segment id per index (a search of the offsets) and the reductions are segment
sums and maxima: shapes stay static however the offsets split the indices. An index equal to
``padding_idx`` counts in no bag; an empty bag is zeros.

Of the forward's extra outputs, the backward ops read only ``max_indices`` (the weight row
each maximum came from, the first on a tie, as torch's kernel keeps it); they recompute the
bags from the offsets, which they are also given. ``offset2bag`` and ``bag_size`` are computed
as CUDA does (a bag per index, its count).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from xlalab.runtime.lowering.elementwise import compute_float
from xlalab.runtime.lowering.reductions import vector_norm
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array

SUM, MEAN, MAX = 0, 1, 2


def _bags(indices: Array, offsets: Array, num_bags: int) -> Array:
    """The bag of each index: the position of the last offset at or before it."""
    starts = offsets[:num_bags]
    return jnp.searchsorted(starts, jnp.arange(indices.shape[0], dtype=starts.dtype), side="right") - 1


def _counted(indices: Array, padding_idx: int | None) -> Array:
    if padding_idx is None or padding_idx < 0:
        return jnp.ones(indices.shape, bool)
    return indices != padding_idx


def _forward(
    weight: Array,
    indices: Array,
    offsets: Array,
    scale_grad_by_freq: bool = False,
    mode: int = SUM,
    sparse: bool = False,
    per_sample_weights: Array | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = -1,
) -> tuple[Array, Array, Array, Array]:
    num_bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    bag = _bags(indices, offsets, num_bags)
    counted = _counted(indices, padding_idx)
    count = jax.ops.segment_sum(counted.astype(indices.dtype), bag, num_bags)
    rows = compute_float(jnp.take(weight, indices, axis=0, mode="clip"))
    if per_sample_weights is not None:
        rows = rows * compute_float(per_sample_weights)[:, None]
    zero = jnp.zeros((), rows.dtype)
    if mode == MAX:
        low = jnp.asarray(-jnp.inf, rows.dtype)
        best = jax.ops.segment_max(jnp.where(counted[:, None], rows, low), bag, num_bags)
        out = jnp.where((count > 0)[:, None], best, zero)
        # Which row each maximum came from: the first index in the bag that attains it.
        n = indices.shape[0]
        at = jnp.where(counted[:, None] & (rows == best[bag]), jnp.arange(n)[:, None], n)
        first = jax.ops.segment_min(at, bag, num_bags)
        max_indices = jnp.where(first < n, indices[jnp.minimum(first, n - 1)], 0).astype(indices.dtype)
    else:
        out = jax.ops.segment_sum(jnp.where(counted[:, None], rows, zero), bag, num_bags)
        if mode == MEAN:
            out = out / jnp.maximum(count, 1).astype(out.dtype)[:, None]
        max_indices = jnp.zeros((0,), indices.dtype)
    bag_size = count if not include_last_offset else jnp.concatenate([count, jnp.zeros((1,), count.dtype)])
    return out.astype(weight.dtype), bag.astype(indices.dtype), bag_size, max_indices


lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)(_forward)


def _dense_backward(
    grad: Array,
    indices: Array,
    bag: Array,
    count: Array,
    max_indices: Array,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    per_sample_weights: Array | None,
    padding_idx: int,
) -> Array:
    g = compute_float(grad)  # accumulate halves in float
    table = jnp.zeros((num_weights, g.shape[1]), g.dtype)
    if mode == MAX:
        # Each bag's gradient goes to the rows its maxima came from (none for an empty bag).
        g = jnp.where((count > 0)[:, None], g, jnp.zeros((), g.dtype))
        return table.at[max_indices, jnp.arange(g.shape[1])[None, :]].add(g).astype(grad.dtype)
    counted = _counted(indices, padding_idx)
    per_index = g[bag]
    if mode == MEAN:
        per_index = per_index / jnp.maximum(count, 1).astype(g.dtype)[bag][:, None]
    if per_sample_weights is not None:
        per_index = per_index * compute_float(per_sample_weights)[:, None]
    if scale_grad_by_freq:
        freq = jnp.zeros((num_weights,), g.dtype).at[indices].add(1)
        per_index = per_index / freq[indices][:, None]
    per_index = jnp.where(counted[:, None], per_index, jnp.zeros((), g.dtype))
    return table.at[indices].add(per_index).astype(grad.dtype)


@lowering(aten._embedding_bag_backward.default)
def _embedding_bag_backward(
    grad: Array,
    indices: Array,
    offsets: Array,
    offset2bag: Array,
    bag_size: Array,
    maximum_indices: Array,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    sparse: bool,
    per_sample_weights: Array | None,
    padding_idx: int = -1,
) -> Array:
    num_bags = grad.shape[0]
    bag = _bags(indices, offsets, num_bags)
    count = jax.ops.segment_sum(_counted(indices, padding_idx).astype(jnp.int32), bag, num_bags)
    return _dense_backward(
        grad, indices, bag, count, maximum_indices, num_weights, scale_grad_by_freq, mode,
        per_sample_weights, padding_idx,
    )  # fmt: skip


@lowering(aten._embedding_bag_per_sample_weights_backward.default)
def _per_sample_weights_backward(
    grad: Array,
    weight: Array,
    indices: Array,
    offsets: Array,
    offset2bag: Array,
    mode: int,
    padding_idx: int = -1,
) -> Array:
    # Only sum mode takes per-sample weights: each weight's gradient is its bag's gradient
    # dotted with the row it scaled.
    bag = _bags(indices, offsets, grad.shape[0])
    rows = compute_float(jnp.take(weight, indices, axis=0, mode="clip"))
    dots = jnp.sum(compute_float(grad)[bag] * rows, axis=1)
    return jnp.where(_counted(indices, padding_idx), dots, jnp.zeros((), dots.dtype)).astype(grad.dtype)


@lowering(aten.embedding_renorm.default)
def _embedding_renorm(weight: Array, indices: Array, max_norm: float, norm_type: float) -> Array:
    """``nn.Embedding(max_norm=...)``: each row an index names whose norm exceeds ``max_norm``
    is scaled to it (``max_norm / (norm + 1e-7)``, as torch's kernel scales); other rows stay."""
    used = jnp.zeros((weight.shape[0],), bool).at[indices.reshape(-1)].set(True)
    rows = compute_float(weight)
    norms = vector_norm(rows, norm_type, dim=1)
    scale = jnp.where(used & (norms > max_norm), max_norm / (norms + 1e-7), jnp.ones((), rows.dtype))
    return (rows * scale[:, None]).astype(weight.dtype)
