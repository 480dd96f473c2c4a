"""Lowerings of aten matrix products (mm, addmm, bmm, baddbmm, matmul, dot, mv...)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.lowering.elementwise import HALF, Scalar, integral_scalar, is_number, scaled
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array

# torch.set_float32_matmul_precision -> the XLA precision that does the same on GPU:
# "highest" (torch's default) is full float32, "high" and "medium" allow TF32-class math.
_PRECISION = {
    "highest": lax.Precision.HIGHEST,
    "high": lax.Precision.HIGH,
    "medium": lax.Precision.DEFAULT,
}


def precision() -> lax.Precision:
    """The matmul precision torch would use for float32 right now (read at trace time)."""
    return _PRECISION.get(torch.get_float32_matmul_precision(), lax.Precision.HIGHEST)


def _product(a: Array, b: Array) -> Array:
    """``a @ b``, accumulated (and left) in float32 for half inputs, as torch's CPU GEMMs do."""
    if a.dtype in HALF:
        return jnp.matmul(a, b, precision=precision(), preferred_element_type=jnp.float32)
    return jnp.matmul(a, b, precision=precision())


@lowering(aten.mm.default, aten.bmm.default, aten.mv.default, aten.matmul.default)
def _matmul(x: Array, other: Array) -> Array:
    # jnp.matmul has torch.matmul's rules for 1-d operands and batch broadcasting.
    return _product(x, other).astype(x.dtype)


# beta and alpha are baked into the graph: beta == 0 selects a formula (x is ignored, NaNs
# included), and a baked Python float keeps its full precision where a graph input would be
# rounded to a half dtype first (torch scales half tensors by float scalars).
_BETA_ALPHA = ("beta", "alpha")


def _beta_alpha(x: Array, product: Array, beta: Scalar, alpha: Scalar) -> Array:
    """``beta * x + alpha * product``; torch ignores ``x`` (even NaN in it) when beta is 0.

    Integer kernels truncate float ``beta``/``alpha`` to the integer type; half kernels
    scale and add in float32 and round once."""
    beta, alpha = integral_scalar(beta, x), integral_scalar(alpha, x)
    half = x.dtype if x.dtype in HALF else None
    if half is not None:
        x, product = x.astype(jnp.float32), product.astype(jnp.float32)
    product = scaled(product, alpha)
    if is_number(beta, 0):
        out = jnp.broadcast_to(product, jnp.broadcast_shapes(x.shape, product.shape))
    else:
        out = scaled(x, beta) + product
    return out if half is None else out.astype(half)


@lowering(aten.dot.default, aten.vdot.default)
def _dot(x: Array, tensor: Array) -> Array:
    # vdot conjugates its first argument; for the real dtypes xlalab carries it is dot.
    return jnp.dot(jnp.conj(x), tensor, precision=precision())


@lowering(aten.outer.default)
def _outer(x: Array, vec2: Array) -> Array:
    return jnp.outer(x, vec2)


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, static=_BETA_ALPHA)
def _add_product(x: Array, a: Array, b: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    return _beta_alpha(x, _product(a, b), beta, alpha)


@lowering(aten.addbmm.default, static=_BETA_ALPHA)
def _addbmm(x: Array, batch1: Array, batch2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    # One contraction over (batch, k) rather than a bmm and a sum: fewer roundings.
    acc = jnp.float32 if batch1.dtype in HALF else None
    product = jnp.einsum("bij,bjk->ik", batch1, batch2, precision=precision(), preferred_element_type=acc)
    return _beta_alpha(x, product, beta, alpha)


@lowering(aten.addr.default, static=_BETA_ALPHA)
def _addr(x: Array, vec1: Array, vec2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    if vec1.dtype in HALF:
        vec1 = vec1.astype(jnp.float32)
    return _beta_alpha(x, jnp.outer(vec1, vec2), beta, alpha)
