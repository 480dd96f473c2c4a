"""SPMD sharding in the runtime: where a tensor's sharding is kept and how a compile uses it.

In SPMD mode (``xr.use_spmd()``) every xla tensor lives on ``xla:0``, which stands for all the
devices together (torch_xla's "virtual device"). The lazy graph stays the single-device graph;
only its compile changes:

* a device-data leaf carries its sharding in its JAX array (``mark_sharding`` re-lays the array
  out as a ``NamedSharding``); leaves nobody sharded are replicated over the devices;
* a storage with a sharding annotation keeps it across in-place updates: when its new value is a
  root of a graph, the program pins that output to the annotation;
* ``mark_sharding`` on a pending value records a ``xla::custom_sharding`` node, lowered to
  ``jax.lax.with_sharding_constraint``;
* ``jax.jit`` then lets XLA's SPMD partitioner split the program, inserting the collectives.

The cache key of an SPMD program includes its leaves' shardings and its pinned outputs, so a
resharded input compiles a new program instead of failing in the old one.

Outside SPMD mode nothing here runs beyond a flag test.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import backend, compile_cache, ir
from .ir import Node

if TYPE_CHECKING:
    from .graph import Graph
    from .storage import Storage

CONSTRAINT = "xla::custom_sharding"  # torch_xla's name for mark_sharding on a pending value

# One axis entry of a partition spec: replicated (None), one mesh axis, or several.
AxisEntry = str | tuple[str, ...] | None

_enabled = [False]


def enable() -> None:
    """Switch SPMD mode on (``xr.use_spmd()``); there is no switching back in a process, as in
    torch_xla: programs and data already placed assume it."""
    _enabled[0] = True


def enabled() -> bool:
    return _enabled[0]


@dataclass(frozen=True)
class ShardingSpec:
    """A sharding over a logical device mesh: hashable, so it can sit in IR nodes and cache keys.

    ``device_ids`` are the mesh's xla device ordinals in mesh order (row-major over
    ``mesh_shape``); ``partition`` names, for each tensor dimension, the mesh axes it is split
    over (None: not split).
    """

    device_ids: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    partition: tuple[AxisEntry, ...]
    _named: list[NamedSharding] = field(default_factory=list, compare=False, hash=False, repr=False)

    def named_sharding(self) -> NamedSharding:
        """The JAX sharding (one ``jax.sharding.Mesh`` per spec object, made on first use)."""
        if not self._named:
            self._named.append(NamedSharding(jax_mesh(self.device_ids, self.mesh_shape, self.axis_names),
                                             PartitionSpec(*self.partition)))  # fmt: skip
        return self._named[0]

    def axis_size(self, entry: AxisEntry) -> int:
        if entry is None:
            return 1
        names = (entry,) if isinstance(entry, str) else entry
        return int(np.prod([self.mesh_shape[self.axis_names.index(a)] for a in names], dtype=np.int64))

    def tile_shape(self) -> tuple[int, ...]:
        """How many blocks each tensor dimension is cut into."""
        return tuple(self.axis_size(e) for e in self.partition)

    def is_replicated(self) -> bool:
        return all(n == 1 for n in self.tile_shape())

    def tile_assignment(self) -> tuple[np.ndarray, int]:
        """The device ids laid out as XLA's tile assignment: one axis per tensor dimension, then
        (if some mesh axes shard nothing) one axis of replicas; and that replica count."""
        ids = np.asarray(self.device_ids).reshape(self.mesh_shape)
        used: list[int] = []
        for e in self.partition:
            names = () if e is None else ((e,) if isinstance(e, str) else e)
            used.extend(self.axis_names.index(a) for a in names)
        rest = [i for i in range(len(self.mesh_shape)) if i not in used]
        replicas = int(np.prod([self.mesh_shape[i] for i in rest], dtype=np.int64))
        tiles = ids.transpose([*used, *rest]).reshape([*self.tile_shape(), replicas])
        return tiles, replicas

    def divides(self, shape: Sequence[int]) -> bool:
        """Whether every dimension of ``shape`` splits into its number of blocks evenly."""
        return all(size % blocks == 0 for size, blocks in zip(shape, self.tile_shape()))

    def even_for(self, shape: Sequence[int]) -> ShardingSpec:
        """The spec a JAX array of ``shape`` can be laid out as: a dimension its blocks do not
        divide keeps only the leading mesh axes whose product divides it (often none: kept
        whole). JAX splits arrays into equal blocks only; inside a program the partitioner
        takes the uneven spec itself (it pads)."""
        if self.divides(shape):
            return self
        entries: list[AxisEntry] = []
        for size, entry in zip(shape, self.partition):
            names = () if entry is None else ((entry,) if isinstance(entry, str) else entry)
            kept: list[str] = []
            for a in names:
                if size % (self.axis_size(tuple(kept)) * self.mesh_shape[self.axis_names.index(a)]):
                    break
                kept.append(a)
            entries.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
        return ShardingSpec(self.device_ids, self.mesh_shape, self.axis_names, tuple(entries))

    def block_bounds(self, shape: Sequence[int]) -> dict[int, tuple[slice, ...]]:
        """Each device's block of a tensor of ``shape``, as XLA cuts it: ``ceil(size / blocks)``
        per block, so with uneven sizes the last blocks are shorter (or empty)."""
        tiles, replicas = self.tile_assignment()
        tile_shape = self.tile_shape()
        bounds: dict[int, tuple[slice, ...]] = {}
        for index in np.ndindex(*tile_shape):
            block = []
            for size, blocks, i in zip(shape, tile_shape, index):
                step = -(-size // blocks)
                block.append(slice(min(i * step, size), min((i + 1) * step, size)))
            for r in range(replicas):
                bounds[int(tiles[(*index, r)])] = tuple(block)
        return bounds

    def hlo_string(self) -> str:
        """torch_xla's sharding spec string: ``{devices=[4,1]0,1,2,3}``, ``{replicated}``, or with
        ``last_tile_dim_replicate`` for partial replication."""
        if self.is_replicated():
            return "{replicated}"
        tiles, replicas = self.tile_assignment()
        dims = list(self.tile_shape()) + ([replicas] if replicas > 1 else [])
        devices = ",".join(str(int(d)) for d in tiles.reshape(-1))
        suffix = " last_tile_dim_replicate" if replicas > 1 else ""
        return f"{{devices=[{','.join(map(str, dims))}]{devices}{suffix}}}"


_MESHES: dict[tuple[Any, ...], Mesh] = {}


def jax_mesh(device_ids: Sequence[int], shape: Sequence[int], names: Sequence[str]) -> Mesh:
    """The ``jax.sharding.Mesh`` over xla devices ``device_ids`` (one object per layout)."""
    key = (tuple(device_ids), tuple(shape), tuple(names))
    mesh = _MESHES.get(key)
    if mesh is None:
        devs = backend.global_jax_devices()  # every process's: a mesh may span several
        bad = [i for i in device_ids if not 0 <= i < len(devs)]
        if bad:
            raise ValueError(
                f"the mesh names device ids {bad}, but there are {len(devs)} xla devices "
                f"(0..{len(devs) - 1}); set XLA_NUM_DEVICES before start for more CPU devices"
            )
        grid = np.array([devs[i] for i in device_ids], dtype=object).reshape(tuple(shape))
        mesh = _MESHES[key] = Mesh(grid, tuple(names))
    return mesh


def replicated_spec(device_ids: Sequence[int] | None = None) -> ShardingSpec:
    ids = tuple(range(len(backend.global_jax_devices()))) if device_ids is None else tuple(device_ids)
    return ShardingSpec(ids, (len(ids),), ("_all",), ())


# --------------------------------------------------------------------------- annotations

# Storage -> the sharding its value keeps (across in-place updates), while the storage lives.
_annotations: weakref.WeakKeyDictionary[Storage, ShardingSpec] = weakref.WeakKeyDictionary()


def annotate(st: Storage, spec: ShardingSpec) -> None:
    _annotations[st] = spec


def annotation(st: Storage) -> ShardingSpec | None:
    return _annotations.get(st)


def clear(st: Storage) -> None:
    _annotations.pop(st, None)


def constraint(node: Node, spec: ShardingSpec) -> Node:
    """``node`` constrained to ``spec`` (an identity the partitioner must honour)."""
    return Node(CONSTRAINT, (node,), spec, node.shape, node.dtype, node.device)


def lower_constraint(vals: list[Any], spec: ShardingSpec, shape: Any, dtype: Any) -> Any:
    return jax.lax.with_sharding_constraint(vals[0], spec.named_sharding())


def node_sharding(n: Node) -> str | None:
    """The sharding a node's value has, as torch_xla's spec string, for graph dumps: a
    constraint's, or a device-data leaf's when it is split over several devices (else None)."""
    if n.op is CONSTRAINT:
        return n.arg.hlo_string()  # type: ignore[no-any-return]
    if n.op is ir.DATA and _enabled[0]:
        spec = spec_of_array(n.value)
        if spec is not None and not spec.is_replicated():
            return spec.hlo_string()
    return None


def spec_of_array(array: Any) -> ShardingSpec | None:
    """The spec of a device array's sharding, when it is a ``NamedSharding`` over xla devices."""
    sharding = getattr(array, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return None
    index = {d: i for i, d in enumerate(backend.global_jax_devices())}
    mesh = sharding.mesh
    ids = tuple(index[d] for d in mesh.devices.reshape(-1))
    partition = tuple(sharding.spec) + (None,) * (np.ndim(array) - len(sharding.spec))
    return ShardingSpec(ids, tuple(mesh.devices.shape), tuple(map(str, mesh.axis_names)), partition)


def place(array: Any, spec: ShardingSpec) -> Any:
    """``array`` laid out across the devices as ``spec`` says (as near as equal blocks allow:
    ``ShardingSpec.even_for``)."""
    return put(array, spec.even_for(np.shape(array)).named_sharding())


def put(array: Any, target: Any) -> Any:
    """``jax.device_put(array, target)``, also when ``target`` spans several processes: JAX moves
    an array only between devices this process drives, so one held here alone is laid out from
    its host value, which every process holds alike (SPMD: each runs the same program on the
    same data, as in JAX's multi-process SPMD)."""
    spans_processes = target is not None and not target.is_fully_addressable
    if spans_processes and getattr(array, "is_fully_addressable", False):
        array = np.asarray(array)
    return jax.device_put(array, target)


# --------------------------------------------------------------------------- compiling


def _program_mesh(graph: Graph, datas: Sequence[Any], roots: Sequence[ShardingSpec | None]) -> Mesh:
    """The mesh an SPMD program runs over: that of its first sharded leaf, constraint or pinned
    output; else the global mesh; else all devices in order. Its unsharded leaves are replicated
    over this mesh: JAX names the partitioner's output shardings over the first input's mesh."""
    for a in datas:
        sharding = getattr(a, "sharding", None)
        if isinstance(sharding, NamedSharding) and not sharding.is_fully_replicated:
            return _concrete(sharding)
    for n in graph.nodes:
        if n.op is CONSTRAINT:
            return _concrete(n.arg.named_sharding())
    for s in roots:
        if s is not None:
            return _concrete(s.named_sharding())
    return _concrete(replicated_spec(default_device_ids()).named_sharding())


def _concrete(named: NamedSharding) -> Mesh:
    mesh = named.mesh
    assert isinstance(mesh, Mesh)  # the shardings here are made over device meshes
    return mesh


# Set by xlalab.distributed.spmd.set_global_mesh: the device order of programs with no sharding.
_global_ids: list[tuple[int, ...]] = []


def default_device_ids() -> tuple[int, ...]:
    return _global_ids[0] if _global_ids else tuple(range(len(backend.global_jax_devices())))


def _device_ids(s: Any) -> list[int]:
    """A sharding's devices in its order (a program's shardings must all agree on it)."""
    return [int(d.id) for d in s._device_assignment]


def place_inputs(graph: Graph, datas: list[Any], scalars: Any) -> tuple[list[Any], Any]:
    """In SPMD mode: the data leaves and scalars all laid out over the program's mesh (an
    unsharded leaf is replicated, and its node keeps the replicated array for later steps)."""
    if not _enabled[0]:
        return datas, scalars
    mesh = _program_mesh(graph, datas, root_specs(graph))
    replicated = NamedSharding(mesh, PartitionSpec())
    order = _device_ids(replicated)
    leaves = [n for n in graph.nodes if n.op is ir.DATA]
    placed = []
    for n, a in zip(leaves, datas):
        sharding = getattr(a, "sharding", None)
        on_mesh = isinstance(sharding, NamedSharding) and sharding.mesh == mesh
        if not on_mesh:
            if sharding is not None and not sharding.is_fully_replicated:
                devices = _device_ids(sharding)
                if devices != order:
                    raise ValueError(
                        f"a {n.shape} input is sharded over devices {devices}, but this graph "
                        f"runs over devices {order}: shard every tensor of "
                        "one program over meshes with the same device order (one global mesh)"
                    )
            else:
                a = put(a, replicated)
                n.value = a  # later steps find it replicated already
        placed.append(a)
    return placed, put(scalars, replicated)


def root_specs(graph: Graph) -> list[ShardingSpec | None]:
    """For each root, the annotation of a storage whose value it is (None: the partitioner
    chooses)."""
    if not _annotations:
        return [None] * len(graph.roots)
    by_node = {id(st.node): spec for st, spec in _annotations.items()}
    return [by_node.get(id(graph.nodes[r])) for r in graph.roots]


def cache_key(graph: Graph, datas: Sequence[Any]) -> tuple[Any, ...] | None:
    """What besides the graph an SPMD program depends on: its leaves' and pinned outputs'
    shardings (None outside SPMD mode)."""
    if not _enabled[0]:
        return None
    return (tuple(getattr(a, "sharding", None) for a in datas), tuple(root_specs(graph)))


def out_shardings(graph: Graph) -> list[NamedSharding | None] | None:
    """In SPMD mode, each root's pinned sharding (None where the partitioner chooses), or None
    when no root is pinned: ``jax.jit``'s ``out_shardings`` for a function returning the roots'
    list (wrap it to match a function that returns more)."""
    if not _enabled[0]:
        return None
    specs = root_specs(graph)
    if not any(specs):
        return None
    shapes = [graph.nodes[r].shape or () for r in graph.roots]
    # An uneven pinned sharding leaves the program as near as equal blocks allow (JAX arrays
    # split evenly only): the storage keeps the annotation, the array its even part.
    return [None if s is None else s.even_for(shape).named_sharding() for s, shape in zip(specs, shapes)]


def jit_options(graph: Graph) -> dict[str, Any]:
    """``jax.jit`` options of a graph whose function returns the roots' list: in SPMD mode, its
    annotated roots pinned to their shardings as ``out_shardings`` (the partitioner chooses the
    others)."""
    outs = out_shardings(graph)
    return {} if outs is None else {"out_shardings": outs}


# --------------------------------------------------------------------------- compiled graphs
# torch.compile's programs (xlalab/dynamo) take their inputs per call instead of from the graph's
# leaves; these helpers give them the same layouts as a lazy program.


def compiled_graph_inputs(graph: Graph, datas: list[Any], scalars: Any) -> tuple[list[Any], Any, Any]:
    """For compiling a torch.compile graph: the leaves and scalars laid out over the program's
    mesh (as ``place_inputs``), and what the cache key must add (None outside SPMD mode)."""
    if not _enabled[0]:
        return datas, scalars, None
    datas, scalars = place_inputs(graph, datas, scalars)
    return datas, scalars, cache_key(graph, datas)


def program_input_shardings(executable: Any) -> tuple[list[Any], Any] | None:
    """In SPMD mode, the shardings a compiled ``fn(datas, scalars)`` program takes its data
    leaves and scalars in (None outside SPMD mode)."""
    if not _enabled[0]:
        return None
    args, _ = executable.input_shardings
    return list(args[0]), args[1]


def fit_inputs(datas: list[Any], scalars: Any, expected: tuple[list[Any], Any]) -> tuple[list[Any], Any]:
    """A compiled graph's per-call inputs laid out as its program takes them: an argument on one
    device (unsharded) is replicated, one sharded otherwise since the compile is re-laid out
    (a compiled XLA program refuses inputs in other layouts)."""
    shardings, scalar_sharding = expected
    fitted = [
        a if a is None or getattr(a, "sharding", None) == s else put(a, s)
        for a, s in zip(datas, shardings)
    ]
    if getattr(scalars, "sharding", None) != scalar_sharding:
        scalars = put(scalars, scalar_sharding)
    return fitted, scalars


def arguments_key(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """In SPMD mode, the shardings of a compiled graph's arguments that hold device data (a
    graph compiles once per layout of its inputs); None outside SPMD mode."""
    if not _enabled[0]:
        return None
    key = []
    for a in args:
        st = getattr(a, "_st", None)
        node = getattr(st, "node", None)
        key.append(getattr(node.value, "sharding", None) if node is not None and node.op is ir.DATA else None)
    return tuple(key)


def carry_annotations(args: Sequence[Any], placeholders: Sequence[Any]) -> None:
    """Give each placeholder a compiled graph traces over its argument's sharding annotation,
    so an argument the graph updates in place (a parameter, optimizer state) comes out of the
    program with its sharding pinned, as in lazy mode."""
    if not _enabled[0] or not _annotations:
        return
    for a, p in zip(args, placeholders):
        st, pst = getattr(a, "_st", None), getattr(p, "_st", None)
        if st is not None and pst is not None:
            spec = _annotations.get(st)
            if spec is not None:
                _annotations[pst] = spec


# --------------------------------------------------------------------------- op by op
# The OPBYOP modes (XLA_USE_EAGER_DEBUG_MODE, XLA_SYNC_TENSORS_OPBYOP, XLA_GET_TENSORS_OPBYOP) and
# the debugger's stepper run each node as its own small program. In SPMD mode each of those is
# compiled for its operands' shardings, so the partitioner splits every op as it would inside the
# fused program (a constraint node re-lays its value out).

# Per-node executables of SPMD runs: the node's signature plus its operands' layouts.
_OP_CACHE = compile_cache.ProgramCache()


def op_by_op_target(graph: Graph, device: int) -> Any:
    """Where a per-node run puts its scalars (``graph.run_node``'s ``dev``): the device, or in
    SPMD mode the program's mesh, replicated, once the graph's unsharded data leaves are
    replicated over it as for the fused program."""
    if not _enabled[0]:
        return backend.jax_device(device)
    leaves = [n for n in graph.nodes if n.op is ir.DATA]
    datas, _ = place_inputs(graph, [n.value for n in leaves], np.zeros(0))
    for n, a in zip(leaves, datas):
        n.value = a
    return NamedSharding(_program_mesh(graph, datas, root_specs(graph)), PartitionSpec())


def node_settings(settings: tuple[Any, ...], instr: tuple[Any, ...], env: Sequence[Any]) -> tuple[Any, ...]:
    """``graph.run_node``'s ``settings`` for one node: in SPMD mode its operands' shardings are
    added, so its small program is compiled once per layout of its operands (a compiled program
    refuses operands laid out otherwise)."""
    if not _enabled[0] or instr[0] != "op":
        return settings
    return (*settings, tuple(getattr(env[i], "sharding", None) for i in instr[6]))


def run_op_by_op(graph: Graph, device: int) -> list[Any]:
    """In SPMD mode, ``graph``'s roots computed one node at a time, each node's program compiled
    for its operands' shardings (what ``graph.run_op_by_op`` does on one device); roots that are
    a sharded storage's new value come out with its annotation, as from the fused program."""
    from . import graph as graph_module  # graph imports this module

    instrs, roots, _, _ = graph_module._instructions(graph)
    target = op_by_op_target(graph, device)
    settings = graph_module._trace_settings()
    env: list[Any] = []
    for instr, node in zip(instrs, graph.nodes):
        env.append(
            graph_module.run_node(instr, node, env, target, node_settings(settings, instr, env), _OP_CACHE)
        )
    outs = [env[i] for i in roots]
    for k, spec in enumerate(root_specs(graph)):
        if spec is not None:
            outs[k] = place(outs[k], spec)
    return outs


def host_value(array: Any) -> np.ndarray:
    """A device array's whole value on the host, also of one split across processes (its blocks
    gathered from every process: each must read it, as each runs the same program)."""
    if getattr(array, "is_fully_addressable", True) or array.is_fully_replicated:
        return np.asarray(array)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))
