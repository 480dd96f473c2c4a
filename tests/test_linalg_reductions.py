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


def _spd(n: int = 3) -> torch.Tensor:
    a = torch.randn(2, n, n, generator=torch.Generator().manual_seed(0))
    return a @ a.mT + n * torch.eye(n)


# LAPACK's results are column-major: eager's kernels return them so, from contiguous operands.
COLUMN_MAJOR: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "inv": torch.linalg.inv,
    "cholesky": torch.linalg.cholesky,
    "solve": lambda a: torch.linalg.solve(a, a[..., :2]),
    "lu_factor": lambda a: torch.linalg.lu_factor(a).LU,
    "qr": lambda a: torch.linalg.qr(a).Q,
    "householder_product": lambda a: torch.linalg.householder_product(a, a[..., 0, :2]),
    "cholesky_solve": lambda a: torch.cholesky_solve(a[..., :2], a),
    "triangular_solve": lambda a: torch.triangular_solve(a[..., :2], a).solution,
}


@pytest.mark.parametrize("name", list(COLUMN_MAJOR))
def test_lapack_results_have_eagers_strides(name: str, dev: torch.device) -> None:
    a = _spd()
    fn = COLUMN_MAJOR[name]
    want, got = fn(a), fn(a.to(dev))
    assert got.stride() == want.stride() and got.is_contiguous() == want.is_contiguous()
    storage_order = (got.as_strided((4,), (1,)).cpu(), want.as_strided((4,), (1,)))
    torch.testing.assert_close(*storage_order, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        want.view(-1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        got.view(-1)
    torch.testing.assert_close(got.mT.reshape(-1).cpu(), want.mT.reshape(-1), rtol=1e-5, atol=1e-5)
