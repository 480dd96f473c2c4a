"""Lowerings of view ops, and of ``xla::update_view``: a write through a view.

Reading a view applies its chain of view ops to the base. Writing through a view must
change the base at exactly the elements the view covers: ``_write`` inverts the chain
level by level (see there), falling back to a scatter by positions for exotic views.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..graph import SPECIAL_LOWERINGS, _subst
from ..tensor import UPDATE_VIEW
from .registry import lowering

aten = torch.ops.aten


def _canon(d: int, n: int) -> int:
    return d + n if d < 0 else d


@lowering(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default)
def _view(x: Any, size: Any, *_: Any) -> Any:
    return jnp.reshape(x, _infer(size, x.size))


def _infer(size: Any, numel: int) -> tuple[int, ...]:
    size = tuple(int(s) for s in size)
    if -1 in size:
        known = int(np.prod([s for s in size if s != -1]))
        size = tuple(numel // max(known, 1) if s == -1 else s for s in size)
    return size


@lowering(aten.expand.default)
def _expand(x: Any, size: Any, implicit: bool = False) -> Any:
    size = tuple(size)
    lead = len(size) - x.ndim
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(size))
    return jnp.broadcast_to(x, shape)


@lowering(aten.permute.default)
def _permute(x: Any, dims: Any) -> Any:
    return jnp.transpose(x, tuple(_canon(d, x.ndim) for d in dims))


@lowering(aten.t.default)
def _t(x: Any) -> Any:
    return x.T if x.ndim == 2 else x


@lowering(aten.transpose.int)
def _transpose(x: Any, a: int, b: int) -> Any:
    return jnp.swapaxes(x, a, b) if x.ndim else x


@lowering(aten.select.int)
def _select(x: Any, dim: int, index: int) -> Any:
    dim = _canon(dim, x.ndim)
    return lax.index_in_dim(x, _canon(index, x.shape[dim]), dim, keepdims=False)


@lowering(aten.slice.Tensor)
def _slice(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    dim = _canon(dim, x.ndim)
    n = x.shape[dim]
    start, end, _ = slice(start, end, step).indices(n)
    end = max(end, start)
    return lax.slice_in_dim(x, start, end, step, dim)


@lowering(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def _squeeze(x: Any, dim: Any = None) -> Any:
    if dim is None:
        dims = tuple(i for i, s in enumerate(x.shape) if s == 1)
    else:
        dims = tuple(_canon(d, max(x.ndim, 1)) for d in ((dim,) if isinstance(dim, int) else dim))
        dims = tuple(d for d in dims if x.ndim and x.shape[d] == 1)
    return jnp.squeeze(x, dims) if dims else x


@lowering(aten.unsqueeze.default)
def _unsqueeze(x: Any, dim: int) -> Any:
    return jnp.expand_dims(x, _canon(dim, x.ndim + 1))


@lowering(aten.alias.default, aten.lift_fresh.default, aten.detach.default)
def _alias(x: Any) -> Any:
    return x


@lowering(aten.diagonal.default)
def _diagonal(x: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
    return jnp.diagonal(x, offset, _canon(dim1, x.ndim), _canon(dim2, x.ndim))


def _strided_positions(size: Any, stride: Any, storage_offset: Any) -> np.ndarray:
    """The flat positions in a contiguous tensor that ``as_strided(size, stride, offset)`` reads."""
    idx = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n) * s).reshape(shape)
    return idx


@lowering(aten.as_strided.default)
def _as_strided(x: Any, size: Any, stride: Any, storage_offset: Any = None) -> Any:
    # xla tensors are contiguous over their base: gather by computed flat positions.
    return jnp.ravel(x)[_strided_positions(size, stride, storage_offset)]


@lowering(aten.as_strided_scatter.default)
def _as_strided_scatter(x: Any, src: Any, size: Any, stride: Any, storage_offset: Any = None) -> Any:
    # What functionalization makes of a write through as_strided: x with src at those positions.
    idx = _strided_positions(size, stride, storage_offset)
    return jnp.ravel(x).at[idx.reshape(-1)].set(jnp.ravel(src).astype(x.dtype)).reshape(x.shape)


@lowering(aten.view_as_real.default)
def _view_as_real(x: Any) -> Any:
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@lowering(aten.view_as_complex.default)
def _view_as_complex(x: Any) -> Any:
    return lax.complex(x[..., 0], x[..., 1])


@lowering(aten.unfold.default)
def _unfold(x: Any, dim: int, size: int, step: int) -> Any:
    if x.ndim == 0:
        return x.reshape(1)  # torch: unfolding a 0-d tensor gives shape (1,)
    dim = _canon(dim, x.ndim)
    n = (x.shape[dim] - size) // step + 1
    idx = (np.arange(n)[:, None] * step + np.arange(size)[None, :])
    moved = jnp.moveaxis(x, dim, -1) if x.ndim else x[None]
    out = moved[..., idx]  # [..., n, size]
    return jnp.moveaxis(out, -2, dim)


@lowering(aten.view.dtype)
def _view_dtype(x: Any, dtype: torch.dtype) -> Any:
    from ..dtypes import to_jnp

    return reinterpret(x, np.dtype(to_jnp(dtype)))


def reinterpret(x: Any, target: np.dtype) -> Any:
    """``x``'s bytes read as ``target`` elements, as torch's ``Tensor.view(dtype)`` reads them:
    to a smaller element size the last dimension grows by the size ratio, to a larger one it
    shrinks by it (torch's meta kernel has already refused what cannot be viewed).

    XLA bitcasts neither bools nor complex numbers: a bool is its byte (0 or 1), a complex
    number its (real, imaginary) pair of components."""
    if x.ndim == 0:  # only a same-size view of a 0-d tensor exists
        return reinterpret(x.reshape(1), target).reshape(())
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    elif np.issubdtype(x.dtype, np.complexfloating):
        x = _view_as_real(x).reshape(*x.shape[:-1], 2 * x.shape[-1])
    if target == np.bool_:
        return reinterpret(x, np.dtype(np.uint8)) != 0
    if np.issubdtype(target, np.complexfloating):
        parts = reinterpret(x, np.dtype(f"float{target.itemsize * 4}"))
        return _view_as_complex(parts.reshape(*parts.shape[:-1], parts.shape[-1] // 2, 2))
    ratio = max(x.dtype.itemsize, target.itemsize) // min(x.dtype.itemsize, target.itemsize)
    if ratio > 1:
        # XLA:GPU aborts the process compiling a size-changing bitcast of a value that is also
        # a program output ("Check failed: operand_maps.size() == 1", jaxlib 0.11.2), as in
        # `v = x.view(torch.int16); x.mul_(2)`; a barrier keeps the two out of one fusion.
        x = lax.optimization_barrier(x)
    if target.itemsize > x.dtype.itemsize:
        # bitcast_convert_type consumes a trailing axis of the size ratio...
        x = x.reshape(*x.shape[:-1], x.shape[-1] // ratio, ratio)
    out = lax.bitcast_convert_type(x, target)
    if target.itemsize < x.dtype.itemsize:
        # ...and adds one going the other way: fold it into the last dimension.
        out = out.reshape(*x.shape[:-1], x.shape[-1] * ratio)
    return out


def _update_view(vals: list[Any], chain: Any, shape: Any, dtype: Any) -> Any:
    """base' = base with the view's elements replaced by ``src``."""
    base, src = vals
    return _write(base, tuple(chain), src)


def _write(base: Any, chain: tuple[Any, ...], src: Any) -> Any:
    """Write ``src`` through ``chain`` into ``base``, one view level at a time.

    Each level is inverted structurally where it can be (a reshape back, a transpose
    back, a dynamic-update-slice for select/slice), which XLA turns into cheap copies;
    any other view op uses the general mechanism: run the view on an iota of the level's
    positions and scatter.
    """
    if not chain:
        # The values convert to the view's dtype, which a dtype view makes differ from the base's.
        return jnp.broadcast_to(src.astype(base.dtype), base.shape)
    (func, tpl), rest = chain[0], chain[1:]
    name = func._schema.name
    if not _inverts(name) and not any(_changes_elements(f) for f, _ in rest):
        # Scatter by the positions the whole rest of the chain reads: an ``expand`` repeats
        # its base's elements, and only those the innermost view covers are written.
        positions = jnp.arange(base.size, dtype=jnp.int64).reshape(base.shape)
        for f, t in chain:
            positions = _apply_view(f, positions, t)
        return _scatter_at(base, positions, src.astype(base.dtype))
    args = [_subst(a, []) for a in tpl]
    inner = _apply_view(func, base, tpl)
    new_inner = _write(inner, rest, src)
    if func is aten.view.dtype:  # the base's bytes, read back as the base's elements
        return reinterpret(new_inner, base.dtype)
    if name in _RESHAPES:
        return jnp.reshape(new_inner, base.shape)
    if name == "aten::permute":
        dims = [_canon(d, base.ndim) for d in args[0]]
        return jnp.transpose(new_inner, [int(d) for d in np.argsort(dims)])
    if name in ("aten::t", "aten::transpose", "aten::_conj"):  # each its own inverse
        return _apply_view(func, new_inner, tpl)
    if name == "aten::view_as_real":  # pairs back to complex numbers, and the reverse
        return _view_as_complex(new_inner.astype(inner.dtype))
    if name == "aten::view_as_complex":
        return _view_as_real(new_inner).astype(base.dtype)
    if name == "aten::select":
        dim = _canon(args[0], base.ndim)
        index = _canon(args[1], base.shape[dim])
        return lax.dynamic_update_index_in_dim(base, new_inner, index, dim)
    if name == "aten::slice":
        dim = _canon(args[0] if args else 0, base.ndim)
        start, end, step = slice(*(list(args[1:4]) + [None] * 3)[:3]).indices(base.shape[dim])
        where = [slice(None)] * base.ndim
        where[dim] = slice(start, max(start, end), step)
        return base.at[tuple(where)].set(new_inner)
    positions = _apply_view(func, jnp.arange(base.size, dtype=jnp.int64).reshape(base.shape), tpl)
    return _scatter_at(base, positions, new_inner)


def _scatter_at(base: Any, positions: Any, values: Any) -> Any:
    """``base`` with ``values`` (broadcast to ``positions``' shape) at those flat positions.

    Where positions repeat (an ``expand``ed view's rows share their base's elements), only the
    copies the write changed are written: eager's kernel writes to memory, so an element one row
    of the view was given (``index_put_``, ``masked_fill_`` on some rows) is what every row then
    reads; the unchanged copies hold the old value and must not win."""
    flat = jnp.ravel(base)
    where, new = jnp.ravel(positions), jnp.ravel(jnp.broadcast_to(values, positions.shape))
    changed = _differs(new, flat[where])
    where = jnp.where(changed, where, flat.size)  # out of range: dropped
    return flat.at[where].set(new, mode="drop").reshape(base.shape)


def _differs(new: Any, old: Any) -> Any:
    """Elementwise, whether ``new`` is another value than ``old`` (a zero's sign counts; NaN is
    NaN)."""
    if jnp.iscomplexobj(new):
        return _differs(new.real, old.real) | _differs(new.imag, old.imag)
    if not jnp.issubdtype(new.dtype, jnp.floating):
        return new != old
    nan = jnp.isnan(new)
    return (nan != jnp.isnan(old)) | (~nan & ((new != old) | (jnp.signbit(new) != jnp.signbit(old))))


def _inverts(name: str) -> bool:
    """Whether ``_write`` inverts this view op level by level."""
    return name in _RESHAPES or name in _INVERTED


def _changes_elements(func: Any) -> bool:
    """A view whose elements are not its base's elements one for one (positions don't carry)."""
    return func is aten.view.dtype or func._schema.name in ("aten::view_as_real", "aten::view_as_complex")


_INVERTED = {"aten::permute", "aten::t", "aten::transpose", "aten::_conj", "aten::view_as_real",
             "aten::view_as_complex", "aten::select", "aten::slice", "aten::view"}
_RESHAPES = {"aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::squeeze", "aten::unsqueeze",
             "aten::alias", "aten::detach", "aten::lift_fresh"}


def _apply_view(func: Any, x: Any, tpl: Any) -> Any:
    from .registry import LOWERINGS

    args = [_subst(a, []) for a in tpl]
    return LOWERINGS[func](x, *args)


def _empty(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> Any:
    from ..dtypes import to_jnp
    from .factories import filled

    return filled(shape, 0, to_jnp(dtype))


SPECIAL_LOWERINGS[UPDATE_VIEW] = _update_view
SPECIAL_LOWERINGS["xla::empty"] = _empty
