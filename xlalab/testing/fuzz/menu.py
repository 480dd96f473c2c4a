"""The fuzzer's op menu: what each op renders to and how its arguments are drawn.

Every entry names an op by the Python call users write (``torch.add``, ``x[::2]``,
``x.add_``), which reaches the lowered aten ops underneath. An entry's ``draw`` picks
operands among the values a program has so far (``Value``: shape, dtype and two flags)
and draws the op's parameters; it returns None when no value suits the op.

Two flags keep the comparison honest without loosening it:

* ``exact``: the op computes the same bits on any correct backend when its inputs are
  exact (sign changes, additions of small dyadic numbers, copies, views...). Transcendentals,
  divisions and reductions in half precision are not exact: their results differ from
  eager's by an ulp or so, which the float tolerances absorb.
* ``discrete``: a tiny change of input can change the result completely (floor, comparisons,
  sort order, float-to-int casts). A discrete op only ever reads exact values: otherwise an
  ulp of legitimate difference would show up as a wrong integer.

IEEE 754 leaves the sign of a zero result open for max/min of 0.0 and -0.0, and eager's
own kernels differ between their vectorized and scalar paths: values coming out of those
ops (``SIGN_OF_ZERO_OPEN``) compare 0.0 equal to -0.0, and the ops that would expose the
sign (``READS_SIGN_OF_ZERO``: 1/x, atan2, signbit...) do not read them.

A float-to-int cast of NaN, infinity or an out-of-range value is undefined behaviour in
C++ (eager's result depends on the CPU): casts only read values that hold none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from .program import fmt, nested

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64")
DTYPES = ("bool", *INTS, *FLOATS)


@dataclass(frozen=True)
class Value:
    """What generation knows about one program value (from running the program eagerly)."""

    shape: tuple[int, ...]
    dtype: str
    exact: bool  # holds the same bits on eager and xla (see the module docstring)
    special: bool  # holds NaN, infinity or a value beyond int32's range
    requires_grad: bool
    writable: bool  # an in-place op may write it (not a leaf requiring grad, nor a view of one)
    contiguous: bool  # contiguous with storage offset 0 (as_strided addresses its own storage)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS


# (max/min over a dim read the value at the first maximal index, as eager does: not listed)
SIGN_OF_ZERO_OPEN = frozenset(
    {"maximum", "minimum", "fmax", "fmin", "amax", "amin", "max_all", "cummax", "clamp", "clamp_",
     "clamp_min", "clamp_max", "hardtanh", "relu",
     "topk", "topk_indices"}  # which of tied 0.0 and -0.0 topk picks is unspecified too
)  # fmt: skip
READS_SIGN_OF_ZERO = frozenset(
    {"reciprocal", "rsqrt", "div", "div_floor", "div_trunc", "floor_divide", "remainder", "fmod", "atan2",
     "copysign", "signbit", "pow", "xlogy"}
)  # fmt: skip

# Ops that pick one of several equal values in no specified order (their gradients then
# land on different elements): never drawn on tied values that require grad.
TIES_UNSPECIFIED = frozenset({"topk", "topk_indices"})
# Ops whose eager result at an infinity depends on eager's code path: gelu(inf) is inf for a
# 1-element float32 tensor and NaN for a longer one (the vectorized kernel). Not drawn on inf.
INFINITY_UNSPECIFIED = frozenset({"gelu"})

Draw = Callable[[st.SearchStrategy[Any]], Any]
Picked = tuple[tuple[int, ...], dict[str, Any]]


@dataclass(frozen=True)
class Op:
    name: str
    template: str  # operands are {a}, {b}, {c}; parameters by name; {out} for statements
    draw: Callable[[Draw, list[Value]], Picked | None]
    exact: bool = False
    discrete: bool = False
    n_out: int = 1
    inplace: bool = False  # writes its first operand


# ---------------------------------------------------------------------- drawing helpers


def pick(draw: Draw, env: list[Value], ok: Callable[[Value], bool]) -> int | None:
    """An index of a value satisfying ``ok``; the most recent ones first (shrinks to them)."""
    candidates = [k for k in reversed(range(len(env))) if ok(env[k])]
    if not candidates:
        return None
    return int(draw(st.sampled_from(candidates)))


def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def dim_of(draw: Draw, v: Value) -> int:
    """A dim of ``v``, negative ones included (0-d tensors take -1 and 0)."""
    n = max(v.ndim, 1)
    return int(draw(st.integers(-n, n - 1)))


NICE_FLOATS = (0.0, 1.0, -1.0, 2.0, 0.5, -0.5, -2.0, 3.0, -0.0, 0.25, -3.0, 1.5, 4.0, -7.5)
SPECIAL_FLOATS = (float("nan"), float("inf"), -float("inf"))


def python_scalar(draw: Draw, *, specials: bool = True) -> Any:
    """A Python number of any type: bool, int (negative ones too) or float."""
    floats = NICE_FLOATS + (SPECIAL_FLOATS if specials else ())
    return draw(
        st.one_of(
            st.sampled_from((1, -1, -2, 2, 0, 3, -3)),
            st.sampled_from(floats),
            st.booleans(),
        )
    )


def scalar_for(draw: Draw, v: Value) -> Any:
    """A Python number an in-place op on ``v`` may take (eager refuses a float into an int)."""
    if v.dtype == "bool":
        return draw(st.booleans())
    if v.dtype in INTS:
        lo = 0 if v.dtype == "uint8" else -3
        return draw(st.one_of(st.integers(lo, 3), st.booleans()))
    return python_scalar(draw)


def index_tensor(draw: Draw, size: int, shape: tuple[int, ...], *, negative: bool = True) -> dict[str, Any]:
    """An int64 index literal of ``shape`` with entries valid for a dim of ``size``."""
    lo = -size if negative else 0
    n = 1
    for s in shape:
        n *= s
    flat = [draw(st.integers(lo, size - 1)) for _ in range(n)]
    return {"tensor": nested(tuple(flat), shape), "dtype": "int64"}


# ---------------------------------------------------------------------- op families


def unary(ok: Callable[[Value], bool] = lambda v: True) -> Callable[[Draw, list[Value]], Picked | None]:
    def draw_unary(draw: Draw, env: list[Value]) -> Picked | None:
        a = pick(draw, env, ok)
        return None if a is None else ((a,), {})

    return draw_unary


def binary(draw: Draw, env: list[Value]) -> Picked | None:
    """Tensor op tensor (broadcasting), or tensor op Python scalar, or scalar op tensor."""
    a = pick(draw, env, lambda v: True)
    if a is None:
        return None
    form = draw(st.sampled_from(("tensor", "scalar", "rscalar")))
    if form == "tensor":
        b = pick(draw, env, lambda v: broadcastable(v.shape, env[a].shape))
        if b is not None:
            return (a, b), {}
    scalar = python_scalar(draw)
    return (a,), {"s": scalar, "swap": form == "rscalar"}


def reduction(
    *, dims: bool = True, keepdim: bool = True, ok: Callable[[Value], bool] = lambda v: True
) -> Callable[[Draw, list[Value]], Picked | None]:
    def draw_reduction(draw: Draw, env: list[Value]) -> Picked | None:
        a = pick(draw, env, ok)
        if a is None:
            return None
        params: dict[str, Any] = {"dim": dim_of(draw, env[a])}
        if dims and env[a].ndim >= 2 and draw(st.booleans()):
            params["dim"] = [params["dim"], (params["dim"] + 1) % env[a].ndim]
        if keepdim:
            params["keepdim"] = draw(st.booleans())
        return (a,), params

    return draw_reduction


def along_dim(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: True)
    return None if a is None else ((a,), {"dim": dim_of(draw, env[a])})


def softmax_like(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.is_float)
    if a is None:
        return None
    return (a,), {"dim": dim_of(draw, env[a])}


def draw_clamp(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.dtype != "bool")
    if a is None:
        return None
    lo = draw(st.one_of(st.none(), st.sampled_from((-1, -2, 0, 1, -0.5, 0.5, 2.5, -1.0))))
    hi = draw(st.one_of(st.none(), st.sampled_from((1, 2, 0, 3, 0.5, 1.5, -1, 2.0))))
    if lo is None and hi is None:
        lo = -1
    return (a,), {"min": lo, "max": hi}


def draw_where(draw: Draw, env: list[Value]) -> Picked | None:
    c = pick(draw, env, lambda v: v.dtype == "bool")
    if c is None:
        return None
    a = pick(draw, env, lambda v: broadcastable(v.shape, env[c].shape))
    if a is None:
        return None
    if draw(st.booleans()):
        b = pick(
            draw, env, lambda v: broadcastable(v.shape, env[c].shape) and broadcastable(v.shape, env[a].shape)
        )
        if b is not None:
            return (c, a, b), {}
    return (c, a), {"s": python_scalar(draw)}


def draw_matmul(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim in (1, 2) and v.dtype != "bool")
    if a is None:
        return None
    va = env[a]
    inner = va.shape[-1]

    def fits(v: Value) -> bool:
        return v.ndim in (1, 2) and v.shape[0] == inner and v.dtype == va.dtype

    b = pick(draw, env, fits)
    if b is None:
        return (a,), {"self_t": "mT" if va.ndim == 2 else "same"}
    return (a, b), {}


def draw_cat(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1)
    if a is None:
        return None
    va = env[a]
    dim = dim_of(draw, va)
    d = dim % va.ndim

    def fits(v: Value) -> bool:
        return v.ndim == va.ndim and all(x == y for k, (x, y) in enumerate(zip(v.shape, va.shape)) if k != d)

    b = pick(draw, env, fits)
    return (a, a if b is None else b), {"dim": dim}


def draw_stack(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: True)
    if a is None:
        return None
    b = pick(draw, env, lambda v: v.shape == env[a].shape)
    n = env[a].ndim + 1
    return (a, a if b is None else b), {"dim": int(draw(st.integers(-n, n - 1)))}


def draw_sort(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.dtype != "bool")
    if a is None:
        return None
    return (a,), {"dim": dim_of(draw, env[a]), "descending": draw(st.booleans())}


def draw_topk(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.dtype != "bool")
    if a is None:
        return None
    dim = dim_of(draw, env[a])
    size = env[a].shape[dim] if env[a].ndim else 1
    k = int(draw(st.integers(0, size)))
    return (a,), {"k": k, "dim": dim, "largest": draw(st.booleans())}


def draw_max_dim(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: True)
    if a is None:
        return None
    return (a,), {"dim": dim_of(draw, env[a]), "keepdim": draw(st.booleans())}


def draw_cast(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: True)
    if a is None:
        return None
    va = env[a]
    targets = ["bool", *FLOATS, *INTS]
    if va.is_float:
        # Float-to-int conversion of NaN, infinity or an out-of-range value is undefined in
        # C++ (eager's result depends on the CPU); only the well-defined cases are drawn.
        targets = ["bool", *FLOATS] + (["int32", "int64"] if not va.special else [])
    return (a,), {"dtype": {"dtype": draw(st.sampled_from(targets))}}


def draw_index_select(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1 and all(s > 0 for s in v.shape))
    if a is None:
        return None
    dim = dim_of(draw, env[a])
    n = int(draw(st.integers(0, 3)))
    return (a,), {"dim": dim, "index": index_tensor(draw, env[a].shape[dim], (n,), negative=False)}


def draw_advanced_index(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1 and v.shape[0] > 0)
    if a is None:
        return None
    n = int(draw(st.integers(1, 3)))
    return (a,), {"index": index_tensor(draw, env[a].shape[0], (n,))}


def draw_gather(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1 and all(s > 0 for s in v.shape))
    if a is None:
        return None
    va = env[a]
    dim = dim_of(draw, va) % va.ndim
    shape = tuple(
        int(draw(st.integers(1, s))) if k != dim else int(draw(st.integers(1, 3)))
        for k, s in enumerate(va.shape)
    )
    return (a,), {"dim": dim, "index": index_tensor(draw, va.shape[dim], shape, negative=False)}


def draw_masked_fill(draw: Draw, env: list[Value]) -> Picked | None:
    m = pick(draw, env, lambda v: v.dtype == "bool")
    if m is None:
        return None
    a = pick(draw, env, lambda v: broadcastable(v.shape, env[m].shape) and len(v.shape) >= len(env[m].shape))
    if a is None:
        return None
    return (a, m), {"s": scalar_for(draw, env[a])}


# ---------------------------------------------------------------------- views


def draw_slice(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1)
    if a is None:
        return None
    va = env[a]
    dim = int(draw(st.integers(0, va.ndim - 1)))
    size = va.shape[dim]
    start = int(draw(st.integers(-size - 1, size)))
    stop = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
    step = int(draw(st.integers(1, 3)))
    return (a,), {"axis": dim, "start": start, "stop": stop, "step": step}


def draw_transpose(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: True)
    if a is None:
        return None
    return (a,), {"d0": dim_of(draw, env[a]), "d1": dim_of(draw, env[a])}


def draw_expand(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: (v.ndim <= 2 and 1 in v.shape) or v.ndim == 0)
    if a is None:
        return None
    shape = [int(draw(st.integers(1, 3))) if s == 1 else -1 for s in env[a].shape]
    if draw(st.booleans()):
        shape = [int(draw(st.integers(1, 3))), *shape]
    return (a,), {"size": shape}


def draw_as_strided(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.contiguous and v.ndim >= 1)
    if a is None:
        return None
    numel = 1
    for s in env[a].shape:
        numel *= s
    if numel == 0:
        return None
    rows = int(draw(st.integers(1, 3)))
    cols = int(draw(st.integers(1, 3)))
    rs = int(draw(st.integers(0, 3)))
    cs = int(draw(st.integers(0, 2)))
    span = (rows - 1) * rs + (cols - 1) * cs
    if span >= numel:
        return None
    offset = int(draw(st.integers(0, numel - 1 - span)))
    return (a,), {"size": [rows, cols], "stride": [rs, cs], "offset": offset}


def draw_narrow(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1)
    if a is None:
        return None
    dim = dim_of(draw, env[a])
    size = env[a].shape[dim]
    start = int(draw(st.integers(0, size)))
    return (a,), {"dim": dim, "start": start, "length": int(draw(st.integers(0, size - start)))}


def draw_select(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1 and all(s > 0 for s in v.shape))
    if a is None:
        return None
    dim = dim_of(draw, env[a])
    size = env[a].shape[dim]
    return (a,), {"dim": dim, "index": int(draw(st.integers(-size, size - 1)))}


def draw_permute(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 2)
    if a is None:
        return None
    order = draw(st.permutations(range(env[a].ndim)))
    # negative dims in the permutation too: torch wraps them
    return (a,), {"dims": [d - env[a].ndim if draw(st.booleans()) else d for d in order]}


def draw_flip(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1)
    return None if a is None else ((a,), {"dims": [dim_of(draw, env[a])]})


def draw_roll(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1)
    if a is None:
        return None
    return (a,), {"shifts": int(draw(st.integers(-3, 3))), "dim": dim_of(draw, env[a])}


def draw_diagonal(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 2)
    if a is None:
        return None
    return (a,), {"offset": int(draw(st.integers(-2, 2)))}


def draw_repeat(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim <= 2)
    if a is None:
        return None
    n = max(env[a].ndim, int(draw(st.integers(1, 2))))
    return (a,), {"sizes": [int(draw(st.integers(1, 2))) for _ in range(n)]}


def draw_scatter_add(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1 and all(s > 0 for s in v.shape) and v.dtype != "bool")
    if a is None:
        return None
    va = env[a]
    dim = dim_of(draw, va) % va.ndim
    shape = tuple(int(draw(st.integers(1, s))) for s in va.shape)
    src = pick(draw, env, lambda v: v.shape == shape and v.dtype == va.dtype)
    if src is None:
        return None
    return (a, src), {"dim": dim, "index": index_tensor(draw, va.shape[dim], shape, negative=False)}


def draw_index_add(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 1 and all(s > 0 for s in v.shape) and v.dtype != "bool")
    if a is None:
        return None
    va = env[a]
    dim = dim_of(draw, va) % va.ndim

    def fits(v: Value) -> bool:
        same = all(x == y for k, (x, y) in enumerate(zip(v.shape, va.shape)) if k != dim)
        return v.ndim == va.ndim and v.dtype == va.dtype and same and 0 < v.shape[dim] <= 3

    src = pick(draw, env, fits)
    if src is None:
        return None
    n = env[src].shape[dim]
    return (a, src), {"dim": dim, "index": index_tensor(draw, va.shape[dim], (n,), negative=False)}


def draw_lerp(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.is_float)
    if a is None:
        return None
    b = pick(draw, env, lambda v: v.dtype == env[a].dtype and broadcastable(v.shape, env[a].shape))
    if b is None:
        return None
    return (a, b), {"w": draw(st.sampled_from((0.25, 0.5, 1.0, -0.5, 2.0)))}


def draw_addcmul(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.dtype != "bool")
    if a is None:
        return None
    b = pick(draw, env, lambda v: broadcastable(v.shape, env[a].shape))
    c = pick(draw, env, lambda v: broadcastable(v.shape, env[a].shape))
    if b is None or c is None:
        return None
    return (a, b, c), {"value": draw(st.sampled_from((1, -1, 2, 0.5, -2.0)))}


def draw_tril(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim >= 2)
    if a is None:
        return None
    return (a,), {"diagonal": int(draw(st.integers(-2, 2)))}


def draw_unsqueeze(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.ndim < 3)
    if a is None:
        return None
    n = env[a].ndim + 1
    return (a,), {"dim": int(draw(st.integers(-n, n - 1)))}


# ---------------------------------------------------------------------- in place


def draw_inplace_scalar(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.writable and v.dtype != "bool")
    if a is None:
        return None
    return (a,), {"s": scalar_for(draw, env[a])}


def draw_inplace_tensor(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.writable)
    if a is None:
        return None
    target = env[a]

    def fits(v: Value) -> bool:
        return (
            broadcastable(v.shape, target.shape)
            and len(v.shape) <= len(target.shape)
            and cast_defined(v, target)
        )

    b = pick(draw, env, fits)
    return None if b is None else ((a, b), {})


def cast_defined(src: Value, dst: Value) -> bool:
    """Whether casting ``src`` to ``dst``'s dtype (``to``, or ``copy_`` into ``dst``) has a defined
    result in C++.

    Float to int of NaN, infinity or an out-of-range value is undefined (see draw_cast);
    so is a negative float into an unsigned or narrow int: only int32/int64 of tame floats,
    and only exact ones (truncation is discrete, like any float-to-int cast).
    """
    if not src.is_float or dst.is_float or dst.dtype == "bool":
        return True
    return dst.dtype in ("int32", "int64") and not src.special and src.exact


def draw_fill(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.writable)
    if a is None:
        return None
    return (a,), {"s": scalar_for(draw, env[a])}


def draw_setitem(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.writable and v.ndim >= 1 and v.shape[0] > 0)
    if a is None:
        return None
    size = env[a].shape[0]
    return (a,), {"i": int(draw(st.integers(-size, size - 1))), "s": scalar_for(draw, env[a])}


def draw_index_put(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, lambda v: v.writable and v.ndim >= 1 and v.shape[0] > 0)
    if a is None:
        return None
    n = int(draw(st.integers(1, 2)))
    return (a,), {"index": index_tensor(draw, env[a].shape[0], (n,)), "s": scalar_for(draw, env[a])}


# Control flow: the branches and loop bodies are drawn from these exact maps of one operand
# ``t`` to a tensor of its shape and dtype (a branch may not return its operand itself).
BODIES = ("t + 1", "t * 2", "-t", "t.abs()", "t * t", "t - t.flip(0)", "torch.zeros_like(t)")


def _control_flow_operand(v: Value) -> bool:
    numeric = v.dtype not in ("bool", "uint8")
    return numeric and v.exact and not v.special and v.ndim >= 1 and v.shape[0] > 0


def draw_cond(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, _control_flow_operand)
    if a is None:
        return None
    return (a,), {"yes": draw(st.sampled_from(BODIES)), "no": draw(st.sampled_from(BODIES))}


def draw_while(draw: Draw, env: list[Value]) -> Picked | None:
    # torch's while_loop has no gradient
    a = pick(draw, env, lambda v: _control_flow_operand(v) and not v.requires_grad)
    if a is None:
        return None
    return (a,), {"body": draw(st.sampled_from(BODIES)), "n": draw(st.integers(0, 3))}


def draw_scan(draw: Draw, env: list[Value]) -> Picked | None:
    a = pick(draw, env, _control_flow_operand)
    return None if a is None else ((a,), {"body": draw(st.sampled_from(BODIES))})


def not_bool(v: Value) -> bool:
    return v.dtype != "bool"


def is_float(v: Value) -> bool:
    return v.is_float


def int_or_bool(v: Value) -> bool:
    return not v.is_float


MENU: tuple[Op, ...] = (
    # unary elementwise
    Op("abs", "torch.abs({a})", unary(not_bool), exact=True),
    Op("neg", "torch.neg({a})", unary(not_bool), exact=True),
    Op("exp", "torch.exp({a})", unary()),
    Op("log", "torch.log({a})", unary()),
    Op("sqrt", "torch.sqrt({a})", unary()),
    Op("rsqrt", "torch.rsqrt({a})", unary()),
    Op("reciprocal", "torch.reciprocal({a})", unary()),
    Op("sin", "torch.sin({a})", unary()),
    Op("tanh", "torch.tanh({a})", unary()),
    Op("sigmoid", "torch.sigmoid({a})", unary()),
    Op("expm1", "torch.expm1({a})", unary()),
    Op("log1p", "torch.log1p({a})", unary()),
    Op("erf", "torch.erf({a})", unary()),
    Op("floor", "torch.floor({a})", unary(not_bool), exact=True, discrete=True),
    Op("ceil", "torch.ceil({a})", unary(not_bool), exact=True, discrete=True),
    Op("round", "torch.round({a})", unary(not_bool), exact=True, discrete=True),
    Op("trunc", "torch.trunc({a})", unary(not_bool), exact=True, discrete=True),
    Op("frac", "torch.frac({a})", unary(is_float), exact=True, discrete=True),
    Op("sign", "torch.sign({a})", unary(), exact=True, discrete=True),
    Op("square", "torch.square({a})", unary(), exact=True),
    Op("relu", "torch.relu({a})", unary(not_bool), exact=True),
    Op("gelu", "torch.nn.functional.gelu({a})", unary(is_float)),
    Op("silu", "torch.nn.functional.silu({a})", unary(is_float)),
    Op("softplus", "torch.nn.functional.softplus({a})", unary(is_float)),
    Op("leaky_relu", "torch.nn.functional.leaky_relu({a}, 0.25)", unary(is_float), exact=True),
    Op("hardtanh", "torch.nn.functional.hardtanh({a})", unary(is_float), exact=True),
    Op("isnan", "torch.isnan({a})", unary(), exact=True),
    Op("isinf", "torch.isinf({a})", unary(), exact=True, discrete=True),
    Op("signbit", "torch.signbit({a})", unary(not_bool), exact=True, discrete=True),
    Op("logical_not", "torch.logical_not({a})", unary(), exact=True, discrete=True),
    Op("bitwise_not", "torch.bitwise_not({a})", unary(int_or_bool), exact=True),
    Op("nan_to_num", "torch.nan_to_num({a})", unary(), exact=True),
    # binary elementwise: tensor, tensor-scalar or scalar-tensor
    Op("add", "torch.add({x}, {y})", binary, exact=True),
    Op("add_alpha", "torch.add({x}, {y}, alpha=2)", binary, exact=True),
    Op("sub", "torch.sub({x}, {y})", binary, exact=True),
    Op("mul", "torch.mul({x}, {y})", binary, exact=True),
    Op("div", "torch.div({x}, {y})", binary),
    Op("div_floor", "torch.div({x}, {y}, rounding_mode='floor')", binary, exact=True, discrete=True),
    Op("div_trunc", "torch.div({x}, {y}, rounding_mode='trunc')", binary, exact=True, discrete=True),
    Op("floor_divide", "torch.floor_divide({x}, {y})", binary, exact=True, discrete=True),
    Op("remainder", "torch.remainder({x}, {y})", binary, exact=True, discrete=True),
    Op("fmod", "torch.fmod({x}, {y})", binary, exact=True, discrete=True),
    Op("pow", "torch.pow({x}, {y})", binary),
    Op("atan2", "torch.atan2({x}, {y})", binary),
    Op("maximum", "torch.maximum({x}, {y})", binary, exact=True),
    Op("minimum", "torch.minimum({x}, {y})", binary, exact=True),
    Op("fmax", "torch.fmax({x}, {y})", binary, exact=True),
    Op("fmin", "torch.fmin({x}, {y})", binary, exact=True),
    Op("clamp_min", "torch.clamp_min({x}, {y})", binary, exact=True),
    Op("clamp_max", "torch.clamp_max({x}, {y})", binary, exact=True),
    Op("eq", "torch.eq({x}, {y})", binary, exact=True, discrete=True),
    Op("ne", "torch.ne({x}, {y})", binary, exact=True, discrete=True),
    Op("lt", "torch.lt({x}, {y})", binary, exact=True, discrete=True),
    Op("le", "torch.le({x}, {y})", binary, exact=True, discrete=True),
    Op("gt", "torch.gt({x}, {y})", binary, exact=True, discrete=True),
    Op("ge", "torch.ge({x}, {y})", binary, exact=True, discrete=True),
    Op("logical_and", "torch.logical_and({x}, {y})", binary, exact=True, discrete=True),
    Op("logical_or", "torch.logical_or({x}, {y})", binary, exact=True, discrete=True),
    Op("bitwise_and", "torch.bitwise_and({x}, {y})", binary, exact=True),
    Op("bitwise_xor", "torch.bitwise_xor({x}, {y})", binary, exact=True),
    Op("xlogy", "torch.xlogy({x}, {y})", binary),
    Op("copysign", "torch.copysign({x}, {y})", binary, exact=True),
    Op("hypot", "torch.hypot({x}, {y})", binary),
    Op("where", "torch.where({a}, {b}, {c})", draw_where, exact=True),
    Op("clamp", "torch.clamp({a}, min={min}, max={max})", draw_clamp, exact=True),
    # reductions
    Op("sum", "torch.sum({a}, dim={dim}, keepdim={keepdim})", reduction()),
    Op("sum_all", "torch.sum({a})", unary()),
    Op("mean", "torch.mean({a}, dim={dim}, keepdim={keepdim})", reduction()),
    # prod's gradient at a NaN or an infinity is autograd's zero-safe formula for any tensor
    # subclass, not eager's (docs/runtime.md, Known limits): not drawn on such values needing one.
    Op(
        "prod",
        "torch.prod({a}, dim={dim}, keepdim={keepdim})",
        reduction(dims=False, ok=lambda v: not (v.special and v.requires_grad)),
    ),
    Op("amax", "torch.amax({a}, dim={dim}, keepdim={keepdim})", reduction(), exact=True),
    Op("amin", "torch.amin({a}, dim={dim}, keepdim={keepdim})", reduction(), exact=True),
    Op(
        "max_dim",
        "torch.max({a}, dim={dim}, keepdim={keepdim})",
        draw_max_dim,
        exact=True,
        discrete=True,
        n_out=2,
    ),
    Op(
        "min_dim",
        "torch.min({a}, dim={dim}, keepdim={keepdim})",
        draw_max_dim,
        exact=True,
        discrete=True,
        n_out=2,
    ),
    Op("argmax", "torch.argmax({a}, dim={dim}, keepdim={keepdim})", draw_max_dim, exact=True, discrete=True),
    Op(
        "any",
        "torch.any({a}, dim={dim}, keepdim={keepdim})",
        reduction(dims=False),
        exact=True,
        discrete=True,
    ),
    Op(
        "all",
        "torch.all({a}, dim={dim}, keepdim={keepdim})",
        reduction(dims=False),
        exact=True,
        discrete=True,
    ),
    Op("std", "torch.std({a}, dim={dim}, keepdim={keepdim})", reduction()),
    Op("var", "torch.var({a}, dim={dim}, keepdim={keepdim}, correction=0)", reduction()),
    Op("logsumexp", "torch.logsumexp({a}, dim={dim}, keepdim={keepdim})", reduction()),
    Op("count_nonzero", "torch.count_nonzero({a}, dim={dim})", along_dim, exact=True, discrete=True),
    Op("softmax", "torch.softmax({a}, dim={dim})", softmax_like),
    Op("log_softmax", "torch.log_softmax({a}, dim={dim})", softmax_like),
    Op("cumsum", "torch.cumsum({a}, dim={dim})", along_dim),
    Op("cumprod", "torch.cumprod({a}, dim={dim})", along_dim),
    Op(
        "sort",
        "torch.sort({a}, dim={dim}, descending={descending}, stable=True)",
        draw_sort,
        exact=True,
        discrete=True,
        n_out=2,
    ),
    # eager breaks ties between equal values in no specified order: indices are checked by
    # reading the values they point at
    Op(
        "topk",
        "torch.topk({a}, {k}, dim={dim}, largest={largest}).values",
        draw_topk,
        exact=True,
        discrete=True,
    ),
    Op(
        "topk_indices",
        "torch.gather({a}, {dim}, torch.topk({a}, {k}, dim={dim}, largest={largest}).indices)",
        draw_topk,
        exact=True,
        discrete=True,
    ),
    # linear algebra, joins, indexing, casts
    Op("matmul", "torch.matmul({a}, {b})", draw_matmul),
    Op("cat", "torch.cat([{a}, {b}], dim={dim})", draw_cat, exact=True),
    Op("stack", "torch.stack([{a}, {b}], dim={dim})", draw_stack, exact=True),
    Op("index_select", "torch.index_select({a}, {dim}, {index})", draw_index_select, exact=True),
    Op("index", "{a}[{index}]", draw_advanced_index, exact=True),
    Op("gather", "torch.gather({a}, {dim}, {index})", draw_gather, exact=True),
    Op("scatter_add", "torch.scatter_add({a}, {dim}, {index}, {b})", draw_scatter_add, exact=True),
    Op("index_add", "torch.index_add({a}, {dim}, {index}, {b})", draw_index_add, exact=True),
    Op("lerp", "torch.lerp({a}, {b}, {w})", draw_lerp),
    Op("addcmul", "torch.addcmul({a}, {b}, {c}, value={value})", draw_addcmul),
    Op("max_all", "torch.max({a})", unary(), exact=True),
    Op("argmin", "torch.argmin({a}, dim={dim}, keepdim={keepdim})", draw_max_dim, exact=True, discrete=True),
    Op("cummax", "torch.cummax({a}, {dim})", along_dim, exact=True, discrete=True, n_out=2),
    Op("bitwise_or", "torch.bitwise_or({x}, {y})", binary, exact=True),
    Op("logical_xor", "torch.logical_xor({x}, {y})", binary, exact=True, discrete=True),
    Op("elu", "torch.nn.functional.elu({a})", unary(is_float)),
    Op("mse_loss", "torch.nn.functional.mse_loss({a}, {b})", draw_lerp),
    Op("masked_fill", "torch.masked_fill({a}, {b}, {s})", draw_masked_fill, exact=True),
    Op("to", "{a}.to({dtype})", draw_cast, exact=True, discrete=True),
    # views
    Op("slice", "{a}[{axis}{start}:{stop}:{step}]", draw_slice, exact=True),
    Op("transpose", "{a}.transpose({d0}, {d1})", draw_transpose, exact=True),
    Op("expand", "{a}.expand({size})", draw_expand, exact=True),
    Op("as_strided", "{a}.as_strided({size}, {stride}, {offset})", draw_as_strided, exact=True),
    Op("narrow", "{a}.narrow({dim}, {start}, {length})", draw_narrow, exact=True),
    Op("select", "{a}.select({dim}, {index})", draw_select, exact=True),
    Op("unsqueeze", "{a}.unsqueeze({dim})", draw_unsqueeze, exact=True),
    Op("flatten", "{a}.reshape(-1)", unary(), exact=True),
    Op("contiguous", "{a}.contiguous()", unary(), exact=True),
    Op("clone", "{a}.clone()", unary(), exact=True),
    Op("detach", "{a}.detach()", unary(), exact=True),  # an alias: writes reach the original
    Op("t", "{a}.t()", unary(lambda v: v.ndim <= 2), exact=True),
    Op("permute", "{a}.permute({dims})", draw_permute, exact=True),
    Op("squeeze", "{a}.squeeze()", unary(), exact=True),
    Op("diagonal", "{a}.diagonal({offset})", draw_diagonal, exact=True),
    Op("flip", "torch.flip({a}, {dims})", draw_flip, exact=True),
    Op("roll", "torch.roll({a}, {shifts}, {dim})", draw_roll, exact=True),
    Op("repeat", "{a}.repeat({sizes})", draw_repeat, exact=True),
    Op("tril", "torch.tril({a}, {diagonal})", draw_tril, exact=True),
    Op("triu", "torch.triu({a}, {diagonal})", draw_tril, exact=True),
    # in place, through views and aliases
    Op("add_", "{a}.add_({s})", draw_inplace_scalar, exact=True, inplace=True),
    Op("mul_", "{a}.mul_({s})", draw_inplace_scalar, exact=True, inplace=True),
    Op("add_tensor_", "{a}.add_({b})", draw_inplace_tensor, exact=True, inplace=True),
    Op("copy_", "{a}.copy_({b})", draw_inplace_tensor, exact=True, inplace=True),
    Op("fill_", "{a}.fill_({s})", draw_fill, exact=True, inplace=True),
    Op("zero_", "{a}.zero_()", unary(lambda v: v.writable), exact=True, inplace=True),
    Op("clamp_", "{a}.clamp_(min={min}, max={max})", draw_clamp, exact=True, inplace=True),
    Op("masked_fill_", "{a}.masked_fill_({b}, {s})", draw_masked_fill, exact=True, inplace=True),
    Op("setitem", "{a}[{i}] = {s}\n{out} = {a}", draw_setitem, exact=True, inplace=True),
    Op("index_put_", "{a}[{index}] = {s}\n{out} = {a}", draw_index_put, exact=True, inplace=True),
    # control flow: a data-dependent branch, a counted loop, a scan over dim 0
    Op("cond", "torch.cond(({a} > 0).any(), lambda t: {yes}, lambda t: {no}, ({a},))", draw_cond,
       exact=True, discrete=True),
    Op("while_loop", "torch._higher_order_ops.while_loop(lambda i, t: i < {n}, lambda i, t: (i + 1, {body}), "
       "(torch.tensor(0, device=dev), {a}))[1]", draw_while, exact=True),
    Op("scan", "torch._higher_order_ops.scan(lambda c, t: (c + t, {body}), {a}[0] * 0, {a})", draw_scan,
       exact=True, n_out=2),
)

BY_NAME: dict[str, Op] = {op.name: op for op in MENU}


def render(op: Op, args: tuple[int, ...], params: dict[str, Any], outs: list[str]) -> list[str]:
    """The source lines of one step."""
    names = [f"v{k}" for k in args]
    fields: dict[str, str] = {"a": names[0]}
    if len(names) > 1:
        fields["b"] = names[1]
    if len(names) > 2:
        fields["c"] = names[2]
    if op.draw is binary:
        # tensor op tensor, tensor op Python number, or a 0-d tensor op tensor
        if len(names) > 1:
            fields["x"], fields["y"] = names[0], names[1]
        elif params.get("swap"):
            fields["x"], fields["y"] = f"torch.tensor({fmt(params['s'])}, device=dev)", names[0]
        else:
            fields["x"], fields["y"] = names[0], fmt(params["s"])
    elif op.name == "where" and len(names) == 2:
        fields["c"] = fmt(params["s"])
    elif op.name == "matmul" and len(names) == 1:
        # no operand fits: the operand with itself (transposed when it is a matrix)
        fields["b"] = names[0] + (".mT" if params["self_t"] == "mT" else "")
    for key, value in params.items():
        if key in ("swap", "self_t"):
            continue
        # a branch or loop body is source, not a value
        fields[key] = value if key in ("yes", "no", "body") else fmt(value)
    if op.name == "slice":  # x[:, :, start:stop:step] slices dim "axis"
        fields["axis"] = ":, " * params["axis"]
        if params["stop"] is None:
            fields["stop"] = ""
    target = ", ".join(outs)
    fields["out"] = target
    text = op.template.format(**fields)
    if "{out}" in op.template:
        return text.split("\n")
    return [f"{target} = {text}"]
