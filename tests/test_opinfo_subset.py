"""The default run's slice of the OpInfo sweep, and the model blocks the issue names.

``make coverage`` runs every OpInfo (``xlalab.testing.opinfo_sweep``); this file runs a
representative subset with the same machinery, fewer samples and dtypes, so that a change
which breaks a common op shows up in ``make test``: arithmetic, unary math, reductions,
matmuls, convolution, pooling, normalization, losses, indexing, sorting, views. Each op
must match eager PyTorch (outputs and float32 gradients); those in ``MUST_LOWER`` must
also run without any CPU fallback.

The second half trains one step of the blocks the issue lists (a ResNet block with batch
norm and avg/max/adaptive pooling, LSTM and GRU cells and layers, a transformer encoder
layer) on ``xla:0`` against eager: same loss, same gradients, no CPU fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xlalab
from xlalab.runtime import metrics
from xlalab.testing import opinfo_sweep

SUBSET = [
    "add", "mul", "div.no_rounding_mode", "pow", "exp", "tanh", "sigmoid", "rsqrt", "clamp", "where",
    "masked_fill", "lerp", "addcdiv", "sum", "mean", "amax", "argmax", "var_mean", "cumsum", "norm",
    "softmax", "log_softmax", "matmul", "addmm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_max_pool2d", "nn.functional.batch_norm", "nn.functional.layer_norm",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.embedding", "index_select", "gather",
    "scatter_add", "index_put", "__getitem__", "cat", "squeeze", "sort", "topk", "nn.functional.bilinear",
    "nn.functional.hardshrink", "histc", "cdist", "nn.functional.grid_sample",
    "nn.functional.interpolate.bicubic", "median", "nanmedian", "kthvalue", "mode",
    "nn.functional.embedding_bag",
]  # fmt: skip

# Ops the training workloads and the model blocks depend on: these must never fall back.
MUST_LOWER = {
    "add", "mul", "exp", "tanh", "sigmoid", "rsqrt", "where", "masked_fill", "addcdiv", "sum", "mean",
    "amax", "argmax", "softmax", "log_softmax", "matmul", "addmm", "nn.functional.linear",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_max_pool2d", "nn.functional.batch_norm",
    "nn.functional.layer_norm", "nn.functional.gelu", "nn.functional.silu", "nn.functional.cross_entropy",
    "nn.functional.mse_loss", "nn.functional.embedding", "index_select", "gather", "cat", "squeeze",
    "nn.functional.bilinear", "nn.functional.hardshrink", "histc", "cdist", "nn.functional.grid_sample",
    "nn.functional.interpolate.bicubic", "median", "nanmedian", "kthvalue", "mode",
    "nn.functional.embedding_bag",
}  # fmt: skip

DTYPES = (torch.float32, torch.int64, torch.bfloat16)


@cache
def _ops() -> dict[str, Any]:
    return {opinfo_sweep.op_id(op): op for op in opinfo_sweep.iter_ops(SUBSET)}


def test_subset_names_exist() -> None:
    assert sorted(set(SUBSET) - set(_ops())) == []


@pytest.mark.parametrize("name", SUBSET)
def test_opinfo_matches_eager(name: str) -> None:
    op = _ops()[name]
    res = opinfo_sweep.sweep_op(op, max_samples=2, max_grad_samples=1, dtypes=DTYPES)
    assert res.cls in ("lowered", "fallback"), f"{name}: {res.cls}: {res.problems}"
    assert res.grad not in ("wrong", "error"), f"{name}: gradient {res.grad}: {res.problems}"
    assert res.samples > 0
    if name in MUST_LOWER:
        assert res.cls == "lowered", f"{name} falls back to the CPU: {res.fallback_ops}"
        assert res.grad in ("lowered", "n/a"), f"{name}'s backward falls back: {res.grad_fallback_ops}"


# Complex numbers, values and gradients: formulas written for real numbers go wrong here (sgn
# is z/|z|, dot does not conjugate, a variance is |z - mean|^2, a backward conjugates the
# derivative, logaddexp orders by real parts, a CPU composite reads conjugate views).
COMPLEX_SUBSET = [
    "abs", "sgn", "angle", "mul", "div.no_rounding_mode", "exp", "log", "sqrt", "reciprocal", "pow",
    "tanh", "sigmoid", "sum", "mean", "cumsum", "var", "std", "var_mean", "dot", "vdot", "matmul",
    "linalg.pinv", "fft.fft", "fft.ifft", "view_as_real", "conj_physical", "conj", "mH", "where", "logaddexp",
]  # fmt: skip


@cache
def _complex_ops() -> dict[str, Any]:
    return {opinfo_sweep.op_id(op): op for op in opinfo_sweep.iter_ops(COMPLEX_SUBSET)}


@pytest.mark.parametrize("name", COMPLEX_SUBSET)
def test_complex_opinfo_matches_eager(name: str) -> None:
    op = _complex_ops()[name]
    res = opinfo_sweep.sweep_op(op, max_samples=2, max_grad_samples=1, dtypes=(torch.complex64,))
    assert res.cls in ("lowered", "fallback"), f"{name}: {res.cls}: {res.problems}"
    assert res.grad not in ("wrong", "error"), f"{name}: gradient {res.grad}: {res.problems}"
    assert res.samples > 0


# --- the sweep's comparison rules --------------------------------------------------------


def test_compare_flags_a_real_difference() -> None:
    with pytest.raises(opinfo_sweep.Mismatch):
        opinfo_sweep.compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), 0.0, 0.0)
    with pytest.raises(opinfo_sweep.Mismatch):  # NaN where eager has a number
        opinfo_sweep.compare(torch.tensor([float("nan")]), torch.tensor([1.0]), 0.0, 0.0)
    with pytest.raises(opinfo_sweep.Mismatch):  # integers are exact
        opinfo_sweep.compare(torch.tensor([3]), torch.tensor([4]), 1.0, 1.0)


def test_compare_accepts_an_equally_accurate_result() -> None:
    # Eager's bfloat16 result is one rounding off the float32 reference; ours another: fine.
    ref = torch.tensor([0.1001])
    eager = ref.bfloat16()
    ours = (ref + 0.0004).bfloat16()
    opinfo_sweep.compare(ours, eager, 0.0, 0.0, reference=ref)
    with pytest.raises(opinfo_sweep.Mismatch):  # far less accurate than eager: wrong
        opinfo_sweep.compare((ref * 1.5).bfloat16(), eager, 0.0, 0.0, reference=ref)


# --- model blocks, one training step against eager -----------------------------------------


class ResNetBlock(nn.Module):
    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.mp, self.ap = nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2)
        self.gap, self.amp = nn.AdaptiveAvgPool2d(1), nn.AdaptiveMaxPool2d((2, 2))
        self.fc = nn.Linear(2 * c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mp(F.relu(self.b1(self.c1(x))))
        y = F.relu(self.b2(self.c2(x)) + x)
        return self.fc(torch.cat([self.gap(self.ap(y)).flatten(1), self.amp(y).mean((2, 3))], 1))


def _cross_entropy(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(m(x), torch.arange(x.shape[0], device=x.device) % 10)


def _encoder_loss(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
    return m(x, src_mask=mask, is_causal=True).pow(2).mean()


BLOCKS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], Callable[..., torch.Tensor]]] = {
    "resnet-block": (ResNetBlock, (4, 3, 16, 16), _cross_entropy),
    "lstm-cell": (lambda: nn.LSTMCell(6, 8), (3, 6), lambda m, x: sum(t.pow(2).sum() for t in m(x))),
    "gru-cell": (lambda: nn.GRUCell(6, 8), (3, 6), lambda m, x: m(x).pow(2).sum()),
    "lstm": (lambda: nn.LSTM(6, 8, batch_first=True), (3, 5, 6), lambda m, x: m(x)[0].pow(2).sum()),
    "gru": (lambda: nn.GRU(6, 8), (5, 3, 6), lambda m, x: m(x)[0].pow(2).sum()),
    "transformer-encoder": (
        lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True),
        (2, 5, 16),
        _encoder_loss,
    ),
}


@pytest.mark.parametrize("name", list(BLOCKS))
def test_block_step_matches_eager_without_fallback(name: str) -> None:
    make, shape, loss_fn = BLOCKS[name]
    dev = xlalab.device()
    torch.manual_seed(0)
    eager = make()
    lazy = make()
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to(dev)
    x = torch.randn(*shape)
    loss = loss_fn(eager, x)
    loss.backward()
    xlalab.mark_step()
    metrics.COUNTERS.clear()
    lazy_loss = loss_fn(lazy, x.to(dev))
    lazy_loss.backward()
    xlalab.mark_step()
    fallbacks = sorted(k for k, v in metrics.COUNTERS.items() if k.startswith("aten::") and v)
    assert fallbacks == []
    torch.testing.assert_close(lazy_loss.detach().cpu(), loss.detach(), rtol=1e-5, atol=1e-5)
    for (pname, p), q in zip(eager.named_parameters(), lazy.parameters()):
        assert q.grad is not None, pname
        torch.testing.assert_close(
            q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=pname: f"{n}: {m}"
        )
    for (bname, b), c in zip(eager.named_buffers(), lazy.buffers()):  # batch norm's running stats
        torch.testing.assert_close(c.cpu(), b, rtol=1e-5, atol=1e-6, msg=lambda m, n=bname: f"{n}: {m}")
