"""``torch_xla.experimental.scan``: a function applied along the leading dimension, as one loop.

``scan(fn, init, xs)`` is ``jax.lax.scan`` for torch: ``fn(carry, x) -> (carry, y)`` runs once per
slice of ``xs`` along dim 0 and the ``y``'s come back stacked. The loop is one XLA ``while``: the
program (and its compile time) does not grow with the number of steps, as an unrolled Python
loop's does. It is torch's ``scan`` operator, which the runtime lowers (``control_flow``), with
its gradient, another scan, run backwards. ``carry``, ``xs`` and ``y`` may be pytrees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.utils._pytree as pytree
from torch._higher_order_ops import scan as _torch_scan

__all__ = ["scan"]


def scan(
    fn: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any,
    partition_fn: Callable[..., Any] | None = None,
    is_fn_pure: bool = True,
) -> tuple[Any, Any]:
    """The last carry and the stacked ``y``'s of ``fn`` over ``xs``.

    ``partition_fn`` (torch_xla's choice of what the backward recomputes) and ``is_fn_pure``
    (its trace cache) are accepted and change nothing: torch's scan saves what its backward
    needs, and dynamo caches the trace.
    """
    if not callable(fn):
        raise ValueError(f"`fn` {fn} must be callable.")
    leaves = pytree.tree_leaves(xs)
    if not leaves:
        raise ValueError(f"`xs` {xs} is an empty PyTree.")
    lengths = {len(leaf) for leaf in leaves}
    if len(lengths) > 1:
        raise ValueError(f"the leaves of `xs` must have one leading dimension size, got {sorted(lengths)}")
    return _torch_scan(fn, init, xs)  # type: ignore[no-any-return]
