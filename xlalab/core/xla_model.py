"""The parts of ``torch_xla.core.xla_model`` a training script uses, over xlalab's runtime."""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..runtime import backend
from ..runtime import mark_step as _mark_step
from ..runtime import replicated as _replicated
from ..runtime import wait_device_ops as _wait
from ..runtime.device import xla_device as _xla_device
from ..runtime.tensor import XlaTensor, to_cpu_many


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


def xla_real_devices(devices: list[Any]) -> list[str]:
    return [f"{backend.hw_name()}:{torch.device(d).index or 0}" for d in devices]


def mark_step(wait: bool = False) -> None:
    """The step barrier: everything pending is compiled (once) and executed."""
    _mark_step(wait)


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
        _mark_step()
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


def send_cpu_data_to_device(data: Any, device: Any) -> Any:
    """``data`` (tensors nested in lists, tuples and dicts) with every CPU tensor moved to ``device``.

    Moves go straight to device data: safe from a background thread (ParallelLoader) while
    replicas record, since nothing becomes pending IR.
    """
    from ..runtime.tensor import to_device_node, wrap

    index = torch.device(device).index or 0

    def move(x: Any) -> Any:
        if isinstance(x, XlaTensor):
            return x.to(device) if (x.device.index or 0) != index else x
        if isinstance(x, torch.Tensor):
            return wrap(to_device_node(x, index))
        if isinstance(x, dict):
            return type(x)((k, move(v)) for k, v in x.items())
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*[move(v) for v in x])
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        return x

    return move(data)
