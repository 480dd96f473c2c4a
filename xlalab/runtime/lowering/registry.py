"""The one table from aten overloads to JAX functions.

A lowering is registered beside its op with one decorator line::

    @lowering(aten.add.Tensor, aten.add.Scalar)
    def _add(x, y, alpha=1):
        return x + y * alpha

Contract (what a lowering function receives and returns):

* It is called with the aten op's arguments exactly as torch dispatch passed them
  (positional args, then keyword args by their schema names).
* Tensor arguments arrive as JAX arrays whose dtype mirrors the torch dtype
  (int64 stays int64: xlalab enables JAX's x64 mode). Lists of tensors arrive as
  lists of arrays; an absent optional tensor is ``None``.
* ``Scalar``-typed arguments arrive either as Python numbers (ints, bools) or as
  0-d JAX arrays (floats are graph inputs so that a changing learning rate does not
  recompile), already cast to the op's compute dtype.
* Everything else (ints, int lists, bools, ``torch.dtype``...) arrives as the
  Python value; int lists arrive as tuples.
* A lowering whose formula depends on a Scalar's value (a norm's ``ord``) names it in
  ``static=``: that argument is then baked into the graph instead of fed at run time.
* Elementwise ops that torch type-promotes (those whose ``torch._refs`` reference carries
  torch's promotion wrapper: add, mul, div, where, clamp, comparisons...) receive their
  promoting arguments already in torch's *computation* dtype (``runtime/promotion.py``):
  ``int64 + uint8`` arrives as two int64 arrays, a bfloat16 ``add`` as float32 arrays
  (torch's "opmath"), a ``-3`` for a uint8 op as 253. The lowering computes in what it
  receives. Every other lowering must itself compute in the dtype torch computes in (a
  cast after the arithmetic cannot undo an overflow or a rounding), e.g. upcast half
  precision where torch's kernel does.
* It returns one array, or a tuple/list of arrays for multi-output ops. The runtime
  casts each result to the dtype torch's meta kernel predicts, and checks its shape.
* A lowering registered with ``result_dtype=True`` also receives that dtype, as the keyword
  ``result_dtype`` (a jnp dtype): promoted operands arrive in the computation dtype, and a
  lowering that must round as torch's half-type loops round needs the type they store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._ops import OpOverload

Lowering = Callable[..., Any]

LOWERINGS: dict[OpOverload, Lowering] = {}
# Scalar arguments that select a formula rather than feed one: baked, never graph inputs.
STATIC_ARGS: dict[OpOverload, frozenset[str]] = {}
# Ops whose lowering is told the dtype of its (one) result.
RESULT_DTYPE: set[OpOverload] = set()


def lowering(
    *ops: OpOverload, static: tuple[str, ...] = (), result_dtype: bool = False
) -> Callable[[Lowering], Lowering]:
    """Register ``fn`` as the JAX lowering of every overload in ``ops``."""

    def register(fn: Lowering) -> Lowering:
        for op in ops:
            if not isinstance(op, OpOverload):
                raise TypeError(f"lowering() takes aten overloads such as aten.add.Tensor, got {op!r}")
            LOWERINGS[op] = fn
            if result_dtype:
                RESULT_DTYPE.add(op)
            if static:
                STATIC_ARGS[op] = frozenset(static)
        return fn

    return register
