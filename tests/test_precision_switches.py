"""XLA_USE_BF16 / XLA_USE_F16 / XLA_USE_32BIT_LONG do what the seeds say, and say so once."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

import xlalab
from xlalab.runtime import backend, config


@pytest.fixture
def switch(request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.param
    backend._warned.clear()
    config.set(name, True)
    yield name
    config.set(name, False)
    backend._warned.clear()
    xlalab.mark_step()


@pytest.mark.parametrize("switch", ["XLA_USE_BF16"], indirect=True)
def test_bf16_reproduces_the_seeds_4096_plus_1(switch: str, dev: torch.device) -> None:
    with pytest.warns(backend.PrecisionWarning, match="XLA_USE_BF16=1") as caught:
        a = torch.tensor(4096.0, device=dev)
        b = torch.tensor(1.0, device=dev)
        total = (a + b).item()
    assert total == 4096.0  # bfloat16 arithmetic, as the seeds show
    assert (a + b).dtype == torch.float32  # the tensor still reports its torch dtype
    assert caught[0].filename == __file__  # the warning points at the user's line


@pytest.mark.parametrize("switch", ["XLA_USE_BF16"], indirect=True)
def test_warns_once_per_switch(switch: str, dev: torch.device) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for v in (4097.0, 4099.0, 1.001):
            torch.tensor([v], device=dev).cpu()
    assert sum(issubclass(w.category, backend.PrecisionWarning) for w in caught) == 1


@pytest.mark.parametrize("switch", ["XLA_USE_F16"], indirect=True)
def test_f16(switch: str, dev: torch.device) -> None:
    with pytest.warns(backend.PrecisionWarning, match="XLA_USE_F16=1.*float16"):
        assert torch.tensor([70000.0], device=dev).tolist() == [float("inf")]


@pytest.mark.parametrize("switch", ["XLA_USE_32BIT_LONG"], indirect=True)
def test_32bit_long_truncates_and_says_so(switch: str, dev: torch.device) -> None:
    with pytest.warns(backend.PrecisionWarning, match=r"XLA_USE_32BIT_LONG=1: 1099511627776 is stored as 0"):
        x = torch.tensor([2**40], device=dev)
    assert x.dtype == torch.int64 and x.tolist() == [0]


def test_switches_off_keep_full_precision(dev: torch.device) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", backend.PrecisionWarning)
        assert (torch.tensor(4096.0, device=dev) + 1).item() == 4097.0
        assert torch.tensor([2**40], device=dev).tolist() == [2**40]
