"""FSDP through SPMD (torch_xla's ``SpmdFullyShardedDataParallel``, "FSDPv2").

Every parameter is sharded along the mesh's ``fsdp`` axis (its dim 0, or when the axis does not
divide that, its largest dimension the axis divides),
and the module's output is constrained to the batch split over that axis. XLA's partitioner
then gathers each weight where a layer needs it and reduce-scatters its gradient: fully sharded
data parallelism with no wrapper code in the step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...runtime.tensor import XlaTensor
from .mesh import Mesh, get_global_mesh
from .xla_sharding import mark_sharding


def _shard_output_default(output: Any, mesh: Mesh, batch: str | tuple[str, ...]) -> None:
    """Constrain the output's batch dimension (dim 0) to the batch axes."""
    out = output[0] if isinstance(output, (tuple, list)) else output
    out = getattr(out, "logits", out)
    if not isinstance(out, XlaTensor) or out.dim() == 0:
        return
    sizes = mesh.shape()
    blocks = sizes[batch] if isinstance(batch, str) else sizes[batch[0]] * sizes[batch[1]]
    if out.shape[0] % blocks:
        return  # a batch the devices do not divide (a last, short one): the partitioner chooses
    mark_sharding(out, mesh, (batch,) + (None,) * (out.dim() - 1))


class SpmdFullyShardedDataParallel(torch.nn.Module):
    """Wrap ``module`` so its parameters are sharded over ``mesh``'s ``fsdp`` axis (the global mesh
    when ``mesh`` is None). ``shard_output(output, mesh)`` replaces the default constraint of the
    output's dim 0 (pass one when the output is not a tensor or a tuple starting with one).
    ``extra_data_axis`` names a mesh axis the batch is split over too (hybrid sharding: the
    parameters are replicated along it)."""

    def __init__(
        self,
        module: torch.nn.Module,
        mesh: Mesh | None = None,
        shard_output: Callable[[Any, Mesh], None] | None = None,
        auto_wrap_policy: Any = None,
        auto_wrapper_callable: Any = None,
        extra_data_axis: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise ValueError("this module is already wrapped in SpmdFullyShardedDataParallel")
        mesh = mesh if mesh is not None else get_global_mesh()
        if mesh is None:
            raise ValueError(
                "SpmdFullyShardedDataParallel needs a mesh: pass mesh=... or call "
                "torch_xla.distributed.spmd.set_global_mesh(mesh) first"
            )
        if "fsdp" not in mesh.axis_names:
            raise ValueError(
                f"the mesh needs an axis named 'fsdp' to shard over; its axes are {mesh.axis_names}"
            )
        if extra_data_axis is not None and extra_data_axis not in mesh.axis_names:
            raise ValueError(
                f"extra_data_axis {extra_data_axis!r} is not an axis of the mesh {mesh.axis_names}"
            )
        if auto_wrap_policy is not None or auto_wrapper_callable is not None:
            raise NotImplementedError(
                "auto_wrap_policy is not supported here: every parameter of the module is sharded "
                "already, so wrap the whole model once"
            )
        self.module = module.to("xla")
        self.mesh = mesh
        self._shard_output = shard_output
        self._batch_axes: str | tuple[str, ...] = (extra_data_axis, "fsdp") if extra_data_axis else "fsdp"
        size = mesh.shape()["fsdp"]
        for p in self.module.parameters():
            spec: list[str | None] = [None] * p.dim()
            # dim 0 as torch_xla does, else the largest dimension the axis divides.
            dims = [0, *sorted(range(1, p.dim()), key=lambda d: -p.shape[d])] if p.dim() else []
            for d in dims:
                if p.shape[d] % size == 0:
                    spec[d] = "fsdp"
                    break
            mark_sharding(p, mesh, tuple(spec))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output = self.module(*args, **kwargs)
        if self._shard_output is not None:
            self._shard_output(output, self.mesh)
        else:
            _shard_output_default(output, self.mesh, self._batch_axes)
        return output
