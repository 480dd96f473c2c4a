"""The runtime queries of ``torch_xla.runtime`` (imported as ``xr``), over xlalab's backend.

xlalab is one process driving the xla devices JAX finds, so the process-level answers are
fixed (one process, ordinal 0, no SPMD). The device-level answers come from the platform.
With one CPU device the values are those torch_xla 2.9 prints (reference ``01_devices.txt``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..runtime import backend


def set_device_type(pjrt_device: str) -> None:
    """Choose the platform (``CPU``, ``CUDA``, ``TPU``) before the first xla device is used,
    as ``PJRT_DEVICE`` does."""
    from ..runtime import config

    if backend.started():
        if pjrt_device.upper() in (backend.hw_name(), "GPU" if backend.hw_name() == "CUDA" else ""):
            return
        raise backend.DeviceError(
            f"set_device_type({pjrt_device!r}): the xla devices are already {backend.hw_name()}; "
            "call it before the first xla device is used, or set PJRT_DEVICE at start"
        )
    config.set("PJRT_DEVICE", pjrt_device)


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
    return backend.global_device_count()  # every process's devices


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
    return _spmd_module() is not None and bool(getattr(_spmd_module(), "is_spmd", lambda: False)())


def _spmd_module() -> Any:
    import importlib.util

    if importlib.util.find_spec("xlalab.distributed.spmd") is None:
        return None
    import importlib

    return importlib.import_module("xlalab.distributed.spmd")


def use_spmd(auto: bool = False) -> None:
    """Run the program SPMD over every device: tensors are sharded by
    ``torch_xla.distributed.spmd.mark_sharding`` and XLA's partitioner splits the program."""
    spmd = _spmd_module()
    if spmd is None or not hasattr(spmd, "use_spmd"):
        raise NotImplementedError(
            "xr.use_spmd(): this xlalab has no SPMD partitioning (torch_xla.distributed.spmd). "
            "Data parallelism over several devices works: xmp.spawn or "
            "torch_xla.distributed.data_parallel.DataParallel (see docs/distributed.md)."
        )
    spmd.use_spmd(auto=auto)


def is_bf16_supported() -> bool:
    """Whether bfloat16 tensors compute on the xla devices (true on CPU, GPU and TPU through XLA)."""
    try:
        import jax.numpy as jnp

        jnp.ones((1,), dtype=jnp.bfloat16, device=backend.jax_device(0)).block_until_ready()
        return True
    except Exception:
        return False


def local_process_count() -> int:
    """Processes on this host: one (xlalab drives all of a host's devices from one process)."""
    return 1


def addressable_runtime_device_count() -> int:
    """Devices this process can address."""
    return backend.device_count()


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Keep compiled programs on disk at ``path`` (JAX's persistent compilation cache), so a
    later run skips XLA compiles it has seen. Call before the first compile.

    ``readonly`` is accepted, but JAX's cache has no read-only mode: programs this process
    compiles are added to the cache too."""
    import os

    import jax

    from ..runtime import graph

    if graph.CACHE:
        raise RuntimeError(
            "xr.initialize_cache() must be called before the first graph is compiled; "
            f"{len(graph.CACHE)} are compiled already. Call it at the start of the program."
        )
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.fspath(path))
    # Every program, however small or fast to compile: the cache is what the user asked for.
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    os.environ["XLA_PERSISTENT_CACHE_PATH"] = os.fspath(path)
    os.environ["XLA_PERSISTENT_CACHE_READ_ONLY"] = "1" if readonly else "0"


def get_num_cached_compilation_graph() -> int:
    """How many compiled graphs this process holds in memory (single-device and replicated)."""
    from ..runtime import graph, replicated

    return len(graph.CACHE) + len(replicated.PROGRAMS)


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
    "addressable_runtime_device_count",
    "device_type",
    "get_master_ip",
    "get_num_cached_compilation_graph",
    "global_device_count",
    "global_ordinal",
    "global_runtime_device_attributes",
    "global_runtime_device_count",
    "host_index",
    "initialize_cache",
    "is_bf16_supported",
    "is_spmd",
    "local_device_count",
    "local_ordinal",
    "local_process_count",
    "process_count",
    "process_index",
    "runtime_device_attributes",
    "set_device_type",
    "use_spmd",
    "world_size",
]
