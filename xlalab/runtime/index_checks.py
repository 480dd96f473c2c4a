"""XLALAB_CHECK_INDICES: out-of-range indices raise, as in eager, instead of being clamped.

XLA has no errors at run time: a gather clamps an index that is out of range (a JAX gather
may fill with NaN instead), where eager PyTorch raises ``IndexError``. In checked mode each
indexing op also records a small node, "is any index of this op out of range", and the next
sync computes these flags with the graph. A raised flag becomes an ``IndexError`` that names
the op, the size of the dimension and the user's line. The flags cost one small extra output
and a read per sync, so the mode is off by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch

from . import checks, config, ir

aten = torch.ops.aten
CHECK = "xla::index_check"


enabled: list[bool] = [False]
config.watch("XLALAB_CHECK_INDICES", lambda on: enabled.__setitem__(0, bool(on)))


# Losses whose target holds a class per element (cross_entropy's): an index into dimension 1.
_CLASS_TARGETS = (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
# Ops whose second argument holds rows of the first.
_EMBEDDINGS = (aten.embedding.default, aten._embedding_bag.default, aten._embedding_bag_forward_only.default)


def _dim(args: tuple[Any, ...], i: int) -> int:
    return int(args[i]) if len(args) > i else 0


def _indexed(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[Any, int, bool]]:
    """(index tensor, size of the dimension it indexes, negatives allowed) for an indexing call."""
    self = args[0]
    if func in _CLASS_TARGETS:  # ignore_index is exempt (see _exempt)
        return [(args[1], self.shape[1] if self.dim() >= 2 else self.shape[0], False)]
    if func in (aten.index.Tensor, aten._unsafe_index.Tensor, aten.index_put.default,
                aten._index_put_impl.default, aten._unsafe_index_put.default):  # fmt: skip
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return [(ix, self.shape[k], True) for k, ix in enumerate(indices) if ix is not None]
    if func in _EMBEDDINGS:
        return [(args[1], self.shape[0], False)]
    if func is aten.take.default or func is aten.put.default:
        return [(args[1], self.numel(), True)]
    if func in (aten.index_select.default, aten.gather.default, aten.index_add.default,
                aten.index_copy.default, aten.index_fill.int_Scalar, aten.index_fill.int_Tensor):  # fmt: skip
        dim = _dim(args, 1) % max(self.dim(), 1)
        size = self.shape[dim] if self.dim() else 1
        return [(args[2], size, func is aten.index_fill.int_Scalar or func is aten.index_fill.int_Tensor)]
    if func in (aten.scatter.src, aten.scatter.value, aten.scatter_add.default,
                aten.scatter_reduce.two, aten.scatter.reduce, aten.scatter.value_reduce):  # fmt: skip
        dim = _dim(args, 1) % max(self.dim(), 1)
        return [(args[2], self.shape[dim] if self.dim() else 1, False)]
    return []


def note(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], node_of: Callable[[Any], ir.Node | None]
) -> None:
    """Record the range checks of one indexing op (checked mode only); ``node_of`` gives an
    xla tensor's current value (None for anything else)."""
    indexed = _indexed(func, args, kwargs)
    if not indexed:
        return
    where = checks.where()
    exempt = _exempt(func, args, kwargs)
    for index, size, negative_ok in indexed:
        src = node_of(index)
        if src is None or index.dtype.is_floating_point or index.dtype is torch.bool:
            continue
        lo = -size if negative_ok else 0
        node = ir.Node(CHECK, (src,), (lo, size, exempt), (), torch.bool, src.device)
        what = (
            f"a target is out of bounds for {size} classes (ignore_index {exempt} aside)"
            if exempt is not None
            else f"index out of range in self, a dimension of size {size}"
        )
        message = (
            f"{func._schema.name}: {what} (made at {where}). Eager PyTorch raises here; XLA would "
            "have clamped it (XLALAB_CHECK_INDICES is on)."
        )
        checks.add(checks.Check(node, IndexError, message))


def _exempt(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The one index value exempt from the range (a loss's ignore_index), or None."""
    if func in _CLASS_TARGETS:
        return int(args[4]) if len(args) > 4 else int(kwargs.get("ignore_index", -100))
    return None


def lower(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> Any:
    lo, hi, exempt = arg
    index = vals[0]
    bad = (index < lo) | (index >= hi)
    return jnp.any(bad & (index != exempt) if exempt is not None else bad)
