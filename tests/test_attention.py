"""Scaled dot-product attention on xla against eager's CPU, which runs its flash kernel for
most 4-d inputs: values, gradients, the output's layout, and the inputs it takes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Attention = Callable[..., torch.Tensor]


def _both(fn: Attention, dev: torch.device, *inputs: torch.Tensor) -> None:
    """``fn`` on CPU copies and on xla copies of ``inputs``: the same output (strides too) and
    the same gradients of every floating input."""
    cpu = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    xla = [t.clone().to(dev).requires_grad_(t.is_floating_point()) for t in inputs]
    want, got = fn(*cpu), fn(*xla)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5, equal_nan=True)
    want.square().sum().backward()
    got.square().sum().backward()
    for a, b in zip(cpu, xla):
        if a.grad is not None:
            torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5)


def _heads(batch: int, length: int, heads: int, seed: int) -> torch.Tensor:
    """(B, H, L, E) as attention code makes it: ``x.view(B, L, H, E).transpose(1, 2)``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, heads, 8, generator=g).transpose(1, 2)


def test_the_output_is_laid_out_as_the_query_so_merging_heads_views_it(dev: torch.device) -> None:
    q, k, v = _heads(2, 5, 2, 0), _heads(2, 6, 2, 1), _heads(2, 6, 2, 2)
    _both(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v).transpose(1, 2).view(2, 5, 16), dev, q, k, v
    )
    _both(F.scaled_dot_product_attention, dev, q.contiguous(), k.contiguous(), v.contiguous())


@pytest.mark.parametrize("causal", [False, True])
def test_a_boolean_mask_applies_with_or_without_the_causal_mask(causal: bool, dev: torch.device) -> None:
    q, k = _heads(2, 5, 2, 3), _heads(2, 6, 2, 4)
    mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(5)) > 0.3
    mask[2] = False  # a row that attends to nothing: zeros, as eager's kernel gives

    def attend(q: torch.Tensor, k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, k, m, is_causal=causal)

    _both(attend, dev, q, k, mask)


def test_a_float_mask_scale_and_a_row_of_minus_infinity(dev: torch.device) -> None:
    q, k = _heads(2, 5, 2, 6), _heads(2, 6, 2, 7)
    bias = torch.randn(2, 1, 5, 6, generator=torch.Generator().manual_seed(8))
    bias[0, 0, 1] = -torch.inf
    _both(lambda q, k, b: F.scaled_dot_product_attention(q, k, k, b.detach(), scale=0.3), dev, q, k, bias)


def test_grouped_query_attention_and_its_key_gradients(dev: torch.device) -> None:
    q, kv = _heads(2, 5, 4, 9), torch.randn(2, 2, 6, 8, generator=torch.Generator().manual_seed(10))
    _both(
        lambda q, kv: F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True), dev, q, kv
    )


def test_three_d_inputs_and_inference_mode(dev: torch.device) -> None:
    g = torch.Generator().manual_seed(11)
    q, k = torch.randn(2, 5, 8, generator=g), torch.randn(2, 6, 8, generator=g)
    _both(lambda q, k: F.scaled_dot_product_attention(q, k, k), dev, q, k)  # eager's math path
    q4 = _heads(1, 3, 2, 12)
    with torch.inference_mode():
        got = F.scaled_dot_product_attention(q4.to(dev), q4.to(dev), q4.to(dev))
    assert got.stride() == F.scaled_dot_product_attention(q4, q4, q4).stride()


def test_compiled_attention_takes_a_mask_with_the_causal_mask(dev: torch.device) -> None:
    q = _heads(1, 4, 2, 13)
    mask = torch.tensor([[True, False, True, True]] * 4)

    def attend(q: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, m, is_causal=True)

    compiled = torch.compile(attend, backend="xlalab")
    got = compiled(q.to(dev), mask.to(dev))
    torch.testing.assert_close(got.cpu(), attend(q, mask), rtol=1e-4, atol=1e-5)


def test_float64_attention_computes_in_float64(dev: torch.device) -> None:
    q = _heads(1, 4, 2, 14).double()
    got = F.scaled_dot_product_attention(q.to(dev), q.to(dev), q.to(dev), is_causal=True)
    want = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-12, atol=1e-12)  # float32's would be 1e-7 off
