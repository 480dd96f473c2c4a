"""Logical device meshes: ``Mesh``, ``HybridMesh``, ``get_1d_mesh`` and the global mesh."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...runtime import backend, sharding


class Mesh:
    """The xla devices arranged as a named grid (torch_xla's ``Mesh``).

    ``device_ids`` are device ordinals (``xla:i`` is device ``i``), laid out row-major over
    ``mesh_shape``; ``axis_names`` name the grid's axes, so a partition spec can say
    ``("data", None)``::

        mesh = Mesh(np.arange(8), (2, 4), ("data", "model"))
    """

    def __init__(
        self,
        device_ids: Sequence[int] | np.ndarray,
        mesh_shape: Sequence[int],
        axis_names: Sequence[str] | None = None,
    ) -> None:
        ids = np.asarray(device_ids).reshape(-1)
        shape = tuple(int(s) for s in mesh_shape)
        if int(np.prod(shape, dtype=np.int64)) != ids.size:
            raise ValueError(
                f"a mesh of shape {shape} holds {int(np.prod(shape))} devices, but {ids.size} ids were given"
            )
        if len(set(ids.tolist())) != ids.size:
            raise ValueError(f"the mesh's device ids repeat: {ids.tolist()}")
        count = len(backend.global_jax_devices())  # every process's
        if ids.size and (ids.min() < 0 or ids.max() >= count):
            raise ValueError(
                f"the mesh names device ids {ids.tolist()}, but there are {count} xla devices "
                f"(0..{count - 1}); on CPU set XLA_NUM_DEVICES=N in the environment before start"
            )
        names = tuple(axis_names) if axis_names is not None else tuple(f"axis_{i}" for i in range(len(shape)))
        if len(names) != len(shape):
            raise ValueError(f"axis_names {names} must name each of the mesh's {len(shape)} axes")
        if len(set(names)) != len(names):
            raise ValueError(f"axis_names repeat: {names}")
        self.device_ids = ids
        self.mesh_shape = shape
        self.axis_names = names
        # The mesh as ``xla::dynamo_mark_sharding`` takes it (plain constants that dynamo reads
        # while tracing ``mark_sharding`` in a compiled function).
        self.dynamo_arguments = ([int(i) for i in ids.tolist()], list(shape), repr(names))

    def size(self) -> int:
        return int(self.device_ids.size)

    def shape(self) -> OrderedDict[str, int]:
        return OrderedDict(zip(self.axis_names, self.mesh_shape))

    def get_logical_mesh(self) -> np.ndarray:
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name: str) -> int | None:
        return self.axis_names.index(name) if name in self.axis_names else None

    def get_jax_mesh(self) -> Any:
        """The ``jax.sharding.Mesh`` over the same devices."""
        return sharding.jax_mesh(self.device_ids.tolist(), self.mesh_shape, self.axis_names)

    def axis_name(self, entry: int | str) -> str:
        """A partition-spec entry (an axis index or name) as the axis name."""
        if isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
            if not 0 <= entry < len(self.axis_names):
                raise ValueError(
                    f"mesh axis {entry} does not exist: the mesh has axes 0..{len(self.axis_names) - 1}"
                )
            return self.axis_names[int(entry)]
        if entry not in self.axis_names:
            raise ValueError(f"mesh axis {entry!r} does not exist: the mesh's axes are {self.axis_names}")
        return str(entry)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Mesh)
            and self.mesh_shape == other.mesh_shape
            and self.axis_names == other.axis_names
            and np.array_equal(self.device_ids, other.device_ids)
        )

    def __hash__(self) -> int:
        return hash((tuple(self.device_ids.tolist()), self.mesh_shape, self.axis_names))

    def __repr__(self) -> str:
        ids = self.device_ids.tolist()
        return f"Mesh(device_ids={ids}, mesh_shape={self.mesh_shape}, axis_names={self.axis_names})"


class HybridMesh(Mesh):
    """A mesh over several slices (torch_xla's ``HybridMesh``): ``ici_mesh_shape`` within a slice,
    ``dcn_mesh_shape`` across slices; the full mesh is their elementwise product.

    The devices here are one slice: devices are laid out slice by slice in ordinal order, each
    slice's devices row-major over ``ici_mesh_shape``.
    """

    def __init__(
        self,
        *,
        ici_mesh_shape: Sequence[int],
        dcn_mesh_shape: Sequence[int] | None = None,
        axis_names: Sequence[str] | None = None,
    ) -> None:
        ici = tuple(int(s) for s in ici_mesh_shape)
        dcn = tuple(int(s) for s in dcn_mesh_shape) if dcn_mesh_shape is not None else (1,) * len(ici)
        if len(dcn) != len(ici):
            raise ValueError(
                f"ici_mesh_shape {ici} and dcn_mesh_shape {dcn} must have the same number of axes"
            )
        per_slice = int(np.prod(ici, dtype=np.int64))
        slices = int(np.prod(dcn, dtype=np.int64))
        # Device (slice s, position p) sits at mesh index dcn_index(s) * ici + ici_index(p).
        grid = np.arange(slices * per_slice).reshape(dcn + ici)
        order = [k for i in range(len(ici)) for k in (i, len(ici) + i)]
        shape = tuple(d * c for d, c in zip(dcn, ici))
        super().__init__(grid.transpose(order).reshape(-1), shape, axis_names)


def get_1d_mesh(axis_name: str | None = None) -> Mesh:
    """All devices in one axis."""
    n = len(backend.global_jax_devices())
    return Mesh(np.arange(n), (n,), (axis_name,) if axis_name is not None else None)


_global: list[Mesh] = []


def set_global_mesh(mesh: Mesh) -> None:
    """The mesh ``get_global_mesh()`` returns (FSDPv2 uses it when given none)."""
    _global[:] = [mesh]
    sharding._global_ids[:] = [tuple(int(i) for i in mesh.device_ids.tolist())]


def get_global_mesh() -> Mesh | None:
    return _global[0] if _global else None
