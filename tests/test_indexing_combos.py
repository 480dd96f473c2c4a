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
    # A 0-d CPU integer tensor is baked into the graph; the lowering gets it as an array.
    def put(x: torch.Tensor) -> torch.Tensor:
        index = x > 4 if mask else torch.tensor([0, 2, 0])
        return x.index_put((index,), torch.tensor(3), accumulate=accumulate)

    _same(put, torch.arange(12).reshape(3, 4))


_ZERO_D_INDEX: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gather": lambda x: x[0, 0].gather(0, torch.tensor(0)),
    "index_select": lambda x: x.index_select(1, torch.tensor(2)),
    "index_select_int32": lambda x: x.index_select(0, torch.tensor(1, dtype=torch.int32)),
    "take": lambda x: torch.take(x, torch.tensor(7)),
    "put": lambda x: x.put(torch.tensor(7), torch.tensor(5.0)),
    "scatter": lambda x: x[0, 0].scatter(0, torch.tensor(0), 5.0),
    "searchsorted": lambda x: torch.searchsorted(x[0].sort().values, torch.tensor(0)),
    "index_put_index": lambda x: x.index_put((torch.tensor(1),), torch.tensor(3.0)),
}


@pytest.mark.parametrize("op", sorted(_ZERO_D_INDEX))
def test_a_0d_cpu_integer_tensor_operand(op: str) -> None:
    # torch takes a 0-d CPU tensor beside xla tensors; an integer one is baked into the graph
    # and must reach an op that takes it as a tensor (an index) as an array of its dtype.
    _same(_ZERO_D_INDEX[op], torch.randn(3, 5))


_DATA_DEPENDENT: dict[str, Callable[[torch.Tensor], Any]] = {
    "nonzero": torch.nonzero,
    "argwhere": torch.argwhere,
    "nonzero_as_tuple_0": lambda x: torch.nonzero(x, as_tuple=True)[0],
    "where_one_argument_1": lambda x: torch.where(x)[1],
    "unique_dim": lambda x: torch.unique(x, dim=1),
    "unique_consecutive_dim": lambda x: torch.unique_consecutive(x, dim=1),
}


@pytest.mark.parametrize("op", sorted(_DATA_DEPENDENT))
def test_data_dependent_results_keep_eager_strides(op: str) -> None:
    # These run on the CPU fallback, whose results eager lays out column-major (nonzero's
    # (n, ndim) result has strides (1, n)); the xla result has eager's strides, so
    # is_contiguous() and view() answer as eager's do.
    _same(_DATA_DEPENDENT[op], torch.tensor([[3, 0, 2, 0, 2], [0, 1, 2, 2, 0]]))


_OF_A_PERMUTED: dict[str, Callable[[torch.Tensor], Any]] = {
    "mask_last_dim": lambda x: x[..., torch.tensor([True, False])],
    "mask_first_dim": lambda x: x[torch.tensor([True, False, True])],
    "mask_first_dim_on_device": lambda x: x[torch.tensor([True, False, True]).to(x.device)],
    "masked_select_row": lambda x: x[x[:, :, 0] > 0],
    "mask_of_a_strided_slice": lambda x: x[:, ::2][torch.tensor([True, False, True])],
}


@pytest.mark.parametrize("op", sorted(_OF_A_PERMUTED))
def test_fallback_of_a_permuted_operand_keeps_its_layout(op: str) -> None:
    # The CPU fallback gives eager's kernel a host copy laid out as the xla operand is, so the
    # result is laid out as eager's (a mask index keeps the operand's order of dims).
    _same(lambda x: _OF_A_PERMUTED[op](x.permute(2, 1, 0)), torch.randn(2, 4, 3))


_GATHERS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "gather": lambda x, i: x.gather(0, i.view(-1, 1)),
    "index_select": lambda x, i: x.index_select(0, i),
    "embedding": lambda x, i: torch.nn.functional.embedding(i, x),
    "embedding_bag": lambda x, i: torch.nn.functional.embedding_bag(i.view(1, -1), x),
    "index": lambda x, i: x[i],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("op", sorted(_GATHERS))
def test_an_index_out_of_range_is_clamped(op: str, dtype: torch.dtype) -> None:
    # Eager raises; XLA has no errors at run time and clamps (docs/runtime.md), where JAX's
    # gathers fill NaN (or the integer minimum) unless told to clip.
    x = torch.arange(12, dtype=dtype if op != "embedding_bag" else torch.float32).reshape(4, 3)
    index = torch.tensor([4, 1, 9])
    got = _GATHERS[op](x.to(xlalab.device()), index.to(xlalab.device())).cpu()
    torch.testing.assert_close(got, _GATHERS[op](x, index.clamp(max=x.shape[0] - 1)))


@pytest.mark.parametrize(
    "view",
    [lambda x: x.t(), lambda x: x.view(2, 2, 6).permute(2, 0, 1).flatten(1), lambda x: x],
    ids=["transpose", "permute", "contiguous"],
)
def test_as_strided_scatter_addresses_the_clone_of_a_permuted_input(view: Callable[..., Any]) -> None:
    # Eager clones self keeping its layout and writes src through as_strided of the clone:
    # the strides address self's elements in their memory order.
    def scatter(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.as_strided_scatter(view(x), src, (2, 3), (4, 1), 2)

    _same(scatter, torch.randn(4, 6), torch.randn(2, 3))


@pytest.mark.parametrize(
    "shapes", [((4,), (6,)), ((4, 3), (4,)), ((4, 6), (6,))], ids=["longer", "not_trailing", "view"]
)
def test_copy_of_a_src_that_does_not_broadcast_raises_at_the_call(shapes: tuple[Any, Any]) -> None:
    dst_shape, src_shape = shapes
    dev = xlalab.device()
    for src in (torch.ones(src_shape), torch.ones(src_shape).to(dev)):
        dst = torch.zeros(dst_shape).to(dev)
        target = dst.t()[2] if len(dst_shape) == 2 and dst_shape[1] == 6 else dst
        with pytest.raises(RuntimeError, match="must match the size"):
            target.copy_(src)
