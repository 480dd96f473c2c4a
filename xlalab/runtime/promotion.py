"""The dtype an elementwise op computes in, by torch's own type-promotion rules.

A cast after the arithmetic cannot undo an overflow or a rounding: ``int64 + uint8`` must add
in int64, and a bfloat16 ``add`` rounds once, from float32 ("opmath"), as torch's kernels do.
So before an elementwise lowering runs, the runtime casts its operands to the computation
dtype that torch would use, and only the result is cast to the result dtype.

Which arguments take part, and how (default, int-to-float, always-bool, no opmath...), is not
restated here: it is read off torch's reference implementations (``torch._refs``), which carry
torch's elementwise type-promotion wrapper. Ops without such a reference keep their lowering's
own dtype handling.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch._refs
import torch._refs.nn.functional
import torch._refs.special
from torch._ops import OpOverload
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch._prims_common.wrappers import elementwise_type_promotion_wrapper


class Rule(NamedTuple):
    """Where the promoting arguments sit in the aten schema, and the promotion kind."""

    positions: tuple[int, ...]
    names: tuple[str, ...]  # the same arguments' aten names (for keyword calls)
    kind: ELEMENTWISE_TYPE_PROMOTION_KIND | None  # None: everything in the first operand's dtype


# aten overloads whose reference goes by another name.
_ALIASES = {
    torch.ops.aten.div.Tensor: "true_divide",
    torch.ops.aten.div.Scalar: "true_divide",
    # clamp(self, min) and clamp(self, max): the bound promotes with self as in clamp.
    torch.ops.aten.clamp_min.Tensor: "clamp",
    torch.ops.aten.clamp_min.default: "clamp",
    torch.ops.aten.clamp_max.Tensor: "clamp",
    torch.ops.aten.clamp_max.default: "clamp",
}
# aten overloads whose reference, and so whose promotion, depends on an argument's value: the
# argument's name and the reference for each value. (``div(rounding_mode=)`` dispatches to three
# references: true division promotes integers to float, the other two compute in the operands'
# common dtype, so ``-1 // uint8(255)`` divides 255 by 255.)
_BY_ARGUMENT: dict[OpOverload, tuple[str, dict[Any, str]]] = {
    op: ("rounding_mode", {None: "true_divide", "trunc": "trunc_divide", "floor": "floor_divide"})
    for op in (torch.ops.aten.div.Tensor_mode, torch.ops.aten.div.Scalar_mode)
}

_REF_MODULES = (torch._refs, torch._refs.special, torch._refs.nn.functional)


def _reference(name: str) -> Any:
    for module, prefix in ((torch._refs.special, "special_"), (torch._refs.nn.functional, "")):
        if name.startswith(prefix) and prefix and hasattr(module, name.removeprefix(prefix)):
            return getattr(module, name.removeprefix(prefix))
    for module in _REF_MODULES:
        ref = getattr(module, name, None)
        if callable(ref):
            return ref
    return None


def _wrapper_of(ref: Any) -> tuple[elementwise_type_promotion_wrapper, inspect.Signature] | None:
    """The promotion wrapper inside a reference's closures, with the signature it binds."""
    queue: list[Any] = [ref]
    seen: set[int] = set()
    while queue:
        fn = queue.pop(0)
        if id(fn) in seen or len(seen) > 64:
            continue
        seen.add(id(fn))
        cells = []
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:
                continue
        wrapper = next((c for c in cells if isinstance(c, elementwise_type_promotion_wrapper)), None)
        signature = next((c for c in cells if isinstance(c, inspect.Signature)), None)
        if wrapper is not None and signature is not None:
            return wrapper, signature
        queue.extend(c for c in cells if inspect.isfunction(c))
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is not None:
            queue.append(wrapped)
    return None


# Ops that convert a Scalar to their input's dtype without promoting (torch checks it fits, or
# wraps it with a C cast): their value arguments, computed in the dtype of ``self``.
_SELF_TYPED: dict[str, tuple[str, ...]] = {
    "masked_fill": ("value",),
    "index_fill": ("value",),
    "fill": ("value",),
}


def rule_for(op: OpOverload, kwargs: dict[str, Any]) -> Rule | None:
    """The promotion rule of one call of ``op`` (its keyword arguments may choose the reference)."""
    by_argument = _BY_ARGUMENT.get(op)
    if by_argument is None:
        return rule(op)
    argument, references = by_argument
    reference = references.get(kwargs.get(argument))
    return None if reference is None else rule(op, reference)


@functools.cache
def rule(op: OpOverload, reference: str | None = None) -> Rule | None:
    """The promotion rule of an aten overload (by its reference, or the one named), or None when
    torch has no elementwise reference for it."""
    namespace, _, name = op._schema.name.partition("::")
    if namespace == "aten" and name in _SELF_TYPED:
        args = [a for a in op._schema.arguments if not a.kwarg_only]
        wanted = ("self", *_SELF_TYPED[name])
        at = tuple(i for i, a in enumerate(args) if a.name in wanted)
        if len(at) == len(wanted) and at[0] == 0:
            return Rule(at, tuple(args[i].name for i in at), None)
        return None
    if namespace != "aten" or name.endswith("_") or not name:
        return None  # prims take operands already promoted; in-place ops record their functional twin
    name = reference or _ALIASES.get(op, name)
    ref = _reference(name)
    found = _wrapper_of(ref) if ref is not None else None
    if found is None:
        return None
    wrapper, signature = found
    schema_args = [a for a in op._schema.arguments if not a.kwarg_only]
    promoting = tuple(wrapper.type_promoting_arg_names or ())
    ref_params = list(signature.parameters)
    found_at = _by_position(promoting, ref_params, schema_args) or _by_name(promoting, schema_args)
    if found_at is None or any(not _is_operand(schema_args[i]) for i in found_at):
        return None  # the reference and the schema disagree: trust neither
    return Rule(found_at, tuple(schema_args[i].name for i in found_at), wrapper.type_promotion_kind)


def _by_position(
    promoting: tuple[str, ...], ref_params: list[str], schema_args: list[Any]
) -> tuple[int, ...] | None:
    """Where the reference's promoting parameters sit, when the schema lists its arguments in
    the reference's order."""
    at = []
    for ref_name in promoting:
        if ref_name not in ref_params or ref_params.index(ref_name) >= len(schema_args):
            return None
        at.append(ref_params.index(ref_name))
    return tuple(at)


def _by_name(promoting: tuple[str, ...], schema_args: list[Any]) -> tuple[int, ...] | None:
    """The schema's arguments that the reference promotes, matched by name (``self`` is the
    reference's ``a``): for an op that is a special case of its reference (``clamp_max``)."""
    names = [("a" if a.name == "self" else a.name) for a in schema_args]
    at = tuple(i for i, n in enumerate(names) if n in promoting)
    return at if at and at[0] == 0 else None


def _is_operand(arg: Any) -> bool:
    arg_type = str(arg.type)
    return "Tensor" in arg_type or "number" in arg_type


def _meta_args(operands: list[Any]) -> list[Any]:
    """Operands as ``elementwise_dtypes`` takes them: tensors on meta, numbers as they are."""
    present = [a for a in operands if a is not None]
    return [torch.empty(a[0], dtype=a[1], device="meta") if type(a) is tuple else a for a in present]


def compute_dtype(rule_: Rule, operands: list[Any]) -> torch.dtype | None:
    """Torch's computation dtype for ``operands``: each a ``(shape, dtype)`` pair for a tensor,
    a Python number for a wrapped number, or None for an absent optional argument."""
    args = _meta_args(operands)
    if not args:
        return None
    if rule_.kind is None:
        first = args[0]
        return first.dtype if isinstance(first, torch.Tensor) else None
    try:
        computation, _ = elementwise_dtypes(*args, type_promotion_kind=rule_.kind)
    except Exception:
        return None  # torch rejects the combination: the lowering (and eager) will say why
    return computation


def half_type(computation: torch.dtype, operands: list[Any]) -> torch.dtype | None:
    """The half type an op's tensors share when it computes in float32 as their opmath, else
    None."""
    tensors = [a[1] for a in operands if type(a) is tuple]
    if computation is not torch.float32 or not any(d in HALF for d in tensors):
        return None
    try:
        kind = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
        _, common = elementwise_dtypes(*_meta_args(operands), type_promotion_kind=kind)
    except Exception:
        return None
    return common if common in HALF else None


def half_common_dtype(computation: torch.dtype, operands: list[Any]) -> torch.dtype | None:
    """The half type an op's integer and bool tensors become before they widen to float32
    (``int16 == float16`` compares in float32 after both became float16), else None."""
    if not any(type(a) is tuple and not a[1].is_floating_point for a in operands):
        return None  # no integer or bool tensor to round on the way
    return half_type(computation, operands)


def half_rounding(value: int, half: torch.dtype) -> float | int:
    """An integer as eager's C cast makes it a half-type number (through float32, as c10's
    half types convert), returned as a float (the integer itself where it is exact)."""
    if not -(2**63) <= value < 2**63:
        rounded = float(torch.tensor(float(np.float32(value))).to(half))
    else:
        rounded = float(torch.tensor(value, dtype=torch.int64).to(half))
    return value if rounded == value else rounded


_INTEGRAL = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.uint16: np.uint16,
    torch.uint32: np.uint32,
    torch.uint64: np.uint64,
}


def python_number(value: Any, dtype: torch.dtype) -> Any:
    """A Python number as torch converts it to an integral computation dtype (a C cast that wraps:
    ``uint8`` sees ``-3`` as 253); numbers for floating dtypes are left to JAX's weak typing."""
    target = _INTEGRAL.get(dtype)
    if target is None or type(value) is float:
        return value
    if dtype is torch.bool:
        return bool(value)
    if type(value) is bool:
        return value
    if not -(2**63) <= value < 2**64:
        return value
    cast: np.ndarray = np.asarray(value, dtype=np.uint64 if value >= 2**63 else np.int64).astype(target)
    # A uint64 number past int64's range stays a numpy scalar: JAX reads a Python int as int64.
    return cast[()] if int(cast) >= 2**63 else int(cast)


HALF = (torch.bfloat16, torch.float16)
# Scalars with many bits below a half type's precision, and tensor values around and between
# them, so that a kernel that sees the scalar rounded gives other results than one that does not.
# (Two sets: one rounds up to a half type, the other down.)
_PROBE_SCALARS = ((1.1, -2.3, 0.37), (3.3333, 0.7, -1.7))


def _probe_tensor(shape: Sequence[int], dtype: torch.dtype, scalars: Sequence[float], k: int) -> torch.Tensor:
    """Values for a probe's ``k``-th tensor: many across a range (each tensor its own), and some
    at, around and at multiples of the scalars."""
    if not dtype.is_floating_point:
        return ((torch.arange(math.prod(shape)) + k) % 5).to(dtype).reshape(shape)
    if not shape:
        return torch.tensor(scalars[0] * (0.9 + 0.3 * k), dtype=dtype)
    near = torch.tensor([v * m for s in scalars for v in (s, s * 1.01, -s) for m in (0.5, 1, 2, 3, 5)])
    spread = torch.linspace(-5, 5, math.prod(shape) - len(near)) * (1 + 0.37 * k)
    return torch.cat([near, spread.roll(7 * k)]).to(dtype).reshape(shape)


def scalars_seen_rounded(
    call: Callable[[list[float], Callable[[Sequence[int], torch.dtype], torch.Tensor]], Any],
    count: int,
    half: torch.dtype,
) -> tuple[bool, ...]:
    """For each of a call's ``count`` float scalar arguments: whether eager's CPU kernel sees it
    rounded to ``half``, the dtype of its half-precision tensors, before computing in float32.

    Torch's kernels differ: most take a wrapped number in the tensors' dtype (an ``add`` of 1.1
    to a bfloat16 tensor adds 1.1015625), some read the scalar's original value in float32
    (``mul``, true ``div``, ``lerp``'s weight). Rather than keep a table, eager is asked:
    ``call(scalars, make_tensor)`` runs the op on small tensors, and a scalar is seen rounded
    when passing it already rounded changes nothing. A scalar that moves no result is taken as
    rounded (TensorIterator casts its inputs to their common dtype); one whose probe call fails
    keeps its original value, as before the probe."""
    def rounded(v: float) -> float:
        return float(torch.tensor(v, dtype=torch.float64).to(half).double())

    seen = []
    for k in range(count):
        same = True
        for probes in _PROBE_SCALARS:
            scalars = [probes[(k + j) % len(probes)] * (1 + 0.01 * j) for j in range(count)]
            scalars_r = list(scalars)
            scalars_r[k] = rounded(scalars[k])
            try:
                exact = _seeded(call, scalars, scalars)
                same = same and _same(exact, _seeded(call, scalars_r, scalars))
            except Exception:
                same = False
        seen.append(same)
    return tuple(seen)


def _seeded(call: Callable[..., Any], scalars: list[float], near: list[float]) -> Any:
    """One probe call with ``scalars``, on the tensors made around ``near`` (the same for both
    calls of a comparison), its random draws (a dropout's) the same every time, and the user's
    CPU random stream left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return call(scalars, _probe_tensors(near))


def _probe_tensors(scalars: Sequence[float]) -> Callable[[Sequence[int], torch.dtype], torch.Tensor]:
    """A maker of the probe's tensors, each call the next one, the same sequence every time."""
    count = itertools.count()
    return lambda shape, dtype: _probe_tensor(shape, dtype, scalars, next(count))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        if a.dtype.is_floating_point:
            return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
        return bool(torch.equal(a, b))
    return bool(a == b)
