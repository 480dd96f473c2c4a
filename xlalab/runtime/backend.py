"""JAX as compiler and PJRT runtime: platform choice, devices, host transfers."""

from __future__ import annotations

import functools
import os
import pkgutil
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import torch

from . import config
from .dtypes import DEVICE_OVERRIDES, TORCH_TO_JNP, host_jnp, set_precision_switches, unsupported

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


# ------------------------------------------------------------------- starting JAX's backends
# JAX reads its host device count and its distributed runtime once, when its backends start.
# xlalab starts them on the first use of an xla device (``platform()``), after applying these.

_applied: dict[str, Any] = {}  # the settings in force once the backends started


# XLA may skip a rounding the program asks for ("excess precision": a bfloat16 product kept in
# float32 into the next op). Eager rounds every op's result to its dtype, and so must every
# program: on an H200, 16 of 27 half-precision exactness checks (log_softmax, logit, linspace, an
# integer operand rounded to the half type first) differed from eager with it allowed.
COMPILER_OPTIONS: dict[str, Any] = {"xla_allow_excess_precision": False}

# XLA:GPU compiles float32 division as PTX's div.full (up to two ulps off) and square root
# through libdevice's approximate path, where eager CUDA and eager CPU round both correctly. On
# an H200 (jaxlib 0.11.2) 29% of random float32 quotients, 14% of reciprocals and 17% of square
# roots came out an ulp off, and 0.15% of truncating divisions a whole unit off. These LLVM
# options make XLA's GPU code divide and take roots as IEEE rounds them; XLA reads XLA_FLAGS once,
# when JAX's backends start, so they are added then (an option the user set is left as set).
GPU_IEEE_OPTIONS = ("-nvptx-prec-divf32=2", "-nvvm-reflect-add=__CUDA_PREC_SQRT=1")
_BACKEND_OPTIONS = "--xla_backend_extra_options="


def with_backend_options(flags: str, options: Sequence[str]) -> str:
    """``flags`` (an XLA_FLAGS value) with ``options`` added to its --xla_backend_extra_options,
    leaving out any option whose name the flags already set."""
    parts = flags.split()
    at = next((i for i, p in enumerate(parts) if p.startswith(_BACKEND_OPTIONS)), None)
    present = parts[at][len(_BACKEND_OPTIONS) :].split(",") if at is not None else []
    names = {o.split("=", 1)[0] for o in present if o}
    added = [o for o in options if o.split("=", 1)[0] not in names]
    if not added:
        return flags
    value = _BACKEND_OPTIONS + ",".join([o for o in present if o] + added)
    if at is None:
        return " ".join([*parts, value])
    parts[at] = value
    return " ".join(parts)


def _may_run_on_gpu() -> bool:
    asked = config.get("PJRT_DEVICE").strip().upper()
    if asked:
        return _PLATFORM_ALIASES.get(asked) == "gpu"
    try:
        import jax_plugins  # type: ignore[import-not-found]  # JAX's namespace for PJRT plugins
    except ImportError:
        return False
    return any(m.name.startswith("xla_cuda") for m in pkgutil.iter_modules(jax_plugins.__path__))


def _ieee_gpu_arithmetic() -> None:
    from jax._src import xla_bridge

    if _may_run_on_gpu() and not xla_bridge.backends_are_initialized():
        os.environ["XLA_FLAGS"] = with_backend_options(os.environ.get("XLA_FLAGS", ""), GPU_IEEE_OPTIONS)
    _applied["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")


def _warn_if_gpu_arithmetic_is_approximate() -> None:
    flags = _applied.get("XLA_FLAGS", "")
    if with_backend_options(flags, GPU_IEEE_OPTIONS) != flags:
        warnings.warn(
            "JAX's backends started before xlalab could set XLA_FLAGS, so float32 division and "
            "sqrt on this GPU are up to two ulps off eager's (and truncating or floor divisions can "
            "be a whole unit off). Use the xla device before running JAX code, or start Python with "
            f"XLA_FLAGS='{with_backend_options(flags, GPU_IEEE_OPTIONS)}'.",
            PrecisionWarning,
            stacklevel=2,
        )


def _start() -> None:
    """Apply XLA_NUM_DEVICES, the GPU arithmetic options and the multi-host settings, then let JAX
    start its backends."""
    _ieee_gpu_arithmetic()
    n = config.get("XLA_NUM_DEVICES")
    if n < 0:
        raise DeviceError(f"XLA_NUM_DEVICES={n}: use a positive count (or 0 for JAX's default).")
    coordinator = config.get("XLALAB_COORDINATOR_ADDRESS").strip()
    if n > 0:
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            # Something ran a JAX operation before the first xla device was used. That is
            # fine if it got the same count; otherwise say what to change.
            have = len(jax.devices("cpu"))
            if have != n:
                raise DeviceError(
                    f"XLA_NUM_DEVICES={n} cannot take effect: JAX's backends were already started "
                    f"(with {have} CPU device(s)) by a JAX operation that ran before the first xla "
                    "device was used. Set XLA_NUM_DEVICES in the environment, or call "
                    "xlalab.runtime.config.set('XLA_NUM_DEVICES', n) at start, before anything uses JAX."
                ) from None
    if coordinator:
        from jax._src import distributed

        if distributed.global_state.client is None:  # the user may have initialized it already
            jax.distributed.initialize(
                coordinator_address=coordinator,
                num_processes=config.get("XLALAB_NUM_PROCESSES"),
                process_id=config.get("XLALAB_PROCESS_ID"),
            )
    from . import compile_cache

    compile_cache.configure_from_settings()
    _applied["XLA_NUM_DEVICES"] = n


def started() -> bool:
    """Whether xla devices were used, so XLA_NUM_DEVICES is fixed for this process."""
    return "XLA_NUM_DEVICES" in _applied


def _on_num_devices(n: Any) -> None:
    if started() and n != _applied["XLA_NUM_DEVICES"]:
        # Put the value in force back, so config.get keeps telling the truth, then refuse.
        config._values["XLA_NUM_DEVICES"] = _applied["XLA_NUM_DEVICES"]
        raise DeviceError(
            f"XLA_NUM_DEVICES={n} was set after the first xla device was used; the device count is fixed "
            f"for this process ({device_count()} device(s)). Set it at start: in the environment "
            f"(XLA_NUM_DEVICES={n}) or with xlalab.runtime.config.set('XLA_NUM_DEVICES', {n}) before the "
            "first xla device is used."
        )


config.watch("XLA_NUM_DEVICES", _on_num_devices)


@functools.cache
def platform() -> str:
    """The JAX platform behind xla devices (``cpu``, ``gpu``, ``tpu``)."""
    _start()
    name = _chosen_platform()
    if name == "gpu":
        _warn_if_gpu_arithmetic_is_approximate()
    return name


def _chosen_platform() -> str:
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
    """This process's devices: ``xla:i`` is ``jax_devices()[i]``."""
    name = platform()
    devs = tuple(jax.local_devices(backend=name))
    n = config.get("XLA_NUM_DEVICES")
    if n > 0 and name != "cpu":
        # On GPU/TPU the devices are real: XLA_NUM_DEVICES takes the first N of them.
        if n > len(devs):
            raise DeviceError(f"XLA_NUM_DEVICES={n}, but this machine has {len(devs)} {hw_name()} device(s).")
        devs = devs[:n]
    return devs


@functools.cache
def global_jax_devices() -> tuple[Any, ...]:
    """Every process's devices, in JAX's global order (this process's alone without multi-host)."""
    platform()  # starts JAX as the settings say (XLA_NUM_DEVICES, the distributed runtime)
    if jax.process_count() == 1:
        return jax_devices()
    return tuple(jax.devices(platform()))


def device_count() -> int:
    """This process's xla devices."""
    return len(jax_devices())


def global_device_count() -> int:
    """The xla devices of every process of a multi-host run (``device_count()`` with one)."""
    return len(global_jax_devices())


def process_index() -> int:
    platform()  # starts the distributed runtime if one is configured
    return int(jax.process_index())


def process_count() -> int:
    platform()
    return int(jax.process_count())


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
    if t.dtype not in TORCH_TO_JNP:
        raise RuntimeError(unsupported(t.dtype))
    if t.dtype == torch.bfloat16:
        host = t.view(torch.int16).numpy().view(host_jnp(torch.bfloat16))
    else:
        host = t.numpy()
    if DEVICE_OVERRIDES and t.dtype in DEVICE_OVERRIDES:
        host = _narrow(host, t.dtype)
    # device_put may alias a NumPy buffer on the CPU platform; the torch tensor it views
    # can change later, so hand JAX a private copy.
    return jax.device_put(np.array(host, copy=True), jax_device(index))


def to_host(array: Any, dtype: torch.dtype) -> torch.Tensor:
    """Copy a JAX array back to a CPU tensor of ``dtype`` (also one split across processes)."""
    from .sharding import host_value  # sharding builds on this module

    host = host_value(array)
    if DEVICE_OVERRIDES and dtype in DEVICE_OVERRIDES:
        _warn_once(
            dtype,
            f"values of {dtype} tensors were computed in {np.dtype(DEVICE_OVERRIDES[dtype]).name} "
            "on the device",
        )
        host = host.astype(host_jnp(dtype))
    if dtype == torch.bfloat16:
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(host, copy=True))


# ---------------------------------------------------------------------- precision switches

_SWITCH_OF = {torch.float32: "XLA_USE_BF16", torch.float64: "XLA_USE_BF16", torch.int64: "XLA_USE_32BIT_LONG"}
_warned: set[str] = set()


class PrecisionWarning(UserWarning):
    """A precision switch (XLA_USE_BF16 / XLA_USE_F16 / XLA_USE_32BIT_LONG) changed a value."""


def _switch_name(dtype: torch.dtype) -> str:
    if (
        dtype in (torch.float32, torch.float64)
        and config.get("XLA_USE_F16")
        and not config.get("XLA_USE_BF16")
    ):
        return "XLA_USE_F16"
    return _SWITCH_OF[dtype]


def _warn_once(dtype: torch.dtype, what: str) -> None:
    switch = _switch_name(dtype)
    if switch in _warned:
        return
    _warned.add(switch)
    from .frames import user_frame

    message = (
        f"{switch}=1: {what}, so results can differ from {dtype} arithmetic "
        f"(torch_xla does this silently). Keep values that accumulate, such as running losses, in a "
        f"higher precision on the host, or unset {switch}."
    )
    where = user_frame()  # point at the user's line, not at xlalab's
    if where is None:
        warnings.warn(message, PrecisionWarning, stacklevel=2)
    else:
        warnings.warn_explicit(message, PrecisionWarning, where.file, where.line)


def _narrow(host: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Convert to the switched device type, warning once if that changes a value."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is what we report below
        narrow = host.astype(DEVICE_OVERRIDES[dtype])
        back = narrow.astype(host.dtype)
    changed = (
        ~((back == host) | (np.isnan(back) & np.isnan(host))) if host.dtype.kind == "f" else back != host
    )
    if changed.any():
        i = int(np.flatnonzero(changed)[0])
        _warn_once(
            dtype,
            f"{host.ravel()[i].item()!r} is stored as {back.ravel()[i].item()!r} on the device "
            f"({dtype} as {np.dtype(DEVICE_OVERRIDES[dtype]).name})",
        )
    return narrow


def _on_switch(_: Any) -> None:
    set_precision_switches(
        config.get("XLA_USE_BF16"), config.get("XLA_USE_F16"), config.get("XLA_USE_32BIT_LONG")
    )


for _name in ("XLA_USE_BF16", "XLA_USE_F16", "XLA_USE_32BIT_LONG"):
    config.watch(_name, _on_switch)
