"""Linear algebra and reductions on xla against eager CPU PyTorch: the cases a differential
probe of them found to differ (values, NaN and zero signs included).

``tests/test_linalg_lowering.py`` covers the factorizations themselves (LU, Cholesky, QR and the
solvers, their gradients and error codes).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

INF, NAN = float("inf"), float("nan")


def _assert_identical(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal dtype and values, NaNs where eager has them and every zero's sign."""
    got = got.cpu()
    assert got.dtype == want.dtype
    g, w = (torch.view_as_real(t) if t.is_complex() else t for t in (got, want))
    assert torch.equal(g.isnan(), w.isnan()), (got, want)
    assert torch.equal(g.nan_to_num(), w.nan_to_num()), (got, want)
    assert torch.equal(g.nan_to_num().signbit(), w.nan_to_num().signbit()), (got, want)


# Eager's complex add computes ``x + alpha * y`` with a complex product even where alpha is 1
# (sub adds ``-alpha * y``): an infinite or NaN part of y makes y's other part NaN.
COMPLEX_ADDS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "add alpha": lambda a, b: torch.add(a, b, alpha=2),
    "add float alpha": lambda a, b: torch.add(a, b, alpha=1 / 3),
    "add complex alpha": lambda a, b: torch.add(a, b, alpha=1j),
    "sub": torch.sub,
    "sub float alpha": lambda a, b: torch.sub(a, b, alpha=-2.5),
    "sub complex alpha": lambda a, b: torch.sub(a, b, alpha=1j),
    "rsub": lambda a, b: torch.rsub(a, b, alpha=2),
    "add_": lambda a, b: a.clone().add_(b),
    "sub_": lambda a, b: a.clone().sub_(b),
    "plus a number": lambda a, b: a + INF,
    "minus a number": lambda a, b: a - INF,
    "minus zero": lambda a, b: a - 0,
    "real plus complex": lambda a, b: a.real + b,
    "real minus complex number": lambda a, b: a.real - 2.5j,
}


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("name", list(COMPLEX_ADDS))
def test_complex_add_and_sub_with_infinities_as_eager(
    name: str, dtype: torch.dtype, dev: torch.device
) -> None:
    a = torch.tensor([1 + 1j, 1 + 1j, complex(-0.0, -0.0), 2, complex(-0.0, 1)], dtype=dtype)
    b = torch.tensor([complex(INF, 0), complex(1, -INF), complex(-0.0, -3), complex(NAN, 0), 3], dtype=dtype)
    fn = COMPLEX_ADDS[name]
    _assert_identical(fn(a.to(dev), b.to(dev)), fn(a, b))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_logdet_of_a_singular_complex_matrix(dtype: torch.dtype, dev: torch.device) -> None:
    # log(sign) + logabsdet: log(-0+0j) is -inf+pi j, and adding -inf makes the imaginary part NaN
    a = torch.tensor([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]], dtype=dtype)
    _assert_identical(torch.logdet(a.to(dev)), torch.logdet(a))
