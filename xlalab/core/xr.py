"""The runtime queries of ``torch_xla.runtime`` (imported as ``xr``), over xlalab's backend.

xlalab is one process driving the xla devices JAX finds, so the process-level answers are
fixed (one process, ordinal 0, no SPMD). The device-level answers come from the platform.
With one CPU device the values are those torch_xla 2.9 prints (reference ``01_devices.txt``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..runtime import backend


def device_type() -> str:
    """The hardware behind the xla devices: ``CPU``, ``CUDA`` or ``TPU``."""
    return backend.hw_name()


def global_device_count() -> int:
    return backend.device_count()


def local_device_count() -> int:
    return backend.device_count()


def addressable_device_count() -> int:
    return backend.device_count()


def global_runtime_device_count() -> int:
    return backend.device_count()


def world_size() -> int:
    # torch_xla counts replicas, which exist only inside a multiprocess spawn; one process is 1.
    return 1


def global_ordinal() -> int:
    return 0


def local_ordinal() -> int:
    return 0


def process_index() -> int:
    return 0


def process_count() -> int:
    return 1


def host_index() -> int:
    return 0


def is_spmd() -> bool:
    return False


def get_master_ip() -> str:
    # There is nothing to discover for one local process; torch_xla refuses the same way on CPU.
    raise RuntimeError(f"IP discovery not supported for device: {device_type()}")


def global_runtime_device_attributes() -> list[dict[str, Any]]:
    """One dict per device, named as torch_xla names real devices (``CPU:0``)."""
    return [{"name": f"{device_type()}:{i}"} for i in range(backend.device_count())]


def runtime_device_attributes(device: Any = None) -> dict[str, Any]:
    """Attributes of one device; the CPU platform has none, as in torch_xla."""
    if device is not None:
        d = torch.device(device)
        if d.type != "xla":
            raise ValueError(f"runtime_device_attributes() needs an xla device, got {d}")
        backend.jax_device(d.index or 0)  # a clear error for a device that does not exist
    return {}


__all__ = [
    "addressable_device_count",
    "device_type",
    "get_master_ip",
    "global_device_count",
    "global_ordinal",
    "global_runtime_device_attributes",
    "global_runtime_device_count",
    "host_index",
    "is_spmd",
    "local_device_count",
    "local_ordinal",
    "process_count",
    "process_index",
    "runtime_device_attributes",
    "world_size",
]
