"""``xla_distribute_tensor`` / ``xla_distribute_module``: the DTensor-style entry points.

A mesh is an xlalab ``Mesh`` or anything shaped like torch's ``DeviceMesh`` (a ``.mesh`` grid of
device ids and ``.mesh_dim_names``); placements are torch's ``Shard(dim)`` / ``Replicate()``,
one per mesh dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ...runtime.tensor import XlaTensor
from .mesh import Mesh
from .xla_sharding import PartitionEntry, XLAShardedTensor, mark_sharding


def as_mesh(device_mesh: Any) -> Mesh:
    if isinstance(device_mesh, Mesh):
        return device_mesh
    grid = getattr(device_mesh, "mesh", None)
    if grid is None:
        raise TypeError(f"device_mesh must be a Mesh or a torch DeviceMesh, got {type(device_mesh).__name__}")
    ids = np.asarray(grid.tolist() if isinstance(grid, torch.Tensor) else grid)
    return Mesh(ids.reshape(-1), ids.shape, getattr(device_mesh, "mesh_dim_names", None))


def partition_spec(placements: Sequence[Any], mesh: Mesh, ndim: int) -> tuple[PartitionEntry, ...]:
    """torch placements (one per mesh dimension) as a partition spec (one entry per tensor dim)."""
    if len(placements) != len(mesh.mesh_shape):
        raise ValueError(
            f"give one placement per mesh dimension: {len(mesh.mesh_shape)}, got {len(placements)}"
        )
    axes: list[list[str]] = [[] for _ in range(ndim)]
    for mesh_dim, p in enumerate(placements):
        dim = getattr(p, "dim", None)
        if dim is None:
            if type(p).__name__ != "Replicate":
                raise ValueError(f"placement {p!r} is not supported: use Shard(dim) or Replicate()")
            continue
        axes[dim % ndim].append(mesh.axis_names[mesh_dim])
    return tuple(None if not a else a[0] if len(a) == 1 else tuple(a) for a in axes)


def xla_distribute_tensor(
    tensor: torch.Tensor, device_mesh: Any, placements: Sequence[Any] | None = None
) -> XLAShardedTensor:
    """``tensor`` on the xla device, sharded over ``device_mesh`` as ``placements`` say (all
    ``Replicate()`` when None)."""
    mesh = as_mesh(device_mesh)
    if not isinstance(tensor, XlaTensor):
        tensor = tensor.to("xla")
    spec = (None,) * tensor.dim() if placements is None else partition_spec(placements, mesh, tensor.dim())
    return mark_sharding(tensor, mesh, spec)


def xla_distribute_module(
    module: torch.nn.Module,
    device_mesh: Any = None,
    partition_fn: Callable[[str, torch.nn.Module, Mesh], None] | None = None,
    input_fn: Callable[[Any, Mesh], Any] | None = None,
    output_fn: Callable[[Any, Mesh], Any] | None = None,
) -> torch.nn.Module:
    """Move ``module`` to xla and shard it: ``partition_fn(name, submodule, mesh)`` runs for every
    submodule (without one, every parameter is replicated); ``input_fn(inputs, mesh)`` and
    ``output_fn(outputs, mesh)`` become forward hooks (to shard inputs and outputs)."""
    from .mesh import get_1d_mesh, get_global_mesh

    mesh = as_mesh(device_mesh) if device_mesh is not None else (get_global_mesh() or get_1d_mesh())
    module = module.to("xla")
    if partition_fn is not None:
        for name, sub in module.named_modules():
            partition_fn(name, sub, mesh)
    else:
        for p in module.parameters():
            mark_sharding(p, mesh, (None,) * p.dim())
    if input_fn is not None:
        fn_in = input_fn
        module.register_forward_pre_hook(lambda _m, inputs: fn_in(inputs, mesh))
    if output_fn is not None:
        fn_out = output_fn
        module.register_forward_hook(lambda _m, _inputs, outputs: fn_out(outputs, mesh))
    return module
