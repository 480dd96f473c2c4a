"""Replicated execution: the replicas of a data-parallel step run as one SPMD program.

A :class:`ReplicaGroup` is one replica per xla device, each driven by its own Python thread
(``xlalab.distributed.data_parallel.DataParallel`` starts them). Every thread records its
replica's step on its own device, exactly as a single-device step records. Recording needs
no coordination: it is per-op dictionary work under the GIL, and each replica only touches
storages on its own device.

The barriers are where the replicas meet. In a replica thread ``mark_step`` (and
``optimizer_step``, ``mesh_reduce``, and reading a value that depends on a collective) is a
*group* barrier: each thread hands its request to the group and waits; the last one to
arrive runs the request for all of them, then wakes the others with their results. For a
sync that means:

1. take every replica's pending storages, linearize each replica's graph;
2. the graphs must be the same program up to the device (they are: the replicas run the
   same code on same-shaped data); the cache key is the single-device key without the
   device, plus the group's devices;
3. on a miss, compile the graph once as an SPMD program: ``jax.shard_map`` over a 1-D mesh
   of the replicas' devices (axis ``"replica"``), the single-device ``build_function`` as its
   body, and ``xla::all_reduce`` nodes lowered to ``lax.psum`` (``pmax``/``pmin``/gathers)
   over that axis, so the reduction is an XLA all-reduce inside the compiled program;
4. run it once with each data leaf presented as one global array whose shards are the
   replicas' own device buffers (no copies), then hand each replica its output shards.

Graphs that differ between replicas and contain no collective run device by device, as
they would without a group. Graphs that differ around the same collectives (the root of a
gather stacking what it received) run in two parts: the collectives and what they read as
one replicated program, then each replica's remainder on its device. Collectives that
differ are an error that says where. Reading a value that needs no collective
(``loss.item()`` before the step ends) runs on the replica's own device without waiting for
the others.

Past one machine the same happens through JAX's distributed runtime: the mesh holds every
process's devices, each process presents its local shards, and XLA's collectives cross
processes (gloo on CPU). See docs/distributed.md.
"""

from __future__ import annotations

import gc
import itertools
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import backend, compile_cache, config, events, graph, ir, metrics, replica_state, storage
from .frames import user_frames
from .ir import Node
from .storage import pending_storages

ALL_REDUCE = "xla::all_reduce"
AXIS = "replica"
REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")


class ReplicaError(RuntimeError):
    """The replicas of a group did not do the same thing, or one of them failed."""


# --------------------------------------------------------------------------- thread state

_tls = replica_state.LOCAL


def current() -> Replica | None:
    """The replica the calling thread runs, or None outside replicated execution."""
    return replica_state.current()  # type: ignore[no-any-return]


@contextmanager
def running(replica: Replica) -> Iterator[Replica]:
    """Run the body as ``replica``: its barriers become group barriers.

    Autograd runs backward on this thread meanwhile: torch's Python device guard reports a
    single PrivateUse1 device, so the engine has a worker queue for xla:0 only (backward on
    xla:1 would fail an internal assert), and the replica's state is thread-local anyway.
    """
    previous = current()
    threaded = torch._C._is_multithreading_enabled()
    _tls.replica = replica
    torch._C._set_multithreading_enabled(False)
    try:
        yield replica
    finally:
        _tls.replica = previous
        torch._C._set_multithreading_enabled(threaded)


_OWNED = replica_state.OWNED  # xla device -> the group whose session runs on it
owned_devices = replica_state.owned_devices


# --------------------------------------------------------------------------- the collective


def _reduce(v: Any, reduce_type: str, axis: str) -> Any:
    if reduce_type == "sum":
        return lax.psum(v, axis)
    if reduce_type == "max":
        return lax.pmax(v, axis)
    if reduce_type == "min":
        return lax.pmin(v, axis)
    # No XLA all-reduce combiner for these in JAX: gather the replicas' values, reduce locally.
    stacked = lax.all_gather(v, axis)
    if reduce_type == "mul":
        return jnp.prod(stacked, axis=0).astype(v.dtype)
    if v.dtype == jnp.bool_:
        return jnp.all(stacked, axis=0) if reduce_type == "and" else jnp.any(stacked, axis=0)
    op = jnp.bitwise_and if reduce_type == "and" else jnp.bitwise_or
    return op.reduce(stacked, axis=0)


def _lower_all_reduce(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> tuple[Any, ...]:
    reduce_type, scale, _world = arg
    axis = getattr(_tls, "axis", None)
    outs = []
    for v in vals:
        # Without a replica axis (a graph dump, or a group of one) the reduction over one
        # replica is the value itself; graph.execute refuses to *run* a wider one that way.
        if axis is not None:
            v = _reduce(v, reduce_type, axis)
        if scale != 1.0:
            v = (v * scale).astype(v.dtype)
        outs.append(v)
    return tuple(outs)


graph.SPECIAL_LOWERINGS[ALL_REDUCE] = _lower_all_reduce
graph.COLLECTIVES[ALL_REDUCE] = lambda n: int(n.arg[2])


def all_reduce_node(nodes: Sequence[Node], reduce_type: str, scale: float, world: int) -> Node:
    """One ``xla::all_reduce`` node over ``nodes`` (a multi-output node: one output each).

    One node for a list of tensors (the gradients) lowers to one variadic all-reduce.
    """
    if reduce_type not in REDUCE_TYPES:
        raise ValueError(f"all_reduce: reduce_type {reduce_type!r} is not one of {', '.join(REDUCE_TYPES)}")
    devices = {n.device for n in nodes}
    if len(devices) != 1:
        raise ReplicaError(
            f"all_reduce: the tensors of one call must be on one device, got xla:{sorted(devices)}"
        )
    metrics.count("xla::all_reduce")
    outs = tuple((n.shape, n.dtype) for n in nodes)
    return Node(
        ALL_REDUCE,
        tuple(nodes),
        (reduce_type, float(scale), int(world)),
        None,
        None,
        devices.pop(),
        outs=outs,  # type: ignore[arg-type]
    )


COLLECTIVE = "xla::collective"
COLLECTIVE_KINDS = ("all_gather", "reduce_scatter", "all_to_all", "collective_permute")


def _one_replica(kind: str, params: tuple[Any, ...], world: int, v: Any) -> Any:
    """A collective traced without a replica axis: the value of a group of one.

    A graph dump of a wider group gets a stand-in of the right shape (the replicas are
    not there to exchange with); graph.execute refuses to *run* such a graph this way.
    """
    if kind == "all_gather":
        return jnp.concatenate([v] * world, axis=params[0]) if world > 1 else v
    if kind == "reduce_scatter":
        _, scale, dim = params
        out = lax.slice_in_dim(v, 0, v.shape[dim] // world, axis=dim) if world > 1 else v
        return (out * scale).astype(v.dtype) if scale != 1.0 else out
    if kind == "collective_permute":
        # Replica 0 receives only if some pair sends to it (with one replica, from itself).
        return v if any(dst == 0 for _, dst in params[0]) else jnp.zeros_like(v)
    return v  # all_to_all of one replica: split into one piece and concatenated back


def _lower_collective(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> Any:
    kind, params, world = arg
    v = vals[0]
    axis = getattr(_tls, "axis", None)
    if axis is None:
        return _one_replica(kind, params, world, v)
    if kind == "all_gather":
        return lax.all_gather(v, axis, axis=params[0], tiled=True)
    if kind == "all_to_all":
        split_dim, concat_dim = params
        return lax.all_to_all(v, axis, split_dim, concat_dim, tiled=True)
    if kind == "collective_permute":
        return lax.ppermute(v, axis, perm=[tuple(p) for p in params[0]])
    reduce_type, scale, dim = params
    if reduce_type == "sum":
        out = lax.psum_scatter(v, axis, scatter_dimension=dim, tiled=True)
    else:
        # JAX has a reduce-scatter for sums only: reduce everywhere, keep this replica's block.
        size = v.shape[dim] // world
        out = lax.dynamic_slice_in_dim(_reduce(v, reduce_type, axis), lax.axis_index(axis) * size, size, dim)
    return (out * scale).astype(v.dtype) if scale != 1.0 else out


graph.SPECIAL_LOWERINGS[COLLECTIVE] = _lower_collective
graph.COLLECTIVES[COLLECTIVE] = lambda n: int(n.arg[2])


def collective_node(
    kind: str, node: Node, params: tuple[Any, ...], world: int, shape: tuple[int, ...]
) -> Node:
    """One ``xla::collective`` node: ``kind`` (all_gather, reduce_scatter, all_to_all or
    collective_permute) of ``node`` across ``world`` replicas, giving ``shape`` on each."""
    if kind not in COLLECTIVE_KINDS:
        raise ValueError(f"collective {kind!r} is not one of {', '.join(COLLECTIVE_KINDS)}")
    metrics.count(f"xla::{kind}")
    return Node(COLLECTIVE, (node,), (kind, params, int(world)), tuple(shape), node.dtype, node.device)


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class Replica:
    """One replica of a group: its local index, xla device and global ordinal."""

    group: ReplicaGroup
    index: int
    device: int
    ordinal: int

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def sync(self, reason: str) -> None:
        self.group.barrier(self, "sync", reason)

    def materialize(self, nodes: Sequence[Node], storages: Sequence[Any], reason: str) -> list[Any]:
        return self.group.materialize(self, nodes, storages, reason)

    def rendezvous(self, tag: str, payload: Any) -> list[Any]:
        """Every replica's ``payload``, by ordinal (the same list for all of them)."""
        return self.group.barrier(self, "rendezvous", (tag, payload))  # type: ignore[no-any-return]


@dataclass
class _Outcome:
    generation: int = -1
    results: dict[int, Any] = field(default_factory=dict)
    error: BaseException | None = None
    leader: int = -1


class ReplicaGroup:
    """One replica per xla device (``devices`` are this process's xla indices).

    In a multi-host run every process makes a group of all its devices; the group's mesh
    holds every process's devices, so ``world_size`` and the ordinals are global.
    """

    def __init__(self, devices: Sequence[int]) -> None:
        if not devices:
            raise ValueError("a replica group needs at least one device")
        if len(set(devices)) != len(devices):
            raise ValueError(f"a device appears twice in the replica group: {list(devices)}")
        self.devices = tuple(int(d) for d in devices)
        local = [backend.jax_device(d) for d in self.devices]
        if backend.process_count() > 1:
            if len(local) != backend.device_count():
                raise ReplicaError(
                    f"in a multi-host run each process replicates over all its {backend.device_count()} "
                    f"xla devices (one SPMD program spans every process); got {len(local)}"
                )
            everyone = list(backend.global_jax_devices())
        else:
            everyone = local
        self.jax_devices = tuple(everyone)
        self.mesh = Mesh(np.array(everyone, dtype=object), (AXIS,))
        self.sharding = NamedSharding(self.mesh, PartitionSpec(AXIS))
        self.ordinals = tuple(everyone.index(d) for d in local)
        self.world_size = len(everyone)
        self.key = tuple((d.process_index, d.id) for d in everyone)
        self.local_of = {d: i for i, d in enumerate(local)}
        self._cond = threading.Condition()
        self._arrived: dict[int, tuple[str, Any]] = {}
        self._outcome = _Outcome()
        self._generation = 0
        self._active: set[int] = set()
        self._broken: str | None = None

    def replica(self, index: int) -> Replica:
        return Replica(self, index, self.devices[index], self.ordinals[index])

    def __repr__(self) -> str:
        devices = ", ".join(f"xla:{d}" for d in self.devices)
        return f"ReplicaGroup([{devices}], world_size={self.world_size})"

    # ---- sessions: one per DataParallel call
    @contextmanager
    def session(self) -> Iterator[ReplicaGroup]:
        """Own the devices while the replica threads run (plain syncs elsewhere leave them)."""
        with self._cond:
            taken = [d for d in self.devices if d in _OWNED]
            if taken:
                raise ReplicaError(f"xla:{taken[0]} is already running replicas of {_OWNED[taken[0]]}")
            for d in self.devices:
                _OWNED[d] = self
            self._active = set(range(len(self.devices)))
            self._arrived = {}
            self._broken = None
        try:
            yield self
        finally:
            with self._cond:
                for d in self.devices:
                    _OWNED.pop(d, None)
                self._active = set()
                if self._broken is not None:
                    self._drop_stranded()

    def _drop_stranded(self) -> None:
        """After a failed session: pending graphs whose collectives lost their partners can never
        run. Take them out of the pending set so they do not fail every later sync; a tensor
        that still needs one says so (graph.execute refuses it) when it is used."""
        for d in self.devices:
            storages = pending_storages(d)
            if storages and graph.collective_width(graph.linearize([st.node for st in storages])) > 1:
                forget(storages)

    def run(self, fn: Callable[[Replica], Any], name: str = "replica") -> list[Any]:
        """``fn(replica)`` once per replica, each in its own thread (torch_xla's design); the
        results by replica. The first replica error is raised once all threads are done."""
        n = len(self.devices)
        results: list[Any] = [None] * n
        errors: list[BaseException | None] = [None] * n

        def target(index: int) -> None:
            replica = self.replica(index)
            error: BaseException | None = None
            try:
                with running(replica):
                    results[index] = fn(replica)
                    # What the replica left pending (with its collectives) runs while every
                    # replica is still in the group.
                    self.barrier(replica, "exit", "replica_exit")
            except BaseException as e:
                error = errors[index] = e
            finally:
                self.leave(replica, error)

        with self.session():
            threads = [
                threading.Thread(target=target, args=(i,), name=f"xlalab {name} xla:{d}", daemon=True)
                for i, d in enumerate(self.devices)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        found = [e for e in errors if e is not None]
        if found:
            # The error that started it: a replica's own, before the others' "a replica failed".
            own = [e for e in found if not isinstance(e, ReplicaError)]
            raise (own or found)[0]
        return results

    def leave(self, replica: Replica, error: BaseException | None) -> None:
        """A replica thread is done (``error`` if its loop raised): the others stop waiting for it."""
        with self._cond:
            self._active.discard(replica.index)
            if error is not None and self._broken is None:
                self._broken = f"the replica on xla:{replica.device} failed: {type(error).__name__}: {error}"
            elif self._arrived and self._broken is None:
                waiting = ", ".join(
                    f"xla:{self.devices[i]} at {self._describe(*req)}"
                    for i, req in sorted(self._arrived.items())
                )
                self._broken = (
                    f"the replica on xla:{replica.device} finished while {waiting}: every replica must run "
                    "the same steps (the same mark_step/optimizer_step, collectives and mesh_reduce calls)"
                )
            self._cond.notify_all()

    # ---- the barrier
    def barrier(self, replica: Replica, kind: str, payload: Any) -> Any:
        """Wait for every replica to arrive with a request of ``kind``; the last one runs it."""
        with self._cond:
            if self._broken is not None:
                raise ReplicaError(self._broken)
            if replica.index not in self._active:
                raise ReplicaError(f"xla:{replica.device} is not running in a session of {self}")
            self._arrived[replica.index] = (kind, payload)
            generation = self._generation
            if len(self._arrived) == len(self._active):
                self._complete(replica.index)
            else:
                while self._generation == generation and self._broken is None:
                    self._cond.wait()
            outcome = self._outcome
            if outcome.generation != generation:  # woken because the group broke
                raise ReplicaError(self._broken)
        if outcome.error is not None:
            if outcome.leader == replica.index:
                raise outcome.error
            raise ReplicaError(
                f"the replicated {kind} failed: {type(outcome.error).__name__}: {outcome.error}"
            ) from outcome.error
        return outcome.results.get(replica.index)

    def _describe(self, kind: str, payload: Any) -> str:
        if kind == "rendezvous":
            return f"mesh_reduce/rendezvous({payload[0]!r})"
        if kind == "materialize":
            return f"a read of a value ({payload[2]})"
        if kind == "exit":
            return "the end of its loop"
        return str(payload)  # a sync: its reason (mark_step, ...)

    def _complete(self, leader: int) -> None:
        arrived, self._arrived = self._arrived, {}
        outcome = _Outcome(self._generation, leader=leader)
        try:
            kinds = {
                (kind, payload[0] if kind == "rendezvous" else None) for kind, payload in arrived.values()
            }
            if len(kinds) > 1:
                where = "; ".join(
                    f"xla:{self.devices[i]} is at {self._describe(*req)}"
                    for i, req in sorted(arrived.items())
                )
                raise ReplicaError(
                    f"the replicas diverged: {where}. Every replica must reach the same barriers "
                    "(mark_step/optimizer_step, mesh_reduce, reads of values that depend on a collective) "
                    "in the same order, and run the same number of steps."
                )
            kind = next(iter(arrived.values()))[0]
            payloads = {i: p for i, (_, p) in arrived.items()}
            if kind in ("sync", "exit"):
                self._sync(payloads)
            elif kind == "materialize":
                outcome.results = self._materialize(payloads)
            else:
                gathered = self._exchange({i: data for i, (_, data) in payloads.items()})
                outcome.results = dict.fromkeys(payloads, gathered)
        except BaseException as e:
            outcome.error = e
        self._outcome = outcome
        self._generation += 1
        self._cond.notify_all()

    # ---- what the leader runs
    def _sync(self, reasons: dict[int, str]) -> None:
        reason = reasons[min(reasons)]
        indices = sorted(reasons)
        for attempt in range(2):
            storages = [pending_storages(self.devices[i]) for i in indices]
            graphs = [graph.linearize([st.node for st in group]) for group in storages]
            if _same_program(graphs) or attempt:
                break
            # A storage kept alive only by a reference cycle is still pending on replicas whose
            # garbage collector has not run yet: collect, then look again.
            gc.collect()
        arrays = execute(self, graphs, [self.devices[i] for i in indices], reason)
        for group, outs in zip(storages, arrays):
            for st, array in zip(group, outs):
                st.node = ir.data(array, st.node.shape, st.node.dtype, st.device)  # type: ignore[arg-type]
        forget([st for group in storages for st in group])

    def _materialize(self, payloads: dict[int, Any]) -> dict[int, Any]:
        indices = sorted(payloads)
        plans = [graph.materialize_plan(payloads[i][0], payloads[i][1]) for i in indices]
        graphs = [graph.linearize(roots) for _, _, roots in plans]
        arrays = execute(self, graphs, [self.devices[i] for i in indices], payloads[indices[0]][2])
        results: dict[int, Any] = {}
        for i, (bases, idx, _), outs in zip(indices, plans, arrays):
            results[i] = graph.materialize_finish(payloads[i][0], bases, idx, outs, forget)
        return results

    def materialize(
        self, replica: Replica, nodes: Sequence[Node], storages: Sequence[Any], reason: str
    ) -> list[Any]:
        """Values for a replica: on its own device, unless they depend on a collective."""
        _, idx, roots = graph.materialize_plan(nodes, storages)
        if (
            any(nodes[i].device != replica.device for i in idx)
            or graph.collective_width(graph.linearize(roots)) <= 1
        ):
            return graph.materialize_on_devices(nodes, storages, reason, forget)
        return self.barrier(replica, "materialize", (nodes, storages, reason))  # type: ignore[no-any-return]

    def _exchange(self, payloads: dict[int, Any]) -> list[Any]:
        """Every replica's payload by global ordinal; across processes through JAX's key-value store."""
        mine = {self.ordinals[i]: p for i, p in payloads.items()}
        if backend.process_count() > 1:
            from jax._src import distributed

            client = distributed.global_state.client
            if client is None:
                raise ReplicaError(
                    "a multi-host rendezvous needs JAX's distributed runtime; it is not running"
                )
            # Every process makes the same rendezvous in the same order, so a process-wide count
            # names each one the same everywhere.
            key = f"xlalab/rendezvous/{next(_EXCHANGES)}"
            client.key_value_set_bytes(f"{key}/{backend.process_index()}", pickle.dumps(mine))
            for p in range(backend.process_count()):
                if p != backend.process_index():
                    mine.update(pickle.loads(client.blocking_key_value_get_bytes(f"{key}/{p}", 600_000)))
        return [mine[o] for o in sorted(mine)]


_EXCHANGES = itertools.count()


def forget(storages: Sequence[Any]) -> None:
    """Drop storages from the pending set; safe while other replica threads record."""
    storage.forget_pending(list(storages))
    storage.sweep_dead()


# --------------------------------------------------------------------------- SPMD programs


@dataclass
class SpmdProgram:
    """A replicated graph compiled once for a group's devices."""

    executable: Any
    graph_hash: int
    num_nodes: int
    devices: tuple[tuple[int, int], ...]
    zero_in: tuple[bool, ...]
    zero_out: tuple[bool, ...]
    executions: int = 0
    shard_order: tuple[int, ...] | None = None  # replica of each output shard, in shard order

    def hlo(self) -> str:
        """The compiled program's HLO text (after XLA's passes): the all-reduces are in it."""
        return str(self.executable.as_text())


PROGRAMS = compile_cache.ProgramCache()  # SpmdProgram by graph key and replica group


def _same_program(graphs: Sequence[graph.Graph]) -> bool:
    first = graphs[0].key[:-1]
    return all(g.key[:-1] == first for g in graphs[1:])


def _difference(graphs: Sequence[graph.Graph], devices: Sequence[int]) -> str:
    a = graphs[0]
    for g, dev in zip(graphs[1:], devices[1:]):
        if g.key[:-1] == a.key[:-1]:
            continue
        if len(g.roots) != len(a.roots):
            return f"xla:{devices[0]} has {len(a.roots)} pending tensor(s), xla:{dev} has {len(g.roots)}"
        for i, (x, y) in enumerate(zip(a.nodes, g.nodes)):
            if x.sid != y.sid or x.shape != y.shape:
                return f"node {i}: {x.name} {x.shape} on xla:{devices[0]} but {y.name} {y.shape} on xla:{dev}"
        return f"xla:{devices[0]} has {len(a.nodes)} nodes, xla:{dev} has {len(g.nodes)}"
    return "no difference"


def execute(
    group: ReplicaGroup, graphs: list[graph.Graph], devices: list[int], reason: str
) -> list[list[Any]]:
    """Execute one graph per replica (``devices[i]`` runs ``graphs[i]``): their arrays, per replica."""
    metrics.flush_tracing()
    if all(not g.roots for g in graphs):
        return [[] for _ in graphs]
    width = max(graph.collective_width(g) for g in graphs)
    if len(graphs) < len(group.devices) and width > 1:
        missing = sorted(set(group.devices) - set(devices))
        raise ReplicaError(
            f"a collective needs every replica, but xla:{missing[0]} has finished its loop: every replica "
            "must run the same steps"
        )
    if group.world_size == 1 or not _same_program(graphs) or len(graphs) < len(group.devices):
        if width > 1 and len(graphs) == len(group.devices):
            split = _collectives_apart(group, graphs, devices, reason)
            if split is not None:
                return split
        if width > 1:
            raise ReplicaError(
                f"the replicas recorded different graphs ({_difference(graphs, devices)}), and they contain "
                "a collective, so they cannot run as one program. Every replica must run the same code "
                "on same-shaped data."
            )
        # Nothing ties the replicas together (or there is one): each runs as a single device would.
        return [graph.execute([g.nodes[r] for r in g.roots], reason) for g in graphs]
    first = graphs[0]
    datas, scalars, zero_in = _global_inputs(group, graphs)
    metrics.record("TensorsGraphSize", len(first.nodes), "number")
    key = (first.key[:-1], graph._trace_settings(), group.key)
    prog = PROGRAMS.get(key)
    if prog is None:
        prog = _compile(group, first, datas, scalars, zero_in)
        PROGRAMS.put(key, prog)
    else:
        graph.note_cache_hit(first, prog, devices[0], reason)
    t0 = time.perf_counter_ns()
    try:
        outs = prog.executable(datas, scalars)
        if config.get("XLA_SYNC_WAIT"):
            jax.block_until_ready(outs)
    except Exception as e:
        raise graph._failure(first, "Executing replicated", e) from e
    dt = time.perf_counter_ns() - t0
    prog.executions += 1
    per_replica = _split(prog, group, outs, len(graphs))
    metrics.record("ExecuteReplicatedTime", dt)
    metrics.count("ExecuteReplicated")
    metrics.count("ExecuteComputation", len(devices))
    for dev in devices:
        metrics.count(f"ExecuteComputation[xla:{dev}]")
    if events.listening():
        frames = user_frames()
        for g, dev in zip(graphs, devices):
            events.publish(
                events.ExecuteEvent(
                    graph_hash=prog.graph_hash, seconds=dt / 1e9, device=f"xla:{dev}", frames=frames
                )
            )
            events.publish(
                events.SyncEvent(
                    graph=g,
                    reason=reason,
                    num_tensors=len(g.roots),
                    graph_hash=prog.graph_hash,
                    frames=frames,
                )
            )
    return per_replica


def _collective_values(g: graph.Graph) -> list[Node]:
    """The values ``g``'s collectives give: each single-output collective, and each output a
    multi-output one (an all-reduce of several tensors) gives to the rest of the graph."""
    out: list[Node] = []
    seen: set[int] = set()
    for n in g.nodes:
        if n.op in graph.COLLECTIVES and n.shape is not None:
            picked = n
        elif n.op is ir.ITEM and n.src[0].op in graph.COLLECTIVES:
            picked = n
        else:
            continue
        if id(picked) not in seen:
            seen.add(id(picked))
            out.append(picked)
    return out


def _substituted(g: graph.Graph, values: dict[int, Node]) -> list[Node]:
    """``g``'s roots with the nodes in ``values`` (by id) replaced, and every node above them
    rebuilt over the replacements (nodes are never changed in place: other graphs share them)."""
    new: dict[int, Node] = {}
    for n in g.nodes:  # operands come before their users
        if id(n) in values:
            new[id(n)] = values[id(n)]
            continue
        src = tuple(new.get(id(s), s) for s in n.src)
        if all(a is b for a, b in zip(src, n.src)):
            new[id(n)] = n
        else:
            new[id(n)] = Node(n.op, src, n.arg, n.shape, n.dtype, n.device, n.value, n.outs, n.frames)
    return [new[id(g.nodes[r])] for r in g.roots]


def _collectives_apart(
    group: ReplicaGroup, graphs: list[graph.Graph], devices: list[int], reason: str
) -> list[list[Any]] | None:
    """Replicas that recorded different graphs around the same collectives (the root of a
    ``gather`` stacking what it received, on its own device): the collectives and what they
    read run first as one replicated program, then each replica's own remainder on its device.
    None if the collectives' parts differ too (that is an error the caller reports)."""
    firsts = [graph.linearize(_collective_values(g)) for g in graphs]
    if not _same_program(firsts):
        return None
    values = execute(group, firsts, devices, reason)
    results = []
    for g, first, arrays in zip(graphs, firsts, values):
        done = {
            id(first.nodes[r]): ir.data(a, first.nodes[r].shape, first.nodes[r].dtype, first.nodes[r].device)  # type: ignore[arg-type]
            for r, a in zip(first.roots, arrays)
        }
        results.append(graph.execute(_substituted(g, done), reason))
    return results


def _global_inputs(group: ReplicaGroup, graphs: list[graph.Graph]) -> tuple[list[Any], Any, tuple[bool, ...]]:
    """Each data leaf as one global array over the replicas' own buffers; scalars as (world, S)."""
    leaves = [[n.value for n in g.nodes if n.op is ir.DATA] for g in graphs]
    world = group.world_size
    datas = []
    zero_in = []
    for arrays in zip(*leaves):
        shape = tuple(arrays[0].shape)
        # Shards are concatenated along axis 0, so a replica's buffer is its shard as it is.
        # A 0-d value has no axis 0: it travels as shape (1,) and is reshaped back inside.
        zero = len(shape) == 0
        zero_in.append(zero)
        if zero:
            arrays = tuple(a.reshape(1) for a in arrays)
            shape = (1,)
        datas.append(
            jax.make_array_from_single_device_arrays(
                (world * shape[0], *shape[1:]), group.sharding, list(arrays)
            )
        )
    values = [[float(n.value) for n in g.nodes if n.op is ir.SCALAR] for g in graphs]
    local = np.asarray(values, dtype=np.float64).reshape(len(graphs), -1)
    scalars = jax.make_array_from_process_local_data(group.sharding, local, (world, local.shape[1]))
    return datas, scalars, tuple(zero_in)


def _compile(
    group: ReplicaGroup, first: graph.Graph, datas: list[Any], scalars: Any, zero_in: tuple[bool, ...]
) -> SpmdProgram:
    run_one = graph.build_function(first)
    zero_out = tuple(first.nodes[r].shape == () for r in first.roots)

    def body(shards: list[Any], scalar_rows: Any) -> list[Any]:
        # The body is traced once, in this thread: the all-reduce lowering sees the axis.
        _tls.axis = AXIS
        try:
            args = [s.reshape(()) if z else s for s, z in zip(shards, zero_in)]
            outs = run_one(args, scalar_rows[0])
        finally:
            _tls.axis = None
        return [o.reshape((1,)) if z else o for o, z in zip(outs, zero_out)]

    spec = PartitionSpec(AXIS)
    # check_vma off: values built inside the body (constants) are per-replica values too.
    fn = jax.shard_map(body, mesh=group.mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False)
    graph.publish_compile_start(first, f"xla:{group.devices[0]}", "")
    t0 = time.perf_counter_ns()
    lowered = None
    try:
        lowered = jax.jit(fn).lower(datas, scalars)
        executable = lowered.compile(compiler_options=backend.COMPILER_OPTIONS)
    except Exception as e:
        what = "Lowering" if lowered is None else "XLA failed to compile"
        failure = graph._failure(first, what, e, lowered)
        graph.publish_compile_error(first, f"xla:{group.devices[0]}", t0, failure)
        raise failure from e
    dt = time.perf_counter_ns() - t0
    metrics.record("CompileTime", dt)
    metrics.count("UncachedCompile")
    prog = SpmdProgram(executable, first.hash, len(first.nodes), group.key, zero_in, zero_out)
    graph.publish_compile(first, prog, f"xla:{group.devices[0]}", "", seconds=dt / 1e9)
    return prog


def _split(prog: SpmdProgram, group: ReplicaGroup, outs: Sequence[Any], n: int) -> list[list[Any]]:
    """Each output's shards, handed back to the replicas whose devices hold them."""
    per_replica: list[list[Any]] = [[None] * len(outs) for _ in range(n)]
    if not outs:
        return per_replica
    if prog.shard_order is None:
        # Every output of one program lays its shards out in the same device order.
        prog.shard_order = tuple(group.local_of[s.device] for s in outs[0].addressable_shards)
    order = prog.shard_order
    for j, (out, zero) in enumerate(zip(outs, prog.zero_out)):
        # ``_arrays`` are the shards' own single-device arrays, in that order: a quarter of the cost
        # of building ``addressable_shards`` for every output of every step.
        arrays = getattr(out, "_arrays", None)
        if arrays is None:
            arrays = [s.data for s in out.addressable_shards]
        for r, array in zip(order, arrays):
            per_replica[r][j] = array.reshape(()) if zero else array
    return per_replica


def programs() -> list[SpmdProgram]:
    """The replicated programs compiled so far (``p.hlo()`` shows each one's HLO)."""
    return list(PROGRAMS.values())
