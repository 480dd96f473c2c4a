"""SPMD: one program split across the devices by XLA's partitioner (``torch_xla.distributed.spmd``).

::

    import torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs

    xr.use_spmd()
    mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
    xs.mark_sharding(model.fc1.weight, mesh, ("model", None))
    xs.mark_sharding(batch, mesh, ("data", None))

The lazy graph is the single-device program; ``jax.jit`` compiles it with the annotated
shardings (``NamedSharding`` over a ``jax.sharding.Mesh``), so results equal the unsharded
program's. See docs/spmd.md.
"""

from __future__ import annotations

from .api import xla_distribute_module, xla_distribute_tensor
from .fsdp import SpmdFullyShardedDataParallel
from .mesh import HybridMesh, Mesh, get_1d_mesh, get_global_mesh, set_global_mesh
from .xla_sharding import (
    ShardingSpec,
    ShardingType,
    XLAShard,
    XLAShardedTensor,
    clear_sharding,
    get_sharding_spec,
    is_spmd,
    mark_sharding,
    mark_sharding_with_gradients,
    use_spmd,
)

__all__ = [
    "HybridMesh",
    "Mesh",
    "ShardingSpec",
    "ShardingType",
    "SpmdFullyShardedDataParallel",
    "XLAShard",
    "XLAShardedTensor",
    "clear_sharding",
    "get_1d_mesh",
    "get_global_mesh",
    "get_sharding_spec",
    "is_spmd",
    "mark_sharding",
    "mark_sharding_with_gradients",
    "set_global_mesh",
    "use_spmd",
    "xla_distribute_module",
    "xla_distribute_tensor",
]
