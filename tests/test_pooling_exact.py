"""Pooling on xla:0 equals eager CPU bit for bit, in 2-d and 3-d, forward and backward.

Overlapping windows are where an implementation shows its summation order: an input that is
the maximum of several windows receives several gradients, and torch's CPU kernels add them
in output order in the gradient's own dtype (bfloat16 included). Inputs with many ties make
that happen often, and make the tie rule (first maximum in the window) decide the indices.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from xlalab.core.xlac import _get_xla_tensors_text

Pool = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

# (name, input shape, pooling with indices), windows overlapping in every case.
POOLS: list[tuple[str, tuple[int, ...], Pool]] = [
    ("max2d", (2, 3, 9, 9), lambda x: F.max_pool2d(x, 3, stride=1, padding=1, return_indices=True)),
    (
        "max2d_dilated_ceil",
        (2, 2, 10, 11),
        lambda x: F.max_pool2d(
            x, (3, 2), stride=(1, 2), padding=1, dilation=2, ceil_mode=True, return_indices=True
        ),
    ),
    ("max1d", (2, 3, 12), lambda x: F.max_pool1d(x, 4, stride=1, padding=2, return_indices=True)),
    ("max3d", (2, 2, 6, 7, 5), lambda x: F.max_pool3d(x, 3, stride=1, padding=1, return_indices=True)),
    (
        "max3d_unbatched_ceil",
        (2, 7, 6, 8),
        lambda x: F.max_pool3d(
            x, (2, 3, 3), stride=(1, 2, 1), dilation=(1, 1, 2), ceil_mode=True, return_indices=True
        ),
    ),
    ("adaptive_max2d", (2, 3, 9, 7), lambda x: F.adaptive_max_pool2d(x, (4, 5), return_indices=True)),
    ("adaptive_max3d", (2, 2, 7, 6, 5), lambda x: F.adaptive_max_pool3d(x, (3, 4, 4), return_indices=True)),
]


def _ties(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 3, shape, generator=gen).to(dtype)


def _run(pool: Pool, x: torch.Tensor, grad: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
    leaf = x.detach().to(device).requires_grad_()
    values, indices = pool(leaf)
    values.backward(grad.to(device))
    assert leaf.grad is not None
    return [t.cpu() for t in (values, indices, leaf.grad)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("shape", "pool"), [p[1:] for p in POOLS], ids=[p[0] for p in POOLS])
def test_max_pooling_and_its_gradient_equal_eager_bit_for_bit(
    shape: tuple[int, ...], pool: Pool, dtype: torch.dtype, dev: torch.device
) -> None:
    x = _ties(shape, dtype)
    out = pool(x)[0]
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    eager = _run(pool, x, grad, torch.device("cpu"))
    lazy = _run(pool, x, grad, dev)
    for name, e, z in zip(("values", "indices", "gradient"), eager, lazy, strict=True):
        assert z.dtype == e.dtype and torch.equal(z, e), f"{name} differ from eager"


def test_3d_max_pooling_records_one_op(dev: torch.device) -> None:
    values, indices = F.max_pool3d(_ties((2, 2, 6, 6, 6), torch.float32).to(dev), 2, return_indices=True)
    ops = [line for line in _get_xla_tensors_text([values, indices]).splitlines() if "aten::" in line]
    assert len(ops) == 1 and "aten::max_pool3d_with_indices(" in ops[0], ops
