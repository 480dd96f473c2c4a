"""torch_xla's ``xla_multiprocessing.spawn`` for xlalab: one replica per device, in threads.

torch_xla starts a process per device. xlalab drives every device from one process, so
``spawn`` runs ``fn(index, *args)`` in one thread per device instead, each thread a replica
of one group: inside it ``xm.xla_device()`` is the replica's device, ``xm.get_ordinal()``
and ``xm.xrt_world_size()`` its place in the group, and ``mark_step``/``optimizer_step``
run every replica's step as one SPMD program (``xlalab.runtime.replicated``). In a
multi-host run each process spawns over its own devices and the group spans all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..runtime import backend, replicated


def spawn(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> list[Any]:
    """Run ``fn(index, *args)`` once per xla device (the first ``nprocs``); the results by index.

    ``join``, ``daemon`` and ``start_method`` are torch_xla's process options, accepted for
    compatibility: the replicas are threads and ``spawn`` returns when all of them are done.
    """
    n = backend.device_count() if nprocs is None else int(nprocs)
    if not 1 <= n <= backend.device_count():
        raise ValueError(f"spawn(nprocs={nprocs}): this process has {backend.device_count()} xla device(s)")
    group = replicated.ReplicaGroup(list(range(n)))
    return group.run(lambda replica: fn(replica.index, *args), name="spawn replica")


class MpModelWrapper:
    """torch_xla's wrapper that shares one model between spawned processes. xlalab's replicas
    are threads of one process, so they share the model already: ``to(device)`` gives each
    replica its own copy on its device, made from the one model."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._lock = threading.Lock()

    def to(self, device: Any) -> Any:
        import copy

        with self._lock:
            return copy.deepcopy(self._model).to(device)


class MpSerialExecutor:
    """Runs functions one replica at a time (``run(fn)``), e.g. a dataset download or a file
    write that must not happen concurrently."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            return fn()


__all__ = ["MpModelWrapper", "MpSerialExecutor", "spawn"]
