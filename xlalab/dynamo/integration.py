"""What dynamo needs to know about ``xla`` tensors, installed once dynamo is imported.

xlalab's tensors are a Python subclass of ``torch.Tensor`` whose ops reach
``__torch_dispatch__``. Dynamo treats such a subclass as an opaque object unless told
otherwise, tracing into the runtime's own Python instead of the user's model. These make
dynamo and AOTAutograd see them as what they are, device tensors on ``xla`` (as torch_xla's
C++ tensors are), and keep torch's tracing off the device's kernels:

- dynamo wraps an ``XlaTensor`` as a tensor (a fake tensor on ``xla`` while tracing);
- dynamo never traces xlalab's own machinery (the runtime runs in eager between graphs), the
  methods that ``dataclasses`` generate for its classes included;
- AOTAutograd accepts an ``XlaTensor`` where it expects a plain tensor's gradient;
- a compiled optimizer keeps its step counters on xla (``capturable``), as dynamo does on CUDA;
- ``xs.mark_sharding`` in a compiled function is the op ``xla::dynamo_mark_sharding`` in the graph;
- with ``torch._dynamo.config.trace_autograd_ops`` on, ``loss.backward()`` of a loss whose
  autograd history began outside the graph breaks the graph, so that autograd's engine runs it
  (dynamo would trace it as doing nothing);
- the default backend (inductor), given xla tensors, says which backends compile for xla;
- a random op inside ``torch.utils.checkpoint`` is refused with what to do instead;
- fake tensors on xla carry no real value (fake mode would compute on it below the Python key),
  and an op failing on them inside autograd's engine raises when the engine returns.

``install_when_dynamo_loads()`` costs nothing up front: it waits for ``torch._dynamo`` to be
imported (``torch.compile`` imports it) and installs then, so ``import xlalab`` does not pay
for dynamo's import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

import torch

_installed = [False]
# xlalab's own machinery: dynamo runs it in eager, between graphs. (``xlalab.testing`` is user
# code as far as dynamo is concerned: its workloads' train steps are traced like anyone's.)
_INFRASTRUCTURE = (
    "xlalab.runtime",
    # xlalab.dynamo but its polyfills, the code dynamo traces in place of xlalab's
    "xlalab.dynamo.backend",
    "xlalab.dynamo.bridge",
    "xlalab.dynamo.executable",
    "xlalab.dynamo.integration",
    "xlalab.dynamo.report",
    "xlalab.core",
    "xlalab.debug",
    "xlalab.lab",
    "xlalab.utils",
    "xlalab.distributed",
    "xlalab.amp",
    "xlalab.experimental",
    "xlalab.tools",
    "xlalab.compat",
    # The runtime's compiler: its Python runs between graphs too, never inside one.
    "jax",
    "jaxlib",
)


def install() -> None:
    """Teach dynamo about xla tensors and register ``backend="xlalab"`` (idempotent; imports
    torch._dynamo)."""
    if _installed[0]:
        return
    _installed[0] = True
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import builder

    from xlalab.runtime.tensor import XlaTensor

    # Exact-type table: consulted before dynamo's subclass rules, so an XlaTensor is built as
    # a tensor (fakeified with its device, shape, dtype and strides) and guarded as one.
    builder.VariableBuilder._type_dispatch()[XlaTensor] = builder.VariableBuilder.wrap_tensor
    # ... as a plain tensor, not a torch-function subclass (whose .grad dynamo will not read).
    infer = builder.infer_subclass_type

    def infer_subclass_type(value: Any) -> Any:
        return None if type(value) is XlaTensor else infer(value)

    builder.infer_subclass_type = infer_subclass_type
    _capturable_optimizers_on_xla()
    _polyfills()
    _no_constants_on_xla()
    _fake_errors_kept_in_backward()
    _no_backward_traced_as_nothing()
    _inductor_names_the_xla_backends()
    _checkpointed_random_ops_refused()
    for name in _INFRASTRUCTURE:
        trace_rules.add(name)
    _skip_generated_methods()
    from .backend import register

    register()


def _skip_generated_methods() -> None:
    """The methods ``dataclasses`` and ``namedtuple`` write for xlalab's classes (``__init__``,
    ``__eq__``...) are compiled from text, so their code lives in no file and dynamo's
    skip-by-module rule misses them. Called from the eager part of a compiled function (an
    event made after a graph break), dynamo would trace them as user code; they are skipped
    like the rest of xlalab's machinery."""
    from torch._dynamo.eval_frame import skip_code

    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith(_INFRASTRUCTURE):
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, type) or value.__module__ != module_name:
                continue
            for member in vars(value).values():
                code = getattr(getattr(member, "__func__", member), "__code__", None)
                if code is not None and not code.co_filename.endswith(".py"):
                    skip_code(code)


def _checkpointed_random_ops_refused() -> None:
    """A random op inside ``torch.utils.checkpoint`` in a compiled function becomes AOTAutograd's
    ``run_and_save_rng_state`` / ``run_with_rng_state``, whose saved state would have to carry
    the device's draws from the forward program to the backward one. xlalab does not carry it:
    say so, and what works, instead of torch's missing-rule error."""
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    from xlalab.runtime.tensor import XlaTensor

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "xlalab: a random op (dropout...) inside torch.utils.checkpoint cannot be compiled "
            "for xla yet: its recomputation in backward must draw the forward's numbers. Run the "
            "step lazily (without torch.compile; checkpointing there recomputes with the same "
            "mask), or turn dropout off in the checkpointed layers (e.g. a config's dropout=0.0)"
        )

    for hop in (run_and_save_rng_state, run_with_rng_state):
        hop.py_impl(XlaTensor)(refuse)


def _inductor_names_the_xla_backends() -> None:
    """``torch.compile(fn)`` with its default backend on xla tensors: inductor has no code
    generator for the device and fails with ``KeyError: 'xla'``. Say which backends compile
    for xla instead."""
    wrapper = torch._TorchCompileInductorWrapper
    original = wrapper.__call__

    def call(self: Any, model_: Any, inputs_: Any) -> Any:
        if any(isinstance(t, torch.Tensor) and t.device.type == "xla" for t in inputs_):
            raise RuntimeError(
                "torch.compile's default backend (inductor) cannot compile for xla tensors: "
                'pass backend="openxla" (torch_xla\'s name, with xlalab.use_torch_xla_names()) or '
                'backend="xlalab", e.g. torch.compile(fn, backend="xlalab")'
            )
        return original(self, model_, inputs_)

    wrapper.__call__ = call  # type: ignore[method-assign,assignment]


def _no_backward_traced_as_nothing() -> None:
    """``loss.backward()`` traced into the graph (``trace_autograd_ops``) finds the leaves to give
    gradients to among the tensors the graph knows. Torch 2.13 takes finding none to mean that
    there are none, and traces the call as nothing. But a loss made before the graph began (a
    graph break inside the forward, as a recurrent layer makes, leaves ``loss`` an input of the
    frame that calls ``backward()``) has its leaves outside the graph: eager gives every
    parameter its gradient there, the traced call gave none and the optimizer step did nothing.
    Such a call breaks the graph instead, and autograd's engine runs it."""
    import itertools

    from torch._dynamo import config
    from torch._dynamo.exc import unimplemented
    from torch._dynamo.variables.tensor import TensorVariable

    original = TensorVariable.method_backward

    def method_backward(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = kwargs.get("inputs", args[3] if len(args) > 3 else None)
        if config.trace_autograd_ops and inputs is None and self.has_grad_fn:
            output = tx.output
            known = itertools.chain(output.leaf_var_creation_order, output.input_source_to_var.values())
            if not self._collect_backward_inputs(known):
                unimplemented(
                    gb_type="backward() of a loss made outside the graph",
                    context=f"call_method {self} backward",
                    explanation="The loss's autograd history began before this graph, so the leaves "
                    "that get gradients are not among its tensors: autograd's engine runs backward().",
                    hints=[
                        "Compile the forward and the backward() call in one function without a graph "
                        "break between them to trace them as one graph."
                    ],
                )
        return original(self, tx, *args, **kwargs)

    TensorVariable.method_backward = method_backward  # type: ignore[method-assign]


def _fake_errors_kept_in_backward() -> None:
    """An op that fails on fake xla tensors while autograd's engine runs a backward node (as
    AOTAutograd traces a backward graph) does not raise there: torch would lose the error on its
    way out of the engine (a Python device guard runs while it is in flight), leaving a
    ``SystemError`` or an aborted process. As for real xla tensors (``runtime.backward_errors``),
    the error is kept, the op returns fakes shaped like its first xla input, and ``backward``
    raises the op's own error when the engine returns."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from xlalab.runtime import backward_errors

    original = FakeTensorMode.__torch_dispatch__

    def dispatch(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        try:
            return original(self, func, types, args, kwargs)
        except Exception as e:
            if torch._C._current_autograd_node() is None:
                raise
            return backward_errors.defer_fake(e, func, args)

    FakeTensorMode.__torch_dispatch__ = dispatch  # type: ignore[method-assign]


def _no_constants_on_xla() -> None:
    """Fake tensors on xla never carry a real value along (a "constant").

    Fake mode keeps the real value of a small tensor made from Python data, and computes ops
    whose operands all have one on those values, below the Python key. On xla that computation
    would reach the device's kernels with no recording to do it (``c * c`` for
    ``c = torch.tensor(1.5, device="xla")`` in a compiled function), so such tensors are plain
    fakes: their ops are traced like any other.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = FakeTensorMode.may_turn_const

    def may_turn_const(self: Any, t: torch.Tensor) -> bool:
        return t.device.type != "xla" and bool(original(self, t))

    FakeTensorMode.may_turn_const = may_turn_const  # type: ignore[method-assign]


def _polyfills() -> None:
    """xlalab functions that user code calls inside a compiled function, traced as their twins
    in ``polyfills`` instead of cut out by a graph break (``xs.mark_sharding``)."""
    from torch._dynamo import substitute_in_graph

    from xlalab.distributed.spmd import xla_sharding

    from . import polyfills

    substitute_in_graph(xla_sharding.mark_sharding, skip_signature_check=True)(polyfills.mark_sharding)


def _capturable_optimizers_on_xla() -> None:
    """Compiled optimizers keep their step counters on xla, as dynamo does on CUDA.

    Dynamo switches a fresh optimizer to ``capturable=True`` when its parameters are on a GPU,
    so the compiled step never copies counters between host and device. The same, for
    parameters on xla: without it every step sends each counter over and back.
    """
    from torch._dynamo.variables.optimizer import OptimizerVariable

    original = OptimizerVariable._set_capturable

    def set_capturable(self: Any, tx: Any) -> None:
        for group in self.value.param_groups:
            params = group.get("params", [])
            fresh = all(p not in self.value.state for p in params)
            if "capturable" in group and params and fresh and all(p.device.type == "xla" for p in params):
                group["capturable"] = True
        original(self, tx)

    OptimizerVariable._set_capturable = set_capturable  # type: ignore[method-assign]


class _WhenDynamoLoads(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_FINDER = _WhenDynamoLoads()


def install_when_dynamo_loads() -> None:
    """Install now if dynamo is loaded, else as soon as it is."""
    if "torch._dynamo" in sys.modules:
        install()
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
