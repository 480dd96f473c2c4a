"""The parts of ``torch_xla.core.xla_model`` a training script uses, over xlalab's runtime."""

from __future__ import annotations

import copy
import sys
from typing import Any, TypedDict

import torch

from ..runtime import backend
from ..runtime import graph as _graph
from ..runtime import mark_step as _mark_step
from ..runtime import replicated as _replicated
from ..runtime import wait_device_ops as _wait
from ..runtime.device import xla_device as _xla_device
from ..runtime.tensor import XlaTensor, to_cpu_many
from ..utils import closures as _closures


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """``xla:n``; by default ``xla:0``, or in a replica thread the replica's own device.

    ``devkind`` must match this machine's platform if given."""
    if n is None:
        replica = _replicated.current()
        if replica is not None:
            n = replica.device
    if devkind is not None and devkind.upper() not in (
        backend.hw_name(),
        "GPU" if backend.hw_name() == "CUDA" else "",
    ):
        raise backend.DeviceError(
            f"xla_device(devkind={devkind!r}): this machine's xla devices are {backend.hw_name()}; "
            f"pass devkind={backend.hw_name()!r} or leave it out."
        )
    return _xla_device(n)


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None) -> list[str]:
    """The xla devices as strings (``['xla:0', ...]``), as torch_xla returns them."""
    n = backend.device_count()
    if max_devices is not None:
        n = min(n, max_devices)
    return [f"xla:{i}" for i in range(n)]


def xla_device_hw(device: Any) -> str:
    """The hardware behind an xla device: ``CPU``, ``CUDA`` or ``TPU``."""
    d = torch.device(device) if not isinstance(device, torch.device) else device
    if d.type != "xla":
        raise ValueError(f"xla_device_hw() needs an xla device, got {d}")
    return backend.hw_name()


def xla_real_devices(devices: list[Any] | None = None) -> list[str]:
    """The real devices behind xla devices (all of them by default): ``['CPU:0', ...]``."""
    if not devices:
        devices = get_xla_supported_devices()
    return [f"{backend.hw_name()}:{torch.device(d).index or 0}" for d in devices]


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    """The step barrier: everything pending is compiled (once) and executed; then the step
    closures queued by :func:`add_step_closure` run, in order."""
    _mark_step(wait)
    profiler = sys.modules.get("xlalab.debug.profiler")
    if profiler is not None:
        profiler.set_tracer_marked_step(True)  # a StepTrace around this step needs no barrier of its own
    _closures.run_step_closures()


def wait_device_ops(devices: list[Any] | None = None) -> None:
    """Block until the device has finished all dispatched work."""
    _wait()


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    barrier: bool = True,
    optimizer_args: dict[str, Any] | None = None,
    groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> Any:
    """``optimizer.step()`` followed by the step barrier (``barrier=False`` leaves it to the caller).

    Inside replicated execution (``DataParallel``) the gradients are first averaged across the
    replicas (:func:`reduce_gradients`: one all-reduce in the step's program), so every replica
    takes the same step and the replicas stay identical.
    """
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step()
    return loss


# Inside a DataParallel replica thread these are the replica's own answers; outside one, one
# process drives every xla device, so it is replica 0 of 1 (torch_xla's answers outside a
# multiprocess spawn). ``defval`` is torch_xla's fallback for "no replication".
def get_ordinal(defval: int = 0) -> int:
    """This replica's global ordinal (0 outside replicated execution)."""
    replica = _replicated.current()
    return replica.ordinal if replica is not None else 0


def get_local_ordinal(defval: int = 0) -> int:
    """This replica's index among this process's replicas (0 outside replicated execution)."""
    replica = _replicated.current()
    return replica.index if replica is not None else 0


def xrt_world_size(defval: int = 1) -> int:
    """How many replicas run this step, over every process (1 outside replicated execution)."""
    replica = _replicated.current()
    return replica.world_size if replica is not None else 1


world_size = xrt_world_size


def is_master_ordinal(local: bool = True) -> bool:
    """Whether this is replica 0 (of this process with ``local``, of the whole run without)."""
    return (get_local_ordinal() if local else get_ordinal()) == 0


def save(data: Any, file_or_path: Any, master_only: bool = True, global_master: bool = False) -> None:
    """``torch.save`` with every xla tensor moved to the CPU first (the seeds' advice, done for you).

    The file then loads on a machine without xla devices, with ``map_location`` or without.
    ``data`` may nest tensors in dicts (a ``state_dict`` keeps its type and ``_metadata``),
    lists and tuples (named ones too); other objects are saved as they are. All xla tensors
    come over in one sync. Aliases of one tensor (``detach()``, ``.data``, a state_dict of tied
    weights) are saved once, as eager ``torch.save`` does; views become separate tensors, as
    the seeds warn. ``master_only``/``global_master`` are torch_xla's: every replica moves its
    tensors (as torch_xla's do), only the master writes.
    """
    cpu_data = _to_cpu_tree(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu_data, file_or_path)


def _to_cpu_tree(data: Any) -> Any:
    found: list[XlaTensor] = []
    _collect(data, found, set())
    hosts = to_cpu_many(found, "save")
    by_alias: dict[Any, torch.Tensor] = {}
    moved: dict[int, torch.Tensor] = {}
    for t, host in zip(found, hosts):
        # Same storage, no view chain: the same value under another tensor object.
        key = (id(t._st), host.dtype) if not t._chain else id(t)
        # A tensor object of its own over the shared CPU storage: torch.save writes the storage
        # once, and each object keeps its own requires_grad.
        out = by_alias.setdefault(key, host).detach()
        if isinstance(t, torch.nn.Parameter):
            moved[id(t)] = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        else:
            moved[id(t)] = out.requires_grad_(t.requires_grad)
    return _rebuild(data, moved)


def _collect(data: Any, found: list[XlaTensor], seen: set[int]) -> None:
    if isinstance(data, XlaTensor):
        if id(data) not in seen:
            seen.add(id(data))
            found.append(data)
    elif isinstance(data, dict):
        for v in data.values():
            _collect(v, found, seen)
    elif isinstance(data, (list, tuple)):
        for v in data:
            _collect(v, found, seen)


def _rebuild(data: Any, moved: dict[int, torch.Tensor]) -> Any:
    if isinstance(data, torch.Tensor):
        return moved.get(id(data), data)
    if isinstance(data, dict):
        items = {k: _rebuild(v, moved) for k, v in data.items()}
        if all(items[k] is v for k, v in data.items()):
            return data
        out = copy.copy(data)  # keeps the dict's type and attributes (a state_dict's _metadata)
        out.update(items)
        return out
    if isinstance(data, (list, tuple)):
        values = [_rebuild(v, moved) for v in data]
        if all(a is b for a, b in zip(values, data)):
            return data
        if isinstance(data, list):
            return values if type(data) is list else _list_like(data, values)
        if hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*values)
        return tuple(values) if type(data) is tuple else type(data)(values)
    return data


def _list_like(data: list[Any], values: list[Any]) -> list[Any]:
    out = copy.copy(data)
    out[:] = values
    return out


# --------------------------------------------------------------------------- collectives

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"


def _check_groups(groups: list[list[int]] | None, world: int) -> None:
    if not groups or (len(groups) == 1 and sorted(groups[0]) == list(range(world))):
        return
    raise NotImplementedError(
        f"all_reduce(groups={groups}): xlalab reduces across all {world} replicas; sub-groups of "
        "replicas are not supported (leave groups=None)."
    )


def all_reduce(
    reduce_type: str,
    inputs: torch.Tensor | list[torch.Tensor],
    scale: float = 1.0,
    groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> Any:
    """Reduce ``inputs`` across the replicas (``REDUCE_SUM``, ``_MUL``, ``_AND``, ``_OR``,
    ``_MIN``, ``_MAX``), then multiply by ``scale``.

    As in torch_xla: a tensor gives a new tensor; a list of tensors is reduced in place (one
    all-reduce for the whole list) and returned. The reduction is recorded like any op and
    becomes an XLA all-reduce in the replicated step's program; it runs at the next barrier.
    A ``sum`` of one tensor is differentiable (its gradient is the all-reduced gradient).
    Outside replicated execution there is one replica, so only ``scale`` applies.
    """
    from ..runtime.tensor import assign, value, wrap_result

    replica = _replicated.current()
    world = replica.world_size if replica is not None else 1
    _check_groups(groups, world)
    if isinstance(inputs, torch.Tensor):
        x = inputs
        if not isinstance(x, XlaTensor):  # PyTorch's own CPU (DataParallel with device_ids=[])
            return x * scale if scale != 1.0 else x.clone()
        if reduce_type == REDUCE_SUM and x.requires_grad and torch.is_grad_enabled():
            return _AllReduceSum.apply(x, float(scale), world)
        return wrap_result(_replicated.all_reduce_node([value(x)], reduce_type, scale, world))[0]
    tensors = list(inputs)
    xla = [t for t in tensors if isinstance(t, XlaTensor)]
    if len(xla) != len(tensors):
        if xla or world != 1:
            raise TypeError(
                "all_reduce of a list takes xla tensors only, or CPU tensors only outside replicas"
            )
        if scale != 1.0:
            with torch.no_grad():
                for t in tensors:
                    t.mul_(scale)
        return inputs
    if xla:
        outs = wrap_result(_replicated.all_reduce_node([value(t) for t in xla], reduce_type, scale, world))
        for t, out in zip(xla, outs):
            assign(t, value(out))
    return inputs


class _AllReduceSum(torch.autograd.Function):
    """``all_reduce(sum)`` for autograd: the gradient of a sum over replicas is the sum of the
    replicas' gradients (what synchronized batch norm needs)."""

    @staticmethod
    def forward(ctx: Any, x: XlaTensor, scale: float, world: int) -> Any:  # type: ignore[override]
        from ..runtime.tensor import value, wrap_result

        ctx.scale, ctx.world = scale, world
        return wrap_result(_replicated.all_reduce_node([value(x)], REDUCE_SUM, scale, world))[0]

    @staticmethod
    def backward(ctx: Any, grad: XlaTensor) -> tuple[Any, None, None]:  # type: ignore[override]
        from ..runtime.tensor import value, wrap_result

        node = _replicated.all_reduce_node([value(grad)], REDUCE_SUM, ctx.scale, ctx.world)
        return wrap_result(node)[0], None, None


def reduce_gradients(
    optimizer: torch.optim.Optimizer, groups: list[list[int]] | None = None, pin_layout: bool = True
) -> None:
    """Average the gradients of ``optimizer``'s parameters across the replicas, in place.

    One all-reduce (``sum``, scaled by ``1/world_size``) for all of them; nothing happens
    outside replicated execution.
    """
    count = xrt_world_size()
    if count <= 1:
        return
    grads = [p.grad.data for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    all_reduce(REDUCE_SUM, grads, scale=1.0 / count, groups=groups, pin_layout=pin_layout)


def rendezvous(tag: str, payload: Any = b"", replicas: list[int] | None = None) -> list[Any]:
    """Wait until every replica reaches ``rendezvous(tag)``; return their payloads by ordinal."""
    replica = _replicated.current()
    if replica is None:
        return [payload]
    return replica.rendezvous(tag, payload)


def mesh_reduce(tag: str, data: Any, reduce_fn: Any) -> Any:
    """``reduce_fn`` of every replica's ``data`` (a list by ordinal), the same on all replicas.

    xla tensors in ``data`` are brought to the CPU first, as in torch_xla. It is a barrier:
    every replica must call it with the same ``tag``. Outside replicated execution:
    ``reduce_fn([data])``.
    """
    replica = _replicated.current()
    if replica is None:
        return reduce_fn([data])
    return reduce_fn(replica.rendezvous(tag, _to_cpu_tree(data)))


def send_cpu_data_to_device(data: Any, device: Any, input_sharding: Any = None) -> Any:
    """``data`` (tensors nested in lists, tuples and dicts) with every CPU tensor moved to ``device``.

    As in torch_xla, a lone tensor comes back as a list of one tensor; each moved tensor keeps
    its ``requires_grad``. Moves go straight to device data: safe from a background thread
    (ParallelLoader) while replicas record, since nothing becomes pending IR.

    In SPMD mode ``input_sharding`` (a ``ShardingSpec`` for every tensor, or a dict of them keyed
    like a dict ``data``) lays the moved tensors out across the mesh, as ``MpDeviceLoader`` does.
    """
    from ..distributed.parallel_loader import _check_input_sharding, _shard_batch
    from ..runtime.tensor import to_device_node, wrap

    input_sharding = _check_input_sharding(input_sharding)
    index = torch.device(device).index or 0

    def move(x: Any) -> Any:
        if isinstance(x, XlaTensor):
            return x.to(device) if (x.device.index or 0) != index else x
        if isinstance(x, torch.Tensor):
            moved = wrap(to_device_node(x.detach(), index))
            return moved.requires_grad_(x.requires_grad) if x.requires_grad else moved
        if isinstance(x, dict):
            return type(x)((k, move(v)) for k, v in x.items())
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*[move(v) for v in x])
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        return x

    if type(data) is torch.Tensor:
        data = [data]
    moved = move(data)
    return moved if input_sharding is None else _shard_batch(moved, input_sharding)


# --------------------------------------------------------------------------- more collectives


def _world_and_check(what: str, groups: list[list[int]] | None) -> int:
    replica = _replicated.current()
    world = replica.world_size if replica is not None else 1
    if groups and not (len(groups) == 1 and sorted(groups[0]) == list(range(world))):
        raise NotImplementedError(
            f"{what}(groups={groups}): xlalab's collectives span all {world} replicas; sub-groups "
            "of replicas are not supported (leave groups=None)."
        )
    return world


def _collective(
    kind: str, x: torch.Tensor, params: tuple[Any, ...], world: int, shape: tuple[int, ...]
) -> Any:
    from ..runtime.tensor import value, wrap

    if not isinstance(x, XlaTensor):
        raise TypeError(
            f"{kind} takes xla tensors; got a tensor on {x.device}. Move it with .to(xm.xla_device())."
        )
    return wrap(_replicated.collective_node(kind, value(x), params, world, shape))


def all_gather(
    value: torch.Tensor | list[torch.Tensor],
    dim: int = 0,
    groups: list[list[int]] | None = None,
    output: torch.Tensor | list[torch.Tensor] | None = None,
    pin_layout: bool = True,
    channel_id: int | None = None,
    use_global_device_ids: bool | None = None,
) -> Any:
    """Every replica's ``value`` concatenated along ``dim`` (an XLA all-gather in the step's
    program). A list of tensors gives a list; ``output`` receives the result in place."""
    if isinstance(value, (list, tuple)):
        outs = [all_gather(v, dim, groups, None, pin_layout) for v in value]
        if output is not None:
            for o, r in zip(_checked_outputs(output, outs), outs):
                o.copy_(r)
            return output
        return outs
    world = _world_and_check("all_gather", groups)
    d = dim + value.dim() if dim < 0 else dim
    if not 0 <= d < max(value.dim(), 1):
        raise IndexError(f"all_gather(dim={dim}) of a {value.dim()}-d tensor")
    shape = list(value.shape)
    shape[d] *= world
    result = _collective("all_gather", value, (d,), world, tuple(shape))
    if output is not None:
        assert isinstance(output, torch.Tensor)
        output.copy_(result)
        return output
    return result


def _checked_outputs(output: Any, results: list[Any]) -> list[torch.Tensor]:
    if not isinstance(output, (list, tuple)) or len(output) != len(results):
        raise ValueError(f"output must be a list of {len(results)} tensors, one per input")
    return list(output)


def reduce_scatter(
    reduce_type: str,
    input: torch.Tensor | list[torch.Tensor],
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: list[list[int]] | None = None,
    output: torch.Tensor | list[torch.Tensor] | None = None,
    pin_layout: bool = True,
    channel_id: int | None = None,
    use_global_device_ids: bool | None = None,
) -> Any:
    """Reduce ``input`` across the replicas (``REDUCE_SUM``, ...), scale it, and give each
    replica its ``1/shard_count`` block along ``scatter_dim`` (an XLA reduce-scatter)."""
    if isinstance(input, (list, tuple)):
        outs = [reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups) for t in input]
        if output is not None:
            for o, r in zip(_checked_outputs(output, outs), outs):
                o.copy_(r)
            return output
        return outs
    if reduce_type not in _replicated.REDUCE_TYPES:
        raise ValueError(f"reduce_scatter: reduce_type {reduce_type!r} is not one of xm.REDUCE_*")
    world = _world_and_check("reduce_scatter", groups)
    if shard_count != world:
        raise ValueError(
            f"reduce_scatter(shard_count={shard_count}): there are {world} replicas; shard_count must be "
            "the number of replicas (xm.xrt_world_size())"
        )
    d = scatter_dim + input.dim() if scatter_dim < 0 else scatter_dim
    if input.shape[d] % world:
        raise ValueError(
            f"reduce_scatter: dimension {scatter_dim} of size {input.shape[d]} does not split into "
            f"{world} shards"
        )
    shape = list(input.shape)
    shape[d] //= world
    result = _collective("reduce_scatter", input, (reduce_type, float(scale), d), world, tuple(shape))
    if output is not None:
        assert isinstance(output, torch.Tensor)
        output.copy_(result)
        return output
    return result


def all_to_all(
    value: torch.Tensor,
    split_dimension: int,
    concat_dimension: int,
    split_count: int,
    groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> Any:
    """XLA's AllToAll: split ``value`` into ``split_count`` blocks along ``split_dimension``,
    send block ``i`` to replica ``i``, concatenate what arrives along ``concat_dimension``."""
    world = _world_and_check("all_to_all", groups)
    if split_count != world:
        raise ValueError(f"all_to_all(split_count={split_count}): split_count must be the {world} replicas")
    s = split_dimension % value.dim()
    c = concat_dimension % value.dim()
    if value.shape[s] % world:
        raise ValueError(f"all_to_all: dimension {s} of size {value.shape[s]} does not split into {world}")
    shape = list(value.shape)
    shape[s] //= world
    shape[c] *= world
    return _collective("all_to_all", value, (s, c), world, tuple(shape))


def collective_permute(value: torch.Tensor, pairs: list[list[int]]) -> Any:
    """XLA's CollectivePermute: replica ``src`` sends ``value`` to ``dst`` for each
    ``[src, dst]`` pair; a replica that receives nothing gets zeros."""
    world = _world_and_check("collective_permute", None)
    checked = tuple((int(a), int(b)) for a, b in pairs)
    for a, b in checked:
        if not (0 <= a < world and 0 <= b < world):
            raise ValueError(f"collective_permute: pair [{a}, {b}] names a replica outside 0..{world - 1}")
    if len({a for a, _ in checked}) != len(checked) or len({b for _, b in checked}) != len(checked):
        raise ValueError("collective_permute: each replica may send once and receive once")
    return _collective("collective_permute", value, (checked,), world, tuple(value.shape))


def _no_channels(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"xm.{what}: XLA's channel Send/Recv pairs transfers between separately compiled programs; "
        "xlalab's replicas run one SPMD program (JAX has no send/recv), so there is no counterpart. "
        "For pipeline stages, have every replica call xm.collective_permute(value, pairs) with the "
        "same [src, dst] pairs: each dst receives its src's value."
    )


def send(value: torch.Tensor, channel_id: int) -> torch.Tensor:
    """torch_xla's XLA ``Send``: not provided (see the error for xm.collective_permute)."""
    raise _no_channels(f"send(value, channel_id={channel_id})")


def recv(output: torch.Tensor, channel_id: int) -> torch.Tensor:
    """torch_xla's XLA ``Recv``: not provided (see the error for xm.collective_permute)."""
    raise _no_channels(f"recv(output, channel_id={channel_id})")


def collective_broadcast(
    tensors: list[torch.Tensor],
    root_ordinal: int = 0,
    groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> None:
    """Replace ``tensors`` in place, on every replica, with the root replica's values.

    As in torch_xla: every replica multiplies by 1 (the root) or 0 (the others) and the
    results are summed with one all-reduce, so each replica records the same program.
    """
    from ..runtime.tensor import to_device_node, wrap

    ordinal = get_ordinal()
    with torch.no_grad():
        for t in tensors:
            flag = torch.tensor(1 if ordinal == root_ordinal else 0, dtype=t.dtype)
            if isinstance(t, XlaTensor):
                # Device data, not a constant: the replicas' programs must be the same.
                flag = wrap(to_device_node(flag, t.device.index or 0))
            t.mul_(flag)
    all_reduce(REDUCE_SUM, tensors, groups=groups, pin_layout=pin_layout)


def broadcast_master_param(model: torch.nn.Module) -> None:
    """Make every replica's parameters and buffers the master replica's (ordinal 0)."""
    collective_broadcast([*model.parameters(), *model.buffers()])
    mark_step()


# --------------------------------------------------------------------------- steps and closures


def add_step_closure(closure: Any, args: tuple[Any, ...] = (), run_async: bool = False) -> None:
    """Run ``closure(*args)`` after this step's barrier (the next ``mark_step``/``torch_xla.sync``),
    when the tensors it reads are already computed; closures run in the order queued.
    ``run_async=True`` runs it on a worker thread instead, so the next step does not wait."""
    _closures.add_step_closure(closure, args, run_async)


def master_print(*args: Any, fd: Any = None, local: bool = False, flush: bool = False) -> None:
    """``print`` on the master replica only (ordinal 0 of the run, or of this host with ``local``)."""
    import sys

    if is_master_ordinal(local=local):
        print(*args, file=fd if fd is not None else sys.stdout, flush=flush)


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "xla"


def unlazy(tensors: list[torch.Tensor]) -> None:
    """Compute ``tensors`` now (one execution for all of them) and wait until they are done."""
    xla = [t for t in tensors if isinstance(t, XlaTensor)]
    if len(xla) != len(tensors):
        bad = next(t for t in tensors if not isinstance(t, XlaTensor))
        raise ValueError(f"unlazy() takes xla tensors; got one on {bad.device}")
    if xla:
        from ..runtime.tensor import value

        arrays = _graph.materialize([value(t) for t in xla], [t._st for t in xla], "unlazy")
        import jax

        jax.block_until_ready(arrays)


def optimization_barrier_(tensors: list[torch.Tensor]) -> None:
    """Stop XLA from moving computation across this point (``jax.lax.optimization_barrier``):
    the tensors are replaced, in place, by the barrier's outputs. Gradient checkpointing uses
    it so that XLA's common-subexpression elimination cannot undo the recomputation."""
    from ..runtime.tensor import assign, value

    xla = [t for t in tensors if isinstance(t, XlaTensor)]
    if xla:
        node = _optimization_barrier_node([value(t) for t in xla])
        for i, t in enumerate(xla):
            from ..runtime import ir

            assign(t, ir.item(node, i))


def _optimization_barrier_node(nodes: list[Any]) -> Any:
    from ..runtime import ir

    devices = {n.device for n in nodes}
    if len(devices) != 1:
        raise ValueError(
            f"optimization_barrier_: the tensors must be on one device, got xla:{sorted(devices)}"
        )
    return ir.Node(
        _OPTIMIZATION_BARRIER,
        tuple(nodes),
        None,
        None,
        None,
        devices.pop(),
        outs=tuple((n.shape, n.dtype) for n in nodes),  # type: ignore[arg-type]
    )


_OPTIMIZATION_BARRIER = "xla::optimization_barrier"


def _lower_optimization_barrier(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> tuple[Any, ...]:
    from jax import lax

    return tuple(lax.optimization_barrier(tuple(vals)))


_graph.SPECIAL_LOWERINGS[_OPTIMIZATION_BARRIER] = _lower_optimization_barrier


# --------------------------------------------------------------------------- RNG


def _device_index(device: Any) -> int:
    if device is None:
        return xla_device().index or 0
    d = torch.device(device)
    if d.type != "xla":
        raise ValueError(f"expected an xla device, got {d}")
    return d.index or 0


def set_rng_state(seed: int, device: Any = None) -> None:
    """Set the xla device's random generator to ``seed`` (a value from :func:`get_rng_state`
    restores that point of the sequence exactly)."""
    from ..runtime import rng

    value = int(seed)
    rng.STATE[_device_index(device)] = [value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF]


def get_rng_state(device: Any = None) -> int:
    """The xla device's random generator state as an integer: the seed after
    ``set_rng_state(seed)``/``torch_xla.manual_seed(seed)``, then moving on with every random op."""
    from ..runtime import rng

    seed, offset = rng.seed_of(_device_index(device))
    return int(seed) | (int(offset) << 32)


class _ForkRng:
    def __init__(self, device: Any, enabled: bool) -> None:
        self.device, self.enabled = device, enabled
        self.state = 0

    def __enter__(self) -> None:
        if self.enabled:
            self.state = get_rng_state(self.device)

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            set_rng_state(self.state, self.device)


def fork_rng(device: Any = None, enabled: bool = True) -> Any:
    """A context manager: the xla random generator is back where it was when the block ends."""
    return _ForkRng(device, enabled)


# --------------------------------------------------------------------------- device facts


def xla_device_kind(device: Any = None) -> str:
    """The vendor's name for the device's kind (JAX's ``device_kind``: ``cpu``,
    ``NVIDIA H100 80GB HBM3``, ``TPU v4``)."""
    return str(backend.jax_device(_device_index(device)).device_kind)


class MemoryInfo(TypedDict):
    bytes_used: int
    bytes_limit: int
    peak_bytes_used: int


def get_memory_info(device: Any = None) -> MemoryInfo:
    """``{'bytes_used', 'bytes_limit', 'peak_bytes_used'}`` of an xla device.

    From the device's allocator (JAX's ``memory_stats()``) on GPU and TPU. The CPU platform
    keeps no such statistics: there ``bytes_used`` is the size of the live arrays on the device,
    ``peak_bytes_used`` the largest value seen by this call so far, and ``bytes_limit`` the
    machine's physical memory.
    """
    index = _device_index(device)
    jdev = backend.jax_device(index)
    stats = None
    try:
        stats = jdev.memory_stats()
    except Exception:  # some platforms raise instead of returning None
        stats = None
    if stats:
        used = int(stats.get("bytes_in_use", 0))
        return {
            "bytes_used": used,
            "bytes_limit": int(stats.get("bytes_limit", stats.get("bytes_reservable_limit", 0))),
            "peak_bytes_used": int(stats.get("peak_bytes_in_use", used)),
        }
    import os

    import jax

    used = sum(a.nbytes for a in jax.live_arrays() if jdev in a.devices())
    peak = _CPU_PEAK[index] = max(_CPU_PEAK.get(index, 0), used)
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        limit = 0
    return {"bytes_used": used, "bytes_limit": int(limit), "peak_bytes_used": peak}


_CPU_PEAK: dict[int, int] = {}


def set_replication(device: Any, devices: list[Any] | None) -> None:
    """torch_xla's per-thread replication setup. xlalab's replicas are set up by
    ``xmp.spawn``/DataParallel, so this only checks that ``device`` is one of ``devices``."""
    if devices and str(device) not in [str(d) for d in devices]:
        raise ValueError(f"set_replication: {device} is not among {devices}")


# --------------------------------------------------------------------------- StableHLO


def _stablehlo_tensors(tensors: list[torch.Tensor] | None) -> list[torch.Tensor]:
    from ..runtime.storage import pending_storages
    from ..runtime.tensor import wrap

    if tensors:
        return list(tensors)
    # torch_xla's empty list: every pending tensor of the default device is an output.
    dev = xla_device().index or 0
    return [wrap(st.node, st) for st in pending_storages(dev)]


def get_stablehlo(tensors: list[torch.Tensor] | None = None) -> str:
    """The StableHLO (MLIR text) of the pending graph whose outputs are ``tensors``; with no
    tensors, of everything pending on the default device. Nothing is executed. With
    XLA_HLO_DEBUG=1 the ops carry the user's source lines."""
    from ..debug import graph_dump

    return graph_dump.get_tensors_stablehlo(_stablehlo_tensors(tensors))


def get_stablehlo_bytecode(tensors: list[torch.Tensor] | None = None) -> bytes:
    """:func:`get_stablehlo` as portable StableHLO bytecode (MLIR bytecode, as
    ``jax.export`` serializes it), readable by StableHLO tools."""
    from jax._src.interpreters import mlir

    from ..debug import graph_dump

    lowered = graph_dump._lower(graph_dump.graph_of(_stablehlo_tensors(tensors)))
    return bytes(mlir.module_to_bytecode(lowered.compiler_ir("stablehlo")))


# --------------------------------------------------------------------------- what libraries call


def _fetch_gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


def _maybe_convert_to_cpu(data: Any, convert: bool = True) -> Any:
    """``data`` with its xla tensors on the CPU (one sync for all), as ``xm.save`` writes it."""
    return _to_cpu_tree(data) if convert else data


class RateTracker:
    """Samples per second, smoothed: torch_xla's training-loop throughput meter."""

    def __init__(self, smooth_factor: float | None = None) -> None:
        import time

        from ..utils.utils import getenv_as

        factor = getenv_as("RATE_TRACKER_SMOOTHING", float, 0.4) if smooth_factor is None else smooth_factor
        self._smooth_factor = float(factor or 0.4)
        self._start_time = time.time()
        self._partial_time = self._start_time
        self._partial_count = 0.0
        self._partial_rate: float | None = None
        self._count = 0.0

    def _update(self, now: float, rate: float) -> None:
        self._partial_count += self._count
        self._count = 0.0
        self._partial_time = now
        self._partial_rate = rate

    def add(self, count: float) -> None:
        self._count += count

    def _smooth(self, current_rate: float) -> float:
        if self._partial_rate is None:
            return current_rate
        return (1 - self._smooth_factor) * current_rate + self._smooth_factor * self._partial_rate

    def rate(self) -> float:
        import time

        now = time.time()
        delta = now - self._partial_time
        report_rate = 0.0
        if delta > 0:
            report_rate = self._smooth(self._count / delta)
            self._update(now, report_rate)
        return report_rate

    def global_rate(self) -> float:
        import time

        delta = time.time() - self._start_time
        count = self._partial_count + self._count
        return count / delta if delta > 0 else 0.0


# --------------------------------------------------------------------------- bucketized and host-side helpers


def all_gather_bucketized(
    input_list: list[torch.Tensor],
    dim: int = 0,
    groups: list[list[int]] | None = None,
    output: list[torch.Tensor] | None = None,
    pin_layout: bool = False,
    bucket_cap_mb: int = 160,
) -> list[torch.Tensor]:
    """:func:`all_gather` of each tensor of ``input_list``; XLA combines the gathers of one
    step's program, so there are no buckets to size."""
    return all_gather(list(input_list), dim, groups, output, pin_layout)  # type: ignore[no-any-return]


def reduce_scatter_bucketized(
    reduce_type: str,
    input_list: list[torch.Tensor],
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: list[list[int]] | None = None,
    output: list[torch.Tensor] | None = None,
    pin_layout: bool = False,
    bucket_cap_mb: int = 160,
) -> list[torch.Tensor]:
    """:func:`reduce_scatter` of each tensor of ``input_list`` (see :func:`all_gather_bucketized`)."""
    return reduce_scatter(  # type: ignore[no-any-return]
        reduce_type, list(input_list), scale, scatter_dim, shard_count, groups, output, pin_layout
    )


def all_reduce_bucketized_gradients(
    gradients: list[torch.Tensor],
    scale: float,
    groups: list[list[int]] | None,
    pin_layout: bool,
    bucket_cap_mb: int = 0,
) -> None:
    """Sum ``gradients`` across the replicas in place, times ``scale`` (one all-reduce)."""
    all_reduce(REDUCE_SUM, list(gradients), scale=scale, groups=groups, pin_layout=pin_layout)


def xla_replication_devices(local_devices: list[Any] | None = None) -> list[str]:
    """The real devices replication runs over (``['CPU:0', 'CPU:1', ...]``)."""
    return xla_real_devices(local_devices or get_xla_supported_devices())


def xla_rendezvous(
    payload: bytes = b"", ordinals: list[int] | None = None, tag: str | None = None
) -> list[bytes]:
    """Every replica's ``payload`` (bytes), by ordinal; a barrier for the replicas."""
    if not isinstance(payload, bytes):
        raise TypeError(f"`payload` must be bytes, not {type(payload).__name__}")
    return rendezvous(tag or "xla_rendezvous", payload, ordinals)


def do_on_ordinals(target: Any, data: Any = (), ordinals: Any = (0,)) -> Any:
    """``target(*data)`` (xla tensors in ``data`` on the CPU) on the replicas in ``ordinals``
    only; the others get None. All replicas meet at a rendezvous afterwards."""
    wanted = {ordinals} if isinstance(ordinals, int) else set(ordinals)
    running = get_ordinal() in wanted
    result = target(*_to_cpu_tree(data)) if running else None
    rendezvous("torch_xla.core.xla_model.do_on_ordinals")
    return result
