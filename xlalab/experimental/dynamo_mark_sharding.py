"""``torch_xla.experimental.dynamo_mark_sharding``: a sharding annotation dynamo can trace.

``torch.ops.xla.dynamo_mark_sharding(t, device_ids, mesh_shape, axis_names, partition_spec)``
(torch_xla's schema: the mesh's ids and shape as int lists, its axis names and the partition
spec as the text of Python tuples) annotates ``t`` as ``xs.mark_sharding(t, mesh, spec)``
does: ``t``'s value is constrained to the sharding in the graph, in place, and the constrained
tensor is returned too. It is an op, so dynamo records it in the graph instead of breaking the
graph where ``mark_sharding`` is called; inside a compiled function ``xs.mark_sharding`` calls
it (``xlalab.dynamo.polyfills``). The op has a side effect (the annotation),
so nothing removes it for its result being unused. Values never change: gradients pass through.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

import torch
from torch._ops import OpOverload

from ..runtime import sharding
from ..runtime import tensor as rt

_LIB = torch.library.Library("xla", "FRAGMENT")  # the op namespace torch_xla uses
_LIB.define(
    "dynamo_mark_sharding(Tensor input, int[] device_ids, int[] mesh_shape, str axis_names, "
    "str partition_spec) -> Tensor"
)
OP: OpOverload = torch.ops.xla.dynamo_mark_sharding.default
torch.fx.node.has_side_effect(OP)


@torch.library.register_fake("xla::dynamo_mark_sharding", lib=_LIB)
def _fake(input: torch.Tensor, device_ids: list[int], mesh_shape: list[int], axis_names: str,
          partition_spec: str) -> torch.Tensor:  # fmt: skip
    return torch.empty_like(input)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    return grad, None, None, None, None


torch.library.register_autograd("xla::dynamo_mark_sharding", _backward, lib=_LIB)


@functools.cache
def spec_of(device_ids: tuple[int, ...], mesh_shape: tuple[int, ...], axis_names: str,
            partition_spec: str, ndim: int) -> sharding.ShardingSpec:  # fmt: skip
    """The sharding the op's arguments describe, checked as ``mark_sharding`` checks it."""
    from ..distributed.spmd.mesh import Mesh
    from ..distributed.spmd.xla_sharding import spec_for

    names = ast.literal_eval(axis_names)
    partition = ast.literal_eval(partition_spec)
    return spec_for(Mesh(list(device_ids), mesh_shape, names), partition, ndim)


def _mark(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from ..distributed.spmd.xla_sharding import _require_spmd, apply_spec

    _require_spmd("mark_sharding")
    t, device_ids, mesh_shape, axis_names, partition_spec = args
    spec = spec_of(tuple(device_ids), tuple(mesh_shape), axis_names, partition_spec, t.dim())
    apply_spec(t, spec)
    return rt.wrap(rt.value(t))  # a new tensor over the constrained value


rt._SPECIAL[OP] = _mark


__all__ = ["OP", "spec_of"]
