"""The seeds' multi-device API: ``DataParallel(network, device_ids)(train_loop_fn, loader)``.

::

    import torch_xla_py.xla_model as xm          # xlalab.core.xla_model
    import torch_xla_py.data_parallel as dp      # this module

    devices = xm.get_xla_supported_devices()
    model_parallel = dp.DataParallel(MNIST, device_ids=devices)

    def train_loop_fn(model, loader, device, context):
        ...
        for _, (data, target) in loader:
            ...
            xm.optimizer_step(optimizer)

    for epoch in range(1, num_epochs + 1):
        model_parallel(train_loop_fn, train_loader)

One replica of the network per device, all built from one copy (so they start identical).
Each call splits the loader's batches over the devices (:class:`ParallelLoader`, dropping
the last incomplete ones) and runs ``train_loop_fn`` once per replica, each in its own
thread as torch_xla did. Inside those threads ``xm.optimizer_step`` all-reduces the
gradients and every barrier is the group's: the replicas' steps compile once and run as one
SPMD program with the all-reduce in it (``xlalab.runtime.replicated``), so the replicas
stay identical. ``device_ids=[]`` runs ``train_loop_fn`` once on PyTorch's own CPU.

Batch norm: with several replicas, batch statistics are averaged across them (synchronized
batch norm, ``sync_batchnorm=True``), so the replicas' running statistics stay identical too
and a step equals one step on the whole (devices x batch) batch. torch_xla kept per-replica
statistics; ``sync_batchnorm=False`` does that (running statistics then drift apart).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from ..core import xla_model as xm
from ..runtime import replicated
from .parallel_loader import (
    DroppedBatchesWarning,
    ParallelLoader,
    dropped_message,
    empty_epoch_message,
    logger,
)


class Context:
    """Per-replica scratch space that lives as long as the DataParallel (torch_xla's Context)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def getattr_or(self, name: str, defval: Any) -> Any:
        """``self.name``, set first to ``defval`` (or ``defval()`` if callable) when missing."""
        value = getattr(self, name, None)
        if value is None:
            value = defval() if callable(defval) else defval
            setattr(self, name, value)
        return value


class DataParallel:
    """Replicates ``network`` over ``device_ids`` and runs a loop function on every replica.

    ``network`` is a module, or a callable that builds one (a module class such as ``MNIST``);
    it is built once and deep-copied to each device. ``device_ids`` default to every xla
    device; ``[]`` means PyTorch's own CPU. ``drop_last`` is accepted for torch_xla's
    signature: incomplete rounds of batches are always dropped (see :class:`ParallelLoader`).
    """

    def __init__(
        self,
        network: nn.Module | Callable[[], nn.Module],
        device_ids: Sequence[Any] | None = None,
        batchdim: int = 0,
        drop_last: bool = False,
        sync_batchnorm: bool = True,
    ) -> None:
        if device_ids is None:
            device_ids = xm.get_xla_supported_devices()
        devices = [torch.device(d) for d in device_ids]
        for d in devices:
            if d.type != "xla":
                raise ValueError(f"DataParallel device_ids are xla devices (xla:N), got {d}")
        module = network if isinstance(network, nn.Module) else network()
        self._device_ids = [str(d) for d in devices]
        self._native_run = not devices
        self._batchdim = batchdim
        self._warned_drop = False
        if self._native_run:
            # No xla device: the network as it is, on PyTorch's own CPU.
            self._devices = [torch.device("cpu")]
            self._models = [module]
            self._group: replicated.ReplicaGroup | None = None
        else:
            self._devices = devices
            self._group = replicated.ReplicaGroup([d.index or 0 for d in devices])
            self._models = [copy.deepcopy(module).to(d) for d in devices]
            if sync_batchnorm and self._group.world_size > 1:
                for m in self._models:
                    _synchronize_batchnorm(m)
        self._contexts = [Context(d) for d in self._devices]

    @property
    def models(self) -> list[nn.Module]:
        """The replicas, one per device (after a step they hold the same values)."""
        return self._models

    @property
    def devices(self) -> list[torch.device]:
        return list(self._devices)

    def __call__(
        self,
        loop_fn: Callable[[nn.Module, Any, torch.device, Context], Any],
        loader: Iterable[Any],
        fixed_batch_size: bool = False,
        batchdim: int = 0,
    ) -> list[Any]:
        """Run ``loop_fn(model, loader, device, context)`` once per replica; their results by device.

        Each replica's loader yields ``(index, batch)`` with the batch already on its device.
        """
        if self._native_run:
            return [loop_fn(self._models[0], enumerate(loader), self._devices[0], self._contexts[0])]
        assert self._group is not None
        para = ParallelLoader(
            loader,
            self._devices,
            fixed_batch_size=fixed_batch_size,
            with_index=True,
            mark_step=False,  # the seeds' loop ends every step with xm.optimizer_step
            warn_empty=False,  # said below, once, at the caller's line
        )
        models, devices, contexts = self._models, self._devices, self._contexts

        def replica_loop(replica: replicated.Replica) -> Any:
            i = replica.index
            return loop_fn(models[i], para.per_device_loader(devices[i]), devices[i], contexts[i])

        try:
            results = self._group.run(replica_loop, name="DataParallel replica")
        finally:
            para.close()
        if para.rounds == 0:
            warnings.warn(empty_epoch_message(para, "DataParallel"), DroppedBatchesWarning, stacklevel=2)
        elif para.dropped and not self._warned_drop:
            self._warned_drop = True
            logger.info(dropped_message(para, "DataParallel"))
        return results


# --------------------------------------------------------------------------- batch norm


class _SynchronizedBatchNorm(nn.modules.batchnorm._BatchNorm):
    """Batch norm whose batch statistics are averaged over the replicas (inside a replica).

    Mixed into the replica's own batch-norm class, so parameters, buffers and hooks stay as
    they are. Each replica has a same-sized batch (the loader guarantees it), so the mean of
    the replicas' means is the mean of the whole batch, and likewise for the variance about
    that mean: the step equals a step on the replicas' batches together. The all-reduces are
    differentiable, so the gradients are those of the whole batch too.
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        replica = replicated.current()
        uses_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if replica is None or replica.world_size == 1 or not uses_batch_stats:
            return super().forward(input)
        self._check_input_dim(input)
        world = replica.world_size
        dims = [0, *range(2, input.dim())]
        shape = [1, input.shape[1]] + [1] * (input.dim() - 2)
        mean = xm.all_reduce(xm.REDUCE_SUM, input.mean(dims), scale=1.0 / world)
        centered = input - mean.view(shape)
        var = xm.all_reduce(xm.REDUCE_SUM, (centered * centered).mean(dims), scale=1.0 / world)
        out = centered * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                n = input.numel() // input.shape[1] * world
                assert self.running_mean is not None and self.running_var is not None
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                # Running variance is unbiased, as in torch's batch norm.
                self.running_var.mul_(1 - factor).add_(var.detach() * (n / max(n - 1, 1)), alpha=factor)
        return out  # type: ignore[no-any-return]


_SYNCED: dict[type, type] = {}
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _synchronize_batchnorm(model: nn.Module) -> None:
    for m in model.modules():
        # Only torch's own classes: a subclass may have its own forward, which we must not replace.
        if type(m) in _BATCH_NORMS:
            cls = type(m)
            synced = _SYNCED.get(cls)
            if synced is None:
                synced = _SYNCED[cls] = type(f"Synchronized{cls.__name__}", (_SynchronizedBatchNorm, cls), {})
            m.__class__ = synced


__all__ = ["Context", "DataParallel"]
