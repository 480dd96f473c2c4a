"""Per-device loaders: ``ParallelLoader`` and ``MpDeviceLoader``, as in torch_xla.

A background thread reads the host loader, deals its batches out to the devices one round
at a time (one batch per device), copies each batch to its device and queues it. The copy
of the next batches overlaps the devices' compute on the current ones; the device queues
are bounded (``device_prefetch_size``), so the thread stays only a few batches ahead.

Every device must do the same work in every step (the replicas' steps run as one program),
so a round is handed out only if it is complete and its batches have the same shapes. The
last, incomplete batches of an epoch are therefore dropped, as the seeds warn ("iterators
may drop the last few batches in the input iterator"); when that leaves an epoch with no
work at all, a :class:`DroppedBatchesWarning` says so.
"""

from __future__ import annotations

import logging
import queue
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from ..core import xla_model as xm

logger = logging.getLogger("xlalab")


class DroppedBatchesWarning(UserWarning):
    """Batches were dropped so that every device does the same work, leaving nothing to do."""


class _End:
    """Queued after a device's last batch (or with the host loader's error)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def _signature(batch: Any) -> Any:
    """The shapes and dtypes of every tensor in a batch: batches of a round must agree."""
    if isinstance(batch, torch.Tensor):
        return (tuple(batch.shape), batch.dtype)
    if isinstance(batch, dict):
        return tuple((k, _signature(v)) for k, v in batch.items())
    if isinstance(batch, (list, tuple)):
        return tuple(_signature(v) for v in batch)
    return type(batch).__name__


class ParallelLoader:
    """Wraps a host ``loader`` and feeds one :class:`PerDeviceLoader` per device.

    ``fixed_batch_size`` also drops rounds whose shapes differ from the first round's (so a
    smaller last batch can never cause a recompilation). ``batchdim``,
    ``batches_per_execution`` and ``host_to_device_transfer_threads`` are torch_xla's and
    accepted for compatibility; xlalab moves whole batches with one thread.

    In SPMD mode, ``input_sharding`` shards each batch as it is handed out: an
    ``xs.ShardingSpec`` for every tensor of the batch, or a dict of them keyed like the batch's
    dict (``{"x": xs.ShardingSpec(mesh, ("data", None)), ...}``; keys not named stay unsharded).
    """

    def __init__(
        self,
        loader: Iterable[Any],
        devices: Sequence[Any],
        batchdim: int = 0,
        batches_per_execution: int = 1,
        loader_prefetch_size: int = 16,
        device_prefetch_size: int = 8,
        host_to_device_transfer_threads: int = 1,
        input_sharding: Any = None,
        fixed_batch_size: bool = False,
        *,
        with_index: bool = False,
        mark_step: bool = True,
        warn_empty: bool = True,
    ) -> None:
        if not devices:
            raise ValueError("ParallelLoader needs at least one device")
        self._loader = loader
        self._devices = [torch.device(d) for d in devices]
        self._input_sharding = _check_input_sharding(input_sharding)
        self._fixed_batch_size = fixed_batch_size
        self._with_index = with_index
        self._mark_step = mark_step
        self._warn_empty = warn_empty
        self._queues = {str(d): queue.Queue[Any](maxsize=max(1, device_prefetch_size)) for d in self._devices}
        self._closed = threading.Event()
        self._warned = False
        self._lock = threading.Lock()
        self.batches_read = 0  # host batches seen this epoch
        self.rounds = 0  # rounds handed out: each device got this many batches
        self.dropped = 0  # host batches dropped (incomplete or mismatched rounds)
        self._thread = threading.Thread(target=self._worker, name="xlalab ParallelLoader", daemon=True)
        self._thread.start()

    @property
    def batches_per_execution(self) -> int:
        return 1

    def per_device_loader(self, device: Any) -> PerDeviceLoader:
        key = str(torch.device(device))
        if key not in self._queues:
            raise ValueError(f"{key} is not one of this loader's devices: {', '.join(self._queues)}")
        return PerDeviceLoader(self, torch.device(device))

    def per_device_samples(self) -> int:
        """Batches each device gets per epoch (the host loader's length divided by the devices)."""
        return len(self._loader) // len(self._devices)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the background thread (it also stops by itself at the end of the host loader)."""
        self._closed.set()
        for q in self._queues.values():  # unblock a worker waiting on a full queue
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self._thread.join(timeout=10)

    # ---- the background thread
    def _put(self, device: torch.device, item: Any) -> bool:
        q = self._queues[str(device)]
        while not self._closed.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _worker(self) -> None:
        error: BaseException | None = None
        try:
            first: Any = None
            batches: list[Any] = []
            n = len(self._devices)
            for batch in self._loader:
                if self._closed.is_set():
                    return
                self.batches_read += 1
                batches.append(batch)
                if len(batches) < n:
                    continue
                signatures = {_signature(b) for b in batches}
                if first is None and len(signatures) == 1:
                    first = next(iter(signatures))
                if len(signatures) != 1 or (self._fixed_batch_size and signatures != {first}):
                    self.dropped += n
                else:
                    for device, b in zip(self._devices, batches):
                        moved = xm.send_cpu_data_to_device(b, device)
                        if type(b) is torch.Tensor:
                            moved = moved[0]  # torch_xla's list of one, for a lone tensor
                        if not self._put(device, moved):
                            return
                    self.rounds += 1
                batches = []
            self.dropped += len(batches)
        except BaseException as e:  # handed to the consumers, which raise it
            error = e
        finally:
            for device in self._devices:
                self._put(device, _End(error))

    def _at_end(self) -> None:
        """Called by a device loader that reached the end: say so if the epoch did nothing."""
        with self._lock:
            if self._warned or not self._warn_empty:
                return
            self._warned = True
        if self.rounds == 0:
            # _at_end <- next <- __next__ <- the user's for loop
            warnings.warn(empty_epoch_message(self), DroppedBatchesWarning, stacklevel=4)
        elif self.dropped:
            logger.info(dropped_message(self))


def empty_epoch_message(loader: ParallelLoader, who: str = "ParallelLoader") -> str:
    n = len(loader._devices)
    return (
        f"{who}: this epoch did nothing. The loader gave {loader.batches_read} batch(es) for {n} device(s); "
        f"every step needs one same-shaped batch per device, so the last incomplete batches are dropped "
        f"(all {loader.dropped} of them here) to give every device the same work. With a small dataset, "
        "use a smaller batch size so each device gets at least one batch."
    )


def dropped_message(loader: ParallelLoader, who: str = "ParallelLoader") -> str:
    return (
        f"{who}: dropped the last {loader.dropped} of {loader.batches_read} batch(es) so that each of the "
        f"{len(loader._devices)} device(s) does the same {loader.rounds} step(s)."
    )


def _check_input_sharding(input_sharding: Any) -> Any:
    """``input_sharding`` as given, once it is known to be usable (SPMD mode, sharding specs)."""
    if input_sharding is None:
        return None
    from .spmd.xla_sharding import ShardingSpec, _require_spmd

    _require_spmd("ParallelLoader(input_sharding=...)")
    specs = input_sharding.values() if isinstance(input_sharding, dict) else [input_sharding]
    for spec in specs:
        if not isinstance(spec, ShardingSpec):
            raise TypeError(
                f"input_sharding got a {type(spec).__name__}: give a torch_xla.distributed.spmd.ShardingSpec "
                "(xs.ShardingSpec(mesh, ('data', None))), or a dict of them keyed like the batch's dict"
            )
    return input_sharding


def _shard_batch(batch: Any, input_sharding: Any) -> Any:
    """``batch`` with its tensors sharded as ``input_sharding`` says (a spec for all, or per key)."""
    if not isinstance(input_sharding, dict):
        return _apply_spec(batch, input_sharding)
    if not isinstance(batch, dict):
        raise TypeError(
            f"input_sharding is a dict keyed like a dict batch ({', '.join(map(repr, input_sharding))}), "
            f"but the loader gave a {type(batch).__name__}: give one ShardingSpec for all its tensors"
        )
    missing = [k for k in input_sharding if k not in batch]
    if missing:
        raise ValueError(
            f"input_sharding names {', '.join(map(repr, missing))}, which the batch does not have "
            f"(its keys: {', '.join(map(repr, batch))})"
        )
    return type(batch)(
        (k, _apply_spec(v, input_sharding[k]) if k in input_sharding else v) for k, v in batch.items()
    )


def _apply_spec(x: Any, spec: Any) -> Any:
    if isinstance(x, torch.Tensor):
        spec.apply(x)  # lays the device data out across the mesh (the tensor itself is kept)
        return x
    if isinstance(x, dict):
        return type(x)((k, _apply_spec(v, spec)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[_apply_spec(v, spec) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_apply_spec(v, spec) for v in x)
    return x


class PerDeviceLoader:
    """One device's batches from a :class:`ParallelLoader`, already on the device.

    Like torch_xla's, it calls ``xm.mark_step()`` before handing out each batch and at the
    end (unless the ParallelLoader was made with ``mark_step=False``, as DataParallel does:
    the seeds' loop ends every step with ``xm.optimizer_step``). DataParallel's loaders yield
    ``(index, batch)``, as the seeds' ``for _, (data, target) in loader`` expects.
    """

    def __init__(self, loader: ParallelLoader, device: torch.device) -> None:
        self._loader = loader
        self._device = device
        self._queue = loader._queues[str(device)]
        self._index = 0
        self._finished = False
        self._owns_loader = False

    def __del__(self) -> None:
        if self._owns_loader:
            self._loader._closed.set()  # the background thread stops at its next put

    def __iter__(self) -> Iterator[Any]:
        return self

    def __len__(self) -> int:
        return self._loader.per_device_samples()

    def __next__(self) -> Any:
        return self.next()

    def next(self) -> Any:
        if self._finished:
            raise StopIteration
        if self._loader._mark_step:
            xm.mark_step()
        item = self._queue.get()
        if isinstance(item, _End):
            self._finished = True
            if item.error is not None:
                raise item.error
            self._loader._at_end()
            raise StopIteration
        if self._loader._input_sharding is not None:
            # Here, in the consumer's thread: annotations are the graph's, never a loader thread's.
            item = _shard_batch(item, self._loader._input_sharding)
        index = self._index
        self._index += 1
        return (index, item) if self._loader._with_index else item


class MpDeviceLoader:
    """torch_xla's loader for one device: each ``iter()`` starts a :class:`ParallelLoader`
    over ``[device]`` (background host-to-device copies, a ``mark_step`` per batch)."""

    def __init__(self, loader: Iterable[Any], device: Any, **kwargs: Any) -> None:
        self._loader = loader
        self._device = device
        self._kwargs = kwargs

    def __iter__(self) -> Iterator[Any]:
        per_device = ParallelLoader(self._loader, [self._device], **self._kwargs).per_device_loader(
            self._device
        )
        per_device._owns_loader = True  # a loop that stops early must not leave the thread waiting
        return per_device

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]


__all__ = ["DroppedBatchesWarning", "MpDeviceLoader", "ParallelLoader", "PerDeviceLoader"]
