"""The parts of ``torch_xla.core.xla_model`` a training script uses, over xlalab's runtime."""

from __future__ import annotations

from typing import Any

import torch

from ..runtime import backend
from ..runtime import mark_step as _mark_step
from ..runtime import wait_device_ops as _wait
from ..runtime.device import xla_device as _xla_device


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """``xla:n`` (``xla:0`` by default). ``devkind`` must match this machine's platform if given."""
    if devkind is not None and devkind.upper() not in (
        backend.hw_name(),
        "GPU" if backend.hw_name() == "CUDA" else "",
    ):
        raise backend.DeviceError(
            f"xla_device(devkind={devkind!r}): this machine's xla devices are {backend.hw_name()}; "
            f"pass devkind={backend.hw_name()!r} or leave it out."
        )
    return _xla_device(n)


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None) -> list[str]:
    """The xla devices as strings (``['xla:0', ...]``), as torch_xla returns them."""
    n = backend.device_count()
    if max_devices is not None:
        n = min(n, max_devices)
    return [f"xla:{i}" for i in range(n)]


def xla_device_hw(device: Any) -> str:
    """The hardware behind an xla device: ``CPU``, ``CUDA`` or ``TPU``."""
    d = torch.device(device) if not isinstance(device, torch.device) else device
    if d.type != "xla":
        raise ValueError(f"xla_device_hw() needs an xla device, got {d}")
    return backend.hw_name()


def xla_real_devices(devices: list[Any]) -> list[str]:
    return [f"{backend.hw_name()}:{torch.device(d).index or 0}" for d in devices]


def mark_step(wait: bool = False) -> None:
    """The step barrier: everything pending is compiled (once) and executed."""
    _mark_step(wait)


def wait_device_ops(devices: list[Any] | None = None) -> None:
    """Block until the device has finished all dispatched work."""
    _wait()


def optimizer_step(
    optimizer: torch.optim.Optimizer, barrier: bool = True, optimizer_args: dict[str, Any] | None = None
) -> Any:
    """``optimizer.step()`` followed by the step barrier (``barrier=False`` leaves it to the caller)."""
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        _mark_step()
    return loss


def get_ordinal() -> int:
    return 0


def xrt_world_size() -> int:
    return 1


world_size = xrt_world_size


def is_master_ordinal(local: bool = True) -> bool:
    return True
