"""torch.nn.functional with unusual arguments on xla:0 equals eager CPU, values and gradients."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F


def _value_and_grad(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = x.detach().to(device).requires_grad_()
    y = fn(leaf)
    gen = torch.Generator().manual_seed(1)
    (grad,) = torch.autograd.grad(y, leaf, torch.randn(y.shape, generator=gen).to(y.dtype).to(device))
    return y.cpu(), grad.cpu()


def _assert_matches_eager(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, dev: torch.device, **tol: float
) -> None:
    got, want = _value_and_grad(fn, x, dev), _value_and_grad(fn, x, "cpu")
    torch.testing.assert_close(got[0], want[0], **tol)
    torch.testing.assert_close(got[1], want[1], **tol)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("scale", [1.3, 2.2, 2.3, 0.6])
def test_nearest_interpolate_with_scale_factor_equals_eager(dev: torch.device, nd: int, scale: float) -> None:
    """An axis whose size a scale factor keeps or doubles: eager's 2-d forward and every
    nearest backward copy or repeat it (torch's legacy ``nearest_idx``), whatever the factor."""
    x = torch.randn(2, 3, *[3, 2, 4][:nd])
    resize = lambda t: F.interpolate(t, scale_factor=scale, mode="nearest")
    _assert_matches_eager(resize, x, dev, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_interpolate_gradient_accumulates_half_types_in_float32(
    dev: torch.device, dtype: torch.dtype, mode: str
) -> None:
    x = torch.randn(1, 2, 2, 3).to(dtype)
    _assert_matches_eager(lambda t: F.interpolate(t, size=(40, 7), mode=mode), x, dev, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_layer_and_batch_norm_save_statistics_in_eager_dtype_and_backpropagate(
    dev: torch.device, dtype: torch.dtype
) -> None:
    """Eager's CPU kernels keep a half input's mean and rstd in its own type (torch's meta
    kernels say float32); the backward kernels refuse statistics of another type."""
    x, w, b = torch.randn(4, 6, 5).to(dtype), torch.randn(5).to(dtype), torch.randn(5).to(dtype)
    stats = torch.ops.aten.native_layer_norm(x.to(dev), [5], w.to(dev), b.to(dev), 1e-5)
    assert [t.dtype for t in stats] == [t.dtype for t in torch.ops.aten.native_layer_norm(x, [5], w, b, 1e-5)]
    _assert_matches_eager(lambda t: F.layer_norm(t, (5,), w.to(t.device), b.to(t.device)), x, dev)
    leaf = x.to(dev).requires_grad_()
    weight, bias = w.repeat(2)[:6].to(dev), b.repeat(2)[:6].to(dev)
    F.batch_norm(leaf, None, None, weight, bias, training=True).sum().backward()
    assert leaf.grad is not None and leaf.grad.dtype == dtype


_NAN, _INF = float("nan"), float("inf")
MAX_POOLS: list[tuple[str, torch.Tensor, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]] = [
    ("pad_1d", torch.full((1, 1, 3), -_INF), lambda t: F.max_pool1d(t, 3, 1, 1, return_indices=True)),
    ("pad_2d", torch.full((1, 2, 2, 3), -_INF), lambda t: F.max_pool2d(t, 2, 1, 1, return_indices=True)),
    (
        "pad_dilated_3d",
        torch.full((1, 1, 3, 2, 4), -_INF),
        lambda t: F.max_pool3d(t, 3, 2, 1, dilation=(1, 1, 2), ceil_mode=True, return_indices=True),
    ),
    (
        "nans_1d",
        torch.tensor([[[1.0, _NAN, 2.0, _NAN, 0.0]]]),
        lambda t: F.max_pool1d(t, 5, return_indices=True),
    ),
    (
        "nans_2d",
        torch.tensor([[[[1.0, _NAN], [_NAN, 0.0]]]]),
        lambda t: F.max_pool2d(t, 2, return_indices=True),
    ),
    (
        "nans_adaptive",
        torch.tensor([[[[1.0, _NAN], [_NAN, 0.0]]]]),
        lambda t: F.adaptive_max_pool2d(t, 1, return_indices=True),
    ),
]


@pytest.mark.parametrize(("x", "pool"), [p[1:] for p in MAX_POOLS], ids=[p[0] for p in MAX_POOLS])
def test_max_pool_index_of_an_all_minus_inf_window_or_of_nans_equals_eager(
    dev: torch.device, x: torch.Tensor, pool: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """A window of -inf keeps its first element inside the input (never the padding, whose -inf
    ties with it); a window with NaNs keeps its last NaN. The gradient goes where the index says."""
    want, got = pool(x), pool(x.to(dev))
    torch.testing.assert_close(got[1].cpu(), want[1], rtol=0, atol=0)
    _assert_matches_eager(lambda t: pool(t)[0], x, dev, rtol=0, atol=0, equal_nan=True)
