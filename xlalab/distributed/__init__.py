"""Several devices: DataParallel, per-device loaders, collectives and multi-host runs.

- :mod:`xlalab.distributed.data_parallel`: the seeds' ``DataParallel`` (``torch_xla_py.data_parallel``);
- :mod:`xlalab.distributed.parallel_loader`: ``ParallelLoader``, ``MpDeviceLoader``;
- ``xlalab.core.xla_model``: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
  ``collective_permute``, ``collective_broadcast`` (XLA collectives in the replicated program),
  ``mesh_reduce``, ``get_ordinal``, ``xrt_world_size``;
- :func:`initialize`: join a multi-host run (JAX's distributed runtime), see docs/distributed.md.
"""

from __future__ import annotations

from ..runtime import backend, config
from ..runtime.replicated import ReplicaError, programs


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """Join a multi-host run: process ``process_id`` of ``num_processes``, coordinated by process 0
    at ``coordinator_address`` (``host:port``). Call it at start, before the first xla device is
    used; the environment variables XLALAB_COORDINATOR_ADDRESS, XLALAB_NUM_PROCESSES and
    XLALAB_PROCESS_ID do the same without changing the script.
    """
    if backend.started():
        raise backend.DeviceError(
            "xlalab.distributed.initialize() must be called before the first xla device is used: "
            "JAX's distributed runtime starts with its backends. Call it at start, or set "
            "XLALAB_COORDINATOR_ADDRESS, XLALAB_NUM_PROCESSES and XLALAB_PROCESS_ID in the environment."
        )
    config.set("XLALAB_COORDINATOR_ADDRESS", coordinator_address)
    config.set("XLALAB_NUM_PROCESSES", num_processes)
    config.set("XLALAB_PROCESS_ID", process_id)
    backend.platform()  # starts JAX's backends (and the distributed runtime) now: errors show here


def process_index() -> int:
    return backend.process_index()


def process_count() -> int:
    return backend.process_count()


__all__ = ["ReplicaError", "initialize", "process_count", "process_index", "programs"]
