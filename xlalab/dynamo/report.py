"""What compiled mode did, per compiled function: graphs, graph breaks, recompiles.

Dynamo knows why it ended a graph (a graph break, with the user's line) and why it compiled a
function again (the guard that failed); the backend is called at that moment, reads both and
publishes them on the runtime's event bus:

=====================  ===========================================================================
event                  fields
=====================  ===========================================================================
``DynamoGraphEvent``   ``function``, ``graph_index``, ``num_ops``, ``code`` (the FX graph's Python)
``GraphBreakEvent``    ``function``, ``reason`` (dynamo's words), ``advice`` (the fix, where one is
                       known), ``frames`` (the user's line first)
``RecompileEvent``     ``function``, ``guard`` (dynamo's words), ``explanation`` (plain words:
                       "``x.size(0)`` changed 16 → 15"), ``frames`` (the call that recompiled)
``DynamoExecuteEvent`` an ``ExecuteEvent`` for one compiled graph's run, with ``name`` and ``graph``
=====================  ===========================================================================

Each graph also counts ``DynamoExtractCompiledGraph`` in the metrics registry (torch_xla's
counter), and each recompile ``DynamoRecompile``.

``compiled_functions()`` gives the same as data: one ``FunctionReport`` per function, with
its graphs (each with the FX code and the programs compiled for it), breaks and recompiles.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import os
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from xlalab.runtime import events, metrics
from xlalab.runtime.frames import Frame, relabel_locations, user_frames


@dataclass(frozen=True)
class DynamoGraphEvent(events.Event):
    kind: str = field(init=False, default="dynamo_graph")
    function: str = ""
    graph_index: int = 0
    num_ops: int = 0
    code: str = ""


@dataclass(frozen=True)
class GraphBreakEvent(events.Event):
    kind: str = field(init=False, default="graph_break")
    function: str = ""
    reason: str = ""
    advice: str = ""  # what to change, for the breaks a user can remove (``break_advice``)


@dataclass(frozen=True)
class RecompileEvent(events.Event):
    kind: str = field(init=False, default="dynamo_recompile")
    function: str = ""
    guard: str = ""
    explanation: str = ""
    advice: str = ""  # what to change (``guard_advice``)


@dataclass(frozen=True)
class DynamoExecuteEvent(events.ExecuteEvent):
    reason: str = "dynamo"
    name: str = ""
    graph: Any = None


@dataclass
class GraphReport:
    index: int
    fx_code: str
    num_ops: int
    aot_code: dict[str, str] = field(default_factory=dict)  # "forward"/"backward" -> aten FX code
    # Held weakly: a report must not keep a graph's executables alive after dynamo drops them (a
    # session that compiles many functions would otherwise hold every program it ever made, and
    # each holds memory maps of its machine code until the process reaches the kernel's limit).
    _compiled: list[weakref.ref[Any]] = field(default_factory=list, repr=False)
    _programs: list[weakref.ref[Any]] = field(default_factory=list, repr=False)

    @property
    def compiled(self) -> list[Any]:
        """Its CompiledGraphs that dynamo still holds (``hlo()``, variants)."""
        return [c for ref in self._compiled if (c := ref()) is not None]

    @property
    def programs(self) -> list[Any]:
        """The runtime Programs compiled for it that are still alive."""
        return [p for ref in self._programs if (p := ref()) is not None]


@dataclass
class FunctionReport:
    name: str
    file: str
    line: int
    graphs: list[GraphReport] = field(default_factory=list)
    breaks: list[tuple[str, Frame | None]] = field(default_factory=list)
    recompiles: list[tuple[str, str, Frame | None]] = field(default_factory=list)  # guard, words, call
    lazy: list[str] = field(default_factory=list)  # why a graph runs lazily
    # The code object the user wrote (a decorated function's own, not its wrapper's; never a
    # resume function's): what ``%xla_graph f`` finds the report by.
    code: Any = field(default=None, repr=False, compare=False)

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    def is_for(self, code: Any) -> bool:
        """Whether this report is of the function whose code object is ``code``."""
        if self.code is not None:
            return self.code is code
        return (self.file, self.line) == (code.co_filename, code.co_firstlineno)


# The metrics registry's counters (what the lab's panel shows beside XLA's compiles): every graph
# dynamo handed to the backend (torch_xla's name for the same count), and how many of those a
# failed guard caused.
GRAPHS_COUNTER = "DynamoExtractCompiledGraph"
RECOMPILES_COUNTER = "DynamoRecompile"

_FUNCTIONS: dict[tuple[Any, ...], FunctionReport] = {}
_BY_LABEL: dict[str, GraphReport] = {}
_FN_BY_LABEL: dict[str, FunctionReport] = {}

_TORCH_DIR = os.path.dirname(torch.__file__)
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_RESUME_NAME = re.compile(r"\btorch_dynamo_resume_in_(\w+?)_at_\d+\b")


def compiled_functions() -> list[FunctionReport]:
    """Every function compiled so far, in the order dynamo first compiled them."""
    return list(_FUNCTIONS.values())


def summary() -> str:
    """Every compiled function in a few lines: graphs, breaks (with lines), recompiles (in words)."""
    lines: list[str] = []
    for rep in _FUNCTIONS.values():
        graphs = f"{rep.num_graphs} graph{'s' if rep.num_graphs != 1 else ''}"
        lines.append(f"{rep.name} ({os.path.basename(rep.file)}:{rep.line}): {graphs}")
        for reason, where in rep.breaks:
            at = f"{os.path.basename(where.file)}:{where.line}" if where else "?"
            lines.append(f"  graph break at {at}: {reason}")
            advice = break_advice(reason)
            if advice:
                lines.append(f"    {advice}")
        for guard, words, call in rep.recompiles:
            at = f", at {os.path.basename(call.file)}:{call.line}" if call else ""
            lines.append(f"  recompiled: {relabel_locations(words, _base_name)}{at}")
            lines.append(f"    {guard_advice(guard)}")
        for why in rep.lazy:
            lines.append(f"  runs lazily: {why}")
    return "\n".join(lines)


def _base_name(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}"


def reset() -> None:
    """Forget every report (``xlalab.dynamo.reset()`` also resets dynamo's caches)."""
    _FUNCTIONS.clear()
    _BY_LABEL.clear()
    _FN_BY_LABEL.clear()


def _current_code() -> tuple[Any, Any]:
    """The code object dynamo is compiling (for a compiled module, its ``forward``), and the
    function a decorator's wrapper wraps when that code is such a wrapper (else None)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        code = tx.f_code
        if code.co_filename.startswith(_TORCH_DIR):
            # torch.compile(module) traces torch's wrapper around the module's call
            fn = tx.f_locals.get("fn")
            forward = getattr(type(fn), "forward", None) if isinstance(fn, torch.nn.Module) else fn
            return getattr(forward, "__code__", code), forward if hasattr(forward, "__wrapped__") else None
        return code, _wrapped_by(original_code(code), getattr(tx, "closure", None))
    except Exception:  # outside dynamo (a graph handed to the backend by hand)
        return None, None


def original_code(code: Any) -> Any:
    """The code object of the function a resume function continues (dynamo compiles the part of
    a function after a graph break as ``torch_dynamo_resume_in_<name>_at_<line>``), or ``code``."""
    try:
        from torch._dynamo.resume_execution import ContinueExecutionCache
    except ImportError:
        return code
    seen = 0
    while (meta := ContinueExecutionCache.generated_code_metadata.get(code)) is not None and seen < 8:
        code, seen = meta.code, seen + 1
    return code


def _wrapped_by(code: Any, closure: tuple[Any, ...] | None) -> Any:
    """The function that a decorator's wrapper running ``code`` over ``closure`` was made for
    (``functools.wraps`` leaves it as ``__wrapped__``), or None.

    A decorated method (``can_return_tuple`` on every Hugging Face ``forward``) runs the
    decorator's ``wrapper``, whose code all the methods it decorates share: the function
    object with these very closure cells tells which one this is, and its ``__qualname__``
    (``GPT2LMHeadModel.forward``) is what the user knows it as.
    """
    if not closure or "<locals>" not in getattr(code, "co_qualname", ""):
        return None
    import gc
    import types

    for fn in gc.get_referrers(code):
        if (
            isinstance(fn, types.FunctionType)
            and fn.__code__ is code
            and fn.__closure__ is not None
            and len(fn.__closure__) == len(closure)
            and all(a is b for a, b in zip(fn.__closure__, closure))
        ):
            return fn if hasattr(fn, "__wrapped__") else None
    return None


def _recompile_reason() -> str | None:
    try:
        from torch._dynamo.utils import get_metrics_context

        reason = get_metrics_context()._metrics.get("recompile_reason")
    except Exception:
        return None
    return reason if isinstance(reason, str) else None


def _function(code: Any, wrapper: Any = None) -> FunctionReport:
    """The report of the function running ``code``: the part of a function after a graph break
    (a resume function) belongs to that function."""
    if code is None:
        key: tuple[Any, ...] = ("<graph>", 0, "<fx graph>")
        return _report(key, key, None)
    orig = original_code(code)
    resume = _RESUME.match(code.co_name)
    if resume and (orig is code or wrapper is None):
        found = _resumed_report(code, orig, resume.group(1))
        if found is not None:
            return found
    name = resume.group(1) if resume and orig is code else getattr(orig, "co_qualname", orig.co_name)
    key = shown = (orig.co_filename, orig.co_firstlineno, name)
    if wrapper is None:
        return _report(key, shown, orig)
    # a decorator's wrapper: named as the function it wraps
    own = getattr(inspect.unwrap(wrapper), "__code__", orig)
    shown = (own.co_filename, own.co_firstlineno, wrapper.__qualname__)
    return _report((*key, shown), shown, own)


def _report(key: tuple[Any, ...], shown: tuple[Any, ...], code: Any) -> FunctionReport:
    found = _FUNCTIONS.get(key)
    if found is None:
        found = _FUNCTIONS[key] = FunctionReport(shown[2], shown[0], shown[1], code=code)
    return found


def _resumed_report(code: Any, orig: Any, name: str) -> FunctionReport | None:
    """The report that a resume function's part belongs to: the first one of its original code
    object (a decorator's wrapper that dynamo did not tell apart shares it), or, where dynamo
    did not say which code it resumes, the first of that name in its file."""
    if orig is not code:
        own = (orig.co_filename, orig.co_firstlineno, getattr(orig, "co_qualname", orig.co_name))
        return next((rep for at, rep in _keyed_reports() if at == own), None)
    for (file, _line, fname), rep in _keyed_reports():
        if file == code.co_filename and (fname == name or fname.endswith("." + name)):
            return rep
    return None


def _keyed_reports() -> list[tuple[tuple[str, int, str], FunctionReport]]:
    return [((k[0], k[1], k[2]), rep) for k, rep in _FUNCTIONS.items()]


def note_dynamo_graph(gm: Any) -> str:
    """Record a graph dynamo captured (with its break and recompile reasons); its label."""
    code, wrapper = _current_code()
    rep = _function(code, wrapper)
    index = len(rep.graphs)
    ops = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    graph = GraphReport(index, gm.code, ops)
    rep.graphs.append(graph)
    metrics.count(GRAPHS_COUNTER)
    label = f"{rep.name} (graph {index})"
    _BY_LABEL[label] = graph
    _FN_BY_LABEL[label] = rep
    listening = events.listening()
    if listening:
        events.publish(DynamoGraphEvent(function=rep.name, graph_index=index, num_ops=ops, code=gm.code))
    cause = getattr(gm, "compile_subgraph_reason", None)
    if cause is not None and getattr(cause, "graph_break", False):
        stack = list(getattr(cause, "user_stack", []) or [])
        # The user's line: the innermost frame outside torch (a break inside torch.optim's step
        # is at the user's ``opt.step()``).
        mine = [s for s in stack if not s.filename.startswith(_TORCH_DIR)] or stack
        where = Frame(mine[-1].filename, mine[-1].lineno or 0, mine[-1].name) if mine else None
        reason = break_reason(str(cause.reason))
        rep.breaks.append((reason, where))
        if listening:
            # Innermost first and the user's own, as every event's frames (a break inside
            # torch.optim's step is at the user's ``opt.step()``).
            frames = tuple(Frame(s.filename, s.lineno or 0, s.name) for s in reversed(stack))
            frames = tuple(f for f in frames if not f.file.startswith(_TORCH_DIR)) or frames
            # then the call that ran the compiled function (the user's frames on the stack now)
            frames += tuple(f for f in user_frames() if f not in frames)
            advice = break_advice(reason)
            events.publish(GraphBreakEvent(function=rep.name, reason=reason, advice=advice, frames=frames))
    guard = _recompile_reason() if index == 0 or code is not None else None
    if guard is not None and code is not None:
        words = explain_guard(guard, _guard_names(rep, code, wrapper))
        call = user_frames()
        resume = _RESUME.match(code.co_name)
        if resume:  # the call is past the function's own frame, which runs the part after its break
            own = (code.co_filename, resume.group(1))
            call = tuple(itertools.dropwhile(lambda f: (f.file, f.function) == own, call))
        where = call[0] if call else None
        if resume and _same_change(rep, words, where):
            return label  # the function's own frame recompiled for this change already
        rep.recompiles.append((guard, words, where))
        metrics.count(RECOMPILES_COUNTER)
        if listening:
            events.publish(
                RecompileEvent(
                    function=rep.name, guard=guard, explanation=words, advice=guard_advice(guard), frames=call
                )
            )
    return label


def _same_change(rep: FunctionReport, words: str, where: Frame | None) -> bool:
    """Whether the part of a function after a graph break recompiles for the change that made
    the function's own frame recompile, at the same call (``x.size(0)`` changed 6 → 5 there,
    the value computed from ``x`` changed 6 → 5 here). A part that recompiles alone (the
    function's frame only ran ``opt.zero_grad()`` before its break) is reported."""
    if not rep.recompiles:
        return False
    _, last_words, last_where = rep.recompiles[-1]
    return last_where == where and last_words.rpartition(" changed ")[2] == words.rpartition(" changed ")[2]


def note_aot_graph(label: str, part: str, gm: Any, compiled: Any) -> None:
    graph = _BY_LABEL.get(label)
    if graph is not None:
        graph.aot_code[part] = gm.code
        graph._compiled.append(weakref.ref(compiled))


def note_program(name: str, ir_graph: Any, program: Any) -> None:
    label = name.rsplit(", ", 1)[0]
    graph = _BY_LABEL.get(label)
    if graph is not None:
        graph._programs.append(weakref.ref(program))


def note_lazy(name: str, why: str) -> None:
    rep = _FN_BY_LABEL.get(name.rsplit(", ", 1)[0])
    if rep is not None:
        rep.lazy.append(why)


def break_reason(text: str) -> str:
    """Dynamo's reason for a graph break as sentences: what it could not trace, its explanation
    and its hints (without the developer context and the link that follow them)."""
    sentences: list[str] = []
    for raw in text.strip().splitlines():
        line = raw.strip()
        if line.startswith(("Developer debug context", "For more details")):
            break
        if line.startswith("Explanation:"):
            line = line[len("Explanation:") :].strip()
        if line:
            sentences.append(line if line.endswith((".", "!", "?", ":")) else line + ".")
    said = " ".join(sentences[:4]) if sentences else text
    if said.startswith("generic_jump TensorVariable"):  # dynamo's only words for `if tensor:`
        said = f"a Python if/while on a tensor's value (dynamo: {said.rstrip('.')})."
    return said


def guard_text(guard: str) -> str:
    """A failed guard's first line as dynamo wrote it, without its column padding, its comment
    naming the function the user wrote rather than dynamo's resume function."""
    first = guard.strip().splitlines()[0] if guard.strip() else guard
    first = re.sub(r"\s{2,}#", "  #", first)
    return _RESUME_NAME.sub(lambda m: m[1], first)


# ----------------------------------------------------------------------------- breaks: what to change

_BRANCH_ADVICE = (
    "a Python if/while on a tensor's value ends the graph: keep both branches in the graph "
    "(torch.where, or torch.cond for branches of different ops); a branch on a random draw "
    "(layer drop: `torch.rand([]) < p`) also makes a graph per outcome, so turn it off"
)
# Dynamo's words for a break (a fragment of its reason) -> what the user can change. Breaks that
# torch makes on purpose say so, so that nobody hunts for a fix that does not exist.
_BREAK_ADVICE = (
    (
        "consumes grad_fns that are needed by tensors returned",
        "a tensor still alive after the graph holds the loss's autograd graph (the loss itself, "
        "returned or kept for later): take `value = loss.detach()` before `loss.backward()` and "
        "keep that, so forward and backward compile as one graph",
    ),
    (
        "Unsupported Tensor.backward() call",
        "backward() runs between graphs, as dynamo does by default (the backward graph AOTAutograd "
        "made runs as one program). Dynamo's experimental torch._dynamo.config.trace_autograd_ops "
        "= True traces it into the graph instead, forward and backward one program, where the "
        "step keeps `loss.detach()` rather than the loss itself; in torch 2.13 that tracing skips "
        "hooks registered on parameters (p.register_hook): check the gradients if you turn it on",
    ),
    (
        "backward() of a loss made outside the graph",
        "the loss was made before this graph began (a graph break in the forward, which recurrent "
        "layers make), so autograd's engine runs its backward(): trace_autograd_ops can only trace "
        "a backward whose forward is in the same graph",
    ),
    (
        "Optimizer.zero_grad",
        "torch never traces zero_grad(); it runs in Python before the graph and only resets "
        "`.grad`, so this break costs little",
    ),
    (
        "User-inserted graph break",
        "a torch.optim step is always a graph of its own (torch's optimizers break the graph "
        "around step() on purpose); if the break is your own torch._dynamo.graph_break(), "
        "remove it",
    ),
    (
        "Tensor.item",
        "a value read inside the compiled function ends the graph: keep it as a tensor "
        "(torch.where instead of if), or read it after the compiled call",
    ),
    ("Data-dependent branching", _BRANCH_ADVICE),
    ("generic_jump TensorVariable", _BRANCH_ADVICE),  # dynamo's words for `if tensor:` in user code
    (
        "setattr() on Tensor.requires_grad",
        "setting requires_grad inside the compiled function ends the graph: set it before the "
        "call (Hugging Face's wav2vec2 feature encoder does this in training; "
        "model.freeze_feature_encoder() skips it when those weights need not train)",
    ),
    (
        "Pending mutations on a parameter",
        "the optimizer needs the `.grad` values the graph set: torch.optim steps start a graph of their own",
    ),
)


def break_advice(reason: str) -> str:
    """What to change for a graph break of this kind ("" when there is no known fix)."""
    for fragment, advice in _BREAK_ADVICE:
        if fragment in reason:
            return advice
    return ""


# ----------------------------------------------------------------------------- guards in plain words

_SIZE = re.compile(
    r"tensor '(?P<name>.+)' size mismatch at index (?P<i>\d+)\. expected (?P<a>\d+), actual (?P<b>\d+)"
)
_STRIDE = re.compile(
    r"tensor '(?P<name>.+)' stride mismatch at index (?P<i>\d+)\. expected (?P<a>\d+), actual (?P<b>\d+)"
)
_DTYPE = re.compile(r"tensor '(?P<name>.+)' dtype mismatch\. expected (?P<a>\w+), actual (?P<b>\w+)")
_GRAD = re.compile(r"tensor '(?P<name>.+)' requires_grad mismatch\. expected requires_grad=(?P<a>\d)")
_RANK = re.compile(r"tensor '(?P<name>.+)' rank mismatch\. expected (?P<a>\d+), actual (?P<b>\d+)")
_EQ = re.compile(r"^(?P<name>.+?) == (?P<a>[^\s]+)\s*(#.*)?$")
_LR = re.compile(r"param_groups\[\d+\]\['(lr|initial_lr)'\] == ")  # an optimizer's float rate
_TYPE = re.compile(
    r"expected type of '(?P<name>.+)' to be a tensor type, ' but found <class '(?P<found>[\w.]+)'>"
)
_GLOBAL = re.compile(r"GLOBAL_STATE changed: (?P<what>[\w(),. ]+?)\s*$")
# `x is None` / `x is not None`, and a value's truth (`not x`, `x`), with dynamo's trailing comment.
_NONE = re.compile(r"^(?P<name>[^\s#]+) is (?P<not>not )?None\s*(#.*)?$")
_TRUTH = re.compile(r"^(?P<not>not )?(?P<name>[A-Za-z_][\w.\[\]']*)\s*(#.*)?$")
# A global-state entry -> what the user did to change it.
_GLOBAL_WORDS = {
    "grad_mode": "grad mode changed (a call under torch.no_grad() or set_grad_enabled, where the "
    "graph was compiled with the other mode): one graph per grad mode",
    "deterministic_algorithms": "torch.use_deterministic_algorithms was switched",
    "torch_function_enabled": "torch function mode was switched",
}
_SOURCE = re.compile(r"L\['([^']+)'\]|G\['([^']+)'\]")


def _pretty(source: str, rename: Callable[[str], str] | None = None) -> str:
    """``L['x']`` -> ``x``; ``L['self']._modules['fc']`` -> ``self.fc``; ``___stack0.h`` (a value
    dynamo carried across a graph break) -> ``h``."""
    text = _SOURCE.sub(lambda m: m.group(1) or m.group(2), source)
    text = re.sub(r"\._(?:modules|parameters|buffers)\['([^']+)'\]", r".\1", text)
    text = re.sub(r"\['([^']+)'\]", r".\1", text)
    text = re.sub(r"^___stack\d+\.", "", text)
    return rename(text) if rename is not None else text


def _wrapper_arguments(code: Any, wrapped: Any) -> Callable[[str], str]:
    """A decorator's wrapper receives the call as ``*args, **kwargs``: name its arguments as
    the wrapped function's parameters (``kwargs.input_ids`` -> ``input_ids``, ``args[0]`` -> the
    first parameter after the wrapper's own)."""
    names, flags = code.co_varnames, code.co_flags
    n = code.co_argcount + code.co_kwonlyargcount
    varargs = names[n] if flags & inspect.CO_VARARGS else None
    varkw = names[n + (varargs is not None)] if flags & inspect.CO_VARKEYWORDS else None
    try:
        params = list(inspect.signature(inspect.unwrap(wrapped)).parameters)
    except (TypeError, ValueError):
        params = []

    def rename(text: str) -> str:
        if varkw is not None and text.startswith(varkw + "."):
            return text[len(varkw) + 1 :]
        m = re.match(rf"{varargs}\[(\d+)\]", text) if varargs is not None else None
        if m is not None and code.co_argcount + int(m[1]) < len(params):
            return params[code.co_argcount + int(m[1])] + text[m.end() :]
        return text

    return rename


def _guard_names(rep: FunctionReport, code: Any, wrapper: Any) -> Callable[[str], str] | None:
    """How a guard of ``code`` names what it checks as the user knows it: a decorator's
    arguments by the wrapped function's parameters, the values a resume function got from the
    graph break before it by where they came from."""
    arguments = _wrapper_arguments(original_code(code), wrapper) if wrapper is not None else None
    carried = _carried_values(rep, code)
    if carried is None:
        return arguments
    if arguments is None:
        return carried
    return lambda text: carried(arguments(text))


def _carried_values(rep: FunctionReport, code: Any) -> Callable[[str], str] | None:
    """A resume function gets the stack of the frame it continues as ``___stack0``, ...; the
    last of them is the value of the call that broke the graph (``.item()``'s number)."""
    m = _RESUME.match(code.co_name)
    if m is None:
        return None
    line = int(m[2])
    reason, where = next(
        (
            (r, w)
            for r, w in reversed(rep.breaks)
            if w is not None and (w.file, w.line) == (code.co_filename, line)
        ),
        ("", Frame(code.co_filename, line, m[1])),
    )
    stack = [int(n[len("___stack") :]) for n in code.co_varnames if re.fullmatch(r"___stack\d+", n)]
    top = f"___stack{max(stack)}" if stack else None
    source = linecache.getline(where.file, where.line)
    read = "Tensor.item" in reason or ".item()" in source
    into = re.match(r"\s*(\w+)\s*=[^=].*\.item\(\)\s*(#.*)?$", source)
    at = (f" into `{into[1]}`" if into else "") + f" at {where.file}:{where.line}"

    def rename(text: str) -> str:
        if not re.fullmatch(r"___stack\d+", text):
            return text
        if text == top and read:
            return f"the value read by `.item()`{at}"
        return f"a value carried across the graph break at {where.file}:{where.line}"

    return rename


def _shown(source: str, rename: Callable[[str], str] | None, part: str = "") -> str:
    """``source`` (a guard's ``L['x']``) as the message says it: ```x.size(0)``` for a name,
    ```.size(0)`` of the value read by ...`` for a value the rename describes in words."""
    name = _pretty(source, rename)
    if " " not in name:
        return f"`{name}{part}`"
    return f"`{part.lstrip('.')}` of {name}" if part else name


def explain_guard(guard: str, rename: Callable[[str], str] | None = None) -> str:
    """Dynamo's failed guard in plain words (the raw text when it is not a known kind);
    ``rename`` maps a source (``x``, ``kwargs.input_ids``) to the name the user knows."""
    first = guard.strip().splitlines()[0] if guard.strip() else guard
    first = re.sub(r"^\d+/\d+: ", "", first)
    m = _SIZE.search(first)
    if m:
        return f"{_shown(m['name'], rename, '.size(' + m['i'] + ')')} changed {m['a']} → {m['b']}"
    m = _STRIDE.search(first)
    if m:
        return f"{_shown(m['name'], rename, '.stride(' + m['i'] + ')')} changed {m['a']} → {m['b']}"
    m = _DTYPE.search(first)
    if m:
        return f"{_shown(m['name'], rename, '.dtype')} changed {m['a']} → {m['b']}"
    m = _RANK.search(first)
    if m:
        return f"{_shown(m['name'], rename, '.dim()')} changed {m['a']} → {m['b']}"
    m = _GRAD.search(first)
    if m:
        was = "True" if m["a"] == "1" else "False"
        now = "False" if was == "True" else "True"
        return f"{_shown(m['name'], rename, '.requires_grad')} changed {was} → {now}"
    m = _EQ.match(first)
    if m:
        return f"{_shown(m['name'], rename)} is no longer {m['a']} (a Python value baked into the graph)"
    m = _TYPE.search(first)
    if m:
        now = f"{_shown(m['name'], rename)} is now {_kind_of(m['found'])}"
        if m["found"].startswith(("torch.", "xlalab.")):
            return f"{now}: the graph was compiled for a tensor of another device or type"
        return f"{now} where the graph was compiled for a tensor"
    m = _GLOBAL.search(first)
    if m:
        parts = [p.strip() for p in m["what"].split(",") if p.strip()]
        return "; ".join(_global_words(p) for p in parts)
    m = _NONE.match(first)
    if m:
        name = _pretty(m["name"], rename)
        if m["not"]:
            return f"`{name}` is now None where the graph was compiled for a value"
        if name.endswith(".grad"):
            return f"`{name}` is now a tensor where the graph was compiled for None (no gradient)"
        return f"`{name}` is no longer None"
    m = _TRUTH.match(first)
    if m:
        was = "false or empty" if m["not"] else "true"
        shown = _shown(m["name"], rename)
        carried = " (a value carried across a graph break)" if m["name"].startswith("___stack") else ""
        carried = carried if shown.startswith("`") else ""
        return f"{shown}{carried} is no longer {was}: the code branched on it"
    return _pretty(first, rename)


# What to change, per kind of failed guard. XLA compiles a program per shape, so a dynamic size
# (dynamo's automatic dynamic shapes, or mark_dynamic) spares dynamo's retrace but not XLA's compile.
_SIZE_ADVICE = (
    "XLA compiles one program per shape, so every new size compiles again (dynamic shapes, "
    "dynamo's own after a second size or torch._dynamo.mark_dynamic, spare dynamo's retrace "
    "but not XLA's compile): pad to a few fixed sizes (drop_last=True, bucketed lengths)"
)
_GUARD_ADVICE = (
    (_SIZE, _SIZE_ADVICE),
    (_RANK, "pass tensors of one rank on every call"),
    (_STRIDE, "the argument's layout changed (a transposed or sliced view): pass the same layout "
     "on every call, e.g. x.contiguous()"),
    (_DTYPE, "pass tensors of one dtype on every call (cast before the call)"),
    (_GRAD, "each requires_grad setting has a graph of its own: this compiles once per setting"),
    (_TYPE, "move every tensor argument to the xla device before the call: a CPU tensor where an "
     "xla one was (or a number where a tensor was) is a graph of its own"),
    (_GLOBAL, "each grad mode or autocast setting has a graph of its own: this compiles once per "
     "setting, not on every call"),
    (_LR, "the optimizer's learning rate is a Python number, a constant of the compiled step, and "
     "a scheduler changes it: give the optimizer a tensor (torch.optim.AdamW(params, "
     "lr=torch.tensor(1e-3))); the rate is then an input, which schedulers update in place"),
    (_EQ, "a Python value is a constant of the graph, so each new value compiles again: if it "
     "changes from call to call, pass it as a tensor on the device (its value is then an input)"),
    (re.compile(r"\.grad is (not )?None"), "a parameter got a gradient in one step and none in "
     "another (a layer that runs in some steps only, such as layer drop, or a branch): run every "
     "layer on every step; zero_grad(set_to_none=False) keeps each .grad a tensor (then a parameter "
     "without a gradient steps with zeros, which momentum and weight decay still move)"),
    (_NONE, "a value that is None on some calls and not on others is a graph of each kind: pass "
     "the same kind of value on every call"),
    (_TRUTH, "each outcome of a Python branch on this value is a graph of its own: keep the value "
     "fixed from call to call"),
)  # fmt: skip


def guard_advice(guard: str) -> str:
    """What to change so that this guard stops failing."""
    first = guard.strip().splitlines()[0] if guard.strip() else guard
    first = re.sub(r"^\d+/\d+: ", "", first)
    for pattern, advice in _GUARD_ADVICE:
        if pattern.search(first):
            return advice
    return "keep the value this guard checks fixed from call to call"


def _kind_of(cls: str) -> str:
    """What a guard's class name means to a user: xla tensors are xlalab's ``XlaTensor``."""
    if cls.endswith(".XlaTensor"):
        return "an xla tensor"
    if cls == "torch.Tensor":
        return "a CPU tensor"
    return f"a {cls.rsplit('.', 1)[-1]}"


def _global_words(what: str) -> str:
    known = _GLOBAL_WORDS.get(what)
    if known is not None:
        return known
    m = re.fullmatch(r"autocast\((?P<dev>\w+)\)_(?P<field>\w+)", what)
    if m:
        return f"autocast on {m['dev']} changed ({m['field'].replace('_', ' ')}) since the graph was compiled"
    return f"torch's global state `{what}` changed since the graph was compiled"
