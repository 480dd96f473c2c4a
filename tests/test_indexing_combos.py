"""Indexing, scatter/gather and view-write combinations on xla give eager's values,
dtypes, shapes and strides, forward and backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import xlalab


def _on(dev: torch.device, a: Any) -> Any:
    return a.to(dev) if isinstance(a, torch.Tensor) else a


def _same(fn: Callable[..., torch.Tensor], *args: Any) -> None:
    """fn on CPU tensors and on their xla copies gives equal results, dtypes, shapes and strides."""
    dev = xlalab.device()
    want = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    got = fn(*[_on(dev, a) for a in args])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("mask", [False, True], ids=["index", "mask"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_of_a_0d_cpu_integer_value(mask: bool, accumulate: bool) -> None:
    # A 0-d CPU integer tensor reaches the lowering as a baked number, not an array.
    def put(x: torch.Tensor) -> torch.Tensor:
        index = x > 4 if mask else torch.tensor([0, 2, 0])
        return x.index_put((index,), torch.tensor(3), accumulate=accumulate)

    _same(put, torch.arange(12).reshape(3, 4))
