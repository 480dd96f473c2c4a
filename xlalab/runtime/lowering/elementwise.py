"""Lowerings of pointwise aten ops: arithmetic, comparisons, unary math, casts.

Every function here works on broadcastable JAX arrays and leaves dtype promotion mostly
to ``jax.numpy``: the runtime casts each result to the dtype torch's meta kernel
predicts, so only a few places (integer division, integer sums) take care to compute
in the right type rather than merely return it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import torch
from jax import lax

from xlalab.runtime.dtypes import convert, to_jnp
from xlalab.runtime.lowering.factories import filled
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array
Scalar = Any  # a Python number or a 0-d array (see registry.py)

_PY_NUMBER = (bool, int, float)


def is_number(value: Scalar, target: float) -> bool:
    """True only when ``value`` is a Python number equal to ``target``.

    Scalars may be traced 0-d arrays, whose value is unknown while tracing; those are
    never treated as special, so the generic (always correct) formula is used.
    """
    return isinstance(value, _PY_NUMBER) and value == target


def scaled(x: Array | Scalar, factor: Scalar) -> Array | Scalar:
    """``x * factor``, skipping the multiply for a literal 1 so int/bool math stays exact."""
    return x if is_number(factor, 1) else x * factor


def is_integral(*xs: Array | Scalar) -> bool:
    """Whether the promoted type of ``xs`` is integer or bool (torch's "integral")."""
    dt = jnp.result_type(*xs)
    return bool(jnp.issubdtype(dt, jnp.integer) or jnp.issubdtype(dt, jnp.bool_))


HALF = (jnp.float16, jnp.bfloat16)


def refuse_bool(name: str, *xs: Array | Scalar) -> None:
    """Raise as eager does for an op its CPU kernels do not implement for bool tensors.

    Without this XLA would compute a value where eager PyTorch raises; a program must not
    depend on which device it ran on to learn that it is wrong.
    """
    # (only when the op computes in bool: a bool operand promoted by a number is fine)
    if jnp.result_type(*xs) == jnp.bool_:
        raise NotImplementedError(f'"{name}" is not implemented for bool tensors (eager PyTorch refuses it)')


def integral_scalar(s: Scalar, x: Array) -> Scalar:
    """A Scalar as torch's integer kernels see it: truncated to ``x``'s integer dtype.

    Float scalars reach lowerings as float graph inputs even when the op computes in an
    integer dtype (``addmv(int, ..., beta=0.5)``), where torch converts them with a C cast.
    """
    if not is_integral(x):
        return s
    if isinstance(s, float):
        return int(s)  # a C cast truncates toward zero
    if isinstance(s, _PY_NUMBER):
        return s
    s = jnp.asarray(s)
    return s.astype(x.dtype) if jnp.issubdtype(s.dtype, jnp.floating) else s


def compute_float(x: Array) -> Array:
    """Upcast half-precision inputs to float32 for numerically touchy math.

    Torch evaluates these kernels in float ``opmath`` for half/bfloat16 and rounds once;
    doing the same keeps results within half-precision rounding of torch's.
    """
    if x.dtype in (jnp.float16, jnp.bfloat16):
        return x.astype(jnp.float32)
    return x


def plus_zero(r: Array) -> Array:
    """``r + 0.0`` as IEEE computes it: -0.0 becomes 0.0, where XLA folds ``r + 0`` into ``r``.
    A sum starts from 0.0, so eager's is never -0.0, but XLA folds a sum over one element (or
    none) into the element itself (or a constant zero that a later add then folds away). A
    comparison and a select are not folded."""
    if jnp.issubdtype(r.dtype, jnp.complexfloating):
        return lax.complex(plus_zero(jnp.real(r)), plus_zero(jnp.imag(r)))
    if not jnp.issubdtype(r.dtype, jnp.floating):
        return r
    return jnp.where(r == 0, filled((), 0, r.dtype), r)


# --- arithmetic -------------------------------------------------------------------


def _is_complex(*xs: Array | Scalar) -> bool:
    return any(isinstance(x, complex) or jnp.iscomplexobj(x) for x in xs)


def _complex_type(x: Array, other: Array | Scalar) -> Any:
    """The op's complex computation dtype: the tensor's (a float graph input, float64, must not
    widen it), else the promotion of a real tensor with a complex number."""
    return x.dtype if jnp.iscomplexobj(x) else jnp.result_type(x, other)


def _complex_scaled(y: Array | Scalar, alpha: Scalar, dtype: Any, negate: bool = False) -> Array:
    """``alpha * y`` (``-alpha * y`` if ``negate``: ``sub`` is an ``add`` of ``-alpha``) as
    eager's complex add kernel computes it in ``x + alpha * y``:
    a complex product even where ``alpha`` is 1, ``(ar*yr - ai*yi) + (ar*yi + ai*yr)j``, so an
    infinite or NaN part of ``y`` makes the other part NaN (``(1+1j) + inf`` is ``inf+nanj``).
    A real ``alpha``'s zero imaginary part goes through an optimization barrier: XLA would
    otherwise fold ``yi * 0`` away with the multiply by ``1 + 0j``. So does a number ``y``
    (``x + (-1)``): XLA folds its constant parts' products (``1 * 0``) and then ``0 + v`` into
    ``v``, which turns a +0.0 imaginary part into -0.0."""
    if isinstance(alpha, jax.Array) and jnp.iscomplexobj(alpha):
        # a float graph input cast to the op's type: its 0j must stay +0j once negated
        alpha = jnp.real(alpha)
    if negate:
        alpha = -alpha
    a = jnp.asarray(alpha, dtype)
    ar, ai = jnp.real(a), jnp.imag(a)
    if not isinstance(alpha, complex):
        ai = lax.optimization_barrier(ai)
    return _complex_product(ar, ai, jnp.asarray(y, dtype))


def _complex_product(ar: Array, ai: Array, y: Array) -> Array:
    """``(ar + ai j) * y`` as eager's complex kernels compute it, ``(ar*yr - ai*yi) + (ar*yi +
    ai*yr)j``. A 0-d ``y``'s parts (a number's) go through an optimization barrier: XLA folds
    products of constants (``1 * 0``), then ``0 + v`` into ``v``."""
    yr, yi = jnp.real(y), jnp.imag(y)
    if y.ndim == 0:
        yr, yi = lax.optimization_barrier((yr, yi))
    return lax.complex(ar * yr - ai * yi, ar * yi + ai * yr)


@lowering(aten.add.Tensor, aten.add.Scalar)
def _add(x: Array, other: Array | Scalar, alpha: Scalar = 1) -> Array:
    if _is_complex(x, other):
        return x + _complex_scaled(other, alpha, _complex_type(x, other))
    y = scaled(other, alpha)
    if is_number(y, 0) and isinstance(x, jax.Array):
        return plus_zero(x)  # XLA folds x + 0 to x (and x + 3 * 0, a number)
    if is_number(x, 0) and isinstance(y, jax.Array):
        return plus_zero(y)  # and 0 + y to y (torch.add(0, y))
    return x + y


@lowering(aten.sub.Tensor, aten.sub.Scalar)
def _sub(x: Array, other: Array | Scalar, alpha: Scalar = 1) -> Array:
    if _is_complex(x, other):
        return x + _complex_scaled(other, alpha, _complex_type(x, other), negate=True)
    return _add(x, other, 0) if _is_integer_zero(alpha) else x - scaled(other, alpha)


@lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(x: Array, other: Array | Scalar, alpha: Scalar = 1) -> Array:
    if _is_complex(x, other):
        return other + _complex_scaled(x, alpha, _complex_type(x, other), negate=True)
    return _add(other, x, 0) if _is_integer_zero(alpha) else other - scaled(x, alpha)


def _is_integer_zero(alpha: Scalar) -> bool:
    """An ``alpha`` of integer 0 (or False): eager's ``sub`` is an ``add`` of ``-alpha``, which
    stays +0, so ``-0.0 - y * 0`` is ``-0.0 + y * 0`` (-0.0 for a positive ``y``), not 0.0."""
    return type(alpha) in (int, bool) and alpha == 0


def _wrapping_square_operand(x: Any) -> Any:
    """``x`` as the second factor of ``x * x``. XLA's simplifier takes a product of a value with
    itself to be non-negative and drops an ``abs`` (or a ``< 0`` test) of it; an integer square
    that overflows wraps to a negative value in eager and in XLA alike, so for integers the
    second factor goes through an optimization barrier and the simplifier sees two values."""
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.integer):
        return lax.optimization_barrier(x)
    return x


@lowering(aten.mul.Tensor, aten.mul.Scalar)
def _mul(x: Array, other: Array | Scalar) -> Array:
    if is_number(other, 0) and is_integral(x):
        # XLA folds an integer x * 0 into a constant 0, which then folds x + 0 away downstream
        # (see ``factories.filled``): the zero it multiplies by is opaque.
        other = lax.optimization_barrier(jnp.zeros((), x.dtype))
    if _is_complex(x, other) and 0 in (jnp.ndim(x), jnp.ndim(other)):
        # A complex product with a number: XLA folds one by a constant ``1 + 0j`` into the other
        # factor, where eager's product makes an infinite or NaN part's partner NaN
        # (``(1+infj) * 1`` is ``nan+infj``).
        dtype = _complex_type(x, other)
        big, small = (x, other) if jnp.ndim(other) == 0 else (other, x)
        big = jnp.asarray(big, dtype)
        return _complex_product(jnp.real(big), jnp.imag(big), jnp.asarray(small, dtype))
    return x * (_wrapping_square_operand(other) if other is x else other)


@lowering(aten.div.Tensor, aten.div.Scalar)
def _div(x: Array, other: Array | Scalar) -> Array:
    # torch's "/" is true division even for integer tensors.
    return jnp.true_divide(x, exact_divisor(other, x))


def rounded_to(dtype: Any) -> Callable[[Array], Array]:
    """Round a float32 step's result to the half type ``dtype``, as eager's half arithmetic does
    after each operation (the identity for other types). On float32 values: XLA drops a
    rounding of a half-typed value, and a float32 -> half -> float32 round trip, where it may
    keep excess precision."""
    bits = {jnp.dtype(jnp.bfloat16): (8, 7), jnp.dtype(jnp.float16): (5, 10)}.get(jnp.dtype(dtype))
    if bits is None:
        return lambda v: v
    if bits[0] == 8:  # bfloat16's subnormals are float32's
        return lambda v: lax.reduce_precision(v, *bits)

    def half(v: Array) -> Array:
        # reduce_precision flushes float16's subnormals (below 2**-14) to zero; they are the
        # multiples of 2**-24 there, exact in float32.
        tiny = jnp.round(v * 2.0**24) * 2.0**-24
        return jnp.where(jnp.abs(v) < 2.0**-14, tiny.astype(v.dtype), lax.reduce_precision(v, *bits))

    return half


# Rounding divisions of half types round as eager's CPU loops do. Dividing by a tensor of
# several elements, its vectorized loop runs the formula in the half type, rounding every step
# (a quotient of 8.9756 truncates to 9 in bfloat16); dividing by one number (a Python number, a
# one-element tensor), it computes in float32 and rounds once (8.9756 truncates to 8).


def exact_divisor(divisor: Array | Scalar, dividend: Array | Scalar) -> Array | Scalar:
    """The divisor as an array of the quotient's shape that XLA does not see as a broadcast.

    XLA turns a division by a broadcast (a number, a 0-d tensor, a column) into a multiplication
    by its reciprocal, one ulp off eager's quotient on about a fifth of the elements (-7 / 3.0 in
    float32), and a whole unit where the quotient is then truncated or floored (81 / 2.7
    truncates to 29). A select on the dividend's NaNs (where the quotient is NaN either way)
    makes the divisor an elementwise value, which still fuses with the division."""
    shape = jnp.broadcast_shapes(jnp.shape(dividend), jnp.shape(divisor))
    if jnp.shape(divisor) == shape:
        return divisor
    dt = jnp.result_type(dividend, divisor)
    if isinstance(dividend, jax.Array) and jnp.issubdtype(dividend.dtype, jnp.inexact):
        nan = jnp.isnan(jnp.broadcast_to(dividend, shape))
        return jnp.where(nan, jnp.asarray(jnp.nan, dt), jnp.asarray(divisor, dt))
    return lax.optimization_barrier(jnp.broadcast_to(jnp.asarray(divisor, dt), shape))


def _division_steps(other: Array | Scalar, result_dtype: Any) -> Callable[[Array], Array]:
    return rounded_to(result_dtype) if result_dtype is not None and jnp.size(other) != 1 else (lambda v: v)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode, result_dtype=True)
def _div_mode(
    x: Array, other: Array | Scalar, rounding_mode: str | None = None, result_dtype: Any = None
) -> Array:
    if rounding_mode is None:
        return _div(x, other)
    if rounding_mode == "floor":
        refuse_bool("div(rounding_mode='floor')", x, other)
        return _floor_div(x, other, result_dtype)
    if is_integral(x, other):
        # lax.div on integers truncates toward zero, exactly like C (and torch 'trunc').
        dt = jnp.result_type(x, other)
        a, b = jnp.broadcast_arrays(jnp.asarray(x, dt), jnp.asarray(other, dt))
        return lax.div(a, b)
    return jnp.trunc(_division_steps(other, result_dtype)(jnp.true_divide(x, exact_divisor(other, x))))


@lowering(aten.floor_divide.default, aten.floor_divide.Scalar, result_dtype=True)
def _floor_divide(x: Array, other: Array | Scalar, result_dtype: Any = None) -> Array:
    refuse_bool("floor_divide", x, other)
    return _floor_div(x, other, result_dtype)


def _floor_div(a: Array | Scalar, b: Array | Scalar, result_dtype: Any = None) -> Array:
    """Floor division with torch's float formula, which fixes the sign of a zero quotient.

    Torch computes (a - fmod(a, b)) / b, corrects it towards -inf and rounds it to the
    nearest integer; a zero quotient takes the sign of a / b (-0.5 // -3 is 0.0, where
    floor(a / b) in another order can give -0.0); b == 0 gives a / b (inf or NaN).
    """
    if is_integral(a, b):
        return jnp.floor_divide(a, b)
    dt = jnp.result_type(a, b)
    step = _division_steps(b, result_dtype)
    a, b = compute_float(jnp.asarray(a, dt)), compute_float(jnp.asarray(b, dt))
    b = exact_divisor(b, a)
    mod = step(jnp.fmod(a, b))
    div = step(step(a - mod) / b)
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), step(div - 1), div)
    floored = jnp.floor(div)
    floored = jnp.where(step(div - floored) > 0.5, step(floored + 1), floored)
    quotient = step(a / b)
    out = jnp.where(div == 0, jnp.copysign(jnp.zeros_like(div), quotient), floored)
    return jnp.where(b == 0, quotient, out).astype(dt)


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def _remainder(x: Array | Scalar, other: Array | Scalar) -> Array:
    # Python-style modulo (result takes the divisor's sign), as torch.remainder.
    refuse_bool("remainder", x, other)
    return jnp.remainder(x, other)


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(x: Array, other: Array | Scalar) -> Array:
    refuse_bool("fmod", x, other)
    return jnp.fmod(x, other)


@lowering(aten.pow.Tensor_Tensor)
def _pow_tensors(x: Array, exponent: Array | Scalar) -> Array:
    # An exponent that is a number here is a 0-d CPU tensor baked into the program: a tensor
    # exponent, so a negative one gives 0 (no error) and an integer one wraps in x's dtype.
    if isinstance(exponent, _PY_NUMBER) and isinstance(x, jax.Array) and is_integral(x, exponent):
        exponent = jnp.asarray(exponent, x.dtype)
    return _pow(x, exponent)


@lowering(aten.pow.Scalar)
def _pow(x: Array | Scalar, exponent: Array | Scalar) -> Array:
    if isinstance(exponent, int) and exponent < 0 and is_integral(x) and not isinstance(x, _PY_NUMBER):
        # eager checks the Scalar exponent's value before computing
        raise ValueError("Integers to negative integer powers are not allowed.")
    if isinstance(x, jax.Array) and x.dtype == jnp.bool_:
        x = x.astype(jnp.int64)  # torch computes bool powers in the promoted (integer) type
    if type(exponent) is int and exponent >= 0 and not isinstance(x, _PY_NUMBER):
        if jnp.issubdtype(x.dtype, jnp.integer) and exponent > 1:  # wrapping squares: see above
            if exponent > _MULTIPLIES_UP_TO:  # one multiply per exponent bit, not per unit
                return _power_by_squaring(x, jnp.asarray(exponent, x.dtype))
            factor, out = _wrapping_square_operand(x), x
            for _ in range(exponent - 1):
                out = out * factor
            return out
        # Small integer powers become multiplies, like torch's x*x fast path for pow(x, 2).
        return lax.integer_pow(x, exponent)
    if is_integral(x, exponent):
        return _integer_pow(jnp.asarray(x), jnp.asarray(exponent))
    out = jnp.power(x, exponent)
    if jnp.issubdtype(out.dtype, jnp.complexfloating):
        return _complex_zero_base(x, exponent, out)
    return out


def _complex_zero_base(x: Array, exponent: Array | Scalar, out: Array) -> Array:
    """A complex power at a zero base as torch's kernel computes it, C's ``cpow`` (``cexp(y *
    clog(0))`` by C's rules for infinities), where XLA's power gives NaN: 0 for an exponent whose
    real part is positive, inf+nan·j for a negative one, NaN for an imaginary or NaN one."""
    y = jnp.asarray(exponent, out.dtype)
    re, im = jnp.real(y), jnp.imag(y)
    nan = jnp.asarray(complex(math.nan, math.nan), out.dtype)
    at_zero = jnp.where(
        re > 0,
        jnp.zeros((), out.dtype),
        jnp.where(re < 0, jnp.asarray(complex(math.inf, math.nan), out.dtype), nan),
    )
    at_zero = jnp.where(jnp.isnan(re) | jnp.isnan(im), nan, at_zero)
    return jnp.where(x == 0, at_zero, out)


@lowering(aten.pow.Tensor_Scalar, result_dtype=True)
def _pow_scalar(x: Array, exponent: Scalar, result_dtype: Any = None) -> Array:
    if result_dtype is not None and jnp.issubdtype(result_dtype, jnp.complexfloating):
        # A complex power (a complex tensor, or any to a complex number, which reaches here in
        # the base's own dtype): in the result's dtype, by torch's shortcuts.
        return _complex_pow_scalar(convert(x, result_dtype), exponent)
    out = _pow(x, exponent)
    if isinstance(exponent, int) or not jnp.issubdtype(out.dtype, jnp.floating):
        return out  # an integer exponent (multiplies, above) or complex numbers
    # torch's kernel takes sqrt for an exponent of 1/2 and rsqrt for -1/2, which differ from C's
    # pow at -0.0 and -inf: sqrt(-0.0) is -0.0 and rsqrt(-0.0) -inf, where pow gives 0.0 and inf.
    # Its float16 kernel alone has no such shortcut: there -0.0 ** 0.5 is 0.0, as C's pow gives.
    if result_dtype == jnp.float16:
        return out
    return jnp.where(exponent == 0.5, jnp.sqrt(x), jnp.where(exponent == -0.5, lax.rsqrt(x), out))


def _complex_pow_scalar(x: Array, exponent: Array | Scalar) -> Array:
    """A complex tensor to a number, by torch's shortcuts: 1 for an exponent of 0, ``x`` for 1,
    products for 2, 3 and -2 (``x * x`` is exact where exp/log are not), sqrt, 1/sqrt and the
    reciprocal for 0.5, -0.5 and -1 (an exponent that is a float graph input is compared in the
    program); C's ``cpow`` for the others."""
    e = exponent
    square = x * x
    shortcuts = (
        (0, jnp.ones_like(x)),
        (1, x),
        (2, square),
        (3, square * x),
        (-2, 1 / square),
        (0.5, jnp.sqrt(x)),
        (-0.5, 1 / jnp.sqrt(x)),
        (-1, 1 / x),
    )
    out = _pow(x, e)
    for value, shortcut in reversed(shortcuts):
        out = jnp.where(e == value, shortcut, out)
    return out


# Integer powers by a number up to this are unrolled multiplies; larger ones go by squaring
# (same wrapping products either way).
_MULTIPLIES_UP_TO = 8


def _power_by_squaring(x: Array, exponent: Array) -> Array:
    """``x ** exponent`` for integers with C's wrapping products, over every bit of the exponent
    (XLA's integer power read only its low 6 bits: 2 ** 64 came out 1 where torch's is 0)."""
    x, exponent = jnp.broadcast_arrays(x, exponent)
    result, base = jnp.ones_like(x), x
    for bit in range(jnp.iinfo(x.dtype).bits - (1 if jnp.issubdtype(x.dtype, jnp.signedinteger) else 0)):
        result = jnp.where((exponent >> bit) & 1 == 1, result * base, result)
        base = base * _wrapping_square_operand(base)
    return result


def _integer_pow(x: Array, exponent: Array) -> Array:
    """torch's integer pow: a negative exponent gives 0, except for bases 1 and -1."""
    dt = jnp.result_type(x, exponent)
    x, exponent = x.astype(dt), exponent.astype(dt)
    positive = _power_by_squaring(x, jnp.maximum(exponent, 0))
    one = jnp.ones((), dt)
    odd = (exponent % 2) != 0
    negative = jnp.where(x == 1, one, jnp.where(x == -1, jnp.where(odd, -one, one), jnp.zeros((), dt)))
    return jnp.where(exponent < 0, negative, positive)


@lowering(aten.float_power.Tensor_Tensor, aten.float_power.Tensor_Scalar, aten.float_power.Scalar)
def _float_power(x: Array | Scalar, exponent: Array | Scalar) -> Array:
    # torch.float_power always computes in double.
    return jnp.power(jnp.asarray(x, jnp.float64), jnp.asarray(exponent, jnp.float64))


@lowering(aten.neg.default)
def _neg(x: Array) -> Array:
    return -x


@lowering(aten.reciprocal.default)
def _reciprocal(x: Array) -> Array:
    return 1 / (x.astype(jnp.float32) if is_integral(x) else x)


def _in_float(fn: Any) -> Any:
    """Run a fused pointwise formula in float32 for half inputs and round once, as torch's
    CPU kernels do (their ``opmath`` type); other dtypes are left alone."""

    def lower(x: Array | Scalar, *rest: Any, **kw: Any) -> Array:
        if not isinstance(x, jax.Array):
            # ``self`` a 0-d integer or bool CPU tensor, baked as a number and already promoted:
            # an array of the dtype its tensor operands were promoted to.
            like = next((a for a in (*rest, *kw.values()) if isinstance(a, jax.Array)), None)
            x = jnp.asarray(x, dtype=None if like is None else like.dtype)
        if x.dtype not in HALF:
            return fn(x, *rest, **kw)
        up = [compute_float(a) if isinstance(a, jax.Array) else a for a in rest]
        kup = {k: compute_float(a) if isinstance(a, jax.Array) else a for k, a in kw.items()}
        return fn(compute_float(x), *up, **kup).astype(x.dtype)

    return lower


@lowering(aten.addcmul.default)
@_in_float
def _addcmul(x: Array, tensor1: Array, tensor2: Array, value: Scalar = 1) -> Array:
    # Same association as torch's CPU kernel: self + (value * t1) * t2.
    return x + scaled(tensor1, integral_scalar(value, x)) * tensor2


@lowering(aten.addcdiv.default)
@_in_float
def _addcdiv(x: Array, tensor1: Array, tensor2: Array, value: Scalar = 1) -> Array:
    # Same association as torch's CPU kernel: self + (value * t1) / t2.
    return x + scaled(tensor1, value) / tensor2


@lowering(aten.lerp.Scalar, aten.lerp.Tensor)
@_in_float
def _lerp(x: Array, end: Array, weight: Array | Scalar) -> Array:
    # torch switches formula at |w| = 0.5 so that lerp(a, b, 1) == b exactly.
    diff = end - x
    return jnp.where(jnp.abs(weight) < 0.5, x + weight * diff, end - diff * (1 - weight))


# --- min / max / clamp ------------------------------------------------------------


# torch's kernels pick between two values with a comparison, and keep the first operand on a tie:
# max(-0.0, 0.0) is -0.0 (relu(-0.0) too), where XLA's max and min give +0.0 and -0.0 whatever
# the order. NaN in either operand gives NaN (the f-forms skip it).


def larger(x: Array, other: Array | Scalar) -> Array:
    """``torch.maximum(x, other)``: the first on a tie, NaN if either is."""
    out = jnp.where(x < other, other, x)
    return jnp.where(jnp.isnan(other), other, out) if _inexact(other) else out


def smaller(x: Array, other: Array | Scalar) -> Array:
    """``torch.minimum(x, other)``: the first on a tie, NaN if either is."""
    out = jnp.where(x > other, other, x)
    return jnp.where(jnp.isnan(other), other, out) if _inexact(other) else out


def _inexact(v: Array | Scalar) -> bool:
    return isinstance(v, float) or (isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jnp.inexact))


@lowering(aten.maximum.default, aten.max.other)
def _maximum(x: Array, other: Array) -> Array:
    return larger(x, other)


@lowering(aten.minimum.default, aten.min.other)
def _minimum(x: Array, other: Array) -> Array:
    return smaller(x, other)


@lowering(aten.fmax.default)
def _fmax(x: Array, other: Array) -> Array:
    return _skipping_nan(larger, x, other)


@lowering(aten.fmin.default)
def _fmin(x: Array, other: Array) -> Array:
    return _skipping_nan(smaller, x, other)


def _skipping_nan(pick: Any, x: Array, other: Array) -> Array:
    """``pick(x, other)``, except that a NaN operand gives way to the other one."""
    return jnp.where(jnp.isnan(x), other, jnp.where(jnp.isnan(other), x, pick(x, other)))


@lowering(aten.clamp.default, aten.clamp.Tensor)
def _clamp(x: Array, min: Array | Scalar | None = None, max: Array | Scalar | None = None) -> Array:
    # max(min(...)) order matters when min > max: torch then returns max.
    if min is not None:
        x = larger(x, min)
    if max is not None:
        x = smaller(x, max)
    return x


@lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(x: Array, min: Array | Scalar) -> Array:
    return larger(x, min)


@lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(x: Array, max: Array | Scalar) -> Array:
    return smaller(x, max)


# --- comparisons, logical and bitwise ops -----------------------------------------


@lowering(aten.eq.Tensor, aten.eq.Scalar)
def _eq(x: Array, other: Array | Scalar) -> Array:
    return x == other


@lowering(aten.ne.Tensor, aten.ne.Scalar)
def _ne(x: Array, other: Array | Scalar) -> Array:
    return x != other


@lowering(aten.lt.Tensor, aten.lt.Scalar)
def _lt(x: Array, other: Array | Scalar) -> Array:
    return x < other


@lowering(aten.le.Tensor, aten.le.Scalar)
def _le(x: Array, other: Array | Scalar) -> Array:
    return x <= other


@lowering(aten.gt.Tensor, aten.gt.Scalar)
def _gt(x: Array, other: Array | Scalar) -> Array:
    return x > other


@lowering(aten.ge.Tensor, aten.ge.Scalar)
def _ge(x: Array, other: Array | Scalar) -> Array:
    return x >= other


@lowering(aten.logical_and.default)
def _logical_and(x: Array, other: Array) -> Array:
    return jnp.logical_and(x, other)


@lowering(aten.logical_or.default)
def _logical_or(x: Array, other: Array) -> Array:
    return jnp.logical_or(x, other)


@lowering(aten.logical_xor.default)
def _logical_xor(x: Array, other: Array) -> Array:
    return jnp.logical_xor(x, other)


@lowering(aten.logical_not.default)
def _logical_not(x: Array) -> Array:
    return jnp.logical_not(x)


@lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)
def _bitwise_and(x: Array, other: Array | Scalar) -> Array:
    return jnp.bitwise_and(x, other)


@lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)
def _bitwise_or(x: Array, other: Array | Scalar) -> Array:
    return jnp.bitwise_or(x, other)


@lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def _bitwise_xor(x: Array, other: Array | Scalar) -> Array:
    return jnp.bitwise_xor(x, other)


@lowering(aten.bitwise_not.default)
def _bitwise_not(x: Array) -> Array:
    return jnp.invert(x)


@lowering(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar)
def _left_shift(x: Array, other: Array | Scalar) -> Array:
    return jnp.left_shift(x, other)


@lowering(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar)
def _right_shift(x: Array, other: Array | Scalar) -> Array:
    return jnp.right_shift(x, other)  # arithmetic for signed types, as in torch


@lowering(aten.isnan.default)
def _isnan(x: Array) -> Array:
    return jnp.isnan(x)


@lowering(aten.isinf.default)
def _isinf(x: Array) -> Array:
    return jnp.isinf(x)


@lowering(aten.isfinite.default)
def _isfinite(x: Array) -> Array:
    return jnp.isfinite(x)


@lowering(aten.isposinf.default)
def _isposinf(x: Array) -> Array:
    return jnp.isposinf(x)


@lowering(aten.isneginf.default)
def _isneginf(x: Array) -> Array:
    return jnp.isneginf(x)


# --- unary math ---------------------------------------------------------------------


def nan_through(fn: Any) -> Any:
    """``fn`` made to return NaN for NaN, whatever XLA's CPU backend proves at compile time.

    XLA on CPU computes exp (and exp2, sinh, cosh, built on it) from a NaN known at
    compile time (0/0 of an empty mean, folded) as an arbitrary number: LLVM folds the
    float-to-int step of its exp routine to an undefined value. Selecting the NaN itself
    keeps it (torch: exp(NaN) is NaN).
    """

    def guarded(x: Array) -> Array:
        return jnp.where(jnp.isnan(x), x, fn(x))

    return guarded


safe_exp = nan_through(jnp.exp)


def _exp2(x: Array) -> Array:
    """``2**x`` within an ulp and exact at integers, as eager's. ``jnp.exp2`` is
    ``exp(x * ln 2)``, whose rounded product is off by up to about |x| ulps (2**-100 by 17).
    Here ``2**round(x)`` is put in the exponent (``ldexp``) and exp takes only the rest, within
    half of ln 2. Beyond ±2000 every float type has overflowed or underflowed already."""
    if jnp.iscomplexobj(x):
        return jnp.exp2(x)
    x = compute_float(x.astype(jnp.float32) if is_integral(x) else x)
    x = jnp.clip(x, -2000, 2000)
    n = jnp.round(x)
    return jnp.ldexp(jnp.exp((x - n) * jnp.asarray(math.log(2), x.dtype)), n.astype(jnp.int32))


def tanh(x: Array) -> Array:
    """tanh within an ulp where float32's result is at least 0.55, as eager's (about correctly
    rounded). XLA's float32 tanh is a rational approximation up to 4.5 ulps off (59% of normal
    samples differed from eager), and it returns ±1 from |x| = 7.9 on where the true value
    rounds to ±1 only from 9.01, so its gradient 1 - tanh² was 0 there (gelu(approximate='tanh')'s
    backward lost 2e-6 at x = 5). From |x| = 0.625 on, 1 - 2 / (exp(2|x|) + 1) has no
    cancellation and is within 0.5 ulp from |x| = 2 (15% differ from eager); below, XLA's."""
    y = jnp.tanh(x)
    if not isinstance(x, jax.Array) or x.dtype != jnp.float32:
        return y
    a = jnp.abs(x)
    far = 1 - 2 / (jnp.exp(2 * jnp.minimum(a, 20.0)) + 1)
    return jnp.where(a >= 0.625, jnp.where(x < 0, -far, far), y)


def _hyperbolic(x: Array, sign: int) -> Array:
    """sinh (``sign`` -1) or cosh (+1) within a few ulps, as eager's. XLA's are ``exp(|x| - ln 2)``
    for large x, and the rounded difference puts them up to |x| ulps off (sinh(64.0) in float32
    differs from eager's in the sixth digit). Here ``exp(|x| / 2)`` (exact halving) is squared,
    half of it first so that it overflows only where the result does; below 1, expm1 keeps
    the small values: sinh is ``(m + m / (m + 1)) / 2`` and cosh ``1 + m**2 / (2 (m + 1))``."""
    if jnp.iscomplexobj(x):
        return jnp.cosh(x) if sign > 0 else jnp.sinh(x)
    a = jnp.abs(x)
    h = jnp.exp(a / 2)
    large = (h * 0.5) * h + sign * ((0.5 / h) / h)
    m = jnp.expm1(jnp.minimum(a, 1))
    small = 1 + m * m / (2 * (m + 1)) if sign > 0 else (m + m / (m + 1)) / 2
    result = jnp.where(a < 1, small, large)
    return result if sign > 0 else jnp.copysign(result, x)


def _abs(x: Array) -> Array:
    """``|x|``. XLA takes an integer's abs to be at least 0 and folds comparisons with that in
    mind, but the abs of a signed type's minimum is itself (int8's -128): ``3 ** abs(e)`` of
    -128 computed a positive power (1) where eager's negative exponent gives 0. The barrier
    keeps XLA from knowing the sign."""
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        return lax.optimization_barrier(jnp.abs(x))
    return jnp.abs(x)


def log_exact(x: Array) -> Array:
    """``log(x)`` that XLA cannot fold into its producer.

    XLA's algebraic simplifier rewrites log(exp(a)) as a, which is wrong where exp(a)
    overflows (torch: log(exp(100.0)) is inf in float32, the rewrite gives 100); the
    barrier keeps the two ops apart.
    """
    return jnp.log(lax.optimization_barrier(x))


def log1p(x: Array) -> Array:
    """``log1p``. XLA's float64 log1p is up to 128 ulps off between -0.5 and -0.1 (a binary cross
    entropy's ``log1p(-p)``); from |x| = 0.1 on it is ``log(u) + (x - (u - 1)) / u`` with
    ``u = 1 + x``, whose rounding the second term puts back, within an ulp of eager's. The
    barrier keeps XLA from folding ``(1 + x) - 1`` into ``x``."""
    if getattr(x, "dtype", None) != jnp.float64:
        return jnp.log1p(x)
    far = (jnp.abs(x) >= 0.1) & (x > -1) & (x < jnp.inf)
    xs = jnp.where(far, x, 0.5)
    u = lax.optimization_barrier(1 + xs)
    return jnp.where(far, jnp.log(u) + (xs - (u - 1)) / u, jnp.log1p(x))


def _atanh(x: Array) -> Array:
    """``atanh``; in float64 from |x| = 0.1 on ``(log1p(x) - log1p(-x)) / 2`` with the accurate
    log1p above (no cancellation: the two logs have opposite signs). XLA's own goes through its
    float64 log1p and was up to 72 ulps off eager's near -0.41."""
    if x.dtype != jnp.float64:
        return jnp.arctanh(x)
    far = (jnp.abs(x) >= 0.1) & (jnp.abs(x) <= 1)  # beyond 1, XLA's NaN (of eager's sign)
    xs = jnp.where(far, x, 0.5)
    return jnp.where(far, (log1p(xs) - log1p(-xs)) / 2, jnp.arctanh(x))


def via_float64(fn: Any) -> Any:
    """``fn`` of a float32 (or half, which arrives in float32) input computed in float64 and
    rounded to float32. XLA's float32 ``lgamma``, ``erf``, ``erfc`` and ``erf_inv`` are
    approximations up to 4e6, 3.5, 54 and 36 ulps off (``lgamma(1.0)`` is 4.8e-7, not 0), where
    eager's libm functions are within an ulp; rounded from float64 they equal eager's on 98.5% to
    100% of float32 inputs, the rest an ulp apart (16 near lgamma's negative roots, where
    eager's own lgammaf is that far off)."""

    def lower(x: Array) -> Array:
        if x.dtype == jnp.float32:
            return fn(x.astype(jnp.float64)).astype(jnp.float32)
        return fn(x)

    return lower


# The asymptotic series of torch's calc_digamma (Cephes), highest power first.
_DIGAMMA_SERIES = (
    8.33333333333333333333e-2,
    -2.10927960927960927961e-2,
    7.57575757575757575758e-3,
    -4.16666666666666666667e-3,
    3.96825396825396825397e-3,
    -8.33333333333333333333e-3,
    8.33333333333333333333e-2,
)


def _unfused_product(a: Array, b: Array) -> Array:
    """``a * b`` rounded to float32 before the add that uses it: XLA on the CPU would fuse the
    two into one multiply-add, rounded once, where eager's scalar loop rounds twice. Taken in
    float64 and rounded with ``reduce_precision``, which XLA keeps (docs/runtime.md)."""
    if a.dtype != jnp.float32:
        return a * b
    return lax.reduce_precision(a.astype(jnp.float64) * b, exponent_bits=8, mantissa_bits=23)


def _erfc(x: Array) -> Array:
    """``erfc``; from 2 up ``exp(-x**2) * erfcx(x)``, with ``x**2`` split exactly into a rounded
    square and its error (Veltkamp's halves), so that ``exp`` sees the square XLA's own erfc
    rounds: its float64 result strays as the square grows, 30 ulps from eager's at 4 and 500 at
    20 (now 7 at most)."""
    if x.dtype != jnp.float64:
        return lax.erfc(x)
    tail = (x >= 2) & (x < jnp.inf)
    xs = jnp.where(tail, x, 2.0)
    split = xs * 134217729.0  # 2**27 + 1
    high = split - (split - xs)
    low = xs - high
    square = xs * xs
    error = ((high * high - square) + 2 * high * low) + low * low
    return jnp.where(tail, jnp.exp(-square) * (1 - error) * erfcx(xs), lax.erfc(x))


def _erfinv(y: Array) -> Array:
    """XLA's inverse error function, then two Newton steps, as torch's calc_erfinv ends. XLA's
    float64 erf_inv is within about 1e-12 of the root only (erfinv(0.9999999) was 6,000 ulps
    off eager's). From |y| = 1/2 on the steps solve erfc(x) = 1 - |y| instead of erf(x) = |y|:
    1 - |y| is exact there, and erf(x) near 1 cannot tell x's last bits apart. ±1 is ±inf,
    where a step would give NaN."""
    a = jnp.abs(y)
    x = lax.erf_inv(a)
    tail = a > 0.5
    two_over_sqrt_pi = jnp.asarray(2 / math.sqrt(math.pi), y.dtype)
    for _ in range(2):
        residual = jnp.where(tail, (1 - a) - lax.erfc(x), lax.erf(x) - a)
        x = x - residual / (two_over_sqrt_pi * jnp.exp(-x * x))
    x = jnp.where(a == 1, jnp.asarray(jnp.inf, y.dtype), x)
    return jnp.where(jnp.isnan(y), y, jnp.copysign(x, y))


def _digamma(x: Array) -> Array:
    """torch's calc_digamma step for step, in the input's type: reflect a negative x, push x up
    to 10 with the recurrence (exactly 10 at the end gives psi(10)), then the asymptotic series.
    XLA's digamma is another approximation: 67% of float32 and 71% of float64 samples differed
    from eager's, by up to 15,000 float32 ulps near its root (1.4616); now 1 in 3,000, by an ulp.
    A zero gives an infinity of the opposite sign, a negative integer NaN."""
    dtype = x.dtype
    negative = x < 0
    wide = x.astype(jnp.float64)
    # pi / tan(pi r) in double, r the fractional part, as torch's float version computes it too.
    reflection = (math.pi / jnp.tan(math.pi * (wide - jnp.trunc(wide)))).astype(dtype)
    x_up = jnp.where(negative, 1 - x, x)
    result = jnp.zeros_like(x)
    for _ in range(10):  # from x > 0 (1 - x > 1 when reflected), 10 steps reach 10
        low = x_up < 10
        result = jnp.where(low, result - 1 / x_up, result)
        x_up = jnp.where(low, x_up + 1, x_up)
    z = 1 / (x_up * x_up)
    series = jnp.zeros_like(x)
    for coefficient in _DIGAMMA_SERIES:
        series = (_unfused_product(series, z) + coefficient).astype(dtype)
    tail = jnp.where(x_up < 1e17, _unfused_product(z, series), 0)
    out = ((result + via_float64(jnp.log)(x_up) - 0.5 / x_up) - tail).astype(dtype)
    out = jnp.where(x_up == 10, result + jnp.asarray(2.25175258906672110764, dtype), out)
    out = jnp.where(negative, out - reflection, out)
    out = jnp.where(negative & (x == jnp.trunc(x)), jnp.asarray(jnp.nan, dtype), out)
    return jnp.where(x == 0, jnp.copysign(jnp.asarray(jnp.inf, dtype), -x), out)


# Ops whose torch semantics are exactly the jnp function of one argument. A table keeps
# ~40 one-line lowerings readable; each entry is still one registration per overload.
_UNARY: dict[Any, Any] = {
    aten.abs.default: _abs,
    aten.exp.default: safe_exp,
    aten.exp2.default: nan_through(_exp2),
    aten.expm1.default: jnp.expm1,
    aten.log.default: log_exact,
    aten.log2.default: jnp.log2,
    aten.log10.default: jnp.log10,
    aten.log1p.default: log1p,
    aten.sqrt.default: jnp.sqrt,
    aten.rsqrt.default: lax.rsqrt,
    aten.sin.default: jnp.sin,
    aten.cos.default: jnp.cos,
    aten.tan.default: jnp.tan,
    aten.asin.default: jnp.arcsin,
    aten.acos.default: jnp.arccos,
    aten.atan.default: jnp.arctan,
    aten.sinh.default: nan_through(lambda x: _hyperbolic(x, -1)),
    aten.cosh.default: nan_through(lambda x: _hyperbolic(x, 1)),
    aten.tanh.default: tanh,
    aten.asinh.default: jnp.arcsinh,
    aten.acosh.default: jnp.arccosh,
    aten.atanh.default: _atanh,
    aten.erf.default: via_float64(lax.erf),
    aten.erfc.default: via_float64(_erfc),
    aten.erfinv.default: via_float64(_erfinv),
    aten.lgamma.default: via_float64(lax.lgamma),
    aten.digamma.default: _digamma,
    aten.sigmoid.default: jax.nn.sigmoid,
    aten.floor.default: jnp.floor,
    aten.ceil.default: jnp.ceil,
    aten.trunc.default: jnp.trunc,
    aten.signbit.default: jnp.signbit,
    aten.positive.default: lambda x: x,
    aten.conj_physical.default: jnp.conj,
    aten._conj_physical.default: jnp.conj,
    # The conjugate view's values (a view op: writes reach the base through it, see views.py).
    aten._conj.default: jnp.conj,
    aten.angle.default: lambda x: jnp.angle(x) if jnp.iscomplexobj(x) else _real_angle(x),
}


def _real_angle(x: Array) -> Array:
    # torch: pi for a negative number, 0 otherwise, NaN for NaN.
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.asarray(math.pi, x.dtype), jnp.zeros((), x.dtype)))


def _float_unary(fn: Any) -> Any:
    def lower(x: Array) -> Array:
        # Integer inputs of float math compute in float (torch returns default float).
        if is_integral(x) and fn not in _INT_PRESERVING:
            x = x.astype(jnp.float32)
        if x.dtype in HALF and fn not in _INT_PRESERVING:
            # torch evaluates half math in float32 and rounds once.
            return fn(x.astype(jnp.float32)).astype(x.dtype)
        return fn(x)

    return lower


_INT_PRESERVING = {_abs, jnp.floor, jnp.ceil, jnp.trunc, jnp.signbit, jnp.conj}

for _op, _fn in _UNARY.items():
    lowering(_op)(_float_unary(_fn))


@lowering(aten.relu.default)
def _relu(x: Array) -> Array:
    return larger(x, jnp.zeros((), x.dtype))


@lowering(aten.sign.default, aten.sgn.default)
def _sign(x: Array) -> Array:
    # torch computes (0 < x) - (x < 0), so sign(NaN) == 0, unlike jnp.sign.
    if x.dtype == jnp.bool_:
        return x
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        # sgn(z) = z / |z|, and 0 at 0 (torch.sign refuses complex numbers, sgn takes them).
        magnitude = jnp.abs(x)
        safe = jnp.where(magnitude == 0, jnp.ones((), magnitude.dtype), magnitude)
        return jnp.where(magnitude == 0, jnp.zeros((), x.dtype), x / safe.astype(x.dtype))
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)
    # Not as converted predicates for floats: XLA rewrites g * convert(p) as select(p, g, 0),
    # which turns abs's gradient g * sgn(x) at NaN into 0 where torch computes NaN * 0.
    # (x == 0 too: torch's sign of -0.0 is +0.0, jnp's is -0.0)
    return jnp.where(jnp.isnan(x) | (x == 0), jnp.zeros((), x.dtype), jnp.sign(x))


@lowering(aten.frac.default)
def _frac(x: Array) -> Array:
    return x - jnp.trunc(x)


@lowering(aten.square.default)
def _square(x: Array) -> Array:
    return x * _wrapping_square_operand(x)


@lowering(aten.round.default)
def _round(x: Array) -> Array:
    return jnp.round(x)  # half to even, like torch


@lowering(aten.round.decimals)
def _round_decimals(x: Array, decimals: int = 0) -> Array:
    # torch scales by 10**|d| with a multiply for d > 0 and a divide for d < 0.
    scale = 10.0 ** abs(decimals)
    if decimals >= 0:
        scaled = jnp.round(x * scale)
        return scaled / exact_divisor(jnp.asarray(scale, scaled.dtype), scaled)
    return jnp.round(x / exact_divisor(jnp.asarray(scale, x.dtype), x)) * scale


@lowering(aten.logit.default, result_dtype=True)
def _logit(x: Array, eps: float | None = None, result_dtype: Any = None) -> Array:
    # Eager's half kernels round every step: the clipped value, 1 - x, the ratio, the log.
    r = rounded_to(result_dtype)
    if eps is not None:
        x = r(jnp.clip(x, eps, 1 - eps))
    return jnp.log(r(x / r(1 - x)))


@lowering(aten.nan_to_num.default)
def _nan_to_num(
    x: Array, nan: float | None = None, posinf: float | None = None, neginf: float | None = None
) -> Array:
    if is_integral(x):
        return x
    info = jnp.finfo(x.dtype)
    x = jnp.where(jnp.isnan(x), 0.0 if nan is None else nan, x)
    x = jnp.where(jnp.isposinf(x), info.max if posinf is None else posinf, x)
    return jnp.where(jnp.isneginf(x), info.min if neginf is None else neginf, x)


@lowering(aten.atan2.default)
def _atan2(x: Array, other: Array) -> Array:
    return jnp.arctan2(x, other)


@lowering(aten.hypot.default)
def _hypot(x: Array, other: Array) -> Array:
    # Eager's hypot is correctly rounded; XLA's scaled formula is an ulp off on a third of
    # float32 values. Squares of float32 numbers are exact in float64, so the sum and root
    # there round to eager's float32 (and half-type) results. (Float64 keeps XLA's formula.)
    dt = jnp.result_type(x, other)
    if dt in (jnp.float32, jnp.float16, jnp.bfloat16):
        wide_x, wide_y = jnp.asarray(x, jnp.float64), jnp.asarray(other, jnp.float64)
        root = jnp.sqrt(wide_x * wide_x + wide_y * wide_y).astype(dt)
        infinite = jnp.isinf(wide_x) | jnp.isinf(wide_y)  # inf even beside a NaN
        return jnp.where(infinite, jnp.asarray(jnp.inf, dt), root)
    return jnp.hypot(x, other)


@lowering(aten.copysign.Tensor, aten.copysign.Scalar)
def _copysign(x: Array, other: Array | Scalar) -> Array:
    return jnp.copysign(x, other)


@lowering(aten.logaddexp.default)
def _logaddexp(x: Array, other: Array) -> Array:
    if jnp.iscomplexobj(x):
        # torch: log1p(exp(low - high)) + high, the operands ordered by their real parts (JAX's
        # takes the modulus of the difference, which is not a complex log-sum-exp).
        first = jnp.real(x) >= jnp.real(other)
        high, low = jnp.where(first, x, other), jnp.where(first, other, x)
        both_minus_inf = jnp.isneginf(jnp.real(low)) & jnp.isneginf(jnp.real(high))
        return jnp.where(both_minus_inf, low, log1p(jnp.exp(low - high)) + high)
    return jnp.logaddexp(x, other)


@lowering(aten.xlogy.Tensor, aten.xlogy.Scalar_Other, aten.xlogy.Scalar_Self, result_dtype=True)
def _xlogy(x: Array | Scalar, other: Array | Scalar, result_dtype: Any = None) -> Array:
    return _times_log(jnp.log, x, other, result_dtype)


@lowering(
    aten.special_xlog1py.default,
    aten.special_xlog1py.self_scalar,
    aten.special_xlog1py.other_scalar,
    result_dtype=True,
)
def _xlog1py(x: Array | Scalar, other: Array | Scalar, result_dtype: Any = None) -> Array:
    return _times_log(log1p, x, other, result_dtype)


def _times_log(
    log: Callable[[Array], Array], x: Array | Scalar, other: Array | Scalar, result_dtype: Any
) -> Array:
    """``x * log(other)`` with 0 times anything 0, and NaN whenever ``other`` is NaN; eager's half
    kernels round the log to the half type before the product."""
    x, other = jnp.asarray(x), jnp.asarray(other)
    if is_integral(x, other):
        x, other = x.astype(jnp.float32), other.astype(jnp.float32)
    logged = rounded_to(result_dtype)(log(other))
    out = jnp.where(x == 0, jnp.zeros((), jnp.result_type(x, other)), x * logged)
    return jnp.where(jnp.isnan(other), other, out)


@lowering(aten.special_entr.default, result_dtype=True)
def _entr(x: Array, result_dtype: Any = None) -> Array:
    """``-x * log(x)`` for x > 0, 0 at 0, -inf below, as eager's kernel: in a half type its log is
    rounded to that type before the product. (torch's decomposition, which ran before, takes the
    product of the float32 log: entr(0.1) in bfloat16 was 0.2305, eager's 0.2295.)"""
    if is_integral(x):
        x = x.astype(jnp.float32)
    wide = compute_float(x)
    product = -wide * rounded_to(result_dtype)(via_float64(log_exact)(wide))
    out = jnp.where(x > 0, product, jnp.where(x == 0, 0.0, -jnp.inf).astype(wide.dtype))
    return jnp.where(jnp.isnan(wide), wide, out)


# --- selection, fill, copy ------------------------------------------------------------


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(condition: Array, x: Array | Scalar, other: Array | Scalar) -> Array:
    return jnp.where(condition, x, other)


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(x: Array, mask: Array, value: Array | Scalar) -> Array:
    return jnp.where(mask, jnp.asarray(value, x.dtype), x)


@lowering(aten.fill.Scalar, aten.fill.Tensor)
def _fill(x: Array, value: Array | Scalar) -> Array:
    if isinstance(value, jax.Array):
        return jnp.broadcast_to(value.astype(x.dtype), x.shape)
    return filled(x.shape, value, x.dtype)


@lowering(aten.zero.default)
def _zero(x: Array) -> Array:
    return filled(x.shape, 0, x.dtype)


@lowering(aten.copy.default)
def _copy(x: Array, src: Array, non_blocking: bool = False) -> Array:
    # Functional ``copy_`` (what functionalization and AOTAutograd write): ``x``'s shape and
    # dtype, ``src``'s values broadcast into it.
    return jnp.broadcast_to(convert(src, x.dtype), x.shape)


@lowering(aten.clone.default)
def _clone(x: Array, memory_format: Any = None) -> Array:
    return x  # JAX arrays are immutable: a clone is the value itself.


@lowering(aten._to_copy.default)
def _to_copy(
    x: Array,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    non_blocking: bool = False,
    memory_format: Any = None,
) -> Array:
    # Only the dtype conversion is ours; device moves belong to the runtime.
    return x if dtype is None else convert(x, to_jnp(dtype))


# --- complex results ----------------------------------------------------------------------


@lowering(aten.complex.default)
def _complex(real: Array, imag: Array) -> Array:
    real, imag = jnp.broadcast_arrays(compute_float(real), compute_float(imag))
    return lax.complex(real, imag)


@lowering(aten.polar.default)
def _polar(abs: Array, angle: Array) -> Array:
    return _complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


# --- special functions (jax.scipy.special) ------------------------------------------------
# zeta, and polygamma of order 2 and up (a zeta), stay on the CPU: JAX's zeta disagrees with
# torch's (cephes) for negative arguments and at the poles (tensor.FALLBACK_IF). Orders 0 and
# 1 (digamma, and trigamma: digamma's derivative, in every Gamma, Beta and Dirichlet loss) are
# lowered, trigamma with torch's own series.


def _trigamma(x: Array) -> Array:
    """torch's calc_trigamma step for step, in the input's type: reflect below 1/2, six steps of
    the recurrence, then the asymptotic series. Its products are rounded before the adds that
    use them and its sine is correctly rounded, as eager's scalar loop and libm's ``sinf`` give
    (XLA's fused multiply-adds and float32 sine put 55% of float32 samples an ulp or more off)."""
    dtype = x.dtype
    pi = jnp.asarray(math.pi, dtype)
    reflect = x < 0.5
    s = via_float64(jnp.sin)(pi * x)
    result = jnp.where(reflect, -(pi * pi) / (s * s), jnp.zeros((), dtype))
    x = jnp.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    inner = (jnp.asarray(1 / 30, dtype) - _unfused_product(ixx, jnp.asarray(1 / 42, dtype))).astype(dtype)
    inner = (jnp.asarray(1 / 6, dtype) - _unfused_product(ixx, inner)).astype(dtype)
    series = ((1 + 1 / (2 * x)) + _unfused_product(ixx, inner)).astype(dtype)
    result = result + series / x
    return jnp.where(reflect, -result, result)


@lowering(aten.polygamma.default)
def _polygamma(n: int, x: Array) -> Array:
    return _float_unary(_digamma if n == 0 else _trigamma)(x)

_SPECIAL_UNARY: dict[Any, Any] = {
    aten.i0.default: jsp.i0,
    aten.special_i0e.default: jsp.i0e,
    aten.special_i1.default: lambda x: _positive_zero(x, jsp.i1(x)),  # torch's i1(-0.0) is +0.0
    aten.special_i1e.default: lambda x: _positive_zero(x, jsp.i1e(x)),
    aten.special_erfcx.default: lambda x: erfcx(x),
    aten.special_ndtri.default: jsp.ndtri,
    aten.special_log_ndtr.default: lambda x: _log_ndtr(x),
}


def erfcx(x: Array) -> Array:
    """``exp(x**2) * erfc(x)``. JAX's erfcx computes ``erfc(x)`` first in part of its range, and
    where that is subnormal (x from 9.19 to 9.42 in float32, 26.54 to 26.64 in float64) XLA on
    the CPU flushes it to zero, and the result with it. From 9 up, the asymptotic series
    ``(1 - z + 1*3 z**2 - 1*3*5 z**3 ...) / (x sqrt(pi))``, ``z = 1 / (2 x**2)``, is taken
    instead: its 12 terms leave less than 1e-15 of error from there."""
    big = x >= 9
    xs = jnp.where(big, x, 9)
    z = 1 / (2 * xs * xs)
    series = jnp.ones_like(z)
    for n in range(12, 0, -1):
        series = 1 - (2 * n - 1) * z * series
    asymptotic = series / (xs * math.sqrt(math.pi))
    return jnp.where(big, asymptotic, jsp.erfcx(jnp.where(big, 0, x)))


@lowering(aten.special_ndtr.default)
def _ndtr(x: Array) -> Array:
    """torch's ``special_ndtr`` is ``(1 + erf(x * M_SQRT1_2)) * 0.5``, each op rounded to the
    input's type (a half type too). JAX's ndtr is accurate in the lower tail where that sum
    cancels: ``ndtr(-3.7)`` in float32 was 1.07855e-4, eager's 1.07795e-4."""
    if is_integral(x):
        x = x.astype(jnp.float32)
    t = (compute_float(x) * math.sqrt(0.5)).astype(x.dtype)
    erf = via_float64(lax.erf)(compute_float(t)).astype(x.dtype)
    return ((compute_float(erf) + 1) * 0.5).astype(x.dtype)


def _positive_zero(x: Array, y: Array) -> Array:
    return jnp.where(x == 0, jnp.zeros((), y.dtype), y)


def _log_ndtr(x: Array) -> Array:
    # torch's calc_log_ndtr: the scaled complementary error function below -1, log1p above.
    t = x * jnp.asarray(math.sqrt(0.5), x.dtype)
    lower = jnp.log(erfcx(-t) / 2) - t * t
    upper = log1p(-via_float64(_erfc)(t) / 2)
    return jnp.where(x < -1, lower, upper)
for _op, _fn in _SPECIAL_UNARY.items():
    lowering(_op)(_float_unary(_fn))


# igamma and igammac (torch.special.gammainc, gammaincc; the Gamma, Chi2 and Poisson cdfs) stay
# on the CPU too: JAX's drifts from torch's from a shape of about 300 up (0.5057 for 0.5001 at
# a = x = 1e6 in float32, 0.0 at 1e10), goes below 0 for shapes under 1e-7, and in float64 from
# a = 1e16 its loop never ends, which would hang the process where torch answers 0.5.


@lowering(aten.gcd.default)
def _gcd(x: Array, other: Array) -> Array:
    """torch's calc_gcd: Euclid's steps with C's remainder on the absolute values, which stop for
    every pair. (JAX's loop never ended when an operand was its type's minimum, whose absolute
    value is itself: gcd(0, int32 min) is int32 min in torch, gcd(5, int32 min) is -1.)"""
    # A baked 0-d CPU integer or bool tensor arrives as a number, already promoted: it takes the
    # tensor's dtype (the loop's carry and lax.rem need one dtype).
    dt = jnp.result_type(x, other)
    x, other = jnp.broadcast_arrays(jnp.asarray(x, dt), jnp.asarray(other, dt))
    a, b = _abs(x), _abs(other)

    def step(ab: tuple[Array, Array]) -> tuple[Array, Array]:
        a, b = ab
        going = a != 0
        return jnp.where(going, lax.rem(b, jnp.where(going, a, 1)), a), jnp.where(going, a, b)

    return lax.while_loop(lambda ab: jnp.any(ab[0] != 0), step, (a, b))[1]


@lowering(aten.lcm.default)
def _lcm(x: Array, other: Array) -> Array:
    # torch's calc_lcm: |x / gcd * other|, the product wrapping as C's does: in int for the
    # types narrower than it (C's promotion), then cut to the type.
    g = _gcd(x, other)
    dtype = g.dtype
    wide = jnp.int32 if jnp.iinfo(dtype).bits < 32 else dtype
    x, other, g = (v.astype(wide) for v in jnp.broadcast_arrays(x, other, g))
    value = _abs(lax.div(x, jnp.where(g == 0, 1, g)) * other)
    return jnp.where(g == 0, jnp.zeros((), wide), value).astype(dtype)


@lowering(aten.nextafter.default)
def _nextafter(x: Array, other: Array) -> Array:
    return jnp.nextafter(x, other)


@lowering(aten.ldexp.Tensor, result_dtype=True)
def _ldexp(x: Array, other: Array, result_dtype: Any = None) -> Array:
    """``x * 2**other`` as eager's CPU kernel computes it. A float tensor scaled by an integer
    exponent scales exactly (C's ldexp, the exponent taken as an int32 as its cast does:
    ``0.0 * 2**200`` is 0, not NaN); any other pair multiplies by the power rounded to the
    result's type (``2.0**200`` is inf in float32, and an integer 0 times it is NaN)."""
    if jnp.issubdtype(x.dtype, jnp.floating) and is_integral(other):
        return jnp.ldexp(x.astype(result_dtype), other.astype(jnp.int64).astype(jnp.int32))
    return x.astype(result_dtype) * _power_of_two(other, result_dtype)


def _power_of_two(n: Array, dtype: Any) -> Array:
    """``2**n`` in ``dtype`` (its real part's type for a complex ``dtype`` and a real ``n``),
    exact where ``n`` is a whole number."""
    if jnp.issubdtype(n.dtype, jnp.complexfloating):
        return jnp.exp(n.astype(dtype) * jnp.asarray(math.log(2), dtype))
    real = jnp.finfo(dtype).dtype
    if is_integral(n):
        return jnp.ldexp(jnp.ones((), real), jnp.clip(n.astype(jnp.int64), -4096, 4096).astype(jnp.int32))
    n = n.astype(real)
    whole = jnp.floor(n)
    # exp2 alone is not exact at whole numbers on XLA:CPU (2**13 comes out one ulp low).
    power = jnp.ldexp(jnp.exp2(n - whole), jnp.clip(whole, -4096, 4096).astype(jnp.int32))
    return jnp.where(jnp.isfinite(n), power, jnp.exp2(n))


@lowering(aten.frexp.Tensor)
def _frexp(x: Array) -> tuple[Array, Array]:
    """C's frexp on the bits: ``x = mantissa * 2**exponent``, |mantissa| in [0.5, 1).

    Integer arithmetic throughout, so that a subnormal ``x`` gets its true exponent where
    XLA's float arithmetic on the CPU would read it as zero. Zeros, infinities and NaN keep
    their value, with exponent 0."""
    info = jnp.finfo(x.dtype)
    nbits, nmant = info.bits, info.nmant
    uint = {16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}[nbits]
    bits = lax.bitcast_convert_type(x, uint).astype(jnp.int64)
    field_mask = (1 << (nbits - 1 - nmant)) - 1  # the exponent field, shifted down
    bias = field_mask // 2
    field = (bits >> nmant) & field_mask
    fraction = bits & ((1 << nmant) - 1)
    sign = bits & ~((1 << (nbits - 1)) - 1)
    # A subnormal's fraction, shifted until its top bit is the implicit one.
    top = (63 - lax.clz(jnp.maximum(fraction, 1))).astype(jnp.int64)
    subnormal = (field == 0) & (fraction != 0)
    special = (field == field_mask) | ((field == 0) & (fraction == 0))  # inf, NaN, zero
    shift = jnp.where(subnormal, nmant - top, 0)
    exponent = jnp.where(subnormal, top - nmant + 1 - bias + 1, field - bias + 1)
    fraction = jnp.where(subnormal, (fraction << shift) & ((1 << nmant) - 1), fraction)
    mantissa_bits = sign | ((bias - 1) << nmant) | fraction
    mantissa = lax.bitcast_convert_type(mantissa_bits.astype(uint), x.dtype)
    return jnp.where(special, x, mantissa), jnp.where(special, 0, exponent).astype(jnp.int32)
