"""Sharding annotations on xla tensors: ``mark_sharding`` and its relatives (torch_xla names).

``mark_sharding(t, mesh, spec)`` on a tensor holding device data lays the data out across the
mesh at once; on a pending value it records a sharding constraint in the graph. Either way the
tensor's storage keeps the annotation, so a parameter updated in place stays sharded.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...runtime import ir, sharding
from ...runtime.storage import Storage, set_node
from ...runtime.tensor import XlaTensor, value
from .mesh import Mesh

PartitionEntry = int | str | tuple[int | str, ...] | None


def use_spmd(auto: bool = False) -> None:
    """Switch SPMD mode on: every xla tensor lives on ``xla:0``, which stands for all devices, and
    programs are split by XLA's partitioner following ``mark_sharding`` annotations."""
    if auto:
        raise NotImplementedError(
            "xr.use_spmd(auto=True): xlalab has no auto-sharding; call xr.use_spmd() and annotate "
            "tensors with torch_xla.distributed.spmd.mark_sharding"
        )
    sharding.enable()


def is_spmd() -> bool:
    return sharding.enabled()


class ShardingType(enum.IntEnum):
    """torch_xla's sharding kinds (the values of ``xla::OpSharding`` types)."""

    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


def sharding_type(spec: sharding.ShardingSpec) -> ShardingType:
    if spec.is_replicated():
        return ShardingType.REPLICATED
    return ShardingType.PARTIAL if spec.tile_assignment()[1] > 1 else ShardingType.TILED


@dataclass
class XLAShard:
    """One device's block of a sharded tensor: its data on the host, the slices of the whole
    tensor it holds, and where it sits. With uneven blocks ``data`` is padded with zeros to the
    block size (as torch_xla's shards are); ``unpadded_data`` is the block itself."""

    data: torch.Tensor
    indices: tuple[slice, ...]
    device: str
    replica_id: int = 0

    @property
    def unpadded_data(self) -> torch.Tensor:
        return self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)]


class XLAShardedTensor:
    """What ``mark_sharding`` returns: the annotated tensor (``global_tensor``) and its sharding."""

    def __init__(self, global_tensor: torch.Tensor, spec: sharding.ShardingSpec) -> None:
        self.global_tensor = global_tensor
        self.spec = spec

    @property
    def sharding_spec(self) -> str:
        return self.spec.hlo_string()

    @property
    def sharding_type(self) -> ShardingType:
        return sharding_type(self.spec)

    @property
    def local_shards(self) -> list[XLAShard]:
        """Every device's block (this computes the tensor if it is pending)."""
        from ...runtime.graph import materialize

        t = self.global_tensor
        assert isinstance(t, XlaTensor)
        array = materialize([value(t)], [t._st], "local_shards")[0]
        shape = tuple(t.shape)
        if self.spec.divides(shape) and sharding.spec_of_array(array) == self.spec:
            return [
                XLAShard(torch.from_numpy(np.array(s.data)), _slices(s.index, shape), f"xla:{s.device.id}",
                         s.replica_id)
                for s in array.addressable_shards
            ]
        # Uneven blocks (or a layout the partitioner chose): cut the value as the spec says.
        whole = np.asarray(array)
        block = tuple(-(-size // n) for size, n in zip(shape, self.spec.tile_shape()))
        shards: list[XLAShard] = []
        seen: dict[tuple[tuple[int, int], ...], int] = {}
        for device, index in sorted(self.spec.block_bounds(shape).items()):
            data = np.zeros(block, dtype=whole.dtype)
            part = whole[index]
            data[tuple(slice(0, n) for n in part.shape)] = part
            key = tuple((s.start, s.stop) for s in index)
            seen[key] = seen.get(key, -1) + 1
            shards.append(XLAShard(torch.from_numpy(data), index, f"xla:{device}", seen[key]))
        return shards

    def __repr__(self) -> str:
        return f"XLAShardedTensor({self.global_tensor!r}, sharding_spec={self.sharding_spec!r})"


def _slices(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A JAX shard index with its open ends filled in from ``shape``."""
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape))


def _require_spmd(what: str) -> None:
    if not sharding.enabled():
        raise RuntimeError(f"{what} needs SPMD mode: call torch_xla.runtime.use_spmd() first (xr.use_spmd())")


def _xla_tensor(t: Any, what: str) -> XlaTensor:
    if isinstance(t, XLAShardedTensor):
        t = t.global_tensor
    if not isinstance(t, XlaTensor):
        raise TypeError(
            f"{what} needs a tensor on an xla device, got {type(t).__name__} on {getattr(t, 'device', '?')}"
        )
    return t


def spec_for(mesh: Mesh, partition_spec: Sequence[PartitionEntry], ndim: int) -> sharding.ShardingSpec:
    """A partition spec (mesh axis indices or names, None, or tuples of them) over ``mesh``."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a torch_xla.distributed.spmd.Mesh, got {type(mesh).__name__}")
    spec = tuple(partition_spec)
    if len(spec) != ndim:
        raise ValueError(
            f"partition_spec {spec} has {len(spec)} entries, the tensor has {ndim} dimensions: give one "
            "entry per dimension (a mesh axis index or name, a tuple of them, or None)"
        )
    entries: list[sharding.AxisEntry] = []
    used: list[str] = []
    for e in spec:
        if e is None:
            entries.append(None)
            continue
        names = tuple(mesh.axis_name(a) for a in e) if isinstance(e, tuple) else (mesh.axis_name(e),)
        used.extend(names)
        entries.append(names[0] if len(names) == 1 else names)
    if len(set(used)) != len(used):
        raise ValueError(f"partition_spec {spec} uses a mesh axis twice; each axis can split one dimension")
    return sharding.ShardingSpec(
        tuple(int(i) for i in mesh.device_ids.tolist()), mesh.mesh_shape, mesh.axis_names, tuple(entries)
    )


def apply_spec(t: XlaTensor, spec: sharding.ShardingSpec) -> None:
    """Give ``t`` the sharding ``spec``: its device data is laid out now, a pending value is
    constrained in the graph, and its storage keeps the annotation."""
    node = value(t)
    if t._chain:
        # A view of another tensor: it becomes a tensor of its own, so the annotation belongs to
        # this value (writes through it no longer reach the base).
        t._st, t._chain, t._vcache = Storage(node, node.device), (), None
    st = t._st
    if node.op is ir.DATA:
        array = sharding.place(node.value, spec)
        set_node(st, ir.data(array, node.shape, node.dtype, node.device))  # type: ignore[arg-type]
    else:
        set_node(st, sharding.constraint(node, spec))
    sharding.annotate(st, spec)


def mark_sharding(
    t: torch.Tensor | XLAShardedTensor,
    mesh: Mesh,
    partition_spec: Sequence[PartitionEntry],
    use_dynamo_custom_op: bool = False,
) -> XLAShardedTensor:
    """Shard ``t`` over ``mesh``: dimension ``i`` is split over the mesh axes ``partition_spec[i]``
    names (an index or name, a tuple of them, or None to keep it whole)::

        xs.mark_sharding(x, mesh, ("data", None))      # rows over the data axis

    Inside a compiled function it is the op ``xla::dynamo_mark_sharding`` in the graph, whatever
    ``use_dynamo_custom_op`` says (torch_xla's switch for that; accepted, not needed).
    """
    _require_spmd("mark_sharding")
    xt = _xla_tensor(t, "mark_sharding")
    spec = spec_for(mesh, partition_spec, xt.dim())
    apply_spec(xt, spec)
    return XLAShardedTensor(xt, spec)


def clear_sharding(t: torch.Tensor | XLAShardedTensor) -> torch.Tensor:
    """Take ``t``'s sharding away: its data becomes replicated, the partitioner chooses again."""
    xt = _xla_tensor(t, "clear_sharding")
    st = xt._st
    sharding.clear(st)
    node = st.node
    if node.op is ir.DATA and sharding.spec_of_array(node.value) is not None:
        replicated = sharding.replicated_spec(sharding.default_device_ids())
        set_node(st, ir.data(sharding.place(node.value, replicated), node.shape, node.dtype, node.device))  # type: ignore[arg-type]
    elif node.op is sharding.CONSTRAINT:
        set_node(st, node.src[0])
    return xt


def sharding_of(t: torch.Tensor) -> sharding.ShardingSpec | None:
    """``t``'s sharding: its annotation, else that of its device data when the partitioner split
    it; None when unsharded."""
    if not isinstance(t, XlaTensor):
        return None
    spec = sharding.annotation(t._st)
    if spec is None and not t._chain:
        node = t._st.node
        if node.op is ir.DATA:
            spec = sharding.spec_of_array(node.value)
            if spec is not None and spec.is_replicated():
                spec = None  # replicated because nothing sharded it: unsharded, as in torch_xla
    return spec


def get_sharding_spec(t: torch.Tensor) -> str:
    """torch_xla's spec string of ``t`` (``_XLAC._get_xla_sharding_spec``): ``{devices=[4,1]0,1,2,3}``,
    ``{replicated}``, or ``""`` when ``t`` has no sharding."""
    spec = sharding_of(t)
    return "" if spec is None else spec.hlo_string()


class _MarkShardingWithGradients(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, spec: sharding.ShardingSpec) -> torch.Tensor:  # type: ignore[override]
        ctx.spec = spec
        out = t.clone()
        apply_spec(_xla_tensor(out, "mark_sharding_with_gradients"), spec)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        grad = grad.clone()
        apply_spec(_xla_tensor(grad, "mark_sharding_with_gradients"), ctx.spec)
        return grad, None


def mark_sharding_with_gradients(
    t: torch.Tensor, mesh: Mesh, partition_spec: Sequence[PartitionEntry]
) -> torch.Tensor:
    """``t`` constrained to the sharding in the forward pass, and its gradient in the backward
    pass; use the returned tensor."""
    _require_spmd("mark_sharding_with_gradients")
    xt = _xla_tensor(t, "mark_sharding_with_gradients")
    return _MarkShardingWithGradients.apply(xt, spec_for(mesh, partition_spec, xt.dim()))  # type: ignore[no-any-return]


class ShardingSpec:
    """A mesh and a partition spec to apply later (torch_xla's ``xs.ShardingSpec``), as data
    loaders take it for their batches: ``ShardingSpec(mesh, ("data", None)).apply(batch)``."""

    def __init__(self, mesh: Mesh, partition_spec: Sequence[PartitionEntry], minibatch: bool = False) -> None:
        if minibatch:
            raise NotImplementedError(
                "ShardingSpec(minibatch=True) is for several hosts each loading a part of the batch; "
                "xlalab's SPMD mesh is one process's devices: load the whole batch and shard it"
            )
        self.mesh = mesh
        self.partition_spec = tuple(partition_spec)

    def apply(self, t: torch.Tensor) -> XLAShardedTensor:
        return mark_sharding(t, self.mesh, self.partition_spec)

    def __repr__(self) -> str:
        return f"ShardingSpec({self.mesh!r}, {self.partition_spec!r})"
