"""The ``"xlalab"`` dynamo backend: AOTAutograd, then one XLA program per graph.

``torch.compile(model, backend="xlalab")``: dynamo captures the model's graphs, AOTAutograd
turns each into a functional aten forward graph and, when something needs gradients, a
backward graph; each of those becomes one compiled program (``executable.CompiledGraph``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

from torch import fx

from ..runtime import checks, control_flow
from ..runtime.frames import user_frames
from ..runtime.lowering.prims import register_inductor_prims
from . import integration, report
from .executable import CompiledGraph


def _compiler(label: str, part: str) -> Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]:
    def compile_part(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from functorch.compile import make_boxed_func

        compiled = CompiledGraph(gm, f"{label}, {part}")
        report.note_aot_graph(label, part, gm, compiled)
        return make_boxed_func(compiled)  # type: ignore[no-any-return]

    return compile_part


_SEQUENCE = (list, tuple, range)


def _flat(index: Any) -> list[Any]:
    out: list[Any] = []
    for item in index:
        out.extend(_flat(item) if isinstance(item, _SEQUENCE) else [item])
    return out


def _index_sequence(index: Any) -> bool:
    """A sequence of ints and bools (nested ones too): torch indexes with it as with the tensor
    ``torch.tensor(index)`` (a mask if all are bools)."""
    if not isinstance(index, _SEQUENCE) or not len(index):
        return False
    return all(type(v) in (int, bool) for v in _flat(index))


def _tensor_indices(gm: fx.GraphModule) -> None:
    """``x[[1, 2]]`` becomes ``x[torch.tensor([1, 2])]``, the same index, read or written
    (``x[[1, 2]] = v``, ``x[..., [0, -1]] *= -1``); so do ``x[range(2)]``, ``x[(0, 2),]`` and
    a list of bools.

    torch builds an index sequence's tensor in C++, on the indexed tensor's device and below
    the Python key, so AOTAutograd would trace it as a constant on xla that it cannot keep. A
    CPU tensor made in the graph is an ordinary constant (and a CPU index is valid for any
    device).
    """
    import operator

    import torch

    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or not (
            (node.target is operator.getitem and len(node.args) == 2)
            or (node.target is operator.setitem and len(node.args) == 3)
        ):
            continue
        base, index, *value = node.args
        example = base.meta.get("example_value") if isinstance(base, fx.Node) else None
        if not isinstance(example, torch.Tensor):
            continue
        # A tuple indexes one dimension per item; so does a list holding sequences (torch's
        # old multi-dimensional form). Any other sequence is one index.
        as_tuple = isinstance(index, tuple) or (
            isinstance(index, list) and any(isinstance(v, _SEQUENCE) for v in index)
        )
        parts = list(index) if as_tuple else [index]
        new: list[Any] = []
        for part in parts:
            if _index_sequence(part):
                with graph.inserting_before(node):
                    new.append(graph.call_function(torch.tensor, (_as_lists(part),)))
            else:
                new.append(part)
        if all(a is b for a, b in zip(new, parts)):
            continue
        node.args = (base, tuple(new) if as_tuple else new[0], *value)
        changed = True
    if changed:
        gm.recompile()


def _as_lists(index: Any) -> list[Any]:
    """The sequence as nested lists (an FX argument; ``range`` is not one)."""
    return [_as_lists(v) if isinstance(v, _SEQUENCE) else v for v in index]


def backend(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
    """A dynamo backend: ``torch.compile(fn, backend=xlalab.dynamo.backend)`` or ``backend="xlalab"``."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    _ignore_inductor_settings(kwargs)
    integration.install()
    control_flow.eager_rules()  # higher-order operators made since the runtime started
    register_inductor_prims()  # dynamo writes some in-place ops as inductor's prims.fma
    label = report.note_dynamo_graph(gm)
    _tensor_indices(gm)
    # An inference graph (the optimizer's step) keeps its in-place updates of inputs in the
    # graph: the program writes them back itself, instead of AOTAutograd copying each one into
    # its input after the call (a dispatch per parameter and state tensor, every step).
    kwargs.setdefault("keep_inference_input_mutations", True)
    # The forward saves for backward only what is costly to recompute (as inductor's partition
    # does); cheap elementwise ops and transposes are redone in the backward program. Fewer
    # saved tensors: fewer outputs for the forward to write and the wrappers to pass along.
    # Random ops are never recomputed, so a dropout mask is the forward's.
    kwargs.setdefault("partition_fn", min_cut_rematerialization_partition)
    aot = aot_autograd(
        fw_compiler=_compiler(label, "forward"), bw_compiler=_compiler(label, "backward"), **kwargs
    )
    try:
        return aot(gm, example_inputs)  # type: ignore[no-any-return]
    except RuntimeError as e:
        mixed = _cpu_operand(gm) if _ENGINE_STREAM_ASSERT in str(e) else None
        if mixed is None:
            raise
        raise RuntimeError(mixed) from e


_WARNED_SETTINGS: set[str] = set()


def _ignore_inductor_settings(kwargs: dict[str, Any]) -> None:
    """torch.compile hands ``mode=`` and ``options=`` to the backend: they choose inductor's and
    CUDA graphs' behaviour, which XLA programs do not have (each graph is one program already).
    Accepted and left out, as torch's own eager backends do, with a warning once per setting."""
    for name in ("mode", "options"):
        if name in kwargs:
            value = kwargs.pop(name)
            if value and name not in _WARNED_SETTINGS:
                _WARNED_SETTINGS.add(name)
                message = (
                    f"torch.compile(..., {name}={value!r}) has no effect with backend='xlalab': "
                    "it sets inductor's and CUDA graphs' behaviour, and every graph here is "
                    "compiled by XLA into one program."
                )
                at = user_frames()  # the call that compiled, not dynamo's machinery
                if at:
                    warnings.warn_explicit(message, UserWarning, at[0].file, at[0].line)
                else:
                    warnings.warn(message, stacklevel=2)


# What torch's autograd engine asserts when a traced backward crosses devices (an xla input
# meeting a CPU parameter in an op whose shape rule does not compare devices).
_ENGINE_STREAM_ASSERT = "opt_ready_stream && opt_parent_stream"


def _cpu_operand(gm: fx.GraphModule) -> str | None:
    """The first op of the graph that takes both an xla tensor and a CPU tensor (not a 0-d one,
    which torch accepts anywhere), said as eager says it, with the user's line; None if none."""
    import torch

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        values = [(a, a.meta.get("example_value")) for a in node.all_input_nodes]
        tensors = [(a, v) for a, v in values if isinstance(v, torch.Tensor) and v.dim() > 0]
        cpu = [(a, v) for a, v in tensors if v.device.type == "cpu"]
        if not cpu or not any(v.device.type == "xla" for _, v in tensors):
            continue
        arg, value = cpu[0]
        grapharg = arg.meta.get("grapharg")
        source = getattr(grapharg, "source", None)
        name = report._pretty(str(source.name)) if source is not None else arg.name
        where = checks.where_of(node.meta.get("stack_trace"))
        at = f" at {where}" if where is not None else ""
        return (
            f"Expected all tensors to be on the same device, but found at least two devices: "
            f"{getattr(node.target, '__name__', node.target)}{at} takes an xla tensor and the CPU "
            f"tensor `{name}` (shape {list(value.shape)}). Move it to the xla device before the "
            "call (model.to(device) before torch.compile's first call), as eager requires."
        )
    return None


def register() -> None:
    """``backend="xlalab"`` for torch.compile, and torch's ``"openxla"`` / ``"openxla_eval"``
    taken over while ``torch_xla`` is xlalab (idempotent)."""
    from torch._dynamo.backends import registry

    if "xlalab" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=backend, name="xlalab")
    _take_over_openxla()
    # torch registers its openxla entries when a backend is first looked up by name (importing
    # them now, while dynamo itself is still loading, would be a circular import).
    if not getattr(registry._lazy_import, "_xlalab", False):
        load_backends = registry._lazy_import

        def lazy_import() -> None:
            load_backends()
            _take_over_openxla()

        lazy_import._xlalab = True  # type: ignore[attr-defined]
        registry._lazy_import = lazy_import  # type: ignore[assignment]


def _take_over_openxla() -> None:
    from torch._dynamo.backends.registry import _COMPILER_FNS

    for name in _OPENXLA:
        original = _COMPILER_FNS.get(name)
        if original is not None and not getattr(original, "_xlalab", False):
            _COMPILER_FNS[name] = _as_openxla(original)


# torch's backends for torch_xla. Each hands every aten graph to ``torch_xla.core.dynamo_bridge``
# on the graph's first call, after dynamo has finished: too late to learn the function's name,
# its graph breaks and the guard that failed, and without the partition and in-graph input
# updates ``backend`` chooses (each optimizer step would copy every parameter after the
# program). Where that bridge is xlalab's own, the name means ``backend``.
_OPENXLA = ("openxla", "openxla_eval")


def _as_openxla(original: Callable[..., Any]) -> Callable[..., Any]:
    def openxla(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable[..., Any]:
        bridge = _bridge()
        if bridge is None:
            raise ImportError(
                'backend="openxla" is torch_xla\'s name and torch_xla is not installed here: call '
                "xlalab.use_torch_xla_names() first (or set XLALAB_TORCH_XLA=1) to run torch_xla "
                'code on xlalab, or pass backend="xlalab"'
            )
        if bridge is not sys.modules.get(f"{__package__}.bridge"):
            return original(gm, example_inputs, **kwargs)  # the real torch_xla's
        return backend(gm, example_inputs, **kwargs)

    openxla._xlalab = True  # type: ignore[attr-defined]
    openxla._tags = getattr(original, "_tags", ())  # type: ignore[attr-defined]
    return openxla


def _bridge() -> Any:
    """``torch_xla.core.dynamo_bridge`` (:mod:`xlalab.dynamo.bridge` while torch_xla's names are
    installed: ``xlalab.use_torch_xla_names()`` or ``XLALAB_TORCH_XLA=1``), or None."""
    try:
        import torch_xla.core.dynamo_bridge as bridge  # type: ignore[import-not-found]
    except ImportError:
        return None
    return bridge


__all__ = ["backend", "register"]
