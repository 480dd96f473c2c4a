"""Entries of the runtime's handler tables that are not lowerings.

Sections, each explained where it is registered: in-place view ops, resizing, in-place ops
with a differently named functional twin, variants sent to the CPU fallback
(``tensor.FALLBACK_IF``), bias-free LSTM cells, ``arange`` into an ``out=`` tensor,
CompositeImplicitAutograd ops that reach the Python key (run their own decomposition instead
of the CPU fallback), and PrivateUse1 kernels for calls torch routes below the Python key
(``kaiser_window`` among them).

**In-place view ops** (``squeeze_``, ``unsqueeze_``, ``t_``, ``transpose_``, ``as_strided_``)
change the *metadata* of ``self`` (its shape), not its values. The runtime's generic
in-place path records the functional op and writes the result back into ``self``, which
refuses a result of another shape; ``torch.matmul`` of a vector, ``quantile`` and friends
call ``squeeze_``/``unsqueeze_`` on temporaries, so they errored.

Here ``self`` becomes the view instead: it is re-pointed at a view over its own storage
(the mechanism ``out=`` uses to resize an output), so later writes through ``self`` still
reach the base, as in eager PyTorch.

**Resizing** (``resize_``, ``resize_as_``) re-points ``self`` at the storage's elements in
the new shape.

**In-place ops whose functional twin is not found by name** (``pow_.Scalar`` is
``pow.Tensor_Scalar`` in place, not ``pow.Scalar``): recorded as that twin and written back.

The handlers are entries of the runtime's table of special ops (``tensor._SPECIAL``),
registered at import, before any op is resolved.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._ops import OpOverload
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import tensor as rt

aten = torch.ops.aten

INPLACE_VIEWS: dict[OpOverload, OpOverload] = {
    aten.squeeze_.default: aten.squeeze.default,
    aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims,
    aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.t_.default: aten.t.default,
    aten.transpose_.default: aten.transpose.int,
    aten.as_strided_.default: aten.as_strided.default,
}


def _inplace_view(view: OpOverload) -> rt.Handler:
    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self = args[0]
        rt.become(self, rt._view(view, args, kwargs))  # its layout too: eager's strides
        rt.metrics.count(rt.info(func).counter)
        return self

    return handler


# In-place overload -> its functional twin, where matching by overload name fails.
INPLACE_TWINS: dict[OpOverload, OpOverload] = {
    aten.pow_.Scalar: aten.pow.Tensor_Scalar,
    aten.pow_.Tensor: aten.pow.Tensor_Tensor,
    aten.float_power_.Scalar: aten.float_power.Tensor_Scalar,
    aten.float_power_.Tensor: aten.float_power.Tensor_Tensor,
    aten.floor_divide_.Tensor: aten.floor_divide.default,
}


def _resize_(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``resize_``/``resize_as_`` as eager resizes: the same shape changes nothing (strides
    included); another becomes contiguous at the same storage offset, over the storage's elements
    in storage order. Within the storage it stays a view of it, so writes reach the other views
    of that storage; past its end the storage grows (new elements are zeros, eager leaves them
    uninitialized) into a storage of ``self``'s own, which views made before no longer share."""
    self = args[0]
    size = tuple(args[1].shape) if func is aten.resize_as_.default else tuple(args[1])
    if size == tuple(self.shape):
        return self
    n = math.prod(size)
    offset = self._layout[1] if self._layout is not None else 0
    root = self._st.node
    stored = math.prod(root.shape or ()) * root.dtype.itemsize // self.dtype.itemsize  # in self's elements
    if offset + n <= stored:
        strides = tuple(math.prod(size[i + 1 :]) for i in range(len(size)))
        new = rt._view(aten.as_strided.default, (self, size, strides, offset), {})
    else:
        kept = rt._view(aten.as_strided.default, (self, (max(stored - offset, 0),), (1,), offset), {})
        new = torch.cat([kept.detach(), kept.new_zeros(n - kept.numel())]).reshape(size)
    rt.become(self, new)
    rt.metrics.count(rt.info(func).counter)
    return self


def _compatible_shallow_copy_type(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    # Asked by ``set_data`` (re-pointing a tensor, as above and for out= resizing): two xla
    # tensors are compatible. Answered here, not by the CPU fallback, which would sync both.
    return isinstance(args[0], rt.XlaTensor) and isinstance(args[1], rt.XlaTensor)


for _inplace, _view in INPLACE_VIEWS.items():
    rt._SPECIAL[_inplace] = _inplace_view(_view)
for _inplace, _functional in INPLACE_TWINS.items():
    rt._SPECIAL[_inplace] = rt._inplace(_functional)
# polygamma_(self, n) is polygamma(n, self) in place (orders past 1 stay on the CPU, as polygamma's).
rt._SPECIAL[aten.polygamma_.default] = rt._guarded(
    rt._inplace(aten.polygamma.default, lambda args: (args[1], args[0])), lambda args: args[1] > 1
)
rt._SPECIAL[aten.resize_.default] = _resize_
rt._SPECIAL[aten.resize_as_.default] = _resize_
rt._SPECIAL[aten._has_compatible_shallow_copy_type.default] = _compatible_shallow_copy_type


# --- variants sent to the CPU fallback ----------------------------------------------------
#
# (0-d unfold and half-dtype lerp with a float weight are now handled by the lowerings.)


# --- LSTM cells without biases -------------------------------------------------------------
#
# torch's meta kernel of ``_thnn_fused_lstm_cell`` dereferences the optional biases, so a
# bias-free ``nn.LSTMCell`` found no output shape and went to the CPU fallback, where the op
# has no kernel at all. Zero biases give the same values (autograd, above this handler, still
# sees no biases, and its backward asks for no bias gradient).


def _lstm_cell(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ("input_gates", "hidden_gates", "cx", "input_bias", "hidden_bias")
    full = dict(zip(names, args))
    full.update(kwargs)
    if full.get("input_bias") is None or full.get("hidden_bias") is None:
        zeros = full["input_gates"].new_zeros(full["input_gates"].shape[1:])
        full["input_bias"] = zeros if full.get("input_bias") is None else full["input_bias"]
        full["hidden_bias"] = zeros if full.get("hidden_bias") is None else full["hidden_bias"]
    return rt._lowered(func, tuple(full[n] for n in names), {})


rt._SPECIAL[aten._thnn_fused_lstm_cell.default] = _lstm_cell


# --- arange into an out= tensor ------------------------------------------------------------
#
# ``torch.arange(..., out=t)`` computes in ``t``'s dtype, and so do torch's window functions
# (hann, hamming, blackman, bartlett), which fill an empty tensor of the window's dtype with
# ``arange_out`` and scale it in place. The generic out= path found ``arange.start`` as the
# functional twin (no step, no dtype), so the values came out int64. Here the values are the
# device factory ``arange.start_step`` in ``out``'s dtype, and ``out`` takes them.


def _arange_out(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    out = kwargs.get("out")
    if not isinstance(out, rt.XlaTensor):
        return rt.fallback(func, args, kwargs)
    start, end, step = (0, args[0], 1) if func is aten.arange.out else (*args, 1)[:3]
    value = torch.arange(start, end, step, dtype=out.dtype, device=out.device)
    assert isinstance(value, rt.XlaTensor)
    rt.set_result(out, rt.value(value))  # in place, or resized as eager resizes out= tensors
    return out


rt._SPECIAL[aten.arange.out] = _arange_out
rt._SPECIAL[aten.arange.start_out] = _arange_out


# --- composite ops that reach the Python key ------------------------------------------------
#
# A CompositeImplicitAutograd op (``reshape``, ``softmax.int``, ``broadcast_tensors``,
# ``to``, ``flatten``...) normally decomposes above autograd and never reaches xlalab. Called
# from *inside* a dispatch (by a decomposition the runtime runs, or by a C++ kernel), it
# does reach ``__torch_dispatch__``, and with no lowering it went to the CPU fallback: a sync
# and a transfer for what is a view or a handful of lowered ops. Run its own decomposition
# instead, as eager would. Ops with a lowering or another handler keep theirs.


def _decompose(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    out = func.decompose(*args, **kwargs)
    return rt.fallback(func, args, kwargs) if out is NotImplemented else out


def _implicit_ops() -> list[OpOverload]:
    ops = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd"):
            continue
        base, _, overload = name[len("aten::") :].partition(".")
        packet = getattr(aten, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if isinstance(op, OpOverload):
            ops.append(op)
    return ops


def _register_implicit() -> None:
    taken = set(rt._SPECIAL) | set(rt.LOWERINGS) | rt.VIEW_OPS | rt.RANDOM_OPS
    for op in _implicit_ops():
        if op not in taken:
            rt._SPECIAL[op] = _decompose


# --- PrivateUse1 kernels: calls that torch routes below the Python key ----------------------
#
# Building a tensor from Python data for an xla tensor (``x[[1, 2]]``'s index list) runs
# ``_to_copy`` with the Python key excluded, so its ``copy_`` reaches ``aten::_copy_from`` on
# PrivateUse1, where the generic boxed fallback trips an internal assert in torch. A kernel of
# its own does the copy the way the runtime does. (Belongs beside the device's factories in
# device.py; registered only where nothing else registered one.)

_COPY_LIB: torch.library.Library | None = None


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    # While dynamo traces, an index list's values are real (torch builds them below the Python
    # key, as constants of the graph): copy them with fake mode set aside.
    with unset_fake_temporarily():
        return rt._copy_(aten.copy_.default, (dst, src), {})


def _efficientzerotensor(
    size: list[int],
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    # Autograd's zero gradients (sgn/abs of real inputs...). The CPU fallback would build a
    # ZeroTensor on the host, which cannot be sent over; plain zeros on the device are the
    # same values.
    return torch.zeros(size, dtype=dtype, device=device)


def _kaiser_window(
    window_length: int,
    periodic: bool = True,
    beta: float = 12.0,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    # torch's kaiser_window has a CPU/CUDA kernel only (its other windows are composites of
    # lowered ops). The same computation from lowered ops: an arange in the window's dtype,
    # then I0(beta * sqrt(|1 - ((a - alpha) / alpha)^2|)) / I0(beta) in its opmath type.
    dtype = dtype or torch.get_default_dtype()
    try:
        torch.kaiser_window(window_length, periodic, beta, dtype=dtype, device="meta")  # eager's checks
    except RuntimeError as e:
        raise RuntimeError(str(e).replace("device=meta", f"device={torch.device(device)}")) from None
    if window_length <= 1:
        return torch.ones(window_length, dtype=dtype, device=device)
    n = window_length + 1 if periodic else window_length
    opmath = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    a = torch.arange(n, dtype=dtype, device=device).to(opmath)
    alpha = (n - 1) / 2.0
    ratio = torch.pow((a - alpha) / alpha, 2.0)
    i0_beta = torch.special.i0(torch.full((), beta, dtype=opmath, device=device))
    window = (torch.special.i0(beta * torch.sqrt(torch.abs(1 - ratio))) / i0_beta).to(dtype)
    return window[: n - 1] if periodic else window


def _kaiser_window_periodic(window_length: int, periodic: bool, **kwargs: Any) -> torch.Tensor:
    return _kaiser_window(window_length, periodic, **kwargs)


_PRIVATEUSE1_KERNELS = {
    "_copy_from": _copy_from,
    "_efficientzerotensor": _efficientzerotensor,
    "kaiser_window": _kaiser_window,
    "kaiser_window.periodic": _kaiser_window_periodic,
    "kaiser_window.beta": _kaiser_window,
}
for _name, _kernel in _PRIVATEUSE1_KERNELS.items():
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{_name}", "PrivateUse1"):
        if _COPY_LIB is None:
            _COPY_LIB = torch.library.Library("aten", "IMPL")
        _COPY_LIB.impl(_name, _kernel, "PrivateUse1")

_register_implicit()
