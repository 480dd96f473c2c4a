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
    torch.bool: jnp.bool_,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
}
JNP_TO_TORCH: dict[Any, torch.dtype] = {np.dtype(v): k for k, v in TORCH_TO_JNP.items()}


def to_jnp(dtype: torch.dtype) -> Any:
    try:
        return TORCH_TO_JNP[dtype]
    except KeyError:
        raise TypeError(
            f"xlalab has no XLA type for {dtype}; supported: "
            + ", ".join(str(d) for d in TORCH_TO_JNP)
        ) from None


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
