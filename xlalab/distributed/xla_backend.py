"""torch_xla's ``xla`` backend for ``torch.distributed``, over xlalab's replicated execution.

Importing this module registers the ``xla`` backend and the ``xla://`` init method, as
``import torch_xla.distributed.xla_backend`` does. Inside ``xmp.spawn`` workers::

    dist.init_process_group("xla", init_method="xla://")
    dist.all_reduce(t)                              # an XLA all-reduce in the step's program
    ddp = DDP(model, gradient_as_bucket_view=True)  # gradients all-reduced the same way

Every collective is one of ``xm``'s (``all_reduce``, ``all_gather``, ``reduce_scatter``,
``all_to_all``, ``collective_broadcast``): it is recorded like any op and runs inside the
replicated step's compiled program at the next barrier, so the returned work is complete
as soon as it is recorded.

torch_xla runs one process per device; xlalab's replicas are threads of one process. So
that each replica has its own default process group, rank and groups (what a process would
have), the ``torch.distributed`` state is kept per replica while replicas run: the module
swaps c10d's world container for one that answers from the calling replica's world (the
same mechanism as PyTorch's threaded test process group). Threads that are not replicas
see the ordinary world, so gloo and nccl groups elsewhere are unaffected.
"""

from __future__ import annotations

import importlib
import itertools
import threading
import weakref
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import ReduceOp

from ..core import xla_model as xm
from ..runtime import replicated
from ..runtime.tensor import XlaTensor, assign, to_device_node

# ``torch.distributed.rendezvous`` is also a function's name in ``torch.distributed``.
rendezvous_module = importlib.import_module("torch.distributed.rendezvous")

BACKEND = "xla"

_REDUCE_TYPES = {
    ReduceOp.SUM: xm.REDUCE_SUM,
    ReduceOp.PRODUCT: xm.REDUCE_MUL,
    ReduceOp.MIN: xm.REDUCE_MIN,
    ReduceOp.MAX: xm.REDUCE_MAX,
    ReduceOp.BAND: xm.REDUCE_AND,
    ReduceOp.BOR: xm.REDUCE_OR,
}


def _reduce_type(op: Any, world: int) -> tuple[str, float]:
    """xm's reduce type and scale for a ``dist.ReduceOp``."""
    if op == ReduceOp.AVG:
        return xm.REDUCE_SUM, 1.0 / world
    for known, name in _REDUCE_TYPES.items():
        if op == known:
            return name, 1.0
    raise NotImplementedError(
        f"the xla backend has no counterpart for ReduceOp {op}: use SUM, AVG, PRODUCT, MIN, MAX, BAND or BOR"
    )


class WorkXla(dist.distributed_c10d.Work):
    """The work of one collective: complete once recorded (it runs in the step's program)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self._tensors = tensors

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._tensors

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        future: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        future.set_result(self._tensors)
        return future


_ONE_SIDED = "every replica runs the same compiled program, so there are no one-sided transfers"
_ROOTED = "XLA's collectives give every replica the same kind of result"


def _not_provided(what: str, instead: str, why: str = _ONE_SIDED) -> NotImplementedError:
    return NotImplementedError(
        f"torch.distributed.{what} has no counterpart in the xla backend ({why}): {instead}"
    )


def _set_from_host(t: torch.Tensor, host: torch.Tensor) -> None:
    """Write a host value into ``t``. An xla tensor becomes device data, not a pending copy:
    pending work on some replicas only would make the replicas' next step programs differ."""
    if not isinstance(t, XlaTensor):
        with torch.no_grad():
            t.copy_(host)
        return
    assign(t, to_device_node(host.to(t.dtype).reshape(t.shape), t.device.index or 0))


class ProcessGroupXla(dist.ProcessGroup):
    """A ``torch.distributed`` process group whose collectives are ``xm``'s XLA collectives.

    The methods take the list forms that torch.distributed and DDP's C++ reducer call (torch's
    stubs also list single-tensor convenience overloads, hence the ``override`` ignores).
    """

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta | None = None) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._store = store
        self._timeout = timeout
        self._barriers = 0

    def _world(self) -> int:
        return xm.xrt_world_size()

    # ---- reductions
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> WorkXla:  # type: ignore[override]
        op = getattr(opts, "reduceOp", ReduceOp.SUM) if opts is not None else ReduceOp.SUM
        reduce_type, scale = _reduce_type(op, self._world())
        xm.all_reduce(reduce_type, tensors, scale=scale)
        return WorkXla(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> WorkXla:
        return self.allreduce(tensors, opts)

    def reduce_scatter(  # type: ignore[override]
        self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]], opts: Any = None
    ) -> WorkXla:
        for output, inputs in zip(output_tensors, input_tensors):
            self._reduce_scatter_into(output, torch.cat([t.reshape(1, -1) for t in inputs]), opts)
        return WorkXla(output_tensors)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> WorkXla:
        world = self._world()
        self._reduce_scatter_into(output, input.reshape(world, -1), opts)
        return WorkXla([output])

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> WorkXla:
        for output, input in zip(outputs, inputs):
            self._reduce_scatter_base(output, input, opts)
        return WorkXla(outputs)

    def _reduce_scatter_into(self, output: torch.Tensor, rows: torch.Tensor, opts: Any) -> None:
        """Reduce ``rows`` (one row per replica) and give this replica its row, in ``output``."""
        world = self._world()
        op = getattr(opts, "reduceOp", ReduceOp.SUM) if opts is not None else ReduceOp.SUM
        reduce_type, scale = _reduce_type(op, world)
        mine = xm.reduce_scatter(reduce_type, rows, scale, scatter_dim=0, shard_count=world)
        with torch.no_grad():
            output.copy_(mine.reshape(output.shape))

    # ---- gathers
    def allgather(  # type: ignore[override]
        self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> WorkXla:
        for outputs, input in zip(output_tensors, input_tensors):
            rows = xm.all_gather(input.reshape(1, -1), dim=0)
            with torch.no_grad():
                for i, output in enumerate(outputs):
                    output.copy_(rows[i].reshape(output.shape))
        return WorkXla([t for outputs in output_tensors for t in outputs])

    def allgather_coalesced(
        self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor], opts: Any = None
    ) -> WorkXla:
        return self.allgather(output_lists, input_list, opts)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> WorkXla:
        rows = xm.all_gather(input.reshape(1, -1), dim=0)
        with torch.no_grad():
            output.copy_(rows.reshape(output.shape))
        return WorkXla([output])

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> WorkXla:
        for output, input in zip(outputs, inputs):
            self._allgather_base(output, input, opts)
        return WorkXla(outputs)

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> WorkXla:
        world = self._world()
        if output_split_sizes or input_split_sizes:
            if len(set(output_split_sizes)) > 1 or len(set(input_split_sizes)) > 1:
                raise _not_provided(
                    "all_to_all_single with uneven split sizes",
                    "split evenly (XLA's all-to-all sends equal blocks), padding the blocks if needed",
                )
        rows = xm.all_to_all(input.reshape(world, -1), 0, 0, world)
        with torch.no_grad():
            output.copy_(rows.reshape(output.shape))
        return WorkXla([output])

    def alltoall(
        self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> WorkXla:
        shapes = {tuple(t.shape) for t in [*input_tensors, *output_tensors]}
        if len(shapes) != 1:
            raise _not_provided(
                "all_to_all with tensors of different shapes",
                "send equal blocks (XLA's all-to-all), padding them if needed",
            )
        world = self._world()
        rows = xm.all_to_all(torch.cat([t.reshape(1, -1) for t in input_tensors]), 0, 0, world)
        with torch.no_grad():
            for i, output in enumerate(output_tensors):
                output.copy_(rows[i].reshape(output.shape))
        return WorkXla(output_tensors)

    # torch.distributed's current names for the same collectives.
    all_gather_single = _allgather_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced  # type: ignore[assignment]
    reduce_scatter_single = _reduce_scatter_base  # type: ignore[assignment]
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced  # type: ignore[assignment]
    all_to_all_single = alltoall_base  # type: ignore[assignment]

    # ---- broadcast and barrier
    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> WorkXla:  # type: ignore[override]
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        xm.collective_broadcast(tensors, root_ordinal=root)
        return WorkXla(tensors)

    def barrier(self, opts: Any = None) -> WorkXla:
        # Every replica must reach it: a host-side meeting of the replica threads.
        self._barriers += 1
        xm.rendezvous(f"torch.distributed.barrier {self._barriers}")
        return WorkXla([])

    # ---- what has no counterpart
    # ---- rooted collectives: as in torch_xla, every replica runs the whole collective and
    # reads its result (the replicas' programs must be the same: only the collective's own
    # graph runs, whatever else each replica has pending); then only the root keeps it.
    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> WorkXla:  # type: ignore[override]
        op = getattr(opts, "reduceOp", ReduceOp.SUM) if opts is not None else ReduceOp.SUM
        reduce_type, scale = _reduce_type(op, self._world())
        results = [xm.all_reduce(reduce_type, t, scale=scale).cpu() for t in tensors]
        root = xm.get_ordinal() == getattr(opts, "rootRank", 0)
        for t, result in zip(tensors, results):
            # The others keep their values, as device data too: the replicas stay alike.
            _set_from_host(t, result if root else t.cpu())
        return WorkXla(tensors)

    def gather(  # type: ignore[override]
        self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> WorkXla:
        gathered = [xm.all_gather(t.reshape(1, -1), dim=0).cpu() for t in input_tensors]
        if xm.get_ordinal() != getattr(opts, "rootRank", 0):
            return WorkXla([])
        for outputs, rows in zip(output_tensors, gathered):
            for i, output in enumerate(outputs):
                _set_from_host(output, rows[i].reshape(output.shape))
        return WorkXla([t for outputs in output_tensors for t in outputs])

    def scatter(  # type: ignore[override]
        self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]], opts: Any = None
    ) -> WorkXla:
        # A reduce-scatter (sum) of the root's pieces and every other replica's zeros, both sent
        # from the host as one fresh array, so that all replicas record the same program.
        world = self._world()
        root = xm.get_ordinal() == getattr(opts, "rootRank", 0)
        for i, output in enumerate(output_tensors):
            zeros = torch.zeros(output.shape, dtype=output.dtype)
            pieces = [t.cpu() for t in input_tensors[i]] if root else [zeros] * world
            rows = torch.stack([p.reshape(-1) for p in pieces]).to(output.device)
            self._reduce_scatter_into(output, rows, None)
        return WorkXla(output_tensors)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> WorkXla:
        raise _not_provided("send", "use xm.collective_permute(value, pairs), called by every replica")

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> WorkXla:
        raise _not_provided("recv", "use xm.collective_permute(value, pairs), called by every replica")

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> WorkXla:
        raise _not_provided("recv", "use xm.collective_permute(value, pairs), called by every replica")


def _create_xla_process_group(store: Any, rank: int, size: int, timeout: timedelta) -> ProcessGroupXla:
    """torch.distributed's constructor for the ``xla`` backend."""
    world = xm.xrt_world_size()
    if size != world:
        raise NotImplementedError(
            f"an xla process group of {size} of the {world} replicas: xlalab's collectives span all "
            "replicas, so the xla backend has no sub-groups (use the default group, or new_group() "
            "over every rank)"
        )
    return ProcessGroupXla(store, rank, size, timeout)


def new_xla_process_group(
    ranks: list[int] | None = None,
    timeout: timedelta = c10d.default_pg_timeout,
    backend: str | None = None,
    pg_options: Any = None,
) -> Any:
    """torch_xla's ``new_group`` for the xla backend: a group over every rank (``ranks=None``
    or all of them); a group of some of the ranks is refused, as every collective spans all."""
    if ranks is not None and sorted(ranks) != list(range(dist.get_world_size())):
        raise NotImplementedError(
            f"new_xla_process_group(ranks={ranks}): xlalab's collectives span all "
            f"{dist.get_world_size()} replicas; leave ranks=None"
        )
    return dist.new_group(ranks=ranks, timeout=timeout, backend=backend or BACKEND, pg_options=pg_options)


# --------------------------------------------------------------------------- rendezvous

_STORES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # replica group -> its store
_STORES_LOCK = threading.Lock()


def _store_of(replica: Any) -> Any:
    """One in-process store per replica group (the ranks are threads of this process)."""
    with _STORES_LOCK:
        store = _STORES.get(replica.group)
        if store is None:
            store = _STORES[replica.group] = dist.HashStore()
        return store


def _xla_rendezvous(url: str, timeout: timedelta = c10d.default_pg_timeout, **kwargs: Any) -> Iterator[Any]:
    """``xla://``: the rank and world size are the replica's ordinal and the replica count."""
    replica = replicated.current()
    if replica is None:
        yield (dist.HashStore(), 0, 1)
        return
    yield (_store_of(replica), replica.ordinal, replica.world_size)


# --------------------------------------------------------------------------- per-replica state


class _ReplicaWorld(c10d._World):
    """One replica's ``torch.distributed`` state (c10d's ``_World`` keeps it in globals)."""

    def __init__(self, serial: int) -> None:
        super().__init__()
        self._pg_map: dict[Any, Any] = {}
        self._pg_names: dict[Any, Any] = {}
        self._pg_group_ranks: dict[Any, Any] = {}
        self._pg_backend_config: dict[Any, Any] = {}
        # Groups are named by this count and registered by name process-wide: each replica's
        # names start at their own offset so that they do not collide.
        self._group_count = serial << 20
        self._tags_to_pg: dict[Any, Any] = {}
        self._pg_to_tag: dict[Any, Any] = {}

    pg_map = property(lambda self: self._pg_map)  # type: ignore[assignment]
    pg_names = property(lambda self: self._pg_names)  # type: ignore[assignment]
    pg_group_ranks = property(lambda self: self._pg_group_ranks)  # type: ignore[assignment]
    pg_backend_config = property(lambda self: self._pg_backend_config)  # type: ignore[assignment]
    tags_to_pg = property(lambda self: self._tags_to_pg)  # type: ignore[assignment]
    pg_to_tag = property(lambda self: self._pg_to_tag)  # type: ignore[assignment]

    @property  # type: ignore[override]
    def group_count(self) -> int:
        return self._group_count

    @group_count.setter
    def group_count(self, value: int) -> None:
        self._group_count = value


class _WorldPerReplica:
    """Stands in for c10d's ``_world``: a replica thread's own world, else the process's."""

    def __init__(self, process_world: Any) -> None:
        object.__setattr__(self, "_process_world", process_world)
        object.__setattr__(self, "_worlds", weakref.WeakKeyDictionary())  # group -> index -> world
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_serials", itertools.count(1))

    def _current(self) -> Any:
        replica = replicated.current()
        if replica is None:
            return self._process_world
        with self._lock:
            worlds = self._worlds.setdefault(replica.group, {})
            if replica.index not in worlds:
                worlds[replica.index] = _ReplicaWorld(next(self._serials))
            return worlds[replica.index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._current(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._current(), name, value)


def _install() -> None:
    if not isinstance(c10d._world, _WorldPerReplica):
        c10d._world = _WorldPerReplica(c10d._world)  # type: ignore[assignment]
    if "XLA" not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_xla_process_group, devices=["xla"])
    if "xla" not in rendezvous_module._rendezvous_handlers:
        rendezvous_module.register_rendezvous_handler("xla", _xla_rendezvous)


_install()

__all__ = ["ProcessGroupXla", "WorkXla", "new_xla_process_group"]
