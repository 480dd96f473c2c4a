"""Lowering bugs the differential fuzzer and issue reports found, each pinned by a test.

Every case runs the same function on eager CPU and on xla:0 and requires the same shape,
dtype and values (NaN positions and the sign of zero included; half precision within its
rounding).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

import xlalab

Program = Callable[[torch.device], torch.Tensor | tuple[torch.Tensor, ...]]
NAN = float("nan")


def _assert_same(program: Program, *, rtol: float = 0.0, atol: float = 0.0) -> None:
    eager = program(torch.device("cpu"))
    lazy = program(xlalab.device())
    eager_t = eager if isinstance(eager, tuple) else (eager,)
    lazy_t = lazy if isinstance(lazy, tuple) else (lazy,)
    assert len(eager_t) == len(lazy_t)
    for e, x in zip(eager_t, lazy_t):
        x = x.cpu()
        assert x.shape == e.shape and x.dtype == e.dtype, (x, e)
        torch.testing.assert_close(x, e, rtol=rtol, atol=atol, equal_nan=True)
        if e.dtype.is_floating_point:
            zeros = e == 0
            assert torch.equal(x[zeros].signbit(), e[zeros].signbit()), f"sign of zero: xla {x}, eager {e}"


WITH_NAN = [[3.0, NAN, -1.0, 2.0, NAN], [NAN, 0.5, 1.5, -2.0, 7.0]]


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [-1, 0])
def test_sort_orders_nan_as_largest(dim: int, descending: bool) -> None:
    _assert_same(
        lambda d: torch.sort(torch.tensor(WITH_NAN, device=d), dim=dim, descending=descending, stable=True)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_orders_nan_as_largest(largest: bool, dtype: torch.dtype) -> None:
    _assert_same(
        lambda d: torch.topk(torch.tensor(WITH_NAN, device=d, dtype=dtype), 3, dim=1, largest=largest)
    )


def test_topk_with_nan_and_infinities_along_dim_0() -> None:
    values = [[NAN, float("inf")], [-float("inf"), NAN], [1.0, 2.0]]
    _assert_same(lambda d: torch.topk(torch.tensor(values, device=d), 2, dim=0))


def test_xlogy_of_a_negative_number_is_nan() -> None:
    x = [2.0, 0.0, -1.5, NAN, 1.0]
    _assert_same(lambda d: torch.xlogy(torch.tensor(x, device=d), -3))
    _assert_same(
        lambda d: torch.xlogy(torch.tensor(x, device=d), torch.tensor([-3.0, -3.0, 0.0, 1.0, NAN], device=d))
    )
    _assert_same(lambda d: torch.xlogy(2, torch.tensor([-3.0, 0.0, 4.0], device=d)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_floor_division_of_negatives_keeps_eagers_zero_sign(dtype: torch.dtype) -> None:
    a = [-0.5, -7.5, -1.0, 0.5, -0.0, 0.0, 3.0]
    b = [-3.0, -2.0, -4.0, -3.0, -2.0, -1.0, 4.0]

    def program(d: torch.device) -> tuple[torch.Tensor, ...]:
        x, y = torch.tensor(a, device=d, dtype=dtype), torch.tensor(b, device=d, dtype=dtype)
        return x // y, torch.div(x, y, rounding_mode="floor"), torch.floor_divide(x, -3.0), x // -0.5

    _assert_same(program)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_half_precision_softmax_computes_in_float32(
    fn: Callable[..., torch.Tensor], dtype: torch.dtype
) -> None:
    # (no result below float32's smallest normal number: XLA on CPU flushes subnormals to zero)
    values = [[-51.25, 0.0, 3.5, -7.0], [100.0, 99.5, -0.0, 30.0]]
    # Eager's exp and XLA's differ in float32's last bit, which can move the rounded half
    # result by one unit in its last place: that much, no more.
    one_ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
    _assert_same(lambda d: fn(torch.tensor(values, device=d, dtype=dtype), -1), rtol=one_ulp, atol=0)
    _assert_same(lambda d: fn(torch.tensor(values, device=d, dtype=dtype), 0), rtol=one_ulp, atol=0)


@pytest.mark.parametrize("shape,dim", [((0,), 0), ((2, 0), -1), ((0, 3), 0), ((0, 3), 1)])
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_of_an_empty_tensor(
    fn: Callable[..., torch.Tensor], shape: tuple[int, ...], dim: int
) -> None:
    _assert_same(lambda d: fn(torch.ones(shape, device=d), dim))


def test_max_over_dim_with_a_signed_zero_tie_matches_eager() -> None:
    values = [[-0.5, -0.0, 0.0, 0.0, -0.5], [0.0, -0.0, -1.0, -3.0, -0.0]]
    _assert_same(lambda d: torch.max(torch.tensor(values, device=d), dim=1))


def test_log_of_an_overflowing_exp_is_inf() -> None:
    # XLA would simplify log(exp(x)) to x; eager's exp overflows first.
    _assert_same(lambda d: torch.log(torch.exp(torch.tensor([148.5, -1.0, 2.0, 89.0], device=d))))


def test_elu_gradient_at_nan_takes_the_linear_branch() -> None:
    def program(d: torch.device) -> tuple[torch.Tensor, ...]:
        x = torch.tensor([-1.0, 0.0, NAN, 2.0], device=d, dtype=torch.float64, requires_grad=True)
        y = torch.nn.functional.elu(x)
        y.sum().backward()
        assert x.grad is not None
        return y.detach(), x.grad

    _assert_same(program, rtol=1e-12)


REFUSED: dict[str, Callable[[torch.device], object]] = {
    "fmod_bool": lambda d: torch.fmod(torch.tensor([True, False], device=d), True),
    "remainder_bool": lambda d: torch.remainder(
        torch.tensor([True], device=d), torch.tensor([True], device=d)
    ),
    "floor_divide_bool": lambda d: torch.floor_divide(
        torch.tensor([True], device=d), torch.tensor([True], device=d)
    ),
    "argmax_bool": lambda d: torch.argmax(torch.tensor([True, False], device=d)),
    "argmin_bool": lambda d: torch.argmin(torch.tensor([True, False], device=d), dim=0),
    "topk_bool": lambda d: torch.topk(torch.tensor([True, False], device=d), 1),
    "std_int": lambda d: torch.std(torch.tensor([1, 2, 4], device=d), dim=0),
    "var_int": lambda d: torch.var(torch.tensor([1, 2, 4], device=d)),
    "pow_int_negative": lambda d: torch.pow(torch.tensor([1, 2], device=d), -1),
    "pow_bool_negative": lambda d: torch.pow(torch.tensor([True], device=d), -2),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_xla_refuses_what_eager_refuses(name: str) -> None:
    program = REFUSED[name]
    with pytest.raises((RuntimeError, NotImplementedError, TypeError, ValueError)) as eager:
        program(torch.device("cpu"))
    # xla raises at the op with eager's own message, or at the sync with the lowering's
    ours = r"not implemented for bool|only support floating|negative integer powers"
    with pytest.raises(Exception, match=f"{re.escape(str(eager.value))}|{ours}"):
        out = program(xlalab.device())
        out = out if isinstance(out, tuple) else (out,)
        [o.cpu() for o in out]  # type: ignore[union-attr]


def test_bools_promoted_by_a_number_still_divide() -> None:
    def program(d: torch.device) -> tuple[torch.Tensor, ...]:
        b = torch.tensor([True, False], device=d)
        x = torch.tensor([2.0, -3.0], device=d)
        return torch.div(torch.tensor(False, device=d), x, rounding_mode="floor"), torch.fmod(b, 2), b // 2

    _assert_same(program)


def test_max_over_a_dim_of_bools_still_works() -> None:
    _assert_same(lambda d: torch.max(torch.tensor([[True, False], [False, False]], device=d), dim=1))


def test_abs_gradient_at_nan_is_nan_through_a_chain() -> None:
    # abs's gradient is g * sgn(x); XLA must not turn g * sgn(abs(x)) into a select that drops NaN.
    def program(d: torch.device) -> tuple[torch.Tensor, ...]:
        x = torch.tensor([NAN, 1.0, -2.0, 0.0], device=d, dtype=torch.float64, requires_grad=True)
        torch.exp(torch.abs(torch.abs(x))).sum().backward()
        assert x.grad is not None
        return (x.grad,)

    _assert_same(program, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::UserWarning")  # eager's warning about std of no elements
def test_exp_of_a_nan_known_at_compile_time_is_nan() -> None:
    # std of an empty tensor is 0/0, which XLA folds to a NaN constant; XLA's CPU exp turned
    # that into an arbitrary number (softmax, exp, sinh and cosh all go through exp).
    def program(d: torch.device) -> tuple[torch.Tensor, ...]:
        nan = torch.std(torch.empty(0, device=d), dim=0) + 0.5
        return torch.exp(nan), torch.softmax(nan, 0), torch.sinh(nan), torch.cosh(nan), torch.exp2(nan)

    _assert_same(program)


def test_sign_of_negative_zero_is_positive_zero() -> None:
    values = [-0.0, 0.0, NAN, -2.0, float("inf")]
    _assert_same(
        lambda d: (torch.sign(torch.tensor(values, device=d)), torch.sgn(torch.tensor(values, device=d)))
    )


def test_topk_smallest_puts_nan_last() -> None:
    values = [[NAN, 0.0, NAN], [2.0, NAN, -1.0]]
    _assert_same(lambda d: torch.topk(torch.tensor(values, device=d), 2, dim=1, largest=False))


def test_adding_integer_zero_turns_negative_zero_positive() -> None:
    def program(d: torch.device) -> tuple[torch.Tensor, ...]:
        x = torch.tensor([-0.0, 0.0, 1.5, NAN], device=d)
        return x + 0, torch.add(x, False), x.clone().add_(0)

    _assert_same(program)
