"""Lowerings of aten matrix products (mm, addmm, bmm, baddbmm, matmul, dot, mv...)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from xlalab.runtime.lowering.elementwise import HALF, Scalar, integral_scalar, is_number, scaled
from xlalab.runtime.lowering.factories import filled
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
    acc = jnp.float32 if a.dtype in HALF else None
    return summed_over_nothing(jnp.matmul(a, b, precision=precision(), preferred_element_type=acc), a, b)


def summed_over_nothing(product: Array, *operands: Array) -> Array:
    """A product whose contracted length is 0 is zeros, as eager fills it. XLA makes it a
    constant, which would fold ``x + product`` into ``x`` (and keep a -0.0 that IEEE's
    ``-0.0 + 0.0`` makes 0.0): the zeros come from ``filled``, which XLA cannot fold."""
    if product.size and any(o.size == 0 for o in operands):
        return filled(product.shape, 0, product.dtype)
    return product


@lowering(aten.mm.default, aten.bmm.default, aten.mv.default, aten.matmul.default)
def _matmul(x: Array, other: Array) -> Array:
    # jnp.matmul has torch.matmul's rules for 1-d operands and batch broadcasting.
    return _product(x, other).astype(x.dtype)


# beta and alpha are baked into the graph: beta == 0 selects a formula (x is ignored, NaNs
# included), and a baked Python float keeps its full precision where a graph input would be
# rounded to a half dtype first (torch scales half tensors by float scalars).
_BETA_ALPHA = ("beta", "alpha")


def _beta_alpha(x: Array, product: Array, beta: Scalar, alpha: Scalar, empty: bool = False) -> Array:
    """``beta * x + alpha * product``; torch ignores ``x`` (even NaN in it) when beta is 0.

    Integer kernels truncate float ``beta``/``alpha`` to the integer type; half kernels
    scale and add in float32 and round once. When nothing was summed (``empty``: a
    contraction of length 0), eager's GEMM only scales ``x`` by beta: a -0.0 in it stays."""
    beta, alpha = integral_scalar(beta, x), integral_scalar(alpha, x)
    half = x.dtype if x.dtype in HALF else None
    if half is not None:
        x, product = x.astype(jnp.float32), product.astype(jnp.float32)
    shape = jnp.broadcast_shapes(x.shape, product.shape)
    if is_number(beta, 0):
        out = jnp.broadcast_to(product if empty else scaled(product, alpha), shape)
    elif empty:
        out = jnp.broadcast_to(scaled(x, beta), shape)
    else:
        out = scaled(x, beta) + scaled(product, alpha)
    return out if half is None else out.astype(half)


@lowering(aten.dot.default)
def _dot(x: Array, tensor: Array) -> Array:
    return summed_over_nothing(jnp.dot(x, tensor, precision=precision()), x, tensor)


@lowering(aten.vdot.default)
def _vdot(x: Array, other: Array) -> Array:
    # vdot conjugates its first argument (complex numbers); dot does not.
    return summed_over_nothing(jnp.dot(jnp.conj(x), other, precision=precision()), x, other)


@lowering(aten.outer.default)
def _outer(x: Array, vec2: Array) -> Array:
    return jnp.outer(x, vec2)


@lowering(aten.addmm.default, aten.baddbmm.default, aten.addmv.default, static=_BETA_ALPHA)
def _add_product(x: Array, a: Array, b: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    return _beta_alpha(x, _product(a, b), beta, alpha, empty=a.size == 0 or b.size == 0)


@lowering(aten.addbmm.default, static=_BETA_ALPHA)
def _addbmm(x: Array, batch1: Array, batch2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    # One contraction over (batch, k) rather than a bmm and a sum: fewer roundings.
    acc = jnp.float32 if batch1.dtype in HALF else None
    product = jnp.einsum("bij,bjk->ik", batch1, batch2, precision=precision(), preferred_element_type=acc)
    empty = batch1.size == 0 or batch2.size == 0
    return _beta_alpha(x, summed_over_nothing(product, batch1, batch2), beta, alpha, empty)


@lowering(aten.addr.default, static=_BETA_ALPHA)
def _addr(x: Array, vec1: Array, vec2: Array, beta: Scalar = 1, alpha: Scalar = 1) -> Array:
    if vec1.dtype in HALF:
        vec1 = vec1.astype(jnp.float32)
    return _beta_alpha(x, jnp.outer(vec1, vec2), beta, alpha)




# ----------------------------------------------------------------------------- factorizations
#
# Results follow LAPACK's conventions, as eager CPU PyTorch returns them: pivots are 1-based
# int32 row swaps, ``info`` is 0 or the 1-based index where the factorization failed. The LU
# and pivots feed torch's backward formulas (linalg_lu_solve with ``adjoint``), so they must be
# the very factorization eager computes: det and slogdet factor ``A.mT`` (torch's choice for a
# contiguous real ``A``: LAPACK then needs no copy), linalg.solve, inv and lu_factor ``A``.


def _first_true(flags: Array) -> Array:
    """int32 1-based index of the first true entry on the last axis, 0 if none (LAPACK's info)."""
    if flags.shape[-1] == 0:  # an empty matrix factors without error
        return jnp.zeros(flags.shape[:-1], jnp.int32)
    found = jnp.any(flags, axis=-1)
    return jnp.where(found, jnp.argmax(flags, axis=-1) + 1, 0).astype(jnp.int32)


def _lu_unpivoted(a: Array) -> Array:
    """Doolittle LU without row exchanges (``pivot=False``, as torch's CUDA kernel computes it)."""
    m, n = a.shape[-2:]
    rows, cols = jnp.arange(m)[:, None], jnp.arange(n)[None, :]

    def step(k: Array, lu: Array) -> Array:
        pivot = lu[..., k, k][..., None]
        below = jnp.where(jnp.arange(m) > k, lu[..., :, k] / pivot, 0)  # the multipliers l[k+1:, k]
        right = jnp.where(jnp.arange(n) > k, lu[..., k, :], 0)  # u[k, k+1:]
        lu = lu - below[..., :, None] * right[..., None, :]
        return jnp.where((rows > k) & (cols == k), below[..., :, None], lu)

    return lax.fori_loop(0, min(m, n), step, a)


def _lu(a: Array, pivot: bool = True) -> tuple[Array, Array, Array]:
    """LAPACK getrf: (LU, 1-based int32 pivots, info = first exactly-zero diagonal of U)."""
    k = min(a.shape[-2:])
    if pivot:
        lu, pivots, _ = lax.linalg.lu(a)
        pivots = pivots.astype(jnp.int32) + 1
    else:
        lu = _lu_unpivoted(a)
        pivots = jnp.broadcast_to(jnp.arange(1, k + 1, dtype=jnp.int32), (*a.shape[:-2], k))
    info = _first_true(jnp.diagonal(lu, axis1=-2, axis2=-1)[..., :k] == 0)
    return lu, pivots, info


@lowering(aten.linalg_lu_factor_ex.default)
def _lu_factor_ex(a: Array, pivot: bool = True, check_errors: bool = False) -> tuple[Array, Array, Array]:
    # check_errors=True raises through its handler (runtime/checks.py), which calls this with False.
    return _lu(a, pivot)


def _permutation(pivots: Array, n: int) -> Array:
    """The row order ``perm`` of LAPACK's sequential swaps: ``A[perm] == L @ U``."""
    return lax.linalg.lu_pivots_to_permutation(pivots - 1, n)


def _unpack(lu: Array, pivots: Array, unpack_data: bool, unpack_pivots: bool) -> tuple[Array, Array, Array]:
    """``A = P L U`` from getrf's packed form; a part not asked for is an empty tensor, as eager's."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    empty = jnp.zeros((0,), lu.dtype)
    if unpack_pivots:
        perm = _permutation(pivots, m)  # A[perm] == L U, so P[perm[i], i] == 1
        p = (perm[..., :, None] == jnp.arange(m)).swapaxes(-1, -2).astype(lu.dtype)
    else:
        p = empty
    if not unpack_data:
        return p, empty, empty
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    return p, lower, jnp.triu(lu[..., :k, :])


@lowering(aten.lu_unpack.default)
def _lu_unpack(
    lu: Array, pivots: Array, unpack_data: bool = True, unpack_pivots: bool = True
) -> tuple[Array, Array, Array]:
    return _unpack(lu, pivots, unpack_data, unpack_pivots)


@lowering(aten.linalg_lu.default)
def _linalg_lu(a: Array, pivot: bool = True) -> tuple[Array, Array, Array]:
    lu, pivots, _ = _lu(a, pivot)
    p, lower, upper = _unpack(lu, pivots, True, pivot)
    return p, lower, upper


def _take_rows(x: Array, order: Array) -> Array:
    return jnp.take_along_axis(x, order[..., :, None], axis=-2)


def _take_cols(x: Array, order: Array) -> Array:
    return jnp.take_along_axis(x, order[..., None, :], axis=-1)


def _batch_broadcast(*xs: Array) -> list[Array]:
    """Broadcast the leading (batch) dims of matrices, as torch's linalg solvers do."""
    batch = jnp.broadcast_shapes(*[x.shape[:-2] for x in xs])
    return [jnp.broadcast_to(x, (*batch, *x.shape[-2:])) for x in xs]


def _lu_solve(lu: Array, pivots: Array, b: Array, left: bool, adjoint: bool) -> Array:
    """Solve ``A X = B`` (``X A = B`` if not ``left``; ``A^H`` if ``adjoint``) with ``A = P L U``."""
    n = lu.shape[-1]
    lu, b = _batch_broadcast(lu, b)
    perm = jnp.broadcast_to(_permutation(pivots, n), (*lu.shape[:-2], n))
    inverse = jnp.argsort(perm, axis=-1)
    solve = lax.linalg.triangular_solve  # b on the left of a unless left_side; a read as a triangle

    def tri(x: Array, lower: bool, unit: bool, transpose: bool) -> Array:
        return solve(lu, x, left_side=left, lower=lower, transpose_a=transpose, conjugate_a=transpose,
                     unit_diagonal=unit)  # fmt: skip

    if left and not adjoint:  # L U X = P^T B
        return tri(tri(_take_rows(b, perm), True, True, False), False, False, False)
    if left:  # U^H L^H (P^T X) = B
        return _take_rows(tri(tri(b, False, False, True), True, True, True), inverse)
    if not adjoint:  # (X P) L U = B: Y = B U^-1 L^-1, X = Y P^T
        return _take_cols(tri(tri(b, False, False, False), True, True, False), inverse)
    # X U^H L^H P^T = B
    return tri(tri(_take_cols(b, perm), True, True, True), False, False, True)


@lowering(aten.linalg_lu_solve.default)
def _linalg_lu_solve(lu: Array, pivots: Array, b: Array, left: bool = True, adjoint: bool = False) -> Array:
    return _lu_solve(lu, pivots, b, left, adjoint)


def _is_vector_rhs(a: Array, b: Array) -> bool:
    """torch's [numpy-compat] rule: ``b`` is a (batch of) vector(s), not a matrix."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])


@lowering(aten._linalg_solve_ex.default)
def _solve_ex(
    a: Array, b: Array, left: bool = True, check_errors: bool = False
) -> tuple[Array, Array, Array, Array]:
    lu, pivots, info = _lu(a)
    vector = _is_vector_rhs(a, b)
    x = _lu_solve(lu, pivots, b[..., None] if vector else b, left, adjoint=False)
    return (x[..., 0] if vector else x), lu, pivots, info


@lowering(aten.linalg_inv_ex.default)
def _inv_ex(a: Array, check_errors: bool = False) -> tuple[Array, Array]:
    # Eager solves A X = I through linalg.solve's LU (info is that one's).
    lu, pivots, info = _lu(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return _lu_solve(lu, pivots, eye, left=True, adjoint=False), info


def _permutation_sign(pivots: Array, dtype: jnp.dtype) -> Array:
    swaps = jnp.sum(pivots != jnp.arange(1, pivots.shape[-1] + 1, dtype=pivots.dtype), axis=-1)
    return jnp.where(swaps % 2 == 0, 1, -1).astype(dtype)


@lowering(aten._linalg_det.default)
def _det(a: Array) -> tuple[Array, Array, Array]:
    lu, pivots, _ = _lu(jnp.swapaxes(a, -1, -2))  # det(A^T) == det(A)
    diagonal = jnp.diagonal(lu, axis1=-2, axis2=-1)
    return _permutation_sign(pivots, a.dtype) * jnp.prod(diagonal, axis=-1), lu, pivots


@lowering(aten._linalg_slogdet.default)
def _slogdet(a: Array) -> tuple[Array, Array, Array, Array]:
    lu, pivots, _ = _lu(jnp.swapaxes(a, -1, -2))
    diagonal = jnp.diagonal(lu, axis1=-2, axis2=-1)
    sign = _permutation_sign(pivots, a.dtype) * jnp.prod(jnp.sign(diagonal), axis=-1)
    return sign, jnp.sum(jnp.log(jnp.abs(diagonal)), axis=-1), lu, pivots


def _triangle_solve(
    a: Array, b: Array, upper: bool, left: bool = True, unit: bool = False, transpose: bool = False
) -> tuple[Array, Array]:
    """``op(A) X = B`` (``X op(A) = B`` if not ``left``) with batch dims broadcast; also gives
    A broadcast."""
    a, b = _batch_broadcast(a, b)
    x = lax.linalg.triangular_solve(
        a, b, left_side=left, lower=not upper, transpose_a=transpose, unit_diagonal=unit
    )
    return x, a


@lowering(aten.linalg_solve_triangular.default)
def _solve_triangular(
    a: Array, b: Array, upper: bool, left: bool = True, unitriangular: bool = False
) -> Array:
    return _triangle_solve(a, b, upper, left, unitriangular)[0]


def _potf2(a: Array) -> tuple[Array, Array]:
    """LAPACK's unblocked Cholesky (lower), run where the fast one failed: it stops at the first
    column whose pivot is not positive (or NaN), leaves that pivot in place and the columns
    after it as they were, and reports the column (1-based) as info."""
    n = a.shape[-1]
    idx = jnp.arange(n)

    def step(j: Array, carry: tuple[Array, Array]) -> tuple[Array, Array]:
        fac, info = carry
        done = jnp.where(idx < j, fac[..., j, :], 0)  # fac[j, :j]
        factored = jnp.where(idx[None, :] < j, fac, 0)  # fac[:, :j]
        ajj = fac[..., j, j] - jnp.sum(done * done, axis=-1)
        running = info == 0
        fails = running & ~(ajj > 0)
        root = jnp.sqrt(jnp.where(fails, 1, ajj))
        dots = jnp.einsum("...ik,...k->...i", factored, done, precision=precision())
        column = (fac[..., :, j] - dots) / root[..., None]
        column = jnp.where(idx > j, column, jnp.where(idx == j, root[..., None], fac[..., :, j]))
        column = jnp.where(fails[..., None], jnp.where(idx == j, ajj[..., None], fac[..., :, j]), column)
        column = jnp.where(running[..., None], column, fac[..., :, j])
        return fac.at[..., :, j].set(column), jnp.where(fails, j + 1, info).astype(jnp.int32)

    info0 = jnp.zeros(a.shape[:-2], jnp.int32)
    fac, info = lax.fori_loop(0, n, step, (a, info0))
    return jnp.tril(fac), info


@lowering(aten.linalg_cholesky_ex.default)
def _cholesky_ex(a: Array, upper: bool = False, check_errors: bool = False) -> tuple[Array, Array]:
    # upper: A = U^H U from A's upper triangle, which is the lower one of A^T (real dtypes).
    x = jnp.swapaxes(a, -1, -2) if upper else a
    if a.shape[-1] == 0:  # 0x0 matrices: nothing to factor, nothing that can fail
        return a, jnp.zeros(a.shape[:-2], jnp.int32)
    fast = jnp.tril(lax.linalg.cholesky(x, symmetrize_input=False))
    # XLA's Cholesky turns a failed matrix into NaNs: redo the batch the way LAPACK does, to
    # return its info and partial factor (only when something failed; a program has no branches
    # per element, so the whole batch goes through the slow path then).
    failed = jnp.any(~jnp.isfinite(fast))
    factor, info = lax.cond(failed, _potf2, lambda y: (fast, jnp.zeros(y.shape[:-2], jnp.int32)), x)
    return (jnp.swapaxes(factor, -1, -2) if upper else factor), info


@lowering(aten.linalg_matrix_exp.default)
def _matrix_exp(a: Array) -> Array:
    # Scaling and squaring with a Pade approximant (JAX's); torch's CPU kernel uses Taylor
    # polynomials. Both land within float32's rounding of the exact value (checked against
    # float64 on norms up to 50: eager 1e-6, this 6e-6 relative at the largest). Its backward
    # is autograd's: matrix_exp of a block matrix, which comes back here. (Half types run on
    # the CPU fallback: tensor.FALLBACK_IF.)
    if a.shape[-1] == 0:
        return a
    wide = jnp.complex128 if jnp.iscomplexobj(a) else jnp.float64
    return jax.scipy.linalg.expm(a.astype(wide)).astype(a.dtype)


@lowering(aten.linalg_householder_product.default)
def _householder_product(a: Array, tau: Array) -> Array:
    """LAPACK's orgqr: the first n columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^H``
    with ``v_i`` a 1 at row i over ``a``'s column i below it, applied right to left."""
    m, n = a.shape[-2:]
    k = tau.shape[-1]
    rows = jnp.arange(m)
    q0 = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)

    def reflect(j: Array, q: Array) -> Array:
        i = k - 1 - j
        column = lax.dynamic_index_in_dim(a, i, axis=-1, keepdims=False)
        v = jnp.where(rows == i, jnp.ones((), a.dtype), jnp.where(rows > i, column, jnp.zeros((), a.dtype)))
        w = jnp.einsum("...m,...mn->...n", jnp.conj(v), q, precision=precision())
        t = lax.dynamic_index_in_dim(tau, i, axis=-1, keepdims=False)
        return q - t[..., None, None] * v[..., :, None] * w[..., None, :]

    return lax.fori_loop(0, k, reflect, q0) if k else q0


# The older names around a Cholesky factor (GPyTorch and BoTorch call them): solves with
# ``A = L L^H`` (or ``U^H U``) and its inverse, as two triangular solves each.


def _factor_solve(factor: Array, b: Array, upper: bool) -> Array:
    """``(L L^H)^-1 B`` from the lower factor (``U^H U`` from the upper one)."""
    factor, b = _batch_broadcast(factor, b)
    solve = lax.linalg.triangular_solve
    # L Y = B, then L^H X = Y (U^H Y = B, then U X = Y).
    y = solve(factor, b, left_side=True, lower=not upper, transpose_a=upper, conjugate_a=upper)
    return solve(factor, y, left_side=True, lower=not upper, transpose_a=not upper, conjugate_a=not upper)


@lowering(aten.cholesky_solve.default, aten._cholesky_solve_helper.default)
def _cholesky_solve(b: Array, factor: Array, upper: bool = False) -> Array:
    return _factor_solve(factor, b, upper)


@lowering(aten.cholesky_inverse.default)
def _cholesky_inverse(factor: Array, upper: bool = False) -> Array:
    eye = jnp.broadcast_to(jnp.eye(factor.shape[-1], dtype=factor.dtype), factor.shape)
    return _factor_solve(factor, eye, upper)


@lowering(aten.triangular_solve.default)
def _triangular_solve(
    b: Array, a: Array, upper: bool = True, transpose: bool = False, unitriangular: bool = False
) -> tuple[Array, Array]:
    # The solution, and the coefficient matrix broadcast, as eager's copy of it.
    return _triangle_solve(a, b, upper, True, unitriangular, transpose)


# Householder QR: JAX's LAPACK kernels and the LAPACK torch links choose the same signs, so Q
# and R equal eager's (checked on a sweep of shapes and dtypes). Not so for the singular and
# eigen vectors of ``svd`` and ``eigh``, which differ in sign from eager's on many inputs
# (valid vectors all the same): those run on the CPU fallback.


@lowering(aten.linalg_qr.default)
def _qr(a: Array, mode: str = "reduced") -> tuple[Array, Array]:
    if mode == "r":
        return jnp.zeros((0,), a.dtype), jnp.linalg.qr(a, mode="r")
    q, r = jnp.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    return q, r


# --- grouped matrix products (mixture-of-experts layers) ------------------------------------------


@lowering(aten._grouped_mm.default)
def _grouped_mm(
    a: Array, b: Array, offs: Array | None = None, bias: Array | None = None, out_dtype: Any = None
) -> Array:
    """One product per group: ``offs`` (cumulative ends) cuts the 2-d operand's jagged dimension
    into groups; a 3-d operand holds one matrix per group. Rows or columns past ``offs[-1]`` are
    zeros here (eager leaves them unwritten). Half inputs accumulate in float32, as matmul's do."""
    acc = jnp.float32 if a.dtype in HALF else None
    if offs is None:  # 3-d x 3-d: a batch of products
        out = jnp.matmul(a, b, precision=precision(), preferred_element_type=acc)
    else:
        ends = offs.astype(jnp.int32)
        sizes = jnp.diff(ends, prepend=jnp.zeros((1,), jnp.int32))
        if a.ndim == 2 and b.ndim == 3:  # rows of a in groups, a matrix of b per group
            out = lax.ragged_dot(a, b, sizes, precision=precision(), preferred_element_type=acc)
        elif a.ndim == 3 and b.ndim == 2:  # columns of b in groups, a matrix of a per group
            out = lax.ragged_dot(
                b.T, jnp.swapaxes(a, 1, 2), sizes, precision=precision(), preferred_element_type=acc
            ).T
        else:  # 2-d x 2-d: the shared dimension in groups, one product per group
            k = jnp.arange(a.shape[1])
            starts = ends - sizes
            inside = (k >= starts[:, None]) & (k < ends[:, None])  # (groups, k)
            a_g = jnp.where(inside[:, None, :], a[None], jnp.zeros((), a.dtype))
            b_g = jnp.where(inside[:, :, None], b[None], jnp.zeros((), b.dtype))
            out = jnp.matmul(a_g, b_g, precision=precision(), preferred_element_type=acc)
    if bias is not None:
        out = out + bias
    return out.astype(out_dtype or a.dtype)


@lowering(aten._trilinear.default)
def _trilinear(
    i1: Array,
    i2: Array,
    i3: Array,
    expand1: tuple[int, ...],
    expand2: tuple[int, ...],
    expand3: tuple[int, ...],
    sumdim: tuple[int, ...],
    unroll_dim: int = 1,
) -> Array:
    """``nn.Bilinear``'s op: the product of the three operands, each with size-1 dimensions
    inserted at ``expand*``, summed over ``sumdim`` (XLA fuses the product into the sum)."""
    operands = ((i1, expand1), (i2, expand2), (i3, expand3))
    a, b, c = (jnp.expand_dims(t, tuple(sorted(e))) if e else t for t, e in operands)
    acc = jnp.float32 if a.dtype in HALF else a.dtype
    product = a.astype(acc) * b.astype(acc) * c.astype(acc)
    return jnp.sum(product, axis=tuple(sorted(d % product.ndim for d in sumdim))).astype(a.dtype)
