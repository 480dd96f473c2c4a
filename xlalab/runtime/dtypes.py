"""Mapping between torch dtypes and the JAX/NumPy dtypes that carry them."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

TORCH_TO_JNP: dict[torch.dtype, Any] = {
    torch.float32: jnp.float32,
    torch.float64: jnp.float64,
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.int64: jnp.int64,
    torch.int32: jnp.int32,
    torch.int16: jnp.int16,
    torch.int8: jnp.int8,
    torch.uint8: jnp.uint8,
    torch.uint16: jnp.uint16,
    torch.uint32: jnp.uint32,
    torch.uint64: jnp.uint64,
    torch.bool: jnp.bool_,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
}
JNP_TO_TORCH: dict[Any, torch.dtype] = {np.dtype(v): k for k, v in TORCH_TO_JNP.items()}

# The precision switches (XLA_USE_BF16 / XLA_USE_F16 / XLA_USE_32BIT_LONG) store a torch dtype
# as another XLA type on the device; the tensor still reports its torch dtype, as in torch_xla.
DEVICE_OVERRIDES: dict[torch.dtype, Any] = {}


def set_precision_switches(bf16: bool, f16: bool, long32: bool) -> None:
    DEVICE_OVERRIDES.clear()
    low = jnp.bfloat16 if bf16 else jnp.float16 if f16 else None
    if low is not None:
        DEVICE_OVERRIDES[torch.float32] = low
        DEVICE_OVERRIDES[torch.float64] = low
    if long32:
        DEVICE_OVERRIDES[torch.int64] = jnp.int32


def host_jnp(dtype: torch.dtype) -> Any:
    """The NumPy/JAX type of ``dtype`` on the host (no precision switch applied)."""
    return TORCH_TO_JNP[dtype]


def to_jnp(dtype: torch.dtype) -> Any:
    """The XLA type that carries ``dtype`` on the device."""
    override = DEVICE_OVERRIDES.get(dtype) if DEVICE_OVERRIDES else None
    if override is not None:
        return override
    try:
        return TORCH_TO_JNP[dtype]
    except KeyError:
        raise TypeError(unsupported(dtype)) from None


def unsupported(dtype: torch.dtype) -> str:
    """Why an xla tensor cannot have ``dtype``, and what to use instead."""
    why = f"xlalab has no XLA type for {dtype}"
    if dtype == torch.complex32:
        # torch makes one from a float16 and a complex operand (a float16 tensor times 1j).
        why += (
            " (XLA has no 16-bit complex numbers, nor has torch_xla): use complex64; a float16 tensor "
            "meeting a complex number makes complex32, so cast it to float32 first"
        )
    return why + "; supported: " + ", ".join(str(d) for d in TORCH_TO_JNP)


def convert(x: Any, want: Any) -> Any:
    """``x`` as an array of the JAX type ``want``: the one way the runtime and its lowerings
    change a value's type. A bool becomes a number through int8: XLA's simplifier turns
    ``float(mask) * y`` into ``select(mask, y, 0)``, which gives +0 where torch's product is
    -0 (a negative y) or NaN (y infinite or NaN)."""
    if x.dtype == want:
        return x
    if x.dtype == jnp.bool_ and jnp.issubdtype(want, jnp.inexact):
        x = x.astype(jnp.int8)
    return x.astype(want)


def to_torch(dtype: Any) -> torch.dtype:
    return JNP_TO_TORCH[np.dtype(dtype)]


def short_name(dtype: torch.dtype) -> str:
    """torch_xla's short type names, as in ``f32[64,1,28,28]``."""
    return _SHORT.get(dtype, str(dtype).removeprefix("torch."))


_SHORT = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "s64",
    torch.int32: "s32",
    torch.int16: "s16",
    torch.int8: "s8",
    torch.uint8: "u8",
    torch.bool: "pred",
    torch.complex64: "c64",
    torch.complex128: "c128",
}
