"""Autocast on the ``xla`` device: ``torch.autocast("xla")`` and ``torch_xla.amp.autocast``.

PyTorch routes ops on an autocast-enabled ``xla`` tensor through the ``AutocastPrivateUse1``
dispatch key, where it has no kernels of its own. These are registered here, as torch_xla
registers them for its device: the matrix-multiply and convolution family runs in the
autocast dtype (bfloat16 by default), the numerically touchy ops (softmax, norms, losses,
reductions of many values) run in float32, every other op passes through unchanged.
Backward runs in the dtypes the forward used, as with CUDA autocast.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..runtime import backend

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined]

# torch_xla's lists for XLA (autocast_mode.cpp / docs/source/perf/amp.md), by aten name.
LOWER_PRECISION = (
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "convolution",
    "_convolution",
    "addmm",
    "addbmm",
    "baddbmm",
    "addmv",
    "addr",
    "matmul",
    "mm",
    "mv",
    "bmm",
    "linear",
    "einsum",
    "prelu",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
)
FLOAT32 = (
    "batch_norm",
    "log_softmax",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy_loss",
    "nll_loss",
    "nll_loss2d",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "hinge_embedding_loss",
    "layer_norm",
    "group_norm",
    "native_layer_norm",
    "rms_norm",
    "softmax",
    "_softmax",
    "logsumexp",
    "norm",
    # Tensor.norm, torch.linalg.norm and F.normalize reach these, not norm.
    "linalg_vector_norm",
    "linalg_matrix_norm",
    "frobenius_norm",
    "nuclear_norm",
    "cosine_similarity",
    "cdist",
    "pdist",
    "renorm",
    "sum",
    "prod",
    "cumsum",
    "cumprod",
    "exp",
    "expm1",
    "softplus",
    "log",
    "log10",
    "log2",
    "log1p",
    "pow",
    "reciprocal",
    "rsqrt",
    "sinh",
    "cosh",
    "tan",
    "acos",
    "asin",
    "erfinv",
    "dist",
    "var",
    "std",
)
# Ops whose floating inputs are cast to the widest of them (torch_xla's and eager CPU's list):
# index_copy requires its source in self's dtype.
PROMOTE = ("index_copy",)


def _eligible(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype is not torch.float64


def _cast_kernel(op: Any, policy: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if policy == "promote":
            dtype = torch.get_autocast_dtype("xla")
            for a in (*args, *kwargs.values()):
                if _eligible(a):  # float64 is left out, as eager's CPU autocast leaves it
                    dtype = torch.promote_types(dtype, a.dtype)
        else:
            dtype = torch.get_autocast_dtype("xla") if policy == "lower" else torch.float32

        def cast(a: Any) -> Any:
            return a.to(dtype) if _eligible(a) and a.dtype is not dtype else a

        # The op is called again below the autocast key, so it reaches autograd and the device.
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*tree_map(cast, args), **tree_map(cast, kwargs))

    return kernel


_LIBRARIES: list[torch.library.Library] = []


def install() -> None:
    """Register the kernels (once per process)."""
    if _LIBRARIES:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    aten = torch.library.Library("aten", "IMPL")
    for names, policy in ((LOWER_PRECISION, "lower"), (FLOAT32, "float32"), (PROMOTE, "promote")):
        for name in names:
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                schema = op._schema
                if any(a.is_out for a in schema.arguments) or schema.name.endswith("_"):
                    continue  # out= and in-place variants are not autocast (as in PyTorch)
                qualified = name if overload == "default" else f"{name}.{overload}"
                try:
                    aten.impl(qualified, _cast_kernel(op, policy), _KEY)
                except RuntimeError:
                    continue  # an overload the dispatcher does not let us override
    _LIBRARIES.extend([fallthrough, aten])
    # PyTorch's default for a PrivateUse1 device is float16; torch_xla's for xla is bfloat16.
    torch.set_autocast_dtype("xla", torch.bfloat16)


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("xla")``, with torch_xla's signature: ``autocast(device, enabled=True,
    dtype=None, cache_enabled=True)``. The dtype defaults to bfloat16 (float16 is accepted
    on GPUs, where XLA computes in it)."""

    def __init__(
        self,
        device: Any,
        enabled: bool = True,
        dtype: torch.dtype | None = None,
        cache_enabled: bool = True,
    ) -> None:
        if "xla" not in str(device):
            raise ValueError(f"torch_xla.amp.autocast is for xla devices; got {device!r}")
        if dtype is None:
            dtype = torch.bfloat16
        if dtype not in (torch.bfloat16, torch.float16):
            warnings.warn(
                f"xla autocast supports bfloat16 and float16, not {dtype}; autocast is disabled",
                stacklevel=2,
            )
            enabled = False
        if dtype is torch.float16 and backend.hw_name() == "TPU":
            warnings.warn("TPUs compute in bfloat16, not float16; using bfloat16", stacklevel=2)
            dtype = torch.bfloat16
        install()
        super().__init__("xla", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)
