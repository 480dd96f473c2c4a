"""The ``xla`` device in torch: PrivateUse1 renamed, with a Python guard, hooks, a device
module, factory entry points and a device RNG.

torch offers this route without a C++ extension: ``rename_privateuse1_backend("xla")``
makes ``torch.device("xla", i)`` print ``xla:i``, a Python device guard and hooks let
autograd run, and a boxed fallback receives the ``empty``/``empty_strided`` calls that
factories and ``.to("xla")`` start with. Everything after that reaches
``XlaTensor.__torch_dispatch__``.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from typing import Any

import torch

from . import backend, backward_errors, checks, control_flow, interrupts, ir, metrics, rng
from .graph import wait_device_ops
from .lowering import attention
from .tensor import EMPTY, HostStorage, XlaTensor, debug_frames, fallback, record, torch_device, wrap

aten = torch.ops.aten


class _Hooks(torch._C._acc.PrivateUse1Hooks):  # type: ignore[misc]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):  # type: ignore[misc]
    # torch's C++ asks for the device type inside functions that must not throw (the current
    # stream, which autograd reads for every op it records on an xla tensor). A C-level callable
    # runs no Python code there, so nothing can raise in it (interrupts.py says why that
    # matters). Not a builtin function: pybind11 would take one for its own binding and find no
    # override.
    type_ = functools.partial(operator.attrgetter("PrivateUse1"), torch._C._autograd.DeviceType)


class _DeviceModule:
    """What ``torch.xla`` / ``torch._register_device_module`` expects."""

    # torch.utils.checkpoint saves and restores a device's RNG state only for an initialized
    # device module: without it a recomputed dropout drew a new mask (gradients of another one).
    _initialized = True

    @staticmethod
    def device(device: Any) -> contextlib.AbstractContextManager[None]:
        """The context that makes ``device`` current (one current device: nothing to switch)."""
        return contextlib.nullcontext()

    @staticmethod
    def is_available() -> bool:
        return backend.device_count() > 0

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return backend.device_count()

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        rng.manual_seed_all(seed)

    @staticmethod
    def manual_seed(seed: int) -> None:
        rng.manual_seed_all(seed)

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        """The device RNG's (seed, offset) as a uint8 tensor, like other backends' RNG state."""
        seed, offset = rng.seed_of(_index(device))
        return torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8)

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        seed, offset = state.clone().view(torch.int64).tolist()
        rng.STATE[_index(device)] = [int(seed), int(offset)]

    @staticmethod
    def synchronize(device: Any = None) -> None:
        wait_device_ops()

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]


# --------------------------------------------------------------------------- factories


def _index(device: Any) -> int:
    if device is None:
        return 0
    d = torch.device(device)
    return d.index or 0


def _empty(size: Any, dtype: torch.dtype | None, device: Any, strides: Any = None) -> XlaTensor:
    dtype = dtype or torch.get_default_dtype()
    index = _index(device)
    backend.jax_device(index)  # a clear error for a device that does not exist
    shape = tuple(int(s) for s in size)
    layout = None
    if strides is not None:
        # empty_strided: ``.to("xla")`` keeps a transposed tensor's strides, as on any device, so
        # that its contiguous() is a copy, as in eager.
        probe = torch.empty_strided(shape, tuple(int(s) for s in strides), device="meta")
        if not probe.is_contiguous():
            layout = (tuple(probe.stride()), 0)
    return wrap(ir.Node(EMPTY, (), None, shape, dtype, index, frames=debug_frames()), layout=layout)


def _privateuse1_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Calls that reach PrivateUse1 with no xla tensor argument: the factories."""
    if op is aten.empty.memory_format:
        return _empty(args[0], kwargs.get("dtype"), kwargs.get("device"))
    if op is aten.empty_strided.default:
        return _empty(args[0], kwargs.get("dtype"), kwargs.get("device"), args[1])
    # Any other factory: run it on the CPU, then send the result over (counted).
    return fallback(op, args, kwargs)


def _factory(op: Any) -> Any:
    """Factories with their own PrivateUse1 kernel: recorded as IR, values baked in."""

    def impl(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.pop("device", None)
        kwargs.pop("pin_memory", None)
        kwargs.pop("layout", None)
        if kwargs.get("dtype") is None:
            kwargs.pop("dtype", None)
        index = _index(device)
        if op in _VALUE_FACTORIES:
            # A fill value is a Scalar like any other: a graph input, so new values never recompile.
            node = record(op, args, kwargs)
            if node is not None:
                node.device = index
                return wrap(node)
        try:
            meta = op(*args, device="meta", **kwargs)
        except Exception:
            # torch's meta kernel refuses some calls that eager runs (an integer arange whose
            # step truncates to 0, arange(-2.5, 2.5, 0.5, dtype=int32)): eager decides, and
            # raises its own error or makes the value on the CPU.
            return fallback(op, args, {**kwargs, "device": torch_device(index)})
        static = ir.typed(args)
        arg = (static, ir.typed(tuple(kwargs.items())))
        if (op, arg) not in _EAGER_ACCEPTS and meta.numel() <= _EAGER_CHECK_NUMEL:
            # ...and accepts some that eager refuses (an arange of bools): ask eager's kernel
            # once per call signature, so that it raises its error here, at the user's line.
            op(*args, device="cpu", **kwargs)
            _EAGER_ACCEPTS.add((op, arg))
        node = ir.Node(op, (), arg, tuple(meta.shape), meta.dtype, index, frames=debug_frames())
        metrics.count("xla::" + op._schema.name.split("::")[-1])
        return wrap(node)

    return impl


_EAGER_ACCEPTS: set[Any] = set()  # factory call signatures eager's CPU kernel ran
_EAGER_CHECK_NUMEL = 4096  # results up to this size are checked against eager's kernel
_VALUE_FACTORIES = (aten.full.default, aten.scalar_tensor.default)
_FACTORIES = (
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.linspace.default,
    aten.eye.default,
    aten.eye.m,
    aten.scalar_tensor.default,
    aten.full.default,
    aten.tril_indices.default,
    aten.triu_indices.default,
)
_libs: list[Any] = []
_WHOLE_BACKWARD_OPS = ("silu_backward", "mish_backward")


def _decomposed(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Torch's decomposition of ``op``: for an xla tensor the Python key comes first and the
    lowering runs, so this serves only a tensor that reaches the device's kernel directly."""
    return op.decompose(*args, **kwargs)


def _restore_on_xla(storage: Any, location: str) -> HostStorage | None:
    """A loaded storage for ``location`` when it names an xla device (else None: not ours)."""
    if location != "xla" and not location.startswith("xla:"):
        return None
    device = torch.device(location)
    index = device.index or 0
    if index >= backend.device_count():
        raise RuntimeError(
            f"Attempting to deserialize object on xla device {index} but "
            f"torch.xla.device_count() is {backend.device_count()}. Please use torch.load with "
            "map_location to map your storages to an existing device."
        )
    out = _host_storage(storage.nbytes(), index)
    out.copy_(storage)
    return out


def _host_storage(nbytes: int, index: int) -> HostStorage:
    out = HostStorage(nbytes)
    out.xla_device = torch.device("xla", index)
    out.bases = {}
    return out


_storage_new: Any = torch.UntypedStorage.__new__


def _new_storage(cls: type, *args: Any, device: Any = None, **kwargs: Any) -> Any:
    """``torch.UntypedStorage(n, device="xla")`` (what ``storage.to("xla")`` and ``.xla()``
    make): a HostStorage, bytes on the host bound for the device, as ``torch.load`` restores a
    storage for xla; ``tensor.set_(storage)`` moves them there. torch's own constructor asks
    the device for an allocator, which a device registered from Python has none of: the
    process crashed."""
    if device is None:
        return _storage_new(cls, *args, **kwargs)
    where = torch.device(device)
    if where.type != "xla" or cls is not torch.UntypedStorage:
        return _storage_new(cls, *args, device=device, **kwargs)
    if kwargs or len(args) > 1 or (args and not isinstance(args[0], int)):
        raise RuntimeError(
            "torch.UntypedStorage on xla takes a size in bytes only: make it on the CPU and move "
            "it with .to(device='xla')"
        )
    return _host_storage(args[0] if args else 0, where.index or 0)


@functools.cache
def install() -> None:
    """Register the xla device with torch (once per process)."""
    interrupts.ensure_installed()
    torch.utils.rename_privateuse1_backend("xla")
    torch.UntypedStorage.__new__ = _new_storage  # type: ignore[method-assign, assignment]
    torch._register_device_module("xla", _DeviceModule())
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    fallback_lib = torch.library.Library("_", "IMPL")
    fallback_lib.fallback(_privateuse1_fallback, "PrivateUse1")
    aten_lib = torch.library.Library("aten", "IMPL")
    # The two allocators also get kernels of their own: under a dispatch mode (dynamo's fake
    # tensors), torch reaches a Python kernel through a lookup that finds per-op kernels only,
    # and an index list (``x[[1, 2]]``) allocates on xla below the Python key.
    aten_lib.impl(
        "empty.memory_format",
        lambda size, **kw: _empty(size, kw.get("dtype"), kw.get("device")),
        "PrivateUse1",
    )
    aten_lib.impl(
        "empty_strided",
        lambda size, stride, **kw: _empty(size, kw.get("dtype"), kw.get("device"), stride),
        "PrivateUse1",
    )
    for op in _FACTORIES:
        aten_lib.impl(
            op._schema.name.split("::")[-1]
            + ("." + op._overloadname if op._overloadname != "default" else ""),
            _factory(op),
            "PrivateUse1",
        )
    # Backward ops that eager's CPU runs as one kernel in float opmath, but that torch
    # decomposes for any other device (CompositeImplicitAutograd): for half types the pieces
    # round every step (silu's gradient near its zero at -1.28 came out half its size). A kernel
    # of the device's own keeps them whole, so they reach the lowering that computes as eager's
    # kernel does. Autograd never differentiates them (their forwards' double backward takes
    # another formula), so they need no derivative of their own.
    for name in _WHOLE_BACKWARD_OPS:
        op = getattr(aten, name).default
        aten_lib.impl(name, functools.partial(_decomposed, op), "PrivateUse1")
    # Attention: the kernel eager's CPU would pick (its flash kernel, mostly), where torch would
    # give another device only its math path (lowering/attention.py says what differs).
    aten_lib.impl("scaled_dot_product_attention", attention.route, "AutogradPrivateUse1")
    # one_hot: eager's checks of the class values, which torch's decomposition skips on any
    # device but the CPU (a value out of range gave a row of zeros).
    aten_lib.impl("one_hot", checks.one_hot_checked, "AutogradPrivateUse1")
    # quantile's q in [0, 1]: eager reads and checks it for a CPU q only.
    for name in ("quantile", "nanquantile"):
        aten_lib.impl(name, checks.quantile_checked(name), "AutogradPrivateUse1")
    # Pinned host memory: once xla is torch's accelerator, ``pin_memory()`` (a DataLoader with
    # pin_memory=True) asks it for a pinned allocator. JAX copies from any host buffer, so a
    # pinned copy is a plain copy and nothing is ever pinned (this torch build has no CUDA).
    aten_lib.impl("_pin_memory", lambda t, device=None: t.clone(), "CPU")
    aten_lib.impl("is_pinned", lambda t, device=None: False, "CPU")
    _libs.extend([fallback_lib, aten_lib])
    # torch.load(map_location=xla): torch's own restore for a renamed PrivateUse1 device makes a
    # storage on it with the device's allocator, which xla has none of (the process crashed).
    # Ahead of it, the bytes stay on the host as a HostStorage that set_ copies to the device.
    torch.serialization.register_package(19, lambda obj: None, _restore_on_xla)
    # Backward on xla tensors runs on the calling thread, as torch does for its own lazy device:
    # recording is GIL-bound, so autograd's per-device worker threads only add hand-offs, and
    # torch's Python device guard cannot tell the engine about more than one device (backward on
    # xla:1 would trip an internal assert). The setting is thread-local: replica threads set it too.
    torch._C._set_multithreading_enabled(False)
    backward_errors.install()
    control_flow.install()
    _patch_tensor_constructors()
    _traced_as_tensors()


def _traced_as_tensors() -> None:
    """``make_fx`` (``torch.func.linearize`` traces with it) records ops on xla tensors as it
    does on plain ones. Left to a tensor subclass, it would record the runtime's own helper
    calls instead (meta-device shape runs, CPU checks), and the traced function would return
    constants."""
    from torch.fx.experimental import proxy_tensor

    if XlaTensor not in proxy_tensor.HANDLED_TYPES:
        proxy_tensor.HANDLED_TYPES = (*proxy_tensor.HANDLED_TYPES, XlaTensor)  # type: ignore[assignment]


def _host_data(data: Any) -> Any:
    """``data`` with the xla tensors inside its lists read to the CPU, all in one sync (as
    eager reads a CUDA tensor's value for ``torch.tensor([loss1, loss2])``)."""
    from .tensor import XlaTensor, to_cpu_many

    found: list[Any] = []

    def collect(d: Any) -> None:
        if isinstance(d, XlaTensor):
            found.append(d)
        elif isinstance(d, (list, tuple)):
            for x in d:
                collect(x)

    collect(data)
    if not found:
        return data
    host = dict(zip(map(id, found), to_cpu_many(found, "tensor_constructor")))

    def swap(d: Any) -> Any:
        if isinstance(d, XlaTensor):
            return host[id(d)]
        return type(d)(swap(x) for x in d) if isinstance(d, (list, tuple)) else d

    return swap(data)


def _patch_tensor_constructors() -> None:
    """``torch.tensor(..., device='xla')`` trips an internal assert on this route: build on
    the CPU and move, which is what the user meant. So do xla tensors inside the data."""
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def make(data: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if isinstance(data, (list, tuple)):
                data = _host_data(data)
            device = kwargs.get("device")
            if device is None or torch.device(device).type != "xla":
                return _original(data, *args, **kwargs)
            kwargs["device"] = "cpu"
            requires_grad = kwargs.pop("requires_grad", False)
            out = _original(data, *args, **kwargs).to(torch.device(device))
            return out.requires_grad_(requires_grad) if requires_grad else out

        make.__doc__ = original.__doc__
        make.__name__ = name
        setattr(torch, name, make)


def xla_device(n: int | None = None) -> torch.device:
    install()
    index = n or 0
    backend.jax_device(index)
    return torch_device(index)
