"""The strides eager PyTorch gives an op's results when an operand is not contiguous.

Eager's elementwise kernels, ``clone``, dtype conversions, ``*_like`` factories and many others
lay their result out as their operands are: ``x.t() * 2`` is transposed as ``x.t()`` is, so
``(x.t() * 2).t().view(-1)`` works and ``(x.t() * 2).view(-1)`` raises. An xla tensor's value
has no physical layout, but its storage keeps its elements in an order (``tensor.py``): a result
eager lays out in another order than row-major is kept in that order, a permute view of it.

Which strides a call gives comes from torch's own meta kernel, run once per op signature and
operand layout, on fake tensors of the CPU device: a meta kernel that lays out by device takes
a bare meta tensor for a CUDA one (``device_hint``), and the convolutions' strides come from
fake mode's own rule, which asks the CPU backend (a channels-last input or weight gives a
channels-last result). Only dense layouts (a permutation of the dims) are kept; anything else
is row-major, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

Strides = tuple[int, ...]

_RESULT_STRIDES: dict[Any, list[Strides | None] | None] = {}


def result_strides(
    func: Any, args: Sequence[Any], kwargs: dict[str, Any], sid: int, meta_operand: Callable[[Any], Any]
) -> list[Strides | None] | None:
    """Per output of ``func(*args, **kwargs)``, the strides eager gives it when they are not
    row-major (else None); None when every output is row-major. ``sid`` names the call's op,
    static arguments and operand shapes (the recorder's structural id); ``meta_operand`` makes
    the meta tensor for an operand, with its eager strides."""
    key = (sid, _strides_of(args), _strides_of(kwargs.values()))
    try:
        return _RESULT_STRIDES[key]
    except KeyError:
        pass
    result: list[Strides | None] | None = None
    metas = [meta_operand(a) for a in args]
    meta_kwargs = {k: meta_operand(v) for k, v in kwargs.items()}
    try:
        out = _on_cpu(func, metas, meta_kwargs)
    except Exception:
        try:
            out = func(*metas, **meta_kwargs)
        except Exception:  # no meta kernel: the result stays row-major
            out = None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    strides = [
        tuple(o.stride()) if isinstance(o, torch.Tensor) and not o.is_contiguous() else None for o in outs
    ]
    if any(s is not None for s in strides):
        result = strides
    _RESULT_STRIDES[key] = result
    return result


def _on_cpu(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``func`` of the meta tensors in ``args`` and ``kwargs`` as fake tensors of the CPU device."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cpu = torch.device("cpu")

    def fake(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.device.type == "meta":
            return FakeTensor(mode, a, cpu)
        if isinstance(a, (list, tuple)):
            return type(a)(fake(x) for x in a)
        return a

    with mode:
        return func(*fake(args), **{k: fake(v) for k, v in kwargs.items()})


def _strides_of(args: Any) -> tuple[Any, ...]:
    """The eager strides of the tensors in ``args`` (None where row-major), in lists too (cat's)."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.append(_strides_of(a))
        elif isinstance(a, torch.Tensor):
            layout = getattr(a, "_layout", None)
            out.append(None if layout is None else layout[0])
    return tuple(out)


def memory_order(shape: Sequence[int], strides: Strides | None) -> tuple[int, ...] | None:
    """The dims of ``shape`` from outermost to innermost in memory, when ``strides`` lay its
    elements out densely in another order than row-major; None otherwise (row-major already,
    overlapping, with gaps, or empty)."""
    if strides is None or len(strides) != len(shape) or 0 in shape:
        return None
    order = tuple(sorted(range(len(shape)), key=lambda d: (-strides[d], d)))
    if order == tuple(range(len(shape))):
        return None
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != step:
            return None  # not a permutation of a dense block
        step *= shape[d]
    return order
