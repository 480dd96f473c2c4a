"""Tensors on ``xla`` devices: a wrapper subclass whose aten ops record IR.

The path an op takes reads top to bottom in ``XlaTensor.__torch_dispatch__``: find the
op's handler (resolved once per overload and cached), which records a node, or updates
a storage for in-place ops, or makes a view, or falls back to eager CPU.

State shared between aliases lives in a ``Storage``: ``nn.Parameter(t)``, ``t.detach()``,
``.data`` and every view of a tensor point at the same storage, so a write through any
of them is seen by all, as in eager PyTorch. A view is its base storage plus a chain of
view ops; reading it applies the chain to the base's current value, writing through it
scatters into the base (``xla::update_view``).
"""

from __future__ import annotations

import _signal
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload

from . import (
    backend,
    backward_errors,
    checks,
    config,
    dtypes,
    events,
    index_checks,
    interrupts,
    ir,
    layouts,
    metrics,
    replica_state,
    rng,
)
from .frames import DEFAULT_DEPTH, Frame, ir_frames, library_caller, user_frames
from .graph import LoweringError, materialize, sync
from .ir import Node, slot
from .lowering.registry import LOWERINGS, STATIC_ARGS

# The pending set lives in storage.py; its functions are part of this module's API too.
from .storage import Storage as Storage
from .storage import forget_pending as forget_pending
from .storage import pending_storages as pending_storages
from .storage import set_node as set_node

_sigint_handler = _signal.getsignal  # read per op: C functions, no enum conversion
_SIGINT = _signal.SIGINT

aten = torch.ops.aten
Handler = Callable[[OpOverload, tuple[Any, ...], dict[str, Any]], Any]


# --------------------------------------------------------------------------- the tensor

_DEVICES: list[torch.device] = []


def torch_device(index: int) -> torch.device:
    while len(_DEVICES) <= index:
        _DEVICES.append(torch.device("xla", len(_DEVICES)))
    return _DEVICES[index]


class XlaTensor(torch.Tensor):
    """A tensor on an ``xla`` device. Its value is ``value(t)``: pending IR or device data."""

    _st: Storage
    # Class-level defaults: a new non-view tensor then pays for one attribute, not three.
    _chain: tuple[tuple[OpOverload, Any], ...] = ()
    _vcache: tuple[Node, Node] | None = None
    _layout: tuple[tuple[int, ...], int] | None = None  # eager's strides and offset, if not contiguous

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    # What a hook raises in backward is kept for its end: in flight, it aborted the process.
    def register_hook(self, hook: Callable[[torch.Tensor], torch.Tensor | None]) -> Any:
        return super().register_hook(backward_errors.guarded(hook, returns_grad=True))

    def register_post_accumulate_grad_hook(self, hook: Callable[[torch.Tensor], None]) -> Any:
        return super().register_post_accumulate_grad_hook(backward_errors.guarded(hook))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[override]
        if _sigint_handler(_SIGINT) is not interrupts.deferring:  # a kernel put Python's back
            interrupts.ensure_installed()
        handler = _HANDLERS.get(id(func))
        if handler is None:
            handler = _resolve(func)
        t0 = time.perf_counter_ns()
        try:
            out = handler(func, args, kwargs or {})
        except Exception as e:
            if torch._C._current_autograd_node() is None:
                raise
            failed = [wrap(n) for n in backward_errors.defer(e, func, args)]
            out = failed[0] if len(failed) == 1 else tuple(failed)
        # LazyTracing: buffered per op, folded into the metric at the next sync.
        _TRACING.append(time.perf_counter_ns() - t0)
        if _EAGER[0] and not rng.BODIES.draws:  # a body's ops run with the op that holds it
            _run_now()
        return out

    def __coerce_same_metadata_as_tangent__(self, expected_metadata: Any, expected_type: Any = None) -> Any:
        # AOTAutograd (compiled mode) asks a tangent to match its forward's metadata: an xla
        # tensor's layout carries nothing more to coerce.
        return self

    def storage(self) -> Any:  # type: ignore[override]
        return _StorageIdentity(self)

    def data_ptr(self) -> int:  # type: ignore[override]
        # Tensors over one storage differ by their offsets, as in eager; others never meet.
        return int(_StorageIdentity(self).data_ptr() + self.storage_offset() * self.element_size())

    # ---- reading values: these are barriers for this tensor
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return _format(self, "print")

    def __str__(self) -> str:
        return _format(self, "print")

    def __format__(self, spec: str) -> str:
        # torch formats only plain 0-d Tensors as numbers; users write f"{loss:.3f}".
        if self.dim() == 0 and spec:
            return format(self.detach().item(), spec)
        return str(self) if not spec else object.__format__(self, spec)

    def tolist(self) -> Any:  # type: ignore[override]
        return to_cpu(self, "tolist").tolist()

    def numpy(self, *, force: bool = False) -> Any:  # type: ignore[override]
        if self.requires_grad and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
            )
        return to_cpu(self, "numpy").numpy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        arr = to_cpu(self, "numpy").numpy()
        return arr if dtype is None else arr.astype(dtype)

    # ---- aliasing: ``.data`` shares the storage; assigning it re-points this tensor
    @property  # type: ignore[override]
    def data(self) -> torch.Tensor:
        # torch's own getter: a detached alias with a version counter of its own, so that a
        # write through ``.data`` stays unseen by autograd (``detach()`` shares the counter).
        return torch._C.TensorBase.data.__get__(self)  # type: ignore[attr-defined]

    @data.setter
    def data(self, other: torch.Tensor) -> None:
        if not isinstance(other, XlaTensor):
            other = other.to(self.device)
        torch._C.TensorBase.data.__set__(self, other)  # type: ignore[attr-defined]
        assert isinstance(other, XlaTensor)
        self._st, self._chain, self._vcache, self._layout = other._st, other._chain, None, other._layout

    # ---- the seeds' caveat: copy.copy of an xla tensor is a deep copy
    def __copy__(self) -> torch.Tensor:
        return self._copied({})

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        if not self.is_leaf:
            raise _eager_deepcopy_error()  # eager deep-copies graph leaves only
        return self._copied(memo)

    def _copied(self, memo: dict[int, Any]) -> torch.Tensor:
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            out = self.detach().clone()
        if getattr(self, "_is_param", False):
            out = torch.nn.Parameter(out, requires_grad=self.requires_grad)  # a model copy keeps its params
        else:
            out.requires_grad_(self.requires_grad)
        memo[id(self)] = out
        return out

    # ---- the seeds: saving an xla tensor directly loads it back on the xla device it came from
    # (xm.save moves tensors to the CPU first, which is what files for other machines need).
    # torch.load's default weights_only=True accepts torch's own rebuild functions only: torch's
    # for devices without storage (torch_xla's tensors save the same way); a Parameter
    # wraps the plain tensor. map_location applies (map_location="cpu" loads CPU tensors).
    def __reduce_ex__(self, protocol: Any) -> Any:  # type: ignore[override]
        from collections import OrderedDict

        if getattr(self, "_is_param", False):
            with torch.no_grad():
                plain = self.detach()
            return (torch._utils._rebuild_parameter, (plain, self.requires_grad, OrderedDict()))
        host = to_cpu(self, "save")
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (host, self.dtype, str(self.device), self.requires_grad),
        )


def _eager_deepcopy_error() -> RuntimeError:
    """The error eager raises deep-copying a tensor that is not a graph leaf (its own words)."""
    import copy

    try:
        copy.deepcopy(torch.zeros(1, requires_grad=True) * 1)
    except RuntimeError as e:
        return RuntimeError(str(e))
    return RuntimeError("only graph leaves can be deep-copied")


class _StorageIdentity:
    """What ``t.storage()`` gives for an xla tensor: its storage's identity and size, no memory.

    Libraries tell tensors that share memory apart by ``storage().data_ptr()`` (transformers'
    ``save_pretrained`` finds tied weights so; safetensors refuses two names for one block).
    Views and aliases of one base share the number, as in eager; there is no host memory
    behind it, so everything else raises.
    """

    __slots__ = ("_nbytes", "_serial", "device")

    def __init__(self, t: XlaTensor) -> None:
        self._serial = t._st.serial
        base = t._st.node  # a view's storage is its base's
        self._nbytes = math.prod(base.shape or ()) * t.element_size()
        self.device = t.device

    def data_ptr(self) -> int:
        # Never 0 (a null pointer means "no storage"); 4 GiB apart, so ranges never overlap.
        return (self._serial + 1) << 32

    def nbytes(self) -> int:
        return self._nbytes

    def size(self) -> int:
        return self._nbytes

    def __getattr__(self, name: str) -> Any:
        raise NotImplementedError(
            f"xla tensors have no host storage (storage().{name}); move the tensor to the CPU "
            "first (t.cpu())"
        )


def _rebuild(host: torch.Tensor, device: str, requires_grad: bool, is_param: bool) -> torch.Tensor:
    """Unpickle an xla tensor saved by an earlier xlalab (``weights_only=False`` files)."""
    t = host.to(torch.device(device))
    if is_param:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def wrap(
    node: Node,
    st: Storage | None = None,
    chain: tuple[Any, ...] = (),
    layout: tuple[tuple[int, ...], int] | None = None,
    inference: bool | None = None,
) -> XlaTensor:
    """A new tensor object for ``node`` (a new storage unless one is given).

    ``layout`` is the (strides, storage offset) that eager PyTorch would give the tensor (a
    transposed view is not contiguous): a value's storage here has no physical layout, but
    ``contiguous()``, ``reshape()`` and ``is_contiguous()`` decide between an alias and a copy
    from these strides, exactly as in eager. Without it the tensor is contiguous.

    ``inference`` says whether the tensor is an inference tensor; by default it is one inside
    ``torch.inference_mode()``, as a new tensor is. A view passes its base's: eager's view of a
    normal tensor is a normal tensor inside inference mode too (autograd then shares the base's
    version counter with it, which an inference tensor has none of), and the view of an
    inference tensor is one outside it.
    """
    if st is None:
        st = Storage(node, node.device)
    if inference is not None and inference != torch.is_inference_mode_enabled():
        with torch.inference_mode(inference):
            t = _wrapper(node, layout)
    else:
        t = _wrapper(node, layout)
    t._st = st
    if chain:
        t._chain = chain
    if layout is not None:
        t._layout = layout
    return t


def _wrapper(node: Node, layout: tuple[tuple[int, ...], int] | None) -> XlaTensor:
    if layout is None:
        return torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined,no-any-return]
            XlaTensor,
            node.shape,  # type: ignore[arg-type]
            dtype=node.dtype,
            device=torch_device(node.device),
        )
    return torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined,no-any-return]
        XlaTensor,
        node.shape,  # type: ignore[arg-type]
        strides=layout[0],
        storage_offset=layout[1],
        dtype=node.dtype,
        device=torch_device(node.device),
    )


def value(t: XlaTensor) -> Node:
    """The node holding ``t``'s current value (applies a view's chain to its base)."""
    chain = t._chain
    base = t._st.node
    if not chain:
        return base
    cached = t._vcache
    if cached is not None and cached[0] is base:
        return cached[1]
    node = base
    for func, tpl in chain:
        node = _view_node(func, node, tpl)
    t._vcache = (base, node)
    return node


def _node_of(a: Any) -> Node | None:
    return value(a) if isinstance(a, XlaTensor) else None


def assign(t: XlaTensor, node: Node) -> None:
    """Write ``node`` into ``t`` in place (through its view chain if it is a view)."""
    if node.dtype != t.dtype:
        node = convert(node, t.dtype)  # type: ignore[arg-type]
    if tuple(node.shape) != tuple(t.shape):  # type: ignore[arg-type]
        node = expand(node, tuple(t.shape))
    st = t._st
    if not t._chain:
        set_node(st, node)
        return
    base = st.node
    set_node(st, Node(UPDATE_VIEW, (base, node), t._chain, base.shape, base.dtype, base.device))


UPDATE_VIEW = "xla::update_view"
EMPTY = "xla::empty"


def convert(node: Node, dtype: torch.dtype) -> Node:
    return Node(
        aten._to_copy.default, (node,), ((slot(0),), (("dtype", dtype),)), node.shape, dtype, node.device
    )


def expand(node: Node, shape: tuple[int, ...]) -> Node:
    return Node(aten.expand.default, (node,), ((slot(0), shape), ()), shape, node.dtype, node.device)


# --------------------------------------------------------------------------- recording

_META: dict[Any, Any] = {}  # signature -> output metadata, or _NO_META
_NO_META = object()


class OpInfo:
    """What the recorder needs to know about an overload, computed once."""

    __slots__ = ("counter", "cpu_operands", "func", "scalar_kw", "scalar_pos")

    def __init__(self, func: OpOverload) -> None:
        self.func = func
        self.counter = "xla::" + func._schema.name.split("::")[-1]
        # Whether a CPU tensor may be an operand (it is sent over): elementwise ops, as
        # torch_xla's binary ops take one, indexing, whose indices eager takes from any device,
        # and CTC's lengths (nn.CTCLoss's documented form). Every other op refuses one at the
        # call, as eager and torch_xla do.
        name = func._schema.name
        self.cpu_operands = torch.Tag.pointwise in func.tags or name in _INDEXING or name in _LENGTHS
        # A Python float becomes a graph input wherever the schema takes a Scalar or a Tensor
        # (a wrapped number); ``float``-typed arguments (eps, p, momentum, scale factors) can
        # steer shapes or code paths, so they stay baked into the graph, as do Scalars that a
        # lowering declares static (a norm's ``ord``).
        args = func._schema.arguments
        static = STATIC_ARGS.get(func, frozenset())
        self.scalar_pos = frozenset(
            i for i, a in enumerate(args) if not a.kwarg_only and a.name not in static and _float_is_input(a)
        )
        self.scalar_kw = frozenset(a.name for a in args if a.name not in static and _float_is_input(a))


_INDEXING = frozenset(
    f"aten::{n}"
    for n in ("index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index", "_unsafe_index_put")
)
_LENGTHS = frozenset({"aten::_ctc_loss", "aten::_ctc_loss_backward"})


def _float_is_input(arg: Any) -> bool:
    t = str(arg.type)
    return "number" in t or "Tensor" in t


_INFO: dict[int, OpInfo] = {}  # keyed by id(op): OpOverload hashes in Python


def info(func: OpOverload) -> OpInfo:
    i = _INFO.get(id(func))
    if i is None:
        i = _INFO[id(func)] = OpInfo(func)
    return i


class _Args:
    """Operands and meta signature gathered while templating one call's arguments."""

    __slots__ = ("device", "op", "operands", "sig")

    def __init__(self, op: OpInfo | None = None) -> None:
        self.operands: list[Node] = []
        self.sig: list[Any] = []
        self.device = -1
        self.op = op  # the op being recorded, whose rules for CPU operands apply

    def add(self, node: Node) -> ir.Slot:
        dev = node.device
        if dev != self.device and node.op is not ir.SCALAR:
            if self.device >= 0:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, "
                    f"xla:{self.device} and xla:{dev}!"
                )
            self.device = dev
        operands = self.operands
        s = ir.SLOTS[len(operands)] if len(operands) < 256 else ir.slot(len(operands))
        operands.append(node)
        return s

    def entry(self, a: Any, is_scalar: bool) -> Any:
        """The template entry for one argument (the uncommon kinds; tensors are inlined)."""
        tp = type(a)
        if tp is XlaTensor:
            node = value(a)
            self.sig.append(node.shape)
            self.sig.append(node.dtype)
            return self.add(node)
        if tp is Node:
            self.sig.append(a.shape)
            self.sig.append(a.dtype)
            return self.add(a)
        if tp is float:
            if is_scalar:
                self.sig.append(float_signature(a))
                return self.add(ir.scalar(a, 0))
            return ir.Const(a, None)  # baked: exact, so 0.0 and -0.0 or 1.0 and 1 stay apart
        if tp is bool:
            return ir.BOOLS[a]
        if tp is complex:
            # baked typed: Python's 0j == 0 == 0.0 (with one hash) would let ``x + 0j`` take the
            # memo entry, and so the float dtype, of ``x + 0``
            return ir.Const(a, None)
        if tp is list or tp is tuple:
            return tuple([self.entry(x, is_scalar) for x in a])
        if isinstance(a, torch.Tensor):
            return self.cpu_tensor(a)
        return a

    def cpu_tensor(self, t: torch.Tensor) -> Any:
        if t.dim() == 0 and t.device.type == "cpu":
            # A 0-d CPU tensor: floats become graph inputs (so they never recompile) that
            # promote as 0-d tensors of their dtype; integers and bools are baked in.
            if t.dtype.is_floating_point:
                self.sig.append((t.dtype, t.dim()))
                return self.add(ir.zero_dim_scalar(t.item(), 0, t.dtype))
            const = ir.Const(t.item(), t.dtype)
            self.sig.append(const)
            return const
        op = self.op
        if op is not None and (t.requires_grad or not op.cpu_operands):
            raise RuntimeError(_cpu_operand_error(op.func, t, max(self.device, 0)))
        # A CPU tensor mixed into an elementwise or indexing op: move it over, as data.
        node = to_device_node(t, max(self.device, 0))
        self.sig.append(node.shape)
        self.sig.append(node.dtype)
        return self.add(node)


_HALF_MAX = 65504.0  # float16's largest finite value
_BEYOND_HALF = (float, "beyond float16's range")
_BEYOND_SINGLE = (float, "beyond float32's range")


def float_signature(v: float) -> Any:
    """A float graph input's entry in its op's signature: its type, and whether it is beyond
    float16's or float32's range. Eager's kernels refuse such a value for those types in some ops
    ("value cannot be converted to type c10::Half without overflow": ``clamp``, ``fill_``), so a
    value out of range gets its own signature, and eager is asked again rather than the answer
    for an in-range value reused."""
    size = abs(v)
    if size <= _HALF_MAX or size == math.inf or size != size:
        return float
    return _BEYOND_HALF if size <= 3.4028234663852886e38 else _BEYOND_SINGLE


def _cpu_operand_error(func: OpOverload, t: torch.Tensor, device: int) -> str:
    """Eager's two-devices error for a CPU tensor given to an xla op, with the fix."""
    what = f"a CPU tensor of shape {list(t.shape)}"
    if t.requires_grad:
        why = (
            f"{what} that requires grad (its gradient would be computed on xla:{device} and "
            "could not reach it)"
        )
    else:
        why = what
    return (
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"xla:{device} and cpu! ({func._schema.name} got {why}: move it to the xla device with "
        ".to(device); for a model's parameters and buffers, model.to(device), before building the "
        "optimizer)"
    )


def _meta_arg(a: Any) -> Any:
    """The stand-in for an original argument in a meta-device call."""
    tp = type(a)
    if tp is XlaTensor or tp is Node:
        return torch.empty(a.shape, dtype=a.dtype, device="meta")
    if tp is list or tp is tuple:
        return type(a)(_meta_arg(x) for x in a)
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("meta")
    if isinstance(a, torch.Tensor) and a.dim() and a.device.type == "cpu":
        # A CPU operand (an index, a mask) gives shapes by its metadata only, as an xla one
        # does: the output metadata is memoized by shapes and dtypes, never by values. (A 0-d
        # one stays: it is a wrapped number to torch's type promotion.)
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
    return a


# Ops whose kernel lays out its result in another order than row-major even from contiguous
# operands: LAPACK's factors and solutions (``inv``, ``cholesky``, ``solve``, ``qr``...) are
# column-major. Found by their meta kernels; their results take eager's strides (``_lowered``).
KERNEL_LAID_OUT: set[OpOverload] = set()


def _outputs(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _compute_meta(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Output metadata from torch's own meta kernels (torch's shape and dtype rules), checked
    against eager's CPU kernel (``_eager_accepts``): empty operands, dtypes and values that only
    the CPU kernel refuses (``max(dim)`` over a zero-size dimension) fall back, so eager raises
    its own error at the user's line."""
    try:
        out = func(*[_meta_arg(a) for a in args], **{k: _meta_arg(v) for k, v in kwargs.items()})
    except Exception:
        out = _meta_by_rule(func, args, kwargs)
        if out is None:
            return _NO_META
    accepted, eager_out = _eager_accepts(func, args, kwargs)
    if not accepted:
        return _NO_META
    if not func.is_view and any(isinstance(o, torch.Tensor) and not o.is_contiguous() for o in _outputs(out)):
        KERNEL_LAID_OUT.add(func)
    # Where torch's meta kernel and its CPU kernel disagree on a result's type (``pow`` of a
    # bool tensor by a bool; the float32 mean and rstd that ``native_layer_norm``'s meta kernel
    # gives a bfloat16 input, which eager's CPU kernel keeps in bfloat16), eager's kernel is the
    # reference.
    described = _eager_dtypes(_describe(out), eager_out)
    for d in described if type(described) is list else [described]:
        if type(d) is tuple and d[1] not in dtypes.TORCH_TO_JNP:
            # Raised here, at the op and the user's line, not when a sync compiles the graph.
            # (A RuntimeError: Tensor.__mul__ turns a TypeError into "unsupported operand types".)
            raise RuntimeError(f"{func._schema.name} makes a {d[1]} tensor: {dtypes.unsupported(d[1])}")
    return described


# Ops whose CPU kernel refuses dtypes that CUDA's takes, and that libraries call with them on
# any accelerator: Hugging Face's mixture-of-experts counts tokens per expert with an integer
# ``histc`` everywhere but on the CPU. The device follows CUDA's rules for these.
ACCELERATOR_DTYPES = {aten.histc.default}


def _grouped_mm_meta(
    a: Any, b: Any, offs: Any = None, bias: Any = None, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    shape: tuple[int, ...]
    if a.dim() == 2 and b.dim() == 3:
        shape = (a.shape[0], b.shape[2])
    elif a.dim() == 3 and b.dim() == 2:
        shape = (a.shape[1], b.shape[1])
    elif a.dim() == 2 and b.dim() == 2:
        shape = (offs.shape[0], a.shape[0], b.shape[1])
    else:
        shape = (a.shape[0], a.shape[1], b.shape[2])
    return torch.empty(shape, dtype=out_dtype or a.dtype, device="meta")


def _like_input_meta(grad_output: Any, x: Any, *args: Any) -> torch.Tensor:
    """A gradient shaped like the input (the margin losses' backward ops)."""
    return torch.empty_like(x, device="meta")


def _ctc_loss_meta(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, *args: Any) -> Any:
    """``_ctc_loss.Tensor``: the loss per element and ``log_alpha`` (see lowering/ctc.py's width)."""
    from .lowering import ctc

    n, steps = log_probs.shape[1], log_probs.shape[0]
    room = 2 * ctc.width(targets, target_lengths) + 1
    return log_probs.new_empty((n,)), log_probs.new_empty((n, steps, room))


def _values_and_mask_meta(x: Any, *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A result like ``x`` and a bool mask of its shape (fake quantization's outputs)."""
    return torch.empty_like(x, device="meta"), torch.empty(x.shape, dtype=torch.bool, device="meta")


# Output metadata for ops whose meta kernel holds CUDA's rules (``_grouped_mm``: bfloat16 only,
# 16-byte aligned strides) where the CPU kernel takes float32 too, or that have no meta kernel
# (fake quantization); eager's CPU kernel still decides what it accepts (``_eager_accepts``).
META_RULES: dict[Any, Callable[..., Any]] = {
    aten._grouped_mm.default: _grouped_mm_meta,
    aten.fake_quantize_per_tensor_affine_cachemask.default: _values_and_mask_meta,
    aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default: _values_and_mask_meta,
    aten.fake_quantize_per_channel_affine_cachemask.default: _values_and_mask_meta,
    aten.multi_margin_loss_backward.default: _like_input_meta,
    aten.multilabel_margin_loss_backward.default: _like_input_meta,
    aten._ctc_loss.Tensor: _ctc_loss_meta,
    aten._ctc_loss_backward.default: _like_input_meta,
    aten._ctc_loss_backward.Tensor: _like_input_meta,
    aten.fractional_max_pool3d_backward.default: _like_input_meta,
}


# The rules above are also torch's Meta kernels where it has none, so that FakeTensor tracing
# (torch.compile's AOTAutograd) can trace these ops too: a compiled FractionalMaxPool3d's
# backward, QAT's fake quantization. Not the rules whose shapes differ from eager's:
_NOT_EAGER_SHAPED = {aten._ctc_loss.Tensor}  # its log_alpha may be wider (lowering/ctc.py's width)
_META_LIB: list[Any] = []  # the library that holds them, alive as long as the process


def _register_meta_kernels() -> None:
    missing = [
        op
        for op in META_RULES
        if op not in _NOT_EAGER_SHAPED and not op.has_kernel_for_dispatch_key(torch._C.DispatchKey.Meta)
    ]
    if not missing:
        return
    lib = torch.library.Library("aten", "IMPL", "Meta")
    for op in missing:
        name = op._schema.name.split("::")[1]
        lib.impl(name if op._overloadname == "default" else f"{name}.{op._overloadname}", META_RULES[op])
    _META_LIB.append(lib)


_register_meta_kernels()


def _meta_by_rule(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rule = META_RULES.get(func)
    if rule is None:
        return None
    try:
        return rule(*[_meta_arg(a) for a in args], **{k: _meta_arg(v) for k, v in kwargs.items()})
    except Exception:
        return None


# Ops whose eager errors depend on the values (a singular matrix; CTC's lengths, where zeros
# refuse concatenated targets): zeros would say nothing.
_VALUE_CHECKED = ("linalg_", "cholesky", "inverse", "lu_", "_lu", "solve", "svd", "eig", "qr", "det",
                  "lstsq", "pinv", "triangular", "geqrf", "ormqr", "orgqr", "matrix_exp", "potr",
                  "_ctc_loss")  # fmt: skip
# Kernels that check nothing and trust their operands (a backward given what its forward
# checked): zeros or shrunk operands could make them read out of bounds, so they are not asked.
_UNCHECKED_KERNELS = frozenset({"aten::_ctc_loss_backward"})
_SMALL = 4096  # elements: operands up to this size are checked at their real shapes
# How eager's kernels word a NotImplementedError that refuses an operand's dtype.
_DTYPE_REFUSALS = ("not implemented for", "not supported for complex")


def _eager_accepts(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    """Whether eager's CPU kernel accepts this call. Meta kernels skip many of eager's checks
    (``fmod`` of bools, ``std`` of integers, an integer ``pow`` to a negative power), so on the
    first call with a new signature the CPU kernel is asked too, on zeros: at the real shapes when
    every operand is small, else on operands shrunk to one element, where only eager's "not
    implemented for <dtype>" counts (a shape error then comes from the shrinking). When eager
    refuses, the op falls back and eager raises its own error at the user's line; a refusal that
    real values would not trigger costs a CPU fallback, never a wrong value. Also returns what the
    kernel gave (None when it raised)."""
    name = func._schema.name
    if name in _UNCHECKED_KERNELS:
        return True, None
    small = _max_numel(args) <= _SMALL and _max_numel(kwargs.values()) <= _SMALL
    exact = small and not any(word in name for word in _VALUE_CHECKED)
    shrink = not exact
    # CUDA's dtype rules: its other checks are the CPU kernel's, asked on float operands.
    floats = func in ACCELERATOR_DTYPES
    try:
        out = func(
            *[_cpu_zeros(a, shrink, floats=floats) for a in args],
            **{k: _cpu_zeros(v, shrink, floats=floats) for k, v in kwargs.items()},
        )
    except NotImplementedError as e:
        # "... not implemented for 'Bool'", "clamp is not supported for complex types"; an op
        # with no CPU kernel at all (a fused kernel that xlalab lowers) says "Could not run ..."
        # and is fine here.
        return not any(refusal in str(e) for refusal in _DTYPE_REFUSALS), None
    except Exception:
        if not exact:
            return True, None
        # Zeros can be what fails (an integer division by zero) where ones are fine, and ones
        # can be what fails (an index past a dimension of size 1) where zeros are fine: only
        # what fails on both is eager's refusal of the call itself.
        try:
            ones = [_cpu_zeros(a, False, 1) for a in args]
            out = func(*ones, **{k: _cpu_zeros(v, False, 1) for k, v in kwargs.items()})
        except Exception:
            return False, None
    return True, None if floats else out  # (float operands: not the result type of this call)


def _max_numel(args: Any) -> int:
    most = 0
    for a in args:
        tp = type(a)
        if tp is XlaTensor or tp is Node:
            n = 1
            for d in a.shape:
                n *= int(d)
            most = max(most, n)
        elif tp is list or tp is tuple:
            most = max(most, _max_numel(a))
    return most


def _cpu_zeros(a: Any, shrink: bool, fill: int = 0, floats: bool = False) -> Any:
    tp = type(a)
    if tp is XlaTensor or tp is Node:
        shape = [min(int(n), 1) for n in a.shape] if shrink else list(a.shape)
        # (CUDA's rules take integer types, not bool: bool stays for eager's kernel to refuse)
        integer = not a.dtype.is_floating_point and a.dtype is not torch.bool
        dtype = torch.float32 if floats and integer else a.dtype
        return torch.full(shape, fill, dtype=dtype)
    if tp is list or tp is tuple:
        return type(a)(_cpu_zeros(x, shrink, fill, floats) for x in a)
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("cpu")
    return a


def _eager_dtypes(described: Any, eager_out: Any) -> Any:
    """``described`` (one output's (shape, dtype), or a list of them) with the dtypes of the
    tensors eager's kernel gave in the same places."""
    if type(described) is tuple and isinstance(eager_out, torch.Tensor):
        return described if eager_out.dtype == described[1] else (described[0], eager_out.dtype)
    if type(described) is list and isinstance(eager_out, (tuple, list)) and len(eager_out) == len(described):
        return [_eager_dtypes(d, e) for d, e in zip(described, eager_out, strict=True)]
    return described


def _describe(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return (tuple(out.shape), out.dtype)
    if isinstance(out, (tuple, list)):
        return [_describe(o) for o in out]
    if out is None:
        return None
    return _NO_META


def record(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Node | None:
    """Record ``func(*args, **kwargs)`` as a node; None when it must fall back to the CPU.

    This is the hot path of every lowered op: plain tensors are templated inline, and
    output shapes come from a memo keyed by (op, static args, operand shapes/dtypes).
    The node's structural hash is that key's hash combined with its operands' hashes.
    """
    inf = _INFO.get(id(func)) or info(func)
    acc = _Args(inf)
    sig = acc.sig
    operands = acc.operands
    sp = inf.scalar_pos
    tpl = []
    i = 0
    for a in args:
        tp = type(a)
        if tp is XlaTensor and not a._chain:
            node = a._st.node
            sig.append(node.shape)
            sig.append(node.dtype)
            if node.device != acc.device:
                if acc.device >= 0:
                    tpl.append(acc.add(node))  # raises eager's two-devices error
                    i += 1
                    continue
                acc.device = node.device
            n = len(operands)
            tpl.append(ir.SLOTS[n] if n < 256 else ir.slot(n))
            operands.append(node)
        elif tp is int or a is None:  # sizes, dims, flags: the template holds them as they are
            tpl.append(a)
        elif tp is float and i in sp:
            sig.append(float if -_HALF_MAX <= a <= _HALF_MAX else float_signature(a))  # inline: the hot path
            tpl.append(ir.SLOTS[len(operands)] if len(operands) < 256 else ir.slot(len(operands)))
            operands.append(ir.scalar(a, 0))
        else:
            tpl.append(acc.entry(a, i in sp))
        i += 1
    if kwargs:
        sk = inf.scalar_kw
        ktpl = tuple([(k, acc.entry(v, k in sk)) for k, v in kwargs.items()])
    else:
        ktpl = ()
    arg = (tuple(tpl), ktpl)
    # The memo key is exact (typed constants, see ir.Const), so it also names the node's
    # structure: its entry carries the structural id handed out when it was first seen.
    key = (id(func), arg, tuple(sig))
    try:
        memo = _META.get(key)
    except TypeError:  # an unhashable argument: let eager PyTorch deal with it
        return None
    if memo is None:
        memo = _META[key] = (_compute_meta(func, args, kwargs), ir.structural_id(key))
    meta, sid = memo
    if meta is _NO_META:
        return None
    counters = _COUNTERS
    counters[inf.counter] = counters.get(inf.counter, 0) + 1
    src = tuple(operands)
    h = hash((sid, *[s.hash for s in src]))
    dev = acc.device if acc.device >= 0 else 0
    frames = ir_frames(_IR_DEBUG[1]) if _IR_DEBUG[0] else None
    if type(meta) is tuple:
        return Node(func, src, arg, meta[0], meta[1], dev, None, None, frames, h, sid)
    outs = tuple(meta)
    if any(o is not None and type(o) is not tuple for o in outs):
        return None
    return Node(func, src, arg, None, None, dev, None, outs, frames, h, sid)  # type: ignore[arg-type]


# XLA_USE_EAGER_DEBUG_MODE: every op runs as soon as it is recorded (op by op).
_EAGER: list[bool] = [False]
config.watch("XLA_USE_EAGER_DEBUG_MODE", lambda on: _EAGER.__setitem__(0, bool(on)))


def _run_now() -> None:
    sync("eager_debug_mode")


# [enabled, depth]: read on the hot path; kept in step with the settings by config.watch.
_IR_DEBUG: list[Any] = [False, 8]


def debug_frames() -> tuple[Frame, ...] | None:
    """The user's frames a new IR node records under XLA_IR_DEBUG (None when it is off): every
    node made outside ``record`` (random ops, factories) needs them, or the notebook cannot name
    the line that made it."""
    return ir_frames(_IR_DEBUG[1]) if _IR_DEBUG[0] else None


def _set_ir_debug(on: bool) -> None:
    _IR_DEBUG[0] = on
    # Backward nodes take the frames of the forward op they differentiate; autograd's anomaly
    # mode is what keeps the forward stack on each grad_fn.
    torch.autograd.set_detect_anomaly(on, check_nan=False)


config.watch("XLA_IR_DEBUG", _set_ir_debug)
config.watch("XLALAB_IR_DEBUG_DEPTH", lambda depth: _IR_DEBUG.__setitem__(1, depth))


_TRACING = metrics.LAZY_TRACING
_COUNTERS = metrics.COUNTERS  # incremented inline on the hot path (cleared in place by clear_counters)


def wrap_result(node: Node) -> Any:
    if node.outs is None:
        return wrap(node)
    # Outputs switched off (convolution_backward's output_mask) stay None, as in eager.
    return tuple(None if o is None else wrap(ir.item(node, i)) for i, o in enumerate(node.outs))


def laid_out_result(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], node: Node) -> Any:
    """``node``'s result tensors with the strides eager's kernel gives them. Called when an
    operand is not contiguous: eager's elementwise ops, ``clone``, conversions and ``*_like``
    lay out their result as that operand is (``x.t() * 2`` is transposed too), and a later
    ``view`` or ``is_contiguous()`` depends on it."""
    per_output = layouts.result_strides(func, args, kwargs, node.sid, _meta_operand)
    if per_output is None:
        return wrap_result(node)
    if node.outs is None:
        return laid_out_tensor(node, per_output[0])
    return tuple(
        None if o is None else laid_out_tensor(ir.item(node, i), per_output[i])
        for i, o in enumerate(node.outs)
    )


def _meta_operand(a: Any) -> Any:
    """A meta tensor with ``a``'s shape, dtype and eager strides (other arguments as they are)."""
    if type(a) is XlaTensor:
        return _laid_out(value(a), a._layout)
    if type(a) is list or type(a) is tuple:
        return type(a)(_meta_operand(x) for x in a)
    return _meta_arg(a)


def laid_out_tensor(node: Node, strides: tuple[int, ...] | None) -> XlaTensor:
    """A tensor holding ``node`` whose storage keeps its elements in the order ``strides`` give
    (a permutation of ``node``'s dims): a permute view of that storage, so that views,
    ``as_strided`` and dtype views address its elements as eager's do."""
    order = layouts.memory_order(node.shape, strides)  # type: ignore[arg-type]
    if order is None:
        return wrap(node)
    shape = tuple(node.shape[d] for d in order)  # type: ignore[index]
    stored = Node(aten.permute.default, (node,), ((slot(0), order), ()), shape, node.dtype, node.device)
    back = tuple(order.index(d) for d in range(len(order)))
    layout = _view_layout(aten.permute.default, stored, None, (back,))
    t = wrap(node, Storage(stored, stored.device), ((aten.permute.default, (back,)),), layout)
    t._vcache = (stored, node)  # read, it is the op's own result: no transposes for XLA to fold
    return t


def _view_node(func: OpOverload, base: Node, tpl: Any, layout: Layout | None = None) -> Node:
    node = record(func, (base, *tpl), {})
    if node is None:
        func(_laid_out(base, layout), *tpl)  # torch's own error for the view, at the user's line
        raise RuntimeError(f"xlalab: the view op {func} has no shape rule for {base}")
    return node


# --------------------------------------------------------------------------- handlers


def _lowered(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    node = record(func, args, kwargs)
    if node is None:
        return fallback(func, args, kwargs)
    if index_checks.enabled[0]:
        index_checks.note(func, args, kwargs, _node_of)
    return result_of(func, args, kwargs, node)


def result_of(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], node: Node) -> Any:
    """``node``'s result tensors for ``func(*args, **kwargs)``, laid out as eager's kernel lays
    them out where that can differ from row-major."""
    if func in KERNEL_LAID_OUT:
        return laid_out_result(func, args, kwargs, node)
    for a in args:
        if type(a) is XlaTensor:
            if a._layout is not None:
                return laid_out_result(func, args, kwargs, node)
        elif type(a) is list or type(a) is tuple:  # cat's tensors
            if any(type(t) is XlaTensor and t._layout is not None for t in a):
                return laid_out_result(func, args, kwargs, node)
    return wrap_result(node)


def _inplace(
    functional: OpOverload, arguments: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
) -> Handler:
    """The in-place op as ``functional`` recorded and written back into ``self`` (the first
    argument); ``arguments`` reorders the call's arguments where the two schemas differ."""

    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self = args[0]
        if type(self) is not XlaTensor:
            dev = next(a.device for a in _flat(args, kwargs) if isinstance(a, XlaTensor))
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"{dev} and {self.device}! ({func._schema.name} writes into a {self.device} tensor "
                f"with an operand on {dev}: move one of them, e.g. the operand with .to('{self.device}'))"
            )
        fargs = args if arguments is None else arguments(args)
        node = record(functional, fargs, kwargs)
        if node is None or node.outs is not None:
            return fallback(func, args, kwargs)
        if index_checks.enabled[0]:
            index_checks.note(functional, fargs, kwargs, _node_of)
        _check_inplace(func, self, node)
        metrics.count(info(func).counter)
        assign(self, node)
        return self

    return handler


def _check_inplace(func: OpOverload, self: XlaTensor, node: Node) -> None:
    if tuple(node.shape) != tuple(self.shape):  # type: ignore[arg-type]
        raise RuntimeError(
            f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(node.shape)}"  # type: ignore[arg-type]
        )
    if not torch.can_cast(node.dtype, self.dtype):  # type: ignore[arg-type]
        raise RuntimeError(
            f"result type {_tname(node.dtype)} can't be cast to the desired output type {_tname(self.dtype)}"
        )


# c10's ScalarType names, which eager's messages use ("result type Float can't be cast to the
# desired output type Byte").
_SCALAR_TYPE_NAMES = {
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.uint16: "UInt16",
    torch.uint32: "UInt32",
    torch.uint64: "UInt64",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.bool: "Bool",
}


def _tname(d: Any) -> str:
    return _SCALAR_TYPE_NAMES.get(d, str(d))


def become(t: XlaTensor, other: XlaTensor) -> None:
    """``t`` (the same Python object) takes ``other``'s shape, storage, view chain and layout:
    an out= tensor resized, ``set_``, an in-place view (``t_()``). ``t`` stays an inference
    tensor or a normal one, as in eager (re-pointing it would take ``other``'s kind)."""
    if other.is_inference() != t.is_inference():
        alias = wrap(value(other), other._st, other._chain, other._layout, t.is_inference())
        alias._vcache = other._vcache
        other = alias
    torch._C.TensorBase.data.__set__(t, other)  # type: ignore[attr-defined]
    t._st, t._chain, t._vcache, t._layout = other._st, other._chain, other._vcache, other._layout


def set_result(out: XlaTensor, node: Node) -> None:
    """Write an op's result into its out= tensor, in place, after resizing it to the result's
    shape as eager resizes it (``resize_``: within its storage it stays a view of it, so an
    empty slice given as ``out=`` fills the storage from its offset)."""
    if tuple(out.shape) != tuple(node.shape):  # type: ignore[arg-type]
        aten.resize_.default(out, node.shape)
    assign(out, node)


def _written_args(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    """ids of the xla tensors ``func`` writes to (its schema's mutable arguments)."""
    out: list[int] = []
    for i, sa in enumerate(func._schema.arguments):
        if sa.alias_info is not None and sa.alias_info.is_write:
            a = args[i] if i < len(args) and not sa.kwarg_only else kwargs.get(sa.name)
            out.extend(id(x) for x in _as_list(a) if isinstance(x, XlaTensor))
    return out


def _out_variant(functional: OpOverload) -> Handler:
    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        kw = dict(kwargs)
        out = kw.pop("out")
        _check_out(func, args, kwargs)
        node = record(functional, args, kw)
        if node is None or node.outs is not None or not isinstance(out, XlaTensor):
            return fallback(func, args, kwargs)
        set_result(out, node)
        return out

    return handler


_OUT_REFUSALS: dict[Any, str | None] = {}  # out= call signature -> eager's error, if it refuses


def _check_out(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Eager's refusal of an out= tensor (a dtype the result cannot be cast to, or that the kernel
    does not write: ``mm(..., out=float64)``), raised at the call: asked of torch's meta kernel
    once per signature, and of eager's CPU kernel where the meta kernel refuses."""
    key: Any = (id(func), _signature(args), _signature(tuple(kwargs.items())))
    try:
        refusal = _OUT_REFUSALS.get(key, "")
    except TypeError:  # an unhashable argument: nothing to remember it by
        key, refusal = None, ""
    if refusal == "":
        refusal = _out_refusal(func, args, kwargs)
        if key is not None:
            _OUT_REFUSALS[key] = refusal
    if refusal is not None:
        raise RuntimeError(refusal)


def _signature(args: Any) -> tuple[Any, ...]:
    return tuple(
        (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor)
        else _signature(a) if isinstance(a, (list, tuple)) else a
        for a in args
    )  # fmt: skip


def _out_refusal(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resize warning is eager's to give, once, above
        try:
            func(*[_meta_operand(a) for a in args], **{k: _meta_operand(v) for k, v in kwargs.items()})
            return None
        except RuntimeError:
            pass
        except Exception:  # no meta kernel for this out= variant: nothing to ask
            return None
        if _max_numel(args) > _SMALL or _max_numel(kwargs.values()) > _SMALL:
            return None  # too large to ask eager's kernel on zeros: let the call go on
        zeros = {k: _cpu_zeros(v, False) for k, v in kwargs.items()}
        try:
            func(*[_cpu_zeros(a, False) for a in args], **zeros)
        except RuntimeError as e:
            return str(e)
    return None


# True while a functionalized graph (AOTAutograd's, in compiled mode) runs: its ``view`` is
# a reshape of a value, applied where the user's program had other strides.
FUNCTIONAL = [False]


def _view(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if kwargs:  # rare for view ops (``as_strided(size=, stride=)``): by position, as the rest
        args = tuple(_bound(func, args, kwargs).values())
        while len(args) > 1 and args[-1] is None:
            args = args[:-1]
    base = args[0]
    tpl = tuple(tuple(a) if type(a) is list else a for a in args[1:])
    chain = base._chain
    if func is aten.as_strided.default and chain:
        # as_strided addresses the storage, not the view it is called on (a transposed view's
        # elements are not where its row-major value has them): it is a view of the storage's
        # root value, which is contiguous.
        parent, chain, layout = base._st.node, (), None
        if len(tpl) < 3 or tpl[2] is None:  # no storage_offset: the view's own, as in eager
            tpl = (*tpl[:2], base._layout[1] if base._layout is not None else 0)
        if parent.dtype != base.dtype:
            # A view of another dtype counts its sizes, strides and offset in its own elements:
            # the storage read as that dtype, flat, is what it addresses.
            chain = ((aten.view.default, ((-1,),)), (aten.view.dtype, (base.dtype,)))
            for vfunc, vtpl in chain:
                parent = _view_node(vfunc, parent, vtpl)
    else:
        parent, layout = value(base), base._layout
    if func in _STRIDE_CHECKED_VIEWS and layout is not None:
        func(_laid_out(parent, layout), *tpl)  # it checks strides and offset: eager's error
    elif func is aten.view.default and layout is not None and not FUNCTIONAL[0]:
        _check_view_strides(parent, layout, tpl)
    node = _view_node(func, parent, tpl, layout)  # counted as xla::<op> where it is recorded
    # A dtype view is a new tensor in eager (its inference-ness is the mode's), others inherit.
    inference = None if func is aten.view.dtype else base.is_inference()
    t = wrap(node, base._st, (*chain, (func, tpl)), _view_layout(func, parent, layout, tpl), inference)
    t._vcache = (base._st.node, node)
    return t


# Views that reinterpret elements check the operand's strides and offset (a dtype view of
# another size, view_as_complex's pairs): a meta run with eager's layout raises eager's error.
_STRIDE_CHECKED_VIEWS = {aten.view.dtype, aten.view_as_complex.default}
_LAYOUTS: dict[Any, Any] = {}
_VIEW_REFUSALS: dict[Any, str | None] = {}  # (shape, dtype, layout, view args) -> eager's error


def _check_view_strides(parent: Node, layout: Any, tpl: tuple[Any, ...]) -> None:
    """A view checks that the strides allow it (x.t().view(6) must reshape): eager's error,
    where accepting it would alias what eager copies. Asked of a meta tensor once per layout."""
    key: Any = (parent.shape, parent.dtype, layout, tpl)
    try:
        refusal = _VIEW_REFUSALS.get(key, "")
    except TypeError:  # symbolic sizes: ask every time
        key, refusal = None, ""
    if refusal == "":
        try:
            aten.view.default(_laid_out(parent, layout), *tpl)
            refusal = None
        except RuntimeError as e:
            refusal = str(e)
        if key is not None:
            _VIEW_REFUSALS[key] = refusal
    if refusal is not None:
        raise RuntimeError(refusal)


Layout = tuple[tuple[int, ...], int]  # strides and storage offset


def _laid_out(parent: Node, layout: Layout | None) -> torch.Tensor:
    """A meta tensor of ``parent``'s shape and dtype with eager's strides and offset."""
    shape = tuple(parent.shape or ())
    if layout is None:
        return torch.empty(shape, dtype=parent.dtype, device="meta")
    strides, offset = layout
    extent = offset + sum((n - 1) * st for n, st in zip(shape, strides) if n > 0) + 1
    storage = torch.empty(max(extent, 1), dtype=parent.dtype, device="meta")
    return storage.as_strided(shape, strides, offset)


def _view_layout(
    func: OpOverload, parent: Node, parent_layout: Layout | None, tpl: tuple[Any, ...]
) -> Layout | None:
    """The strides and storage offset eager PyTorch gives ``func`` of a tensor of ``parent``'s shape
    laid out as ``parent_layout``, from a meta run of the view (memoized; None when contiguous)."""
    shape = parent.shape
    key = (id(func), shape, parent_layout, tpl)
    try:
        layout = _LAYOUTS.get(key, _NO_META)
    except TypeError:
        return None
    if layout is not _NO_META:
        return layout  # type: ignore[no-any-return]
    layout = None
    try:
        if parent_layout is None:
            strides, offset = torch.empty(shape, device="meta").stride(), 0  # type: ignore[arg-type]
        else:
            strides, offset = parent_layout
        extent = offset + sum((n - 1) * st for n, st in zip(shape, strides) if n > 0) + 1  # type: ignore[arg-type,misc]
        meta = torch.empty(max(extent, 1), dtype=parent.dtype, device="meta").as_strided(
            shape, strides, offset  # type: ignore[arg-type]
        )
        out = func(meta, *tpl)
        if out.stride() != torch.empty(out.shape, device="meta").stride() or out.storage_offset() != 0:
            layout = (tuple(out.stride()), out.storage_offset())
    except Exception:
        layout = None  # the shape rule already accepted the view: keep it contiguous
    _LAYOUTS[key] = layout
    return layout


def _multi_view(split: Callable[..., list[tuple[OpOverload, tuple[Any, ...]]]]) -> Handler:
    """unbind/split are views too: each output is a select/slice of the base."""

    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        base = args[0]
        outs = []
        for vfunc, vargs in split(base, *args[1:], **kwargs):
            outs.append(_view(vfunc, (base, *vargs), {}))
        metrics.count(info(func).counter)
        return outs

    return handler


def _unbind_views(base: XlaTensor, dim: int = 0) -> list[tuple[OpOverload, tuple[Any, ...]]]:
    return [(aten.select.int, (dim, i)) for i in range(base.shape[dim])]


def _split_views(base: XlaTensor, split_size: Any, dim: int = 0) -> list[tuple[OpOverload, tuple[Any, ...]]]:
    n = base.shape[dim]
    if isinstance(split_size, int):
        sizes = [min(split_size, n - s) for s in range(0, n, split_size)] if split_size > 0 else [n]
        sizes = sizes or [0]
    else:
        sizes = list(split_size)
    out, start = [], 0
    for size in sizes:
        out.append((aten.slice.Tensor, (dim, start, start + size, 1)))
        start += size
    return out


def _alias(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """detach/alias: a new tensor object over the same storage and view chain."""
    src = args[0]
    t = wrap(value(src), src._st, src._chain, src._layout, src.is_inference())
    t._vcache = src._vcache
    metrics.count(info(func).counter)
    return t


def _set_source(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``b.set_(a)``: ``b`` becomes ``a``'s alias (its storage, view chain and shape), in place."""
    self, src = args[0], args[1]
    if not isinstance(src, XlaTensor):
        raise RuntimeError(
            f"set_: the source is a tensor on {src.device}, and an xla tensor can only share the "
            "storage of another xla tensor: move the source first (source.to(self.device))"
        )
    alias = wrap(value(src), src._st, src._chain, src._layout)
    alias._vcache = src._vcache
    become(self, alias)
    return self


class HostStorage(torch.UntypedStorage):
    """A file's bytes bound for an xla device: what ``torch.load(map_location=xla)`` restores a
    storage as. Its memory is on the host; its ``device`` is the xla one, so torch's rebuild
    makes an empty xla tensor and ``set_``s it to this storage, which sends the bytes over once
    (``bases``) and makes the tensor its view there: tensors saved as views of one storage load
    as views of one xla storage, with eager's strides."""

    xla_device: torch.device
    bases: dict[torch.dtype, XlaTensor]

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.xla_device


def _set_host_storage(
    self: XlaTensor,
    storage: HostStorage,
    offset: int | None = None,
    size: list[int] | None = None,
    stride: list[int] | None = None,
) -> XlaTensor:
    base = storage.bases.get(self.dtype)
    if base is None:
        host = torch.empty(0, dtype=self.dtype).set_(storage)  # every element of the storage
        base = storage.bases[self.dtype] = wrap(to_device_node(host, self._st.device))
    if size is None:
        return _set_source(aten.set_.source_Tensor, (self, base), {})
    if not stride:  # eager's set_ takes an empty stride as the contiguous one
        stride = [math.prod(size[i + 1 :]) for i in range(len(size))]
    view = torch.as_strided(base, size, stride, offset)
    return _set_source(aten.set_.source_Tensor, (self, view), {})


def _set_storage(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if isinstance(args[1], HostStorage):
        return _set_host_storage(args[0], args[1], *args[2:])
    # torch turns b.set_(a, offset, size, stride) into this call with a's storage, which for an
    # xla tensor is no memory to point at.
    raise NotImplementedError(
        "set_ with a storage, or with (source, storage_offset, size, stride): an xla tensor's "
        "storage is no host memory to point at. Use b.set_(a.as_strided(size, stride, "
        "storage_offset)), which makes b that view of a's storage, or b.set_(a) to share a's."
    )


def _is_set_to(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether both tensors are the same view of one storage: storage, offset, sizes, strides."""
    a, b = args[0], args[1]
    if not (isinstance(a, XlaTensor) and isinstance(b, XlaTensor)) or a._st is not b._st:
        return False
    return (a.shape, a.stride(), a.storage_offset()) == (b.shape, b.stride(), b.storage_offset())


def _lift_fresh(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A tensor torch built from Python data (``x[[1, 2]]``'s index list). While dynamo traces
    with fake tensors, the xla tensor torch built below the Python key becomes a fake one like
    every other tensor of the trace (dynamo's graph keeps the Python list itself)."""
    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if mode is None:
        return _alias(func, args, kwargs)
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import _disable_current_modes

    src = args[0]
    # Made with every mode set aside, not by an op: nothing is recorded for it.
    with _disable_current_modes():
        meta = torch.empty_strided(tuple(src.shape), src.stride(), dtype=src.dtype, device="meta")
    return FakeTensor(mode, meta, src.device)


def _copy_(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(dst, XlaTensor):
        # xla -> cpu copy into an existing CPU tensor
        dst.copy_(to_cpu(src, "copy"))
        return dst
    metrics.count("xla::copy_")
    if not isinstance(src, torch.Tensor):
        # ``t.copy_(1.5)``: a Python number fills, as eager does (as a wrapped number).
        src = torch.tensor(src)
    if tuple(src.shape) != tuple(dst.shape):
        # eager's error for a src that does not broadcast to dst, at the call (not at the sync)
        torch.empty(dst.shape, device="meta").copy_(torch.empty(src.shape, device="meta"))
    if not isinstance(src, XlaTensor):
        if not dst._chain and tuple(src.shape) == tuple(dst.shape):
            set_node(dst._st, to_device_node(src, dst._st.device, dst.dtype))
            dst._vcache = None
            return dst
        node = to_device_node(src, dst._st.device)
    else:
        node = value(src)
        if node.device != dst._st.device:
            node = to_device_node(to_cpu(src, "copy"), dst._st.device)
    assign(dst, node)
    return dst


def _to_copy(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    src = args[0]
    device = kwargs.get("device")
    dtype = kwargs.get("dtype") or src.dtype
    if device is not None and torch.device(device).type != "xla":
        out = to_cpu(src, "cpu")
        if src._layout is not None:  # eager's copy keeps the source's layout (a transposed view)
            meta = torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device="meta")
            layout = aten._to_copy.default(meta, memory_format=kwargs.get("memory_format"))
            out = torch.empty_strided(out.shape, layout.stride(), dtype=out.dtype).copy_(out)
        return out.to(dtype=dtype, device=device) if dtype != out.dtype or device != out.device else out
    target = src._st.device if device is None else (torch.device(device).index or 0)
    _check_memory_format(src, kwargs.get("memory_format"))
    if dtype not in dtypes.TORCH_TO_JNP:
        raise RuntimeError(f"{src.dtype} to {dtype}: {dtypes.unsupported(dtype)}")
    metrics.count("xla::_to_copy")
    if target != src._st.device:
        return wrap(to_device_node(to_cpu(src, "to"), target, dtype))
    node = convert(value(src), dtype)
    return wrap(node) if src._layout is None else laid_out_result(func, args, kwargs, node)


_RANK_OF_FORMAT = {torch.channels_last: 4, torch.channels_last_3d: 5}


def _check_memory_format(src: Any, memory_format: Any) -> None:
    """Eager's error for a conversion to a channels-last layout of another rank. (An explicit
    format has no other effect, as on torch_xla: the result is row-major.)"""
    rank = _RANK_OF_FORMAT.get(memory_format)
    if rank is not None and src.dim() != rank:
        name = "channels_last" if rank == 4 else "channels_last_3d"
        raise RuntimeError(f"required rank {rank} tensor to use {name} format")


def _local_scalar_dense(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    metrics.count("aten::_local_scalar_dense")
    _publish_fallback(func, args, "aten::_local_scalar_dense", 0.0)
    return to_cpu(args[0], "item").item()


_NOT_GIVEN = object()


def _plain_type(arg: Any) -> str:
    t = str(arg.type)
    return t[9:-1] if t.startswith("Optional[") else t


def _element_type(arg: Any, overload: str) -> str:
    """The type one element of a ``_foreach_*`` argument has: a list's item, the per-tensor
    number of a ``scalars`` tensor, anything else itself."""
    t = _plain_type(arg)
    if t.startswith("List["):
        return t[5:-1]
    return "number" if overload == "Tensor" and arg.name == "scalars" else t


# Foreach ops whose per-tensor op has another name when the other operand is a number:
# ``_foreach_maximum(ts, 0.5)`` is ``clamp_min`` per tensor (``maximum`` takes two tensors).
_NUMBER_BASES = {"maximum": "clamp_min", "minimum": "clamp_max"}


def _base_overload(func: OpOverload, inplace: bool, base_name: str) -> tuple[OpOverload | None, int]:
    """The per-tensor op a ``_foreach_*`` overload applies: the base overload whose leading
    arguments take one element of each foreach argument (``_foreach_pow.Scalar`` is
    ``pow.Tensor_Scalar``, ``_foreach_clamp_min_.Scalar`` is ``clamp_min_.default``,
    ``_foreach_maximum.Scalar`` is ``clamp_min.default``), and how many trailing optional
    foreach arguments it has no place for (a call passing one falls back:
    ``_foreach_norm(ts, 2)`` is ``norm.Scalar``, with a ``dtype`` it has none)."""
    found = _matching_overload(func, inplace, base_name)
    if found[0] is None and base_name in _NUMBER_BASES:
        found = _matching_overload(func, inplace, _NUMBER_BASES[base_name])
    return found


def _matching_overload(func: OpOverload, inplace: bool, base_name: str) -> tuple[OpOverload | None, int]:
    packet = getattr(aten, base_name + ("_" if inplace else ""), None)
    if packet is None:
        return None, 0
    args = func._schema.arguments
    wanted = [_element_type(a, func._overloadname) for a in args]
    optional_tail = 0
    while optional_tail < len(args) - 1 and str(args[-1 - optional_tail].type).startswith("Optional["):
        optional_tail += 1
    for dropped in range(optional_tail, -1, -1):  # an optional argument left out, when it can be
        want = wanted[: len(wanted) - dropped]
        for name in packet.overloads():
            candidate = getattr(packet, name)
            params = [a for a in candidate._schema.arguments if not a.is_out]
            rest_required = any(a.default_value is None and not a.kwarg_only for a in params[len(want) :])
            if len(params) >= len(want) and not rest_required:
                if [_plain_type(a) for a in params[: len(want)]] == want:
                    return candidate, dropped
    return None, 0


def _foreach(func: OpOverload) -> Handler:
    """_foreach_* ops run as their per-tensor base op on each element (same graph, one node each)."""
    name = func._schema.name.removeprefix("aten::_foreach_")
    inplace = name.endswith("_")
    overload = func._overloadname
    base, dropped = _base_overload(func, inplace, name.rstrip("_"))
    foreach_args = func._schema.arguments
    base_args = base._schema.arguments if base is not None else []
    first_list = next((k for k, a in enumerate(foreach_args) if str(a.type).startswith("List[")), 0)
    kept = len(foreach_args) - dropped

    def handler(_: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Every argument in schema order (``alpha=`` comes as a keyword); None where not given.
        given = [*args, *(kwargs.get(a.name, _NOT_GIVEN) for a in foreach_args[len(args) :])]
        if base is None or any(a is not _NOT_GIVEN and a is not None for a in given[kept:]):
            return fallback(func, args, kwargs)
        base_handler = _HANDLERS.get(id(base)) or _resolve(base)
        outs = []
        for i in range(len(args[first_list])):
            pos: list[Any] = []
            kw: dict[str, Any] = {}
            by_name = False
            for a, fa, ba in zip(given[:kept], foreach_args, base_args):
                if a is _NOT_GIVEN:  # the base op's default applies; what follows goes by name
                    by_name = True
                    continue
                if str(fa.type).startswith("List["):
                    a = a[i]
                elif overload == "Tensor" and fa.name == "scalars":
                    a = a[i].item()
                if ba.kwarg_only or by_name:
                    kw[ba.name] = a
                else:
                    pos.append(a)
            outs.append(base_handler(base, tuple(pos), kw))
        return None if inplace else outs

    return handler


def _functionalized(functional: OpOverload, writes: dict[int, int], n_out: int) -> Handler:
    """An op that mutates some arguments, recorded as its functional twin.

    ``writes`` maps an output of ``functional`` to the argument it updates in place (batch
    norm's running statistics); the first ``n_out`` outputs are what the op returns.
    """

    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        mutated = [args[i] if i < len(args) else None for i in writes.values()]
        if kwargs or any(not isinstance(m, XlaTensor) for m in mutated):
            return _lowered(func, args, kwargs)  # nothing to update: the plain op
        node = record(functional, args, kwargs)
        if node is None:
            return fallback(func, args, kwargs)
        outs = result_of(functional, args, kwargs, node)  # a channels-last input's layout
        for out_index, arg_index in writes.items():
            assign(args[arg_index], value(outs[out_index]))
        return outs[:n_out]

    return handler


_OBSERVED = _functionalized(
    aten._fused_moving_avg_obs_fq_helper_functional.default, {2: 3, 3: 4, 4: 5, 5: 6}, 2
)


def _fused_observer(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """QAT's fused observer and fake quantization, updating its running range, scale and zero
    point in place; eager's check that the range is not empty (an observer that never ran) is
    a device check. The first per-row call, whose empty statistics eager sizes to the rows,
    runs eagerly."""
    running_min, scale = args[3], args[5]
    per_row = args[11] if len(args) > 11 else kwargs.get("per_row_fake_quant", False)
    if per_row and (running_min.numel() == 0 or scale.numel() != running_min.numel()):
        return fallback(func, args, kwargs)
    out = _OBSERVED(func, args, kwargs)
    if type(running_min) is XlaTensor and type(args[2]) is XlaTensor:
        ordered: Any = torch.all(running_min <= args[4]) | torch.all(args[2] == 0)
        message = "In ChooseQuantizationParams, min should be less than or equal to max"
        checks.defer(value(ordered), RuntimeError, message, "fused_moving_avg_obs_fake_quant")
    return out


def _random(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Random ops draw from the device RNG; seed and offset are graph inputs. An op given a
    (CPU) generator draws from it on the CPU, as eager does, and its result moves over."""
    if kwargs.get("generator") is not None or any(isinstance(a, torch.Generator) for a in args):
        return fallback(func, args, kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
    _check_probabilities(func, args)
    self = args[0]
    dev = self._st.device
    seed, offset = rng.rng_operands(dev)
    name = func._schema.name
    inplace = name.endswith("_")
    functional = func if not inplace else None
    inf = info(func)
    acc = _Args(inf)
    tpl = tuple([acc.entry(a, i in inf.scalar_pos) for i, a in enumerate(args)])
    ktpl = tuple([(k, acc.entry(v, k in inf.scalar_kw)) for k, v in kwargs.items()])
    ktpl = (*ktpl, ("__rng__", (acc.add(seed), acc.add(offset))))
    metrics.count(inf.counter)
    src = tuple(acc.operands)
    if func is aten.native_dropout.default:
        outs = ((tuple(self.shape), self.dtype), (tuple(self.shape), torch.bool))
        node = Node(func, src, (tpl, ktpl), None, None, dev, outs=outs, frames=debug_frames())
        return result_of(func, args, kwargs, node)
    if func is aten.multinomial.default:
        shape = _multinomial_checks(args)
        return wrap(Node(func, src, (tpl, ktpl), shape, torch.int64, dev, frames=debug_frames()))
    node = Node(func, src, (tpl, ktpl), tuple(self.shape), self.dtype, dev, frames=debug_frames())
    if functional is not None:
        return result_of(func, args, kwargs, node)  # rand_like(x) is laid out as x is
    assign(self, node)
    return self


def _multinomial_checks(args: tuple[Any, ...]) -> tuple[int, ...]:
    """``multinomial``'s output shape, after eager's checks: those of the shapes raise here (from
    torch's meta kernel), those of the values are device checks raised at a later sync."""
    probs = args[0]
    key = (tuple(probs.shape), probs.dtype, *args[1:])
    shape = _MULTINOMIAL_SHAPES.get(key)
    if shape is None:  # eager's checks of shapes and dtypes, once per signature: on ones
        ones = torch.ones(key[0], dtype=probs.dtype)
        shape = _MULTINOMIAL_SHAPES[key] = tuple(aten.multinomial(ones, *args[1:]).shape)
    with torch.no_grad():
        torch._assert_async(
            (probs.isfinite() & (probs >= 0)).all(),
            "multinomial: probability tensor contains either `inf`, `nan` or element < 0",
        )
        torch._assert_async(
            (probs.sum(-1) > 0).all(),
            "multinomial: invalid multinomial distribution (sum of probabilities <= 0)",
        )
    return shape


_MULTINOMIAL_SHAPES: dict[Any, tuple[int, ...]] = {}

# Where a Bernoulli op takes its probabilities as a tensor: ``bernoulli(p)``, ``x.bernoulli_(p)``.
_PROBABILITIES_AT = {aten.bernoulli.default: 0, aten.bernoulli.Tensor: 1, aten.bernoulli_.Tensor: 1}


def _check_probabilities(func: OpOverload, args: tuple[Any, ...]) -> None:
    """Eager's check that Bernoulli probabilities lie in [0, 1] (NaN fails it): a device check
    raised at a later sync, where XLA would draw from a probability of 1.5 as if it were 1."""
    at = _PROBABILITIES_AT.get(func)
    if at is None or len(args) <= at or type(p := args[at]) is not XlaTensor or p.numel() == 0:
        return
    with torch.no_grad():
        ok: Any = ((p >= 0) & (p <= 1)).all()  # an xla tensor: recorded, not read
    message = "Expected p_in >= 0 && p_in <= 1 to be true, but got false."
    checks.defer(value(ok), RuntimeError, message, func._schema.name.removeprefix("aten::"))


def _cannot_fall_back_in_body(
    func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, error: Exception
) -> None:
    """An op with no lowering, on a value of a torch.cond branch or a loop body being traced:
    eager's own error if eager refuses these arguments, else why the op cannot run there."""
    func(*[_cpu_zeros(a, False) for a in args], **{k: _cpu_zeros(v, False) for k, v in kwargs.items()})
    raise RuntimeError(
        f"{name} has no XLA lowering for these arguments, so it would run on the CPU; inside a "
        "torch.cond branch or a while_loop/scan/map body it cannot: the body runs on the device "
        "and its values exist only there. Compute it outside the body and pass it in as an operand."
    ) from error


# Inside __torch_dispatch__ torch leaves out the dispatch keys that resolve conjugate and
# negative views (and zero tensors): a composite op run on host tensors there (linalg_pinv takes
# ``.mH`` of an SVD factor) would read a conjugated view as if it were not. They are put back
# for the host computation; the keys above the Python one (autograd, autocast, functorch's
# layers) stay out, as the op already went through them.
_HOST_VIEW_KEYS = (
    torch._C.DispatchKeySet(torch._C.DispatchKey.Conjugate)
    | torch._C.DispatchKeySet(torch._C.DispatchKey.Negative)
    | torch._C.DispatchKeySet(torch._C.DispatchKey.ZeroTensor)
)


def _host_view_keys() -> Any:
    excluded = torch._C._dispatch_tls_local_exclude_set()
    return torch._C._ForceDispatchKeyGuard(
        torch._C._dispatch_tls_local_include_set(), excluded - _HOST_VIEW_KEYS
    )


def fallback(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an op without a lowering in eager PyTorch on the CPU, and count it."""
    name = "aten::" + func._schema.name.split("::")[-1]
    metrics.count(name)
    t0 = time.perf_counter()
    xla_args = [a for a in _flat(args, kwargs) if isinstance(a, XlaTensor)]
    device = xla_args[0]._st.device if xla_args else 0
    # The sync that brings the inputs over names the op: debuggers explain it before it runs.
    try:
        host = dict(zip(map(id, xla_args), to_cpu_many(xla_args, f"fallback:{name}")))
    except LoweringError as e:
        if not rng.BODIES.draws:  # no control-flow body is being traced: a failure of its own
            raise
        _cannot_fall_back_in_body(func, args, kwargs, name, e)
    for x in xla_args:
        if x._layout is not None:  # eager's kernel lays its result out as its operands are
            host[id(x)] = _host_laid_out(host[id(x)], x.stride())
    written = _written_args(func, args, kwargs)
    for i in written:  # the op may resize an out= tensor: a host copy of its own it can resize
        host[i] = host[i].clone()

    def to_host(a: Any) -> Any:
        if isinstance(a, XlaTensor):
            return host[id(a)]
        if isinstance(a, (list, tuple)):
            return type(a)(to_host(x) for x in a)
        if isinstance(a, torch.device) and a.type == "xla":
            return torch.device("cpu")
        return a

    hargs = to_host(args)
    hkwargs = {k: to_host(v) for k, v in kwargs.items()}
    with _host_view_keys():
        out = func(*hargs, **hkwargs)
    # Mutated arguments get their new values back on the device.
    for i, sa in enumerate(func._schema.arguments):
        if sa.alias_info is not None and sa.alias_info.is_write:
            a = args[i] if i < len(args) and not sa.kwarg_only else kwargs.get(sa.name)
            ha = hargs[i] if i < len(args) and not sa.kwarg_only else hkwargs.get(sa.name)
            for x, hx in zip(_as_list(a), _as_list(ha)):
                if isinstance(x, XlaTensor):
                    set_result(x, to_device_node(hx, x._st.device))

    def back(o: Any) -> Any:
        if isinstance(o, torch.Tensor) and o.is_nested:
            raise RuntimeError(
                f"{name} made a nested tensor, and xla tensors are dense (as torch_xla's): use "
                "the padded form of the batch and a mask."
            )
        if isinstance(o, torch.Tensor) and o.layout != torch.strided:
            raise RuntimeError(
                f"{name} made a {str(o.layout).removeprefix('torch.')} tensor, and xla tensors are dense: "
                "xlalab has no sparse layouts (torch_xla neither). Use the dense form, e.g. "
                "nn.Embedding(..., sparse=False) or F.embedding(..., sparse=False)."
            )
        if isinstance(o, torch.Tensor):
            for x, hx in zip(xla_args, host.values()):
                if o is hx:
                    return x  # an in-place op returned its (already updated) input
            # laid out as eager's result is (``nonzero``'s is column-major)
            return laid_out_tensor(to_device_node(o, device), o.stride())
        if isinstance(o, (list, tuple)):
            return type(o)(back(x) for x in o)
        return o

    on_cpu = CPU_OUTPUTS.get(func, ())
    if on_cpu and isinstance(out, tuple):
        result = tuple(o if i in on_cpu else back(o) for i, o in enumerate(out))
    else:
        result = back(out)
    _publish_fallback(func, args, name, time.perf_counter() - t0)
    return result


def _host_laid_out(h: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """A host copy with the xla operand's ``strides`` (a permute, a slice with gaps), which
    eager's kernels order their result's dims by; ``h`` as it is where elements would share
    memory (an expand, overlapping windows), which a copy cannot lay out."""
    reach = 0  # the farthest offset the dims with smaller strides reach
    for stride, n in sorted((st, n) for st, n in zip(strides, h.shape) if n > 1):
        if stride <= reach:
            return h
        reach += stride * (n - 1)
    return torch.empty_strided(h.shape, strides, dtype=h.dtype).copy_(h)


# Outputs that are on the CPU in eager whatever the device (packed sequences' batch sizes and
# lengths, which torch.nn.utils.rnn requires on the CPU): a fallback leaves them there.
CPU_OUTPUTS: dict[OpOverload, tuple[int, ...]] = {
    aten._pack_padded_sequence.default: (1,),
    aten._pad_packed_sequence.default: (1,),
}


def _publish_fallback(func: OpOverload, args: tuple[Any, ...], name: str, seconds: float) -> None:
    if events.listening():
        reason, data_dependent = fallback_reason(func, args)
        # Inside backward the line is the forward op's that this one differentiates (kept by
        # anomaly mode under XLA_IR_DEBUG), then the line that called backward().
        backward = torch._C._current_autograd_node() is not None
        forward = ir_frames(DEFAULT_DEPTH[0]) if backward else ()
        events.publish(
            events.FallbackEvent(
                op=name,
                seconds=seconds,
                frames=forward + user_frames(),
                inside=library_caller(),
                reason=reason,
                data_dependent=data_dependent,
                backward=backward,
            )
        )


def _has_mask(indices: Any) -> bool:
    return isinstance(indices, (list, tuple)) and any(
        isinstance(m, torch.Tensor) and m.dtype in (torch.bool, torch.uint8) for m in indices
    )


def fallback_reason(func: OpOverload, args: tuple[Any, ...]) -> tuple[str, bool]:
    """Why ``func`` ran on the CPU, in words, and whether its output shape depends on its
    inputs' values."""
    if func is aten.index.Tensor and len(args) > 1 and _has_mask(args[1]):
        return "indexing with a boolean mask: the result's shape depends on the mask's values", True
    if func in _INDEX_PUTS and len(args) > 2 and _values_per_masked_element(args):
        return events.MASKED_VALUES, False
    if func in FALLBACK_IF:
        return "xlalab lowers this op, but not this variant of it (eager's kernel gives the result)", False
    if func in LOWERINGS:
        return "xlalab's lowering does not cover this call (eager's CPU kernel ran it)", False
    return events.NO_LOWERING, False


def _flat(args: Any, kwargs: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


def _as_list(a: Any) -> list[Any]:
    return list(a) if isinstance(a, (list, tuple)) else [a]


# --------------------------------------------------------------------------- resolution

VIEW_OPS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.expand.default,
    aten.permute.default,
    aten.t.default,
    aten.transpose.int,
    aten.select.int,
    aten.slice.Tensor,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
    aten.as_strided.default,
    aten.diagonal.default,
    aten._reshape_alias.default,
    aten.unfold.default,
    aten.view.dtype,
    aten.view_as_real.default,
    aten.view_as_complex.default,
    aten._conj.default,  # xla tensors carry no conjugate bit: the view's values are conjugated
}
RANDOM_OPS = {
    aten.normal_.default,
    aten.uniform_.default,
    aten.bernoulli_.float,
    aten.bernoulli_.Tensor,
    aten.bernoulli.default,
    aten.bernoulli.p,
    aten.random_.default,
    getattr(aten.random_, "from"),
    aten.random_.to,
    aten.exponential_.default,
    aten.native_dropout.default,
    aten.multinomial.default,
}
def _assert_async(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch._assert_async(cond[, msg])``: a check computed with the next graph, raised at a
    later sync (``checks``); ``_functional_assert_async`` returns its ordering token."""
    if replica_state.current() is not None:
        # Replicas run their graphs as one program of their own: the check is read now instead.
        return fallback(func, args, kwargs)
    message = args[1] if len(args) > 1 else kwargs.get("assert_msg")
    checks.assert_async(_node_of, args[0], message)
    return args[2] if func is aten._functional_assert_async.msg else None


def _as_strided_scatter(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``as_strided_scatter``: eager's kernel clones ``self`` (keeping its layout) and writes
    ``src`` through ``as_strided`` of the clone, so the strides address the clone's storage.
    The lowering addresses ``self`` as row-major; a ``self`` whose elements are dense in another
    order (a transpose) takes eager's own steps on xla tensors."""
    x = args[0]
    if type(x) is not XlaTensor or x._layout is None or layouts.memory_order(x.shape, x.stride()) is None:
        return _lowered(func, args, kwargs)
    bound = func._schema  # (self, src, size, stride, storage_offset=None)
    named = dict(zip([a.name for a in bound.arguments], args)) | kwargs
    out = x.clone()
    out.as_strided(named["size"], named["stride"], named.get("storage_offset")).copy_(named["src"])
    return out


def _histc(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.histc``: with ``min == max`` the bins span the data, and eager refuses data whose
    range is not finite (a NaN or an infinity in it): a deferred check here, as eager's error
    needs the values."""
    out = _lowered(func, args, kwargs)
    x = args[0]
    lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
    hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
    if lo == hi and x.is_floating_point() and x.numel() and replica_state.current() is None:
        finite: Any = torch.isfinite(x).all()  # recorded, not read
        checks.defer(
            value(finite),
            RuntimeError,
            "torch.histc: range of the data is not finite (a NaN or an infinity; give min and max)",
            "torch.histc",
        )
    return out


def _dense_path(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``nn.TransformerEncoder`` asks whether its padding mask is left-aligned before it packs
    the batch into a nested tensor (eval mode, with a key padding mask). xla tensors are dense:
    "no" keeps it on the dense path torch_xla takes (whose device torch never packs). Only the
    padded positions of the output differ from the nested path: computed values, not zeros."""
    return False


def _bound(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every argument of a call by name, defaults included."""
    out = {a.name: a.default_value for a in func._schema.arguments}
    out.update(zip((a.name for a in func._schema.arguments), args))
    out.update(kwargs)
    return out


def _attention(x: Any, kv: tuple[Any, Any], a: dict[str, Any], weights: bool) -> tuple[Any, Any]:
    """Multi-head attention of batch-first ``x`` over ``kv`` with the weights and mask in
    ``a`` (the fused ops' arguments), as torch's functional (unfused) path computes it."""
    mask, mask_type = a["mask"], a["mask_type"]
    if mask is not None and mask.dim() == 4:  # merged (batch, heads, L, S): per batch*head
        mask = mask.reshape(-1, *mask.shape[2:])
    out, attn = torch.nn.functional.multi_head_attention_forward(
        x.transpose(0, 1), kv[0].transpose(0, 1), kv[1].transpose(0, 1),
        a["embed_dim"], a["num_head"] if "num_head" in a else a["num_heads"],
        a["qkv_weight"], a["qkv_bias"], None, None, False, 0.0, a["proj_weight"], a["proj_bias"],
        training=False, key_padding_mask=mask if mask_type == 1 else None, need_weights=weights,
        attn_mask=None if mask_type == 1 else mask,
        average_attn_weights=a.get("average_attn_weights", True),
    )  # fmt: skip
    return out.transpose(0, 1), attn


def _native_multi_head_attention(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``nn.MultiheadAttention``'s fused inference kernel (eval mode, no grad), recorded as the
    ops of its unfused path: on xla it would otherwise run on the CPU fallback, once a layer."""
    a = _bound(func, args, kwargs)
    return _attention(a["query"], (a["key"], a["value"]), a, bool(a["need_weights"]))


def _transformer_encoder_layer_fwd(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``nn.TransformerEncoderLayer``'s fused inference kernel, as the ops of its unfused path."""
    a = _bound(func, args, kwargs)
    F = torch.nn.functional
    e = a["embed_dim"]

    def norm(x: Any, k: int) -> Any:
        return F.layer_norm(x, (e,), a[f"norm_weight_{k}"], a[f"norm_bias_{k}"], a["eps"])

    def attend(x: Any) -> Any:
        return _attention(x, (x, x), a, False)[0]

    def feed_forward(x: Any) -> Any:
        hidden = F.linear(x, a["ffn_weight_1"], a["ffn_bias_1"])
        hidden = F.gelu(hidden) if a["use_gelu"] else F.relu(hidden)
        return F.linear(hidden, a["ffn_weight_2"], a["ffn_bias_2"])

    x = a["src"]
    if a["norm_first"]:
        x = x + attend(norm(x, 1))
        return x + feed_forward(norm(x, 2))
    x = norm(x + attend(x), 1)
    return norm(x + feed_forward(x), 2)


def _random_like(fill: Callable[[torch.Tensor, dict[str, Any]], Any]) -> Handler:
    """``rand_like``/``randn_like``/``randint_like``: an empty tensor like ``self`` filled by the
    device RNG's op (``uniform_``, ``normal_``, ``random_``), as ``torch.rand(device=xla)`` draws,
    instead of a draw on the CPU and a copy over at every call."""

    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        a = _bound(func, args, kwargs)
        device = torch.device(a.get("device") or a["self"].device)
        if a.get("generator") is not None or device.type != "xla" or isinstance(a.get("high"), torch.Tensor):
            return fallback(func, args, kwargs)
        out = torch.empty_like(  # laid out as ``self`` is, as eager's
            a["self"],
            dtype=a.get("dtype") or a["self"].dtype,
            device=device,
            memory_format=a.get("memory_format") or torch.preserve_format,
        )
        return fill(out, a)

    return handler


def _randperm_out(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.randperm(n, device=xla)`` (torch fills an empty out= tensor): the order that sorts
    n uniform float64 draws of the device RNG (ties among 2**53 values are as rare as in any
    shuffle), instead of a draw on the CPU and a copy over at every call. A CPU generator
    draws on the CPU, as eager does."""
    a = _bound(func, args, kwargs)
    out = a["out"]
    if a.get("generator") is not None or type(out) is not XlaTensor:
        return fallback(func, args, kwargs)
    keys = torch.empty(int(a["n"]), dtype=torch.float64, device=out.device).uniform_()
    order: Any = torch.argsort(keys, stable=True).to(out.dtype)
    set_result(out, value(order))
    return out


def _factored_as_eager(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``_linalg_det``/``_linalg_slogdet`` return the LU factors their backward reads; eager
    factors ``A.mT`` when ``A`` is a contiguous real matrix and ``A`` itself otherwise (a
    transposed view), and the backward assumes the same. The lowering factors its operand's
    transpose: it is given ``A.mT`` where eager factors ``A``."""
    a = args[0]
    if type(a) is XlaTensor and a.dim() >= 2 and not (a.is_contiguous() and not a.is_complex()):
        args = (a.mT, *args[1:])
    return _lowered(func, args, kwargs)


_SPECIAL: dict[OpOverload, Handler] = {
    aten._linalg_det.default: _factored_as_eager,
    aten._linalg_slogdet.default: _factored_as_eager,
    # linalg's error codes: device checks raised at a later sync, not a read per call
    aten._linalg_check_errors.default: checks.linalg_errors,
    aten.linalg_inv_ex.default: checks.linalg_ex_checked,
    aten.linalg_cholesky_ex.default: checks.linalg_ex_checked,
    aten.cholesky.default: checks.legacy_cholesky,
    aten._linalg_solve_ex.default: checks.linalg_ex_checked,
    aten.linalg_lu_factor_ex.default: checks.linalg_ex_checked,
    aten._ctc_loss.Tensor: checks.ctc_lengths_checked,
    aten._embedding_bag.default: checks.embedding_bag_offsets_checked,
    aten._embedding_bag_forward_only.default: checks.embedding_bag_offsets_checked,
    aten._fused_moving_avg_obs_fq_helper.default: _fused_observer,
    aten.randperm.out: _randperm_out,
    aten.randperm.generator_out: _randperm_out,
    aten.rand_like.default: _random_like(lambda t, a: t.uniform_()),
    aten.randn_like.default: _random_like(lambda t, a: t.normal_()),
    aten.randint_like.default: _random_like(lambda t, a: t.random_(0, a["high"])),
    aten.randint_like.low_dtype: _random_like(lambda t, a: t.random_(a["low"], a["high"])),
    aten.set_.source_Tensor: _set_source,
    aten.set_.source_Storage: _set_storage,
    aten.set_.source_Storage_storage_offset: _set_storage,
    aten.is_set_to.default: _is_set_to,
    aten._native_multi_head_attention.default: _native_multi_head_attention,
    aten._transformer_encoder_layer_fwd.default: _transformer_encoder_layer_fwd,
    aten._nested_tensor_from_mask_left_aligned.default: _dense_path,
    aten.histc.default: _histc,
    aten.as_strided_scatter.default: _as_strided_scatter,
    aten._assert_async.default: _assert_async,
    aten._assert_async.msg: _assert_async,
    aten._functional_assert_async.msg: _assert_async,
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.lift_fresh.default: _lift_fresh,
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.unbind.int: _multi_view(_unbind_views),
    aten.split.Tensor: _multi_view(_split_views),
    aten.split_with_sizes.default: _multi_view(_split_views),
    # Batch norm updates its running statistics in place (native_batch_norm's schema does not
    # even say so): record the functional variant and write the new statistics back.
    aten.native_batch_norm.default: _functionalized(
        aten._native_batch_norm_legit_functional.default, {3: 3, 4: 4}, 3
    ),
    aten._native_batch_norm_legit.default: _functionalized(
        aten._native_batch_norm_legit_functional.default, {3: 3, 4: 4}, 3
    ),
}
_HANDLERS: dict[int, Handler] = {}  # keyed by id(op), like _INFO
_INDEX_PUTS = [
    getattr(packet, overload)
    for packet in (
        aten.index_put, aten.index_put_, aten._unsafe_index_put, aten._index_put_impl, aten._index_put_impl_
    )
    for overload in ("default", "hacked_twin")
    if hasattr(packet, overload)
]


def _values_per_masked_element(args: tuple[Any, ...]) -> bool:
    """Whether ``index_put(x, indices, values)`` indexes with a boolean mask and places a value
    per element it selects (rather than one that broadcasts over them), or with a mask beside
    other indices."""
    x, indices, values = args[0], args[1], args[2]
    if type(x) is not XlaTensor:  # a CPU tensor written with an xla operand: the two-devices error
        return False
    given = [(i, m) for i, m in enumerate(indices) if m is not None]
    if not any(m.dtype in (torch.bool, torch.uint8) for _, m in given):
        return False
    if len(given) != 1:
        return True
    position, mask = given[0]
    return values_per_selected(tuple(values.shape), x.dim() - position - mask.dim())


def values_per_selected(values_shape: tuple[int, ...], trailing: int) -> bool:
    """Whether masked assignment's values (``x[..., mask, ...] = values``, ``trailing`` dims
    after the mask's) hold one value per selected element rather than broadcasting over them."""
    shape = list(values_shape)
    while len(shape) > trailing and shape[0] == 1:
        shape.pop(0)
    return len(shape) > trailing


# Per-op switches to the CPU fallback, e.g. bool-mask indexing whose shape depends on data.
FALLBACK_IF: dict[OpOverload, Callable[[tuple[Any, ...]], bool]] = {
    # torch's decomposition draws rand_like(self), which has no integer kernel; eager's own
    # geometric_ fills integer tensors too.
    aten.geometric_.default: lambda args: not args[0].dtype.is_floating_point,
    # Orders 2 and up are a Hurwitz zeta, which JAX computes otherwise than torch (elementwise.py).
    aten.polygamma.default: lambda args: args[0] > 1,
    # Eager's half-type kernel computes in the half type and overflows (NaN) where the exact
    # exponential, which the lowering computes in float64, fits: the CPU gives eager's answer.
    aten.linalg_matrix_exp.default: lambda args: args[0].dtype in (torch.float16, torch.bfloat16),
    aten.logcumsumexp.default: lambda args: args[0].dtype.is_complex,
    # A boolean mask with one value per element it selects: how many it selects is data, so
    # eager's kernel places them (and raises when the count is not the values' length).
    **{op: _values_per_masked_element for op in _INDEX_PUTS},
    # Eager resamples uint8 images in fixed point, one axis at a time, each pass rounded to uint8
    # (as PIL does): the CPU gives eager's answer.
    **{
        op: (lambda args: args[0].dtype == torch.uint8)
        for packet in (
            aten.upsample_bilinear2d,
            aten.upsample_bicubic2d,
            aten._upsample_bilinear2d_aa,
            aten._upsample_bicubic2d_aa,
        )
        for op in (packet.default, packet.vec)
    },
}


def _guarded(handler: Handler, predicate: Callable[[tuple[Any, ...]], bool]) -> Handler:
    def guarded(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if predicate(args):
            return fallback(func, args, kwargs)
        return handler(func, args, kwargs)

    return guarded


def _functional_of(func: OpOverload) -> OpOverload | None:
    name = func._schema.name.split("::")[-1]
    ov = func._overloadname
    cands: tuple[str, ...]
    if name.endswith("_"):
        packet = getattr(aten, name[:-1], None)
        cands = (ov,)
    else:
        packet = getattr(aten, name, None)
        cands = tuple(c for c in (ov.removesuffix("_out").removesuffix("out"), "default", "Tensor") if c)
    if packet is None:
        return None
    for c in cands:
        if c in packet.overloads():
            return getattr(packet, c)
    return None


def _decomposition(func: OpOverload) -> Handler | None:
    from torch._decomp import decomposition_table

    decomp = decomposition_table.get(func)
    if decomp is None:
        return None

    accepted: dict[Any, bool] = {}  # per call signature: whether torch's meta and CPU kernels run it

    def handler(f: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # torch's decompositions check little of what eager checks (arguments, dtypes): ask
        # the kernels once per signature, as a lowered op's shape rule does, so that eager
        # raises its own error at the user's line instead of a value coming out.
        try:
            key = _call_key(args, kwargs)
            ok = accepted.get(key)
            if ok is None:
                ok = accepted[key] = _compute_meta(f, args, kwargs) is not _NO_META
        except TypeError:  # an unhashable argument
            ok = True
        if not ok:
            return fallback(f, args, kwargs)
        out = decomp(*args, **kwargs)
        return fallback(f, args, kwargs) if out is NotImplemented else out

    return handler


def _call_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What decides whether the kernels accept a call: operands' shapes, dtypes and layouts,
    a 0-d CPU operand's value, every other argument exactly (``ir.typed``)."""

    def key(a: Any) -> Any:
        tp = type(a)
        if tp is XlaTensor:
            return (tuple(a.shape), a.dtype, a._layout)
        if isinstance(a, torch.Tensor):
            return (tuple(a.shape), a.dtype, a.device.type, ir.typed(a.item()) if a.dim() == 0 else None)
        if tp is list or tp is tuple:
            return tuple([key(x) for x in a])
        return ir.typed(a)

    return (tuple([key(a) for a in args]), tuple([(k, key(v)) for k, v in kwargs.items()]))


def _copy_of_view(func: OpOverload) -> Handler | None:
    """``select_copy``, ``detach_copy``, ...: the view op's result as a new tensor. Functionalized
    graphs (AOTAutograd's, a scan's backward) use these in place of views."""
    base_packet = getattr(aten, func._schema.name.split("::")[-1].removesuffix("_copy"), None)
    base = getattr(base_packet, func._overloadname, None) if base_packet is not None else None
    if base is None or not any(r.alias_info is not None for r in base._schema.returns):
        return None  # no view op of that name (index_copy is no copy of a view of index)

    def handler(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = base(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out.clone(memory_format=torch.contiguous_format)
        return [t.clone(memory_format=torch.contiguous_format) for t in out]

    return handler


def _resolve(func: OpOverload) -> Handler:
    """Pick, once per overload, how its calls are handled."""
    schema = func._schema
    name = schema.name
    handler: Handler | None = _SPECIAL.get(func)
    if handler is None and func in VIEW_OPS:
        handler = _view
    if handler is None and func in RANDOM_OPS:
        handler = _random
    if handler is None and name.startswith("aten::_foreach_"):
        handler = _foreach(func)
    if handler is None and func in LOWERINGS:
        handler = _lowered
    if handler is None and schema.is_mutable:
        functional = _functional_of(func)
        is_out = any(a.kwarg_only and a.name == "out" for a in schema.arguments)
        if functional is not None and functional in LOWERINGS:
            handler = _out_variant(functional) if is_out else _inplace(functional)
    if handler is None:
        handler = _decomposition(func)
    if handler is None and name.endswith("_copy") and not schema.is_mutable:
        handler = _copy_of_view(func)
    if handler is None:
        handler = fallback
    if func in FALLBACK_IF:
        handler = _guarded(handler, FALLBACK_IF[func])
    written = _written_positions(func)
    if written and not name.startswith("aten::_foreach_"):
        handler = _overlap_checked(handler, written)
    _HANDLERS[id(func)] = handler
    return handler


def _written_positions(func: OpOverload) -> list[tuple[int, str]]:
    """Where ``func``'s schema says it writes: (position, name) of each mutable argument."""
    return [
        (-1 if sa.kwarg_only else i, sa.name)
        for i, sa in enumerate(func._schema.arguments)
        if sa.alias_info is not None and sa.alias_info.is_write
    ]


def _overlap_checked(handler: Handler, written: list[tuple[int, str]]) -> Handler:
    """``handler`` behind eager's refusal to write into a tensor whose elements share memory
    (an ``expand``ed view): most kernels refuse it, a few (``fill_``, ``index_put_``, reductions'
    ``out=``) write anyway. A view can only overlap itself through a stride of 0, which is what
    is looked for on each call; the rare call that has one asks eager whether it refuses."""

    def checked(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        for pos, name in written:
            t = args[pos] if 0 <= pos < len(args) else kwargs.get(name)
            if type(t) is XlaTensor and t._chain and _overlaps_itself(t):
                _refuse_as_eager_does(func, args, kwargs, t)
        return handler(func, args, kwargs)

    return checked


def _overlaps_itself(t: XlaTensor) -> bool:
    return any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))


# (op, shape, strides, dtype) of overlapping writes eager accepted: asked once each.
_OVERLAP_ACCEPTED: set[Any] = set()


def _refuse_as_eager_does(
    func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], t: XlaTensor
) -> None:
    """Raise eager's error if its CPU kernel refuses this call's write into ``t``: the call is
    made on zeros, ``t`` laid out with its own strides over a storage of its size."""
    key = (func, tuple(t.shape), t.stride(), t.dtype)
    if key in _OVERLAP_ACCEPTED:
        return
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
    overlapping = torch.zeros(extent, dtype=t.dtype).as_strided(tuple(t.shape), t.stride())

    def cpu(a: Any) -> Any:
        if a is t:
            return overlapping
        if type(a) is list or type(a) is tuple:
            return type(a)(cpu(x) for x in a)
        return _cpu_zeros(a, False)

    try:
        func(*[cpu(a) for a in args], **{k: cpu(v) for k, v in kwargs.items()})
    except RuntimeError as e:
        if "more than one element of the written-to tensor" in str(e):
            raise RuntimeError(str(e)) from None
    except Exception:
        pass  # a refusal of the zeros, not of the overlap: the op's own checks say the rest
    _OVERLAP_ACCEPTED.add(key)


# --------------------------------------------------------------------------- transfers


def to_device_node(t: torch.Tensor, device: int, dtype: torch.dtype | None = None) -> Node:
    """Send a CPU tensor to xla:device; the result is a device-data leaf."""
    dtype = dtype or t.dtype
    t0 = time.perf_counter_ns()
    array = backend.to_device(t, device, dtype)
    dt = time.perf_counter_ns() - t0
    nbytes = t.numel() * dtype.itemsize
    metrics.record("TransferToDeviceTime", dt)
    metrics.record("OutboundData", nbytes, "bytes")
    metrics.count("CreateDataHandles")
    if events.listening():
        events.publish(
            events.TransferEvent(
                direction="to_device", nbytes=nbytes, seconds=dt / 1e9, frames=user_frames(), data=array
            )
        )
    return ir.data(array, tuple(t.shape), dtype, device)


def to_cpu(t: XlaTensor, reason: str) -> torch.Tensor:
    return to_cpu_many([t], reason)[0]


def to_cpu_many(ts: list[XlaTensor], reason: str) -> list[torch.Tensor]:
    """Bring tensors to the host: a barrier for exactly these tensors."""
    if not ts:
        return []
    arrays = materialize([value(t) for t in ts], [t._st for t in ts], reason)
    checks.raise_deferred(wait=True)  # the host waits here: an assertion's flag is as cheap to read
    out = []
    for t, array in zip(ts, arrays):
        t0 = time.perf_counter_ns()
        host = backend.to_host(array, t.dtype)
        dt = time.perf_counter_ns() - t0
        metrics.record("TransferFromDeviceTime", dt)
        metrics.record("InboundData", host.numel() * host.element_size(), "bytes")
        metrics.count("xla::_to_cpu")
        if events.listening():
            events.publish(
                events.TransferEvent(
                    direction="from_device",
                    nbytes=host.numel() * host.element_size(),
                    seconds=dt / 1e9,
                    frames=user_frames(),
                )
            )
        out.append(host)
    return out


def _format(t: XlaTensor, reason: str) -> str:
    """torch's own printing of the CPU value, with the xla device in the suffix."""
    from torch._tensor_str import _tensor_str

    host = to_cpu(t, reason)
    prefix = "tensor("
    body = _tensor_str(host, len(prefix)) if host.numel() or host.dim() != 1 else "[]"
    suffixes = [f"device='{t.device}'"]
    default_dtype = host.dtype in (torch.get_default_dtype(), torch.int64, torch.bool, torch.complex64)
    if host.numel() == 0 and host.dim() != 1:
        suffixes.append(f"size={tuple(host.shape)}")
    if not default_dtype:
        suffixes.append(f"dtype={host.dtype}")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{type(t.grad_fn).__name__}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return prefix + body + ", " + ", ".join(suffixes) + ")"
