"""JAX as compiler and PJRT runtime: platform choice, devices, host transfers."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import torch

from . import config
from .dtypes import to_jnp

# int64/float64 must keep their width: JAX silently truncates them without x64.
jax.config.update("jax_enable_x64", True)

_PLATFORM_ALIASES = {"CPU": "cpu", "CUDA": "gpu", "GPU": "gpu", "TPU": "tpu"}


class DeviceError(RuntimeError):
    """An xla device was asked for that this machine does not have."""


def _available_platforms() -> list[str]:
    found = []
    for name in ("tpu", "gpu", "cpu"):
        try:
            if jax.devices(name):
                found.append(name)
        except RuntimeError:
            pass
    return found


@functools.cache
def platform() -> str:
    """The JAX platform behind xla devices (``cpu``, ``gpu``, ``tpu``)."""
    asked = config.get("PJRT_DEVICE").strip().upper()
    available = _available_platforms()
    if not asked:
        return available[0]
    if asked not in _PLATFORM_ALIASES:
        raise DeviceError(
            f"PJRT_DEVICE={asked!r} is not a platform xlalab knows; use one of CPU, CUDA, TPU "
            f"(this machine has: {', '.join(p.upper() for p in available)})."
        )
    name = _PLATFORM_ALIASES[asked]
    if name not in available:
        raise DeviceError(
            f"PJRT_DEVICE={asked} was asked for, but JAX finds no {asked} device here "
            f"(available: {', '.join(p.upper() for p in available)}). "
            f"Set PJRT_DEVICE={available[0].upper()} or unset it, or install the JAX build for {asked}."
        )
    return name


@functools.cache
def jax_devices() -> tuple[Any, ...]:
    return tuple(jax.devices(platform()))


def device_count() -> int:
    return len(jax_devices())


def hw_name() -> str:
    """torch_xla's hardware name: CPU, CUDA or TPU."""
    return {"cpu": "CPU", "gpu": "CUDA", "tpu": "TPU"}[platform()]


def jax_device(index: int) -> Any:
    devs = jax_devices()
    if not 0 <= index < len(devs):
        raise DeviceError(
            f"xla:{index} does not exist: this machine has {len(devs)} {hw_name()} xla device(s), "
            f"xla:0..xla:{len(devs) - 1}."
        )
    return devs[index]


def to_device(t: torch.Tensor, index: int, dtype: torch.dtype | None = None) -> Any:
    """Copy a CPU tensor to xla:index as a JAX array (of ``dtype`` if given)."""
    t = t.detach()
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    t = t.resolve_conj().resolve_neg().contiguous()
    if t.dtype == torch.bfloat16:
        host = t.view(torch.int16).numpy().view(to_jnp(torch.bfloat16))
    else:
        host = t.numpy()
    # device_put may alias a NumPy buffer on the CPU platform; the torch tensor it views
    # can change later, so hand JAX a private copy.
    return jax.device_put(np.array(host, copy=True), jax_device(index))


def to_host(array: Any, dtype: torch.dtype) -> torch.Tensor:
    """Copy a JAX array back to a CPU tensor of ``dtype``."""
    host = np.asarray(array)
    if dtype == torch.bfloat16:
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(host, copy=True))
