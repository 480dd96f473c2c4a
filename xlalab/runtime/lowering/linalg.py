"""Lowerings of aten matrix products (mm, addmm, bmm, baddbmm, matmul, dot, mv...)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.lowering.elementwise import Scalar, is_number, scaled
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


def _matmul(a: Array, b: Array) -> Array:
    return jnp.matmul(a, b, precision=precision())


def _beta_alpha(x: Array, product: Array, beta: Scalar, alpha: Scalar) -> Array:
    """``beta * x + alpha * product``; torch ignores ``x`` (even NaN in it) when beta is 0."""
    product = scaled(product, alpha)
    if is_number(beta, 0):
        return jnp.broadcast_to(product, jnp.broadcast_shapes(x.shape, product.shape))
    return scaled(x, beta) + product


@lowering(aten.mm.default)
def _mm(x: Array, mat2: Array) -> Array:
    return _matmul(x, mat2)


@lowering(aten.bmm.default)
def _bmm(x: Array, mat2: Array) -> Array:
    return _matmul(x, mat2)


@lowering(aten.matmul.default)
def _matmul_op(x: Array, other: Array) -> Array:
    # jnp.matmul has torch.matmul's rules for 1-d operands and batch broadcasting.
    return _matmul(x, other)


@lowering(aten.mv.default)
def _mv(x: Array, vec: Array) -> Array:
    return _matmul(x, vec)


@lowering(aten.dot.default, aten.vdot.default)
def _dot(x: Array, tensor: Array) -> Array:
    # vdot conjugates its first argument; for the real dtypes xlalab carries it is dot.
    return jnp.dot(jnp.conj(x), tensor, precision=precision())


@lowering(aten.outer.default)
def _outer(x: Array, vec2: Array) -> Array:
    return jnp.outer(x, vec2)


@lowering(aten.addmm.default)
def _addmm(x: Array, mat1: Array, mat2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    return _beta_alpha(x, _matmul(mat1, mat2), beta, alpha)


@lowering(aten.baddbmm.default)
def _baddbmm(x: Array, batch1: Array, batch2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    return _beta_alpha(x, _matmul(batch1, batch2), beta, alpha)


@lowering(aten.addbmm.default)
def _addbmm(x: Array, batch1: Array, batch2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    # One contraction over (batch, k) rather than a bmm and a sum: fewer roundings.
    product = jnp.einsum("bij,bjk->ik", batch1, batch2, precision=precision())
    return _beta_alpha(x, product, beta, alpha)


@lowering(aten.addmv.default)
def _addmv(x: Array, mat: Array, vec: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    return _beta_alpha(x, _matmul(mat, vec), beta, alpha)


@lowering(aten.addr.default)
def _addr(x: Array, vec1: Array, vec2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    return _beta_alpha(x, jnp.outer(vec1, vec2), beta, alpha)
