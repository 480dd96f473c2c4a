"""Lowerings of ``torch.ops.prims`` elementwise and reduction primitives.

Prims reach xlalab when a decomposition written with PyTorch's references (``torch._refs``)
runs on xla tensors, e.g. inside the backward of ops defined in Python. They take operands
of one dtype (the references promote first) and never broadcast implicitly except against
scalars; the runtime casts each result to the dtype the prim's meta kernel gives. View
prims (``broadcast_in_dim``, ``reshape``...) are left to the runtime: lowering a view as a
copy would drop writes made through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.dtypes import to_jnp
from xlalab.runtime.lowering.elementwise import (
    compute_float,
    is_integral,
    larger,
    log1p,
    log_exact,
    safe_exp,
    smaller,
    tanh,
    via_float64,
)
from xlalab.runtime.lowering.registry import LOWERINGS, lowering

prims = torch.ops.prims

Array = jax.Array


def _float_math(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    def lower(x: Array) -> Array:
        return fn(compute_float(x))  # half math in float32, rounded once by the runtime

    return lower


_UNARY: dict[str, Callable[[Array], Array]] = {
    "neg": jnp.negative,
    "abs": jnp.abs,
    "exp": _float_math(safe_exp),
    "expm1": _float_math(jnp.expm1),
    "log": _float_math(log_exact),
    "log1p": _float_math(log1p),
    "sqrt": _float_math(jnp.sqrt),
    "rsqrt": _float_math(lax.rsqrt),
    "sin": _float_math(jnp.sin),
    "cos": _float_math(jnp.cos),
    "tanh": _float_math(tanh),
    "erf": _float_math(via_float64(lax.erf)),
    "reciprocal": _float_math(lambda x: 1 / x),
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "trunc": jnp.trunc,
    "round": jnp.round,
    "sign": lambda x: (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype),
    "bitwise_not": jnp.invert,
}

_BINARY: dict[str, Callable[[Any, Any], Array]] = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "maximum": larger,
    "minimum": smaller,
    "pow": jnp.power,
    "atan2": jnp.arctan2,
    "remainder": jnp.remainder,
    "fmod": jnp.fmod,
    "eq": jnp.equal,
    "ne": jnp.not_equal,
    "lt": jnp.less,
    "le": jnp.less_equal,
    "gt": jnp.greater,
    "ge": jnp.greater_equal,
    "bitwise_and": jnp.bitwise_and,
    "bitwise_or": jnp.bitwise_or,
    "bitwise_xor": jnp.bitwise_xor,
}

for _name, _unary in _UNARY.items():
    lowering(getattr(prims, _name).default)(_unary)
for _name, _binary in _BINARY.items():
    lowering(getattr(prims, _name).default)(_binary)


@lowering(prims.div.default)
def _div(x: Any, other: Any) -> Array:
    # prims.div truncates for integers (C semantics) and is true division otherwise.
    if is_integral(x, other):
        a, b = jnp.broadcast_arrays(jnp.asarray(x), jnp.asarray(other))
        dt = jnp.result_type(a, b)
        return lax.div(a.astype(dt), b.astype(dt))
    return jnp.true_divide(x, other)


def _fma(a: Array, b: Any, c: Any) -> Array:
    # The eager kernel of inductor's fma is ``(a * b) + c``, not a fused multiply-add (inductor
    # fuses it on its own devices). XLA may still contract the two into one, as it does any
    # multiply feeding an add.
    return a * b + c


def register_inductor_prims() -> None:
    """Lowerings of inductor's prims, which exist once ``torch._inductor.inductor_prims`` is
    imported (importing it here would cost every process a second): dynamo imports it when it
    writes ``x.addcmul_(a, b, value=v)``, ``x.addcdiv_(...)`` or ``x.add_(y, alpha=t)`` as
    ``prims.fma``. Called when dynamo hands a graph over."""
    fma = getattr(getattr(prims, "fma", None), "default", None)
    if fma is not None and fma not in LOWERINGS:
        lowering(fma)(_fma)


@lowering(prims.convert_element_type.default)
def _convert_element_type(x: Array, dtype: torch.dtype) -> Array:
    return x.astype(to_jnp(dtype))


@lowering(prims.where.default)
def _where(pred: Array, a: Any, b: Any) -> Array:
    return jnp.where(pred, a, b)


def _dims(x: Array, dims: Sequence[int] | None) -> tuple[int, ...] | None:
    if dims is None or x.ndim == 0:
        return None
    return tuple(d % x.ndim for d in dims)


def _reduction(fn: Callable[..., Array]) -> Callable[..., Array]:
    def lower(inp: Array, dims: Sequence[int] | None, *, output_dtype: torch.dtype | None = None) -> Array:
        x = inp if output_dtype is None else inp.astype(to_jnp(output_dtype))
        return fn(compute_float(x), axis=_dims(x, dims))

    return lower


lowering(prims.sum.default)(_reduction(jnp.sum))
lowering(prims.prod.default)(_reduction(jnp.prod))
lowering(prims.amax.default)(_reduction(jnp.max))
lowering(prims.amin.default)(_reduction(jnp.min))


@lowering(prims.var.default)
def _var(
    inp: Array,
    dims: Sequence[int] | None,
    correction: float | None = 1,
    *,
    output_dtype: torch.dtype | None = None,
) -> Array:
    x = compute_float(inp)
    ax = _dims(x, dims)
    n = x.size if ax is None else math.prod(x.shape[a] for a in ax)
    mean = jnp.mean(x, axis=ax, keepdims=True)
    centered = x - mean
    return jnp.sum(centered * centered, axis=ax) / max(n - (1 if correction is None else correction), 0)
