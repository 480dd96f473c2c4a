"""torch.linalg's factorizations and solvers on xla, and the older names around a Cholesky
factor (``torch.cholesky``, ``cholesky_solve``, ``cholesky_inverse``, ``triangular_solve``):
XLA programs, not CPU fallbacks.

Each op is compared with eager CPU PyTorch (LAPACK) on the same random, well-conditioned
matrices, single and batched, in float32 and float64: every output, including the LU factors,
pivots and ``info`` codes that torch's backward formulas and error checks consume. Gradients
go through autograd's own formulas (which call these ops again on xla). A singular or
non-positive-definite input raises eager's ``torch.linalg.LinAlgError``, at the latest at the
next sync (the error code is checked on the device, not read after every call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import xlalab
import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met
import xlalab.dynamo as dynamo

aten = torch.ops.aten

LOWERED = {
    "aten::linalg_solve_triangular",
    "aten::linalg_cholesky_ex",
    "aten::linalg_inv_ex",
    "aten::linalg_lu_factor_ex",
    "aten::_linalg_solve_ex",
    "aten::linalg_lu_solve",
    "aten::_linalg_det",
    "aten::_linalg_slogdet",
    "aten::lu_unpack",
    "aten::linalg_lu",
    "aten::linalg_qr",
    "aten::cholesky",
    "aten::cholesky_solve",
    "aten::cholesky_inverse",
    "aten::triangular_solve",
    "aten::linalg_matrix_exp",
    "aten::linalg_householder_product",
}
SHAPES = [(4, 4), (2, 3, 5, 5)]


def _matrix(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random, diagonally dominated: well conditioned, pivots without near-ties."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype) + 3 * torch.eye(shape[-1], dtype=dtype)


def _calls(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor) -> dict[str, Any]:
    """Every lowered op once per variant, on ``a`` (square), ``b`` (right-hand sides), ``v``
    (a vector right-hand side)."""
    spd = a @ a.mT
    lu, pivots = torch.linalg.lu_factor(a)
    out: dict[str, Any] = {}
    for upper in (False, True):
        for left in (True, False):
            rhs = b if left else b.mT
            for unit in (False, True):
                out[f"solve_triangular {upper} {left} {unit}"] = torch.linalg.solve_triangular(
                    a, rhs, upper=upper, left=left, unitriangular=unit
                )
            out[f"solve_ex {left}"] = aten._linalg_solve_ex(a, rhs, left=left)
            for adjoint in (False, True):
                out[f"lu_solve {left} {adjoint}"] = torch.linalg.lu_solve(
                    lu, pivots, rhs, left=left, adjoint=adjoint
                )
        out[f"cholesky_ex {upper}"] = torch.linalg.cholesky_ex(spd, upper=upper)
        # The older names (GPyTorch's): a factor, solves with it, its inverse.
        factor = torch.cholesky(spd, upper=upper)
        out[f"cholesky {upper}"] = factor
        out[f"cholesky_solve {upper}"] = torch.cholesky_solve(b, factor, upper=upper)
        out[f"cholesky_inverse {upper}"] = torch.cholesky_inverse(factor, upper=upper)
        for transpose in (False, True):
            out[f"triangular_solve {upper} {transpose}"] = torch.triangular_solve(
                b, a, upper=upper, transpose=transpose, unitriangular=transpose
            )
    out["matrix_exp"] = torch.linalg.matrix_exp(a - a.mT)
    out["householder_product"] = torch.linalg.householder_product(b, b[..., 0, :])
    out["solve vector"] = torch.linalg.solve(a, v)
    out["inv_ex"] = torch.linalg.inv_ex(a)
    out["lu_factor_ex"] = torch.linalg.lu_factor_ex(a)
    out["det"] = aten._linalg_det(a)
    out["slogdet"] = aten._linalg_slogdet(a)
    out["lu_unpack"] = torch.lu_unpack(lu, pivots)
    out["linalg_lu"] = torch.linalg.lu(a)
    for mode in ("reduced", "complete", "r"):  # Householder QR: Q's and R's signs are LAPACK's
        out[f"qr {mode}"] = torch.linalg.qr(b, mode=mode)
    return out


def _assert_same(got: Any, want: Any, what: str, tol: float) -> None:
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.device.type == "xla", what
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, (what, i)
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, msg=f"{what}, output {i}")
        else:  # pivots and info: exactly LAPACK's
            assert torch.equal(g, w), (what, i, g, w)


def _fallbacks() -> set[str]:
    return set(met.executed_fallback_ops()) & LOWERED


def _checks_on_the_cpu() -> bool:
    """Whether an error check (torch.linalg.inv's, solve's...) read its codes on the CPU."""
    return "aten::_linalg_check_errors" in met.executed_fallback_ops()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=["single", "batched"])
def test_every_output_matches_lapack(shape: tuple[int, ...], dtype: torch.dtype, dev: torch.device) -> None:
    a = _matrix(shape, dtype)
    b = torch.randn(*shape[:-1], 2, dtype=dtype)
    v = torch.randn(shape[:-1], dtype=dtype)
    want = _calls(a, b, v)
    met.clear_all()
    got = _calls(a.to(dev), b.to(dev), v.to(dev))
    xm.mark_step()
    for what in want:
        _assert_same(got[what], want[what], what, 1e-4 if dtype == torch.float32 else 1e-10)
    assert not _fallbacks()


def test_failed_factorizations_report_lapack_codes(dev: torch.device) -> None:
    # rank 2: U's last diagonal element is exactly 0 (info 3); the second has a zero first column.
    singular = torch.tensor(
        [[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], [[0.0, 1, 2], [0, 3, 4], [0, 5, 7]]]
    )
    # the second leading minor is negative: LAPACK stops there, leaving its pivot in place
    indefinite = torch.tensor(
        [[[4.0, 2.0, 1.0], [2.0, 1.0, 0.0], [1.0, 0.0, 3.0]], [[4.0, 0, 0], [0, 1, 0], [0, 0, 1]]]
    )
    cases: list[tuple[str, Callable[[torch.Tensor], Any], torch.Tensor]] = [
        ("lu_factor_ex", torch.linalg.lu_factor_ex, singular),
        ("inv_ex info", lambda x: torch.linalg.inv_ex(x).info, singular),
        ("solve_ex info", lambda x: torch.linalg.solve_ex(x, x).info, singular),
        ("det", torch.linalg.det, singular),
        ("slogdet", torch.linalg.slogdet, singular),
        ("cholesky_ex", torch.linalg.cholesky_ex, indefinite),
        ("cholesky_ex upper", lambda x: torch.linalg.cholesky_ex(x, upper=True), indefinite),
    ]
    met.clear_all()
    for what, fn, x in cases:
        got, want = fn(x.to(dev)), fn(x)
        _assert_same(tuple(got) if isinstance(want, tuple) else got, want, what, 1e-5)
    assert not _fallbacks()


def _grad(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> list[torch.Tensor]:
    leaves = [x.clone().requires_grad_() for x in inputs]
    out = fn(*leaves)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
    (out * weights).sum().backward()
    return [x.grad.cpu() for x in leaves]  # type: ignore[union-attr]


GRADIENTS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "inv": lambda a, b: torch.linalg.inv(a) @ b,
    "solve": torch.linalg.solve,
    "solve right": lambda a, b: torch.linalg.solve(a, b.mT, left=False),
    "solve of a transposed view": lambda a, b: torch.linalg.solve(a.mT, b),
    "cholesky": lambda a, b: torch.linalg.cholesky(a @ a.mT) @ b,
    "cholesky upper": lambda a, b: torch.linalg.cholesky(a @ a.mT, upper=True) @ b,
    "solve_triangular": lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
    "lu_factor + lu_solve": lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
    "lu": lambda a, b: torch.stack(torch.linalg.lu(a)) @ b,
    "det": lambda a, b: torch.linalg.det(a)[..., None, None] * b,
    "slogdet": lambda a, b: torch.linalg.slogdet(a).logabsdet[..., None, None] * b,
    # eager factors a transposed view itself, a contiguous matrix through its transpose, and the
    # backward reads the factors it made: the same choice here
    "det of a transposed view": lambda a, b: torch.linalg.det(a.mT)[..., None, None] * b,
    "slogdet of a transposed view": lambda a, b: torch.linalg.slogdet(a.mT).logabsdet[..., None, None] * b,
    "det of a slice": lambda a, b: torch.linalg.det(a[:, :3, 1:])[..., None, None] * b,
    "qr": lambda a, b: torch.stack(torch.linalg.qr(a)) @ b,
    "cholesky_solve": lambda a, b: torch.cholesky_solve(b, torch.cholesky(a @ a.mT)),
    "cholesky_inverse upper": lambda a, b: torch.cholesky_inverse(torch.cholesky(a @ a.mT, True), True) @ b,
    "triangular_solve": lambda a, b: torch.triangular_solve(b, a, upper=False, transpose=True).solution,
    "matrix_exp": lambda a, b: torch.linalg.matrix_exp(a / 4) @ b,
    "householder_product": lambda a, b: torch.linalg.householder_product(a, b[..., 0]),
    "qr of a wide matrix": lambda a, b: torch.linalg.qr(b.mT @ a).R,
}


@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradients_match_eager(name: str, dev: torch.device) -> None:
    a = _matrix((2, 4, 4), torch.float64, seed=1)
    b = torch.randn(2, 4, 3, dtype=torch.float64)
    want = _grad(GRADIENTS[name], a, b)
    met.clear_all()
    got = _grad(GRADIENTS[name], a.to(dev), b.to(dev))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)
    assert not _fallbacks()


def _whiten(x: torch.Tensor, cov: torch.Tensor) -> torch.Tensor:
    """x's coordinates in cov's Cholesky frame, and the inverse covariance applied to them."""
    chol = torch.linalg.cholesky(cov)
    z = torch.linalg.solve_triangular(chol, x, upper=False)
    q, r = torch.linalg.qr(x)
    return torch.linalg.inv(cov) @ z + torch.linalg.solve(cov, x) + q @ r


def test_a_compiled_function_using_them_runs_as_one_program(dev: torch.device) -> None:
    cov = _matrix((2, 4, 4), torch.float32, seed=2)
    cov = cov @ cov.mT
    x = torch.randn(2, 4, 3)
    dynamo.reset()
    compiled = torch.compile(_whiten, backend="xlalab")
    got = compiled(x.to(dev), cov.to(dev))
    torch.testing.assert_close(got.cpu(), _whiten(x, cov), rtol=1e-4, atol=1e-4)
    reports = dynamo.compiled_functions()
    assert reports and not [f for f in reports if f.lazy], [f.lazy for f in reports]
    assert not _checks_on_the_cpu()


SINGULAR = torch.tensor([[1.0, 2.0], [2.0, 4.0]])


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (torch.linalg.inv, torch.linalg.LinAlgError, r"linalg.inv: .*the input matrix is singular"),
        (lambda x: torch.linalg.solve(x, x), torch.linalg.LinAlgError, r"linalg.solve: .*singular"),
        (torch.linalg.cholesky, torch.linalg.LinAlgError, r"linalg.cholesky: .*not positive-definite"),
        (torch.cholesky, torch.linalg.LinAlgError, r"^cholesky: .*not positive-definite"),
        (
            lambda x: torch.linalg.cholesky_ex(x, check_errors=True),
            torch.linalg.LinAlgError,
            "not positive-def",
        ),
        (lambda x: torch.linalg.inv_ex(x, check_errors=True), torch.linalg.LinAlgError, "linalg.inv_ex: "),
        (torch.linalg.lu_factor, RuntimeError, r"lu_factor: .*division by zero"),
    ],
    ids=["inv", "solve", "cholesky", "legacy cholesky", "cholesky_ex checked", "inv_ex checked", "lu_factor"],
)
def test_a_singular_matrix_raises_eagers_error_by_the_next_sync(
    call: Callable[[torch.Tensor], Any], error: type[Exception], message: str, dev: torch.device
) -> None:
    with pytest.raises(error):
        call(SINGULAR)  # eager raises it too
    met.clear_all()
    with pytest.raises(error, match=message + r".*checked on the device"):
        call(SINGULAR.to(dev))  # recorded without a read
        xm.mark_step()  # the step's program computes the check; waiting on it reports it
        xm.wait_device_ops()
    assert not _fallbacks() and not _checks_on_the_cpu()
    # Reported once; the runtime carries on.
    assert torch.linalg.inv(torch.eye(2, device=dev)).cpu().tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_a_batched_check_passes_when_every_matrix_is_invertible(dev: torch.device) -> None:
    a = _matrix((3, 4, 4), torch.float32)
    met.clear_all()
    got = torch.linalg.inv(a.to(dev))
    xlalab.mark_step()
    xm.wait_device_ops()  # no error: every info is 0
    torch.testing.assert_close(got.cpu(), torch.linalg.inv(a), rtol=1e-5, atol=1e-5)
    assert not _checks_on_the_cpu()


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)], ids=str)
def test_empty_matrices_and_batches(shape: tuple[int, ...], dev: torch.device) -> None:
    a = torch.zeros(shape) if shape[-1] == 0 else torch.eye(shape[-1]).expand(*shape).clone()
    calls: list[Callable[[torch.Tensor], torch.Tensor]] = [
        torch.linalg.cholesky,
        torch.linalg.inv,
        torch.linalg.det,
        lambda m: torch.linalg.slogdet(m).logabsdet,
        lambda m: torch.linalg.lu_factor(m).LU,
        lambda m: torch.linalg.solve(m, m),
        lambda m: torch.linalg.solve_triangular(m, m, upper=True),
    ]
    for call in calls:
        want = call(a)
        got = call(a.to(dev)).cpu()
        assert got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("shape", [(5, 3), (3, 7), (10, 6), (2, 16, 9), (1, 5), (40, 33)], ids=str)
def test_qr_equals_lapacks_signs_included_on_any_shape(shape: tuple[int, ...], dev: torch.device) -> None:
    for seed in range(3):
        a = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        for mode in ("reduced", "complete", "r"):
            _assert_same(torch.linalg.qr(a.to(dev), mode=mode), torch.linalg.qr(a, mode=mode), mode, 1e-4)
    assert "aten::linalg_qr" not in met.executed_fallback_ops()


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_parametrization_trains_as_eager(orthogonal_map: str, dev: torch.device) -> None:
    # nn.utils.parametrizations.orthogonal: a matrix exponential, a Cayley transform or
    # Householder reflectors of the raw weight, recomputed at every forward.
    from torch.nn.utils import parametrizations

    torch.manual_seed(0)
    eager = parametrizations.orthogonal(torch.nn.Linear(6, 6), orthogonal_map=orthogonal_map)
    lazy = parametrizations.orthogonal(torch.nn.Linear(6, 6), orthogonal_map=orthogonal_map).to(dev)
    lazy.load_state_dict(eager.state_dict())
    met.clear_all()
    for model, device in ((eager, "cpu"), (lazy, dev)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step)).to(device)
            opt.zero_grad()
            (model(x) ** 3).mean().backward()
            opt.step()
            xm.mark_step()
    torch.testing.assert_close(lazy.weight.detach().cpu(), eager.weight.detach(), rtol=1e-5, atol=1e-5)
    assert not _fallbacks()
