"""Lowerings of aten ops that gather, scatter, join or rearrange elements.

cat/stack, index_select/gather/scatter, advanced indexing (index.Tensor, index_put),
triangular masks, flip/roll/repeat, constant padding, sort/topk.

Boolean-mask indexing (``x[mask]``) has a data-dependent result shape that XLA cannot
express; it is refused with NotImplementedError. Masked *assignment*
(``x[mask] = v``) keeps the shape of ``x`` and is lowered to a select when ``v`` broadcasts over
the selected elements; one value per selected element (the gradient of ``x[mask]``) runs on the
CPU fallback (``tensor.FALLBACK_IF``), which also raises eager's error when the counts differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.lowering.elementwise import Scalar, refuse_bool, scaled
from xlalab.runtime.lowering.registry import lowering
from xlalab.runtime.tensor import values_per_selected

aten = torch.ops.aten

Array = jax.Array


def _is_mask(index: Array) -> bool:
    return index.dtype in (jnp.bool_, jnp.uint8)


def _data_dependent(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"{what} with a boolean mask has a data-dependent shape, which XLA cannot compile; "
        "index with integer tensors (e.g. mask.nonzero() computed on the CPU) or use torch.where"
    )


def _index_tuple(indices: Sequence[Array | None]) -> tuple[Any, ...]:
    """torch's list of optional index tensors as a jnp index (None means the whole dim).

    jnp's advanced indexing follows NumPy's layout rules, which torch's follow too: the
    broadcast index dims replace the indexed dims in place when the index tensors are
    adjacent, and move to the front when a skipped dim separates them.
    """
    out: list[Any] = []
    for index in indices:
        if index is None:
            out.append(slice(None))
        elif _is_mask(index):
            raise _data_dependent("indexing")
        else:
            out.append(index)
    return tuple(out)


def _dim(dim: int, ndim: int) -> int:
    return dim % max(ndim, 1)


# --- joining ------------------------------------------------------------------------


@lowering(aten.cat.default)
def _cat(tensors: Sequence[Array], dim: int = 0) -> Array:
    # torch still accepts legacy empty 1-d tensors of shape (0,) next to any rank.
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return tensors[0]
    return jnp.concatenate(kept, axis=_dim(dim, kept[0].ndim))


@lowering(aten.stack.default)
def _stack(tensors: Sequence[Array], dim: int = 0) -> Array:
    return jnp.stack(tensors, axis=dim)


# --- gathering ----------------------------------------------------------------------


@lowering(
    aten.index.Tensor,
    aten.index.Tensor_hacked_twin,
    aten._unsafe_index.Tensor,
    aten._unsafe_index.Tensor_hacked_twin,
)
def _index(x: Array, indices: Sequence[Array | None]) -> Array:
    return x[_index_tuple(indices)]


@lowering(aten.index_select.default)
def _index_select(x: Array, dim: int, index: Array) -> Array:
    if x.ndim == 0:
        return x
    # mode: an index out of range is clamped, as XLA's gathers do (JAX's default fills NaN)
    return jnp.take(x, index.reshape(-1), axis=_dim(dim, x.ndim), mode="clip")


@lowering(aten.take.default)
def _take(x: Array, index: Array) -> Array:
    return x.reshape(-1)[index]


@lowering(aten.put.default)
def _put(x: Array, index: Array, source: Array, accumulate: bool = False) -> Array:
    """``x`` flattened, ``source`` written (or added) at ``index``; ``take``'s backward."""
    flat, at, values = x.reshape(-1), index.reshape(-1), source.reshape(-1).astype(x.dtype)
    at = jnp.where(at < 0, at + flat.shape[0], at)
    if not accumulate:
        out = flat.at[at].set(values)
    else:  # a bool sum is an or
        out = flat.at[at].max(values) if x.dtype == jnp.bool_ else flat.at[at].add(values)
    return out.reshape(x.shape)


@lowering(aten.gather.default)
def _gather(x: Array, dim: int, index: Array, sparse_grad: bool = False) -> Array:
    if index.size == 0:  # an empty index reads nothing, whatever its rank (eager allows any)
        return jnp.zeros(index.shape, x.dtype)
    if x.ndim == 0 or index.ndim == 0:  # torch takes a 0-d tensor (or index) as one of size 1
        return jnp.broadcast_to(x.reshape(-1)[index.reshape(-1)].reshape(index.shape), index.shape)
    dim = _dim(dim, x.ndim)
    # torch lets the index be smaller than the input in the other dims and then reads
    # the leading block; take_along_axis wants equal (or broadcastable) sizes.
    block = tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))
    return jnp.take_along_axis(x[block], index, axis=dim, mode="clip")  # out of range: clamped


# --- scattering ---------------------------------------------------------------------


def _scatter_target(index: Array, dim: int) -> tuple[Array, ...]:
    """Full coordinates for torch's scatter: ``index`` along ``dim``, identity elsewhere."""
    coords = [lax.broadcasted_iota(index.dtype, index.shape, d) for d in range(index.ndim)]
    coords[_dim(dim, index.ndim)] = index
    return tuple(coords)


def _src_block(src: Array | Scalar, index: Array, dtype: Any) -> Array:
    """The part of ``src`` that scatter reads: its leading block of ``index``'s shape."""
    src = jnp.asarray(src, dtype)
    if src.ndim == 0:
        return src
    return src[tuple(slice(0, n) for n in index.shape)]


def _scatter(x: Array, dim: int, index: Array, src: Array | Scalar, reduce: str | None) -> Array:
    if x.ndim == 0 or index.ndim == 0:
        # torch treats 0-d operands as 1-element vectors here.
        src1 = src.reshape(-1) if isinstance(src, jax.Array) and src.ndim == 0 else src
        out = _scatter(x.reshape(-1), 0, index.reshape(-1), src1, reduce)
        return out.reshape(x.shape)
    if x.dtype == jnp.bool_ and reduce is not None:
        # bool sum/max are logical ors, prod/min logical ands: reduce 0/1 integers.
        ints = jnp.asarray(src).astype(jnp.int32)
        return _scatter(x.astype(jnp.int32), dim, index, ints, reduce) != 0
    target = x.at[_scatter_target(index, dim)]
    values = _src_block(src, index, x.dtype)
    if reduce is None:
        return target.set(values)
    if reduce in ("add", "sum"):
        return target.add(values)
    if reduce in ("multiply", "prod"):
        return target.multiply(values)
    if reduce == "amax":
        return target.max(values)
    if reduce == "amin":
        return target.min(values)
    raise NotImplementedError(f"scatter reduce={reduce!r}")


@lowering(aten.scatter.src, aten.scatter.value)
def _scatter_set(x: Array, dim: int, index: Array, src: Array | Scalar) -> Array:
    return _scatter(x, dim, index, src, None)


@lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_with_reduce(x: Array, dim: int, index: Array, src: Array | Scalar, reduce: str) -> Array:
    return _scatter(x, dim, index, src, reduce)


@lowering(aten.scatter_add.default)
def _scatter_add(x: Array, dim: int, index: Array, src: Array) -> Array:
    return _scatter(x, dim, index, src, "add")


def _reduce_identity(reduce: str, dtype: Any) -> Scalar:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    floating = jnp.issubdtype(dtype, jnp.floating)
    if reduce == "amax":
        return -jnp.inf if floating else jnp.iinfo(dtype).min
    return jnp.inf if floating else jnp.iinfo(dtype).max


@lowering(aten.scatter_reduce.two)
def _scatter_reduce(
    x: Array, dim: int, index: Array, src: Array, reduce: str, include_self: bool = True
) -> Array:
    if x.dtype == jnp.bool_:
        out = _scatter_reduce(x.astype(jnp.int32), dim, index, src.astype(jnp.int32), reduce, include_self)
        return out != 0
    target = _scatter_target(index, dim)
    base = x if include_self else x.at[target].set(jnp.asarray(_reduce_identity(reduce, x.dtype), x.dtype))
    if reduce != "mean":
        return _scatter(base, dim, index, src, reduce)
    total = _scatter(base, dim, index, src, "sum")
    hits = jnp.zeros(x.shape, jnp.int64).at[target].add(1)
    count = jnp.maximum(hits + int(include_self), 1).astype(x.dtype)
    mean = jnp.floor_divide(total, count) if jnp.issubdtype(x.dtype, jnp.integer) else total / count
    return jnp.where(hits > 0, mean, x)


def _dim_index(dim: int, ndim: int, index: Any) -> tuple[Any, ...]:
    return (slice(None),) * _dim(dim, ndim) + (index,)


def _as_vector(fn: Any) -> Any:
    """index_add/copy/fill on a 0-d tensor: torch treats it (and a 0-d source) as 1 element."""

    def lower(x: Array, dim: int, index: Array, source: Any, *rest: Any, **kw: Any) -> Array:
        if x.ndim > 0:
            return fn(x, dim, index, source, *rest, **kw)
        if isinstance(source, jax.Array) and source.ndim == 0 and fn is not _index_fill:
            source = source.reshape(1)
        return fn(x.reshape(1), 0, index.reshape(-1), source, *rest, **kw).reshape(())

    return lower


def _index_add(x: Array, dim: int, index: Array, source: Array, alpha: Scalar = 1) -> Array:
    if index.ndim == 0:
        index = index.reshape(1)
        source = jnp.expand_dims(source, _dim(dim, x.ndim)) if source.ndim == x.ndim - 1 else source
    where = _dim_index(dim, x.ndim, index)
    if x.dtype == jnp.bool_:
        # bool "addition" is a logical or, of source scaled by alpha (False adds nothing).
        added = scaled(source.astype(jnp.int32), jnp.asarray(alpha).astype(jnp.int32))
        return x.astype(jnp.int32).at[where].add(added) != 0
    return x.at[where].add(scaled(source, alpha).astype(x.dtype))


def _index_copy(x: Array, dim: int, index: Array, source: Array) -> Array:
    if index.ndim == 0:
        index = index.reshape(1)
        source = jnp.expand_dims(source, _dim(dim, x.ndim)) if source.ndim == x.ndim - 1 else source
    return x.at[_dim_index(dim, x.ndim, index)].set(source.astype(x.dtype))


def _index_fill(x: Array, dim: int, index: Array, value: Array | Scalar) -> Array:
    return x.at[_dim_index(dim, x.ndim, index.reshape(-1))].set(jnp.asarray(value, x.dtype))


lowering(aten.index_add.default)(_as_vector(_index_add))
lowering(aten.index_copy.default)(_as_vector(_index_copy))
lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)(_as_vector(_index_fill))


def _mask_put(x: Array, position: int, mask: Array, values: Array, accumulate: bool) -> Array:
    """``x[..., mask, ...] = values`` as a select, when ``values`` does not depend on how
    many elements the mask selects (it broadcasts over the dims after the mask)."""
    trailing = x.ndim - position - mask.ndim
    if values_per_selected(values.shape, trailing):  # the CPU fallback takes these (tensor.FALLBACK_IF)
        raise _data_dependent("index_put with one value per selected element")
    values = values.reshape(values.shape[values.ndim - trailing :]) if values.ndim > trailing else values
    where = mask.astype(jnp.bool_).reshape((1,) * position + mask.shape + (1,) * trailing)
    new = x + values if accumulate else jnp.broadcast_to(values, x.shape)
    return jnp.where(where, new.astype(x.dtype), x)


@lowering(
    aten.index_put.default,
    aten.index_put.hacked_twin,
    aten._unsafe_index_put.default,
    aten._unsafe_index_put.hacked_twin,
    aten._index_put_impl.default,
)
def _index_put(
    x: Array,
    indices: Sequence[Array | None],
    values: Array,
    accumulate: bool = False,
    unsafe: bool = False,
) -> Array:
    given = [(i, index) for i, index in enumerate(indices) if index is not None]
    if len(given) == 1 and _is_mask(given[0][1]):
        position, mask = given[0]
        return _mask_put(x, position, mask, values, accumulate)
    where = _index_tuple(indices)
    if accumulate and x.dtype == jnp.bool_:  # bool sums are logical ors
        return x.astype(jnp.int32).at[where].add(values.astype(jnp.int32)) != 0
    target = x.at[where]
    values = values.astype(x.dtype)
    return target.add(values) if accumulate else target.set(values)


@lowering(aten.masked_scatter.default)
def _masked_scatter(x: Array, mask: Array, source: Array) -> Array:
    # The k-th selected position takes source's k-th element: a cumsum finds k, so the
    # result keeps a static shape even though the number of selected elements varies.
    shape = jnp.broadcast_shapes(x.shape, mask.shape)  # out of place, self broadcasts too
    x, mask = jnp.broadcast_to(x, shape), jnp.broadcast_to(mask, shape)
    if source.size == 0:
        return x  # nothing to place (torch requires the mask to select nothing then)
    position = jnp.cumsum(mask.reshape(-1).astype(jnp.int64)) - 1
    picked = source.reshape(-1)[jnp.clip(position, 0, source.size - 1)].reshape(x.shape)
    return jnp.where(mask, picked.astype(x.dtype), x)


@lowering(aten.masked_scatter_backward.default)
def _masked_scatter_backward(grad_output: Array, mask: Array, sizes: Sequence[int]) -> Array:
    # The source's gradient: the selected positions' gradients in order (the inverse of the
    # placement above), zeros past the count selected.
    n = math.prod(sizes)
    selected = jnp.broadcast_to(mask, grad_output.shape).reshape(-1)
    position = jnp.cumsum(selected.astype(jnp.int64)) - 1
    out = jnp.zeros((n,), grad_output.dtype)
    out = out.at[jnp.where(selected, position, n)].set(grad_output.reshape(-1), mode="drop")
    return out.reshape(tuple(sizes))


@lowering(aten.slice_scatter.default)
def _slice_scatter(
    x: Array, src: Array, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1
) -> Array:
    return x.at[_dim_index(dim, x.ndim, slice(start, end, step))].set(src.astype(x.dtype))


@lowering(aten.select_scatter.default)
def _select_scatter(x: Array, src: Array, dim: int, index: int) -> Array:
    return x.at[_dim_index(dim, x.ndim, index)].set(src.astype(x.dtype))


@lowering(aten.diagonal_scatter.default)
def _diagonal_scatter(x: Array, src: Array, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Array:
    moved = jnp.moveaxis(x, (dim1, dim2), (-2, -1))
    i = jnp.arange(src.shape[-1])
    rows, cols = i + max(-offset, 0), i + max(offset, 0)
    moved = moved.at[..., rows, cols].set(src.astype(x.dtype))
    return jnp.moveaxis(moved, (-2, -1), (dim1, dim2))


# --- rearranging --------------------------------------------------------------------


@lowering(aten.triu.default)
def _triu(x: Array, diagonal: int = 0) -> Array:
    return jnp.triu(x, diagonal)


@lowering(aten.tril.default)
def _tril(x: Array, diagonal: int = 0) -> Array:
    return jnp.tril(x, diagonal)


@lowering(aten.flip.default)
def _flip(x: Array, dims: Sequence[int]) -> Array:
    # A 0-d tensor takes dim 0 (or -1) in torch, as one of size 1: nothing to reverse.
    return jnp.flip(x, tuple(dims)) if len(dims) and x.ndim else x


@lowering(aten.roll.default)
def _roll(x: Array, shifts: Sequence[int], dims: Sequence[int] = ()) -> Array:
    if len(dims) == 0:  # no dims: roll the flattened tensor
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), tuple(dims))


@lowering(aten.repeat.default)
def _repeat(x: Array, repeats: Sequence[int]) -> Array:
    # Extra leading repeats add new leading dims, as in torch.
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, tuple(repeats))


@lowering(aten.constant_pad_nd.default)
def _constant_pad_nd(x: Array, pad: Sequence[int], value: Scalar = 0) -> Array:
    # pad lists (before, after) pairs from the last dim backwards; negative pads crop,
    # which lax.pad does natively.
    config = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        config[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), config)


# --- sorting ------------------------------------------------------------------------


def _sort(x: Array, dim: int, descending: bool) -> tuple[Array, Array]:
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    # Stable argsort; NaN sorts as the largest value, first when descending, as in torch.
    order = jnp.argsort(x, axis=dim, stable=True, descending=descending)
    return jnp.take_along_axis(x, order, axis=dim), order


@lowering(aten.sort.default)
def _sort_default(x: Array, dim: int = -1, descending: bool = False) -> tuple[Array, Array]:
    return _sort(x, dim, descending)


@lowering(aten.sort.stable)
def _sort_stable(
    x: Array, stable: bool | None = None, dim: int = -1, descending: bool = False
) -> tuple[Array, Array]:
    return _sort(x, dim, descending)


@lowering(aten.topk.default)
def _topk(x: Array, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Array, Array]:
    refuse_bool("topk", x)
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    dim = _dim(dim, x.ndim)
    moved = jnp.moveaxis(x, dim, -1)
    if largest:
        # XLA ranks a NaN with its sign bit set (0/0 and inf - inf make one on x86) below every
        # number; torch ranks any NaN above them.
        keys = jnp.where(jnp.isnan(moved), jnp.nan, moved) if jnp.issubdtype(x.dtype, jnp.floating) else moved
        _, order = lax.top_k(keys, k)
    elif jnp.issubdtype(x.dtype, jnp.floating):
        # Smallest first, NaN last (torch orders NaN as the largest value): an ascending
        # sort, since negated keys would rank NaN first.
        order = jnp.argsort(moved, axis=-1, stable=True)[..., :k]
    else:
        _, order = lax.top_k(jnp.invert(moved), k)  # order-reversing keys, no overflow
    values = jnp.take_along_axis(moved, order, axis=-1)
    return jnp.moveaxis(values, -1, dim), jnp.moveaxis(order.astype(jnp.int64), -1, dim)


# --- order statistics ---------------------------------------------------------------
# kthvalue, median, nanmedian and mode read a stable ascending sort of each slice (NaN last,
# as torch orders it). Among equal values torch's kernels return whichever index their
# partial sort left there; these return the sort's (the sweep accepts any tied index).


def _sorted_slices(x: Array, dim: int) -> tuple[Array, Array]:
    """Each slice along ``dim`` sorted, moved last, and where each sorted value came from."""
    moved = jnp.moveaxis(x, dim, -1)
    order = jnp.argsort(moved, axis=-1, stable=True)
    return jnp.take_along_axis(moved, order, axis=-1), order


def _picked(
    values: Array, order: Array, at: Array | int, dim: int, keepdim: bool
) -> tuple[Array, Array]:
    """The sorted slices' entries at position ``at`` (one per slice, or one for all)."""
    pos = jnp.broadcast_to(jnp.asarray(at), values.shape[:-1])[..., None]
    v = jnp.take_along_axis(values, pos, axis=-1)[..., 0]
    i = jnp.take_along_axis(order, pos, axis=-1)[..., 0].astype(jnp.int64)
    if keepdim:
        v, i = jnp.expand_dims(v, dim), jnp.expand_dims(i, dim)
    return v, i


def _first_nan(x: Array, dim: int) -> tuple[Array, Array]:
    """Per slice: whether it holds a NaN, and the index of its first NaN."""
    nan = jnp.isnan(jnp.moveaxis(x, dim, -1))
    return jnp.any(nan, axis=-1), jnp.argmax(nan, axis=-1).astype(jnp.int64)


@lowering(aten.kthvalue.default)
def _kthvalue(x: Array, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Array, Array]:
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    dim = _dim(dim, x.ndim)
    values, order = _sorted_slices(x, dim)
    return _picked(values, order, k - 1, dim, keepdim)


def _median_dim(x: Array, dim: int, keepdim: bool, skip_nan: bool) -> tuple[Array, Array]:
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    dim = _dim(dim, x.ndim)
    values, order = _sorted_slices(x, dim)
    n = x.shape[dim]
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return _picked(values, order, (n - 1) // 2, dim, keepdim)
    if skip_nan:  # the lower median of the values that are not NaN (NaN when all are)
        count = jnp.sum(~jnp.isnan(values), axis=-1)
        return _picked(values, order, jnp.maximum(count - 1, 0) // 2, dim, keepdim)
    v, i = _picked(values, order, (n - 1) // 2, dim, False)
    has_nan, nan_at = _first_nan(x, dim)  # a NaN anywhere makes the median NaN, at the first one
    v, i = jnp.where(has_nan, jnp.nan, v).astype(x.dtype), jnp.where(has_nan, nan_at, i)
    return (jnp.expand_dims(v, dim), jnp.expand_dims(i, dim)) if keepdim else (v, i)


@lowering(aten.median.dim)
def _median(x: Array, dim: int, keepdim: bool = False) -> tuple[Array, Array]:
    return _median_dim(x, dim, keepdim, skip_nan=False)


@lowering(aten.nanmedian.dim)
def _nanmedian(x: Array, dim: int, keepdim: bool = False) -> tuple[Array, Array]:
    return _median_dim(x, dim, keepdim, skip_nan=True)


@lowering(aten.median.default)
def _median_all(x: Array) -> Array:
    if x.size == 0:
        return jnp.full((), jnp.nan, x.dtype)
    return _median_dim(x.reshape(-1), 0, False, skip_nan=False)[0]


@lowering(aten.nanmedian.default)
def _nanmedian_all(x: Array) -> Array:
    if x.size == 0:
        return jnp.full((), jnp.nan, x.dtype)
    return _median_dim(x.reshape(-1), 0, False, skip_nan=True)[0]


@lowering(aten.mode.default)
def _mode(x: Array, dim: int = -1, keepdim: bool = False) -> tuple[Array, Array]:
    """The most frequent value of each slice, the smallest of those equally frequent."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    dim = _dim(dim, x.ndim)
    values, order = _sorted_slices(x, dim)
    n = values.shape[-1]
    at = jnp.arange(n)
    after, before = values[..., 1:], values[..., :-1]
    differs = (after != before) & ~(jnp.isnan(after) & jnp.isnan(before))  # NaNs are one run, as in eager
    starts = jnp.concatenate([jnp.ones((*values.shape[:-1], 1), bool), differs], axis=-1)
    run_start = lax.cummax(jnp.where(starts, at, 0), axis=values.ndim - 1)
    run_length = at - run_start + 1  # so far, at each position of a run of equal values
    # The first position where a run reaches the greatest length ends the smallest mode.
    return _picked(values, order, jnp.argmax(run_length, axis=-1), dim, keepdim)


@lowering(aten.nonzero_static.default)
def _nonzero_static(x: Array, size: int, fill_value: int = -1) -> Array:
    """``nonzero`` padded (or cut) to ``size`` rows: the static-shape form torch_xla recommends
    in place of ``nonzero``, whose shape depends on the values."""
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    coords = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(coords, axis=1).astype(jnp.int64)
