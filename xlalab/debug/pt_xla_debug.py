"""PT_XLA_DEBUG: explain every compilation and execution, and analyse the run at exit.

Settings (``xlalab.runtime.config``; environment at start, ``config.set`` at run time):

``PT_XLA_DEBUG``
    Turns everything on: the analysis blocks below, the ``pt-xla-profiler:`` lines at step
    ends (at barriers that run something: an empty mark_step publishes no event), and the
    summary at exit (also available as :func:`report`).
``PT_XLA_DEBUG_LEVEL``
    ``1``: a *Compilation Analysis* block (cause, graph info, Python frames) and a
    *Post Compilation Analysis* block (sizes) for every new compilation. ``2`` (the default):
    also an *Execution Analysis* block for every execution, cached or not. ``0``: no blocks,
    only the analysis. As with torch_xla 2.9, setting the level explicitly without
    ``PT_XLA_DEBUG`` prints the blocks but neither step-end lines nor the exit summary.
``PT_XLA_DEBUG_FILE``
    Append everything to this file instead of stderr.
``PT_XLA_DEBUG_MAX_FRAME``
    How many Python frames each block shows (the runtime records at most 8 per event).

Compiled mode (``torch.compile(backend="xlalab")``) gets torch_xla's causes for it: a graph
compiled for dynamo prints its Compilation block with "dynamo is compiling a FX graph to HLO"
when it is compiled, and each run of a compiled program an Execution block with "dynamo is
executing a compiled program" (level 2).

The block layout is torch_xla 2.9's, line for line, so parsers written for it read ours.
The causes come from the runtime's sync reason, which is exact, so where torch_xla
guesses ("most likely ...") an ``xlalab:`` line under the cause says what really happened.

The analysis at exit names a source line in every finding (``file:line (function): kind: ...``):

- **recompilation**: after ``WARMUP_STEPS`` steps, a step barrier that compiles more often
  than every other step; the finding says what changed in the graph (an input's shape and
  the line that sent it to the device, an op's output shape, the ops themselves, or a
  baked-in Python int) - with ``XLA_IR_DEBUG=1`` also the line that created the changed op;
- **transfer**: a line that copies device values to the host (``.item()``, ``print``,
  ``.tolist()``, ``.cpu()``...) in at least half of the steps (and ``TRANSFER_MIN_STEPS``);
- **slow compile** / **slow execution**: above ``SLOW_COMPILE_SECONDS`` /
  ``SLOW_EXECUTE_SECONDS`` (execution time is dispatch time unless ``XLA_SYNC_WAIT=1``);
- compiled mode's **recompilation** (dynamo's failed guard, in plain words, at the call) and
  **graph break** (dynamo's reason, at the line it could not trace);
- **not lowered**: ops that ran on the CPU (``FallbackEvent``), other than
  ``aten::_local_scalar_dense`` (the ``.item()`` read, reported as a transfer).

The debugger only listens to :mod:`xlalab.runtime.events`. It never touches a tensor, so it
can never cause a compilation or a transfer of its own, and while it is off nothing
subscribes: the runtime's hot path does not pay for it.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from xlalab.runtime import config, debug_files, events, metrics
from xlalab.runtime.frames import Frame

from . import analysis_errors, barriers
from .graph_diff import NodeSig, first_change, node_bytes, signature, type_bytes

__all__ = [
    "SLOW_COMPILE_SECONDS",
    "SLOW_EXECUTE_SECONDS",
    "TRANSFER_MIN_STEPS",
    "WARMUP_STEPS",
    "enabled",
    "install",
    "report",
    "reset",
]

# --------------------------------------------------------------------------- thresholds
# Module attributes, so a notebook (or a test) can tune them: ``pt_xla_debug.WARMUP_STEPS = 5``.

#: Steps whose compilations are expected (the first graphs, the optimizer's state appearing).
WARMUP_STEPS = 2
#: A compilation this slow is worth a finding: on CPU and GPU small models compile in well
#: under a second, so ten seconds means a very large graph (an unrolled loop, a huge step).
SLOW_COMPILE_SECONDS = 10.0
#: Execution is timed at dispatch (XLA runs asynchronously), which takes microseconds to
#: milliseconds; a second means the host waited on the device or transferred a lot.
SLOW_EXECUTE_SECONDS = 1.0
#: A line must read device values in at least this many steps before it is called frequent.
TRANSFER_MIN_STEPS = 2

_RULE = "=" * 80
_DASH = "-" * 80
_PROFILER = "pt-xla-profiler"
_ITEM_OP = "aten::_local_scalar_dense"

# What the runtime's sync reasons mean, said exactly (torch_xla can only guess "most likely").
_ACCESS = {
    "item": "a Python number was read from a pending tensor (.item(), float(), int(), bool(), if tensor)",
    "tolist": "the value was read with .tolist()",
    "numpy": "the value was read with .numpy()",
    "cpu": "the value was copied to the CPU (.cpu(), .to('cpu'))",
    "print": "user code trying to access tensor value with print (print/repr/str of a pending tensor)",
    "copy": "copy_ between a pending xla tensor and another device",
    "to": "the value was moved to another xla device (.to())",
}
# Syncs compiled mode makes on its own, not a read in the user's code.
_RUNTIME_SYNCS = {
    "dynamo_input": "dynamo is executing a compiled program whose input is still pending lazy work "
    "(ops run outside the compiled function, such as the gradient backward() starts from): that "
    "work runs first",
    "dynamo_output": "dynamo is executing a compiled program that returns a CPU tensor: its value "
    "is copied to the CPU",
}
_ACCESS_SHORT = {
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "cpu": ".cpu()",
    "print": "print",
    "copy": "copy_",
    "to": ".to()",
    "fallback": "CPU fallback",
}

# Ops whose output shape depends on the data: besides running on the CPU, they change the
# shapes of everything computed from them, which is a classic source of recompilation.
# Compiled mode (xlalab.dynamo): the compile reason its backend gives the runtime, and the reason
# its execute events carry (read by name: the debugger does not import the dynamo package).
_DYNAMO_COMPILE = "dynamo_compile"
_DYNAMO_EXECUTE = "dynamo"
_GRAPH_BREAK = "graph_break"
_DYNAMO_RECOMPILE = "dynamo_recompile"

_DYNAMIC_SHAPE_OPS = {"aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2"}


# --------------------------------------------------------------------------- formatting helpers



def _frame_str(f: Frame) -> str:
    return f"{f.function} ({f.file}:{f.line})"


def _where(f: Frame | None) -> str:
    """A finding's location, compiler style, so editors and terminals can jump to it."""
    return "<unknown>" if f is None else f"{f.file}:{f.line} ({f.function})"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:.6f} GB"


def _barrier_name() -> str:
    """Say the barrier the way the user's script says it: torch_xla 2.9 calls it
    ``torch_xla.sync``; a script written against xlalab (or older torch_xla) says mark_step."""
    return "torch_xla.sync" if "torch_xla" in sys.modules else "mark_step"


# --------------------------------------------------------------------------- graph facts


@dataclass(frozen=True)
class _GraphInfo:
    """What the blocks show about a graph; computed once so no Graph (and so no device array)
    outlives the event that carried it."""

    hash: int
    inputs: int
    outputs: int
    nodes: int


def _graph_info(graph: Any, graph_hash: int, num_tensors: int) -> _GraphInfo:
    if graph is None:
        return _GraphInfo(graph_hash, 0, num_tensors, 0)
    leaves = sum(1 for n in graph.nodes if n.is_leaf)  # device data and scalar inputs
    return _GraphInfo(graph_hash, leaves, len(graph.roots), len(graph.nodes))


def _computation_hash(graph: Any, graph_hash: int) -> str:
    """A 128-bit fingerprint of the compiled computation (torch_xla prints its HLO's hash)."""
    text = repr(graph.key) if graph is not None else str(graph_hash)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _memory(graph: Any) -> tuple[int, int, int, int, int]:
    """(input, output, aliased input, intermediate, program) bytes of a compiled graph.

    XLA's own numbers when the compiled program can be found in the runtime's cache (read
    only: nothing is compiled or run), otherwise an estimate from the nodes' shapes.
    """
    try:
        from xlalab.runtime import graph as graph_mod

        settings = getattr(graph_mod, "_trace_settings", None)
        prog = graph_mod.CACHE.get((graph.key, settings())) if settings is not None else None
        stats = prog.executable.memory_analysis() if prog is not None else None
        if stats is not None:
            return (
                int(stats.argument_size_in_bytes),
                int(stats.output_size_in_bytes),
                int(stats.alias_size_in_bytes),
                int(stats.temp_size_in_bytes),
                int(stats.generated_code_size_in_bytes),
            )
    except Exception:  # a debugger must never break the program it watches
        pass
    roots = set(graph.roots)
    inp = out = mid = 0
    for i, n in enumerate(graph.nodes):
        size = node_bytes(n)
        if n.is_leaf:
            inp += size
        elif i in roots:
            out += size
        else:
            mid += size
    return inp, out, 0, mid, 0


def _describe_change(
    old: tuple[NodeSig, ...],
    new: tuple[NodeSig, ...],
    uploads: Sequence[tuple[int, Frame]],
    dynamic: dict[Frame | None, str] | None = None,
) -> tuple[str, str]:
    """The first thing that differs between two graphs compiled at one sync site, as (what, example):
    ``what`` is the same every time the same thing changes, so repeated changes group together."""
    hint = " (set XLA_IR_DEBUG=1 to name the line that created it)"
    dynamic = dynamic or {}
    c = first_change(old, new)
    at = f" created at {_where(c.made)}" if c.made is not None else hint
    if c.kind == "input_shape":
        where = ""
        for nbytes, frame in reversed(uploads):
            if nbytes == type_bytes(c.new):
                where = f", sent to the device at {_where(frame)}"
                if frame in dynamic:
                    where += f" by {dynamic[frame]}, whose output shape depends on the data"
                break
        return f"an input's shape{where}", f"{c.old} -> {c.new}"
    if c.kind == "ops":
        return f"the ops: {c.old} became {c.new}{at}", f"{len(old)} -> {len(new)} nodes"
    if c.kind == "output_shape":
        return f"the output of {c.op}{at}", f"{c.old} -> {c.new}"
    if c.kind == "baked_value" and c.arg:
        return (
            f"an integer baked into the graph: {c.op} {c.arg}{at} (keep it constant, or pass it as a tensor)",
            f"{c.old} -> {c.new}",
        )
    if c.kind == "baked_value":
        return (
            f"the static arguments of {c.op}{at}: a Python int/bool that changes every step is baked "
            "into the graph (pass it as a tensor)",
            c.new,
        )
    if c.kind == "outputs":
        return (
            f"the live outputs: a tensor of the step is kept alive (the first: {c.op}{at}), so the graph "
            "returns it",
            f"{c.old} -> {c.new}",
        )
    if c.kind == "size":
        return "the number of ops (the graph grew or shrank)", f"{len(old)} -> {len(new)} nodes"
    return "nothing in the graph: the compile settings changed (matmul precision, XLA_HLO_DEBUG)", ""


# --------------------------------------------------------------------------- state


@dataclass
class _Pending:
    """One execute() being explained: its compile/execute events wait for the sync event that
    says why it ran (the runtime publishes compile, execute, then sync)."""

    compile: events.CompileEvent | None = None
    execute: events.ExecuteEvent | None = None


@dataclass
class _Stats:
    base_marks: int = 0  # _marks() when the records were reset
    extra_steps: int = 0  # barriers the MarkStep counter did not see
    close_marks: int = -1  # _marks() at the last barrier that closed a step
    last_barrier: tuple[Frame, ...] | None = None  # to merge one barrier's per-device syncs
    barrier_devices: set[Any] = field(default_factory=set)
    compiles: int = 0
    cached: int = 0
    executions: int = 0
    compile_seconds: float = 0.0
    # per sync site (innermost frame): steps of uncached compiles, and what changed each time
    compile_steps: dict[Frame | None, list[int]] = field(default_factory=lambda: defaultdict(list))
    last_sig: dict[Frame | None, tuple[NodeSig, ...]] = field(default_factory=dict)
    # per sync site: what changed between consecutive compilations -> the examples seen
    changes: dict[Frame | None, dict[str, list[tuple[int, str]]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    step_compiles: int = 0  # uncached compiles in the open step
    # host-to-device uploads in the open step: (bytes, frame), to say where a changed input came from
    uploads: list[tuple[int, Frame]] = field(default_factory=list)
    upload_step: int = -1
    # device-to-host transfers per line: total count and the steps they happened in
    transfers: Counter[Frame | None] = field(default_factory=Counter)
    transfer_steps: dict[Frame | None, set[int]] = field(default_factory=lambda: defaultdict(set))
    transfer_total: int = 0
    early: dict[Frame | None, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    # CPU fallbacks: (op, frames) -> count for torch_xla's summary; (op, line) -> count for findings
    unlowered: Counter[tuple[str, tuple[Frame, ...]]] = field(default_factory=Counter)
    fallbacks: Counter[tuple[str, Frame | None]] = field(default_factory=Counter)
    fallback_steps: dict[tuple[str, Frame | None], set[int]] = field(default_factory=lambda: defaultdict(set))
    announced_ops: set[tuple[str, Frame | None]] = field(default_factory=set)
    slow_compiles: dict[Frame | None, list[float]] = field(default_factory=lambda: defaultdict(list))
    slow_executes: dict[Frame | None, list[float]] = field(default_factory=lambda: defaultdict(list))
    # compiled mode: (function, dynamo's reason, the user's line) -> graph breaks there, and
    # (function, the call that recompiled) -> the failed guards in plain words
    graph_breaks: Counter[tuple[str, str, Frame | None]] = field(default_factory=Counter)
    graph_break_advice: dict[tuple[str, str, Frame | None], str] = field(default_factory=dict)
    # per (function, call): each recompile's plain words and what to change
    dynamo_recompiles: dict[tuple[str, Frame | None], list[tuple[str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # optimizer steps with no barrier between them: where step() was called -> (steps, graph nodes, frames)
    no_barrier: dict[Frame | None, tuple[int, int, tuple[Frame, ...]]] = field(default_factory=dict)


@dataclass
class _State:
    installed: bool = False
    debug: bool = False  # PT_XLA_DEBUG
    level: int = 2
    level_explicit: bool = False  # PT_XLA_DEBUG_LEVEL given by the user (env or config.set)
    file: str = ""
    max_frame: int = 8
    unsubscribe: Callable[[], None] | None = None
    handle: IO[str] | None = None
    handle_path: str = ""
    # per thread: replica threads (and loaders) execute concurrently, each its own compile/execute/sync
    pending: dict[int, _Pending] = field(default_factory=dict)
    held: list[tuple[Callable[[str | None], str], events.SyncEvent]] = field(default_factory=list)
    stats: _Stats = field(default_factory=_Stats)
    raw_marks: int = 0  # the MarkStep counter when last read (see _marks)
    marks_offset: int = 0
    last_report: str = ""  # what report() last returned (the program may have printed it)
    barrier_watch: barriers.BarrierWatch = field(default_factory=barriers.BarrierWatch)


_S = _State()
_LOCK = threading.RLock()  # events may come from several threads (loaders, step closures)


def enabled() -> bool:
    """True while the debugger listens to the runtime (PT_XLA_DEBUG or an explicit level)."""
    return _S.unsubscribe is not None


def _blocks_on() -> bool:
    return (_S.debug or _S.level_explicit) and _S.level >= 1


# --------------------------------------------------------------------------- output


def _emit(text: str) -> None:
    """Write to PT_XLA_DEBUG_FILE (appended, as torch_xla does) or to stderr."""
    if _S.file:
        try:
            if _S.handle is None or _S.handle_path != _S.file:
                _close()
                _S.handle = open(_S.file, "a", encoding="utf-8")  # kept open: one write per event
                _S.handle_path = _S.file
            _S.handle.write(text)
            _S.handle.flush()
        except OSError as e:
            # The report is a side channel: an unwritable file warns once, the program goes on.
            debug_files.warn_once("PT_XLA_DEBUG_FILE", _S.file, e)
    else:
        # Looked up each time: pytest's capsys and notebooks replace sys.stderr.
        sys.stderr.write(text)
        sys.stderr.flush()


def _close() -> None:
    if _S.handle is not None:
        _S.handle.close()
        _S.handle = None
        _S.handle_path = ""


def _block(prefix: str, lines: Iterable[str]) -> str:
    """A torch_xla analysis block: a blank line, then every line prefixed, framed by rules."""
    body = [_RULE, *lines, _DASH, _RULE]
    return "\n" + "".join(f"{prefix}: {line}\n" for line in body)


def _cause_lines(reason: str, op: str | None = None) -> list[str]:
    barrier = _barrier_name()
    if reason == "mark_step":
        return [f"  user {barrier}"]
    if reason.startswith("fallback"):
        # The runtime names the op in the reason ("fallback:aten::nonzero").
        what = op or reason.partition(":")[2] or "an op"
        return [f"  {what} has no XLA lowering: it runs on the CPU and needs its inputs' values (fallback)"]
    runtime = _RUNTIME_SYNCS.get(reason)
    if runtime is not None:
        return [f"  {runtime}"]
    exact = _ACCESS.get(reason, f"the runtime synced for {reason!r}")
    return [f"  most likely user code trying to access tensor value before {barrier}", f"  xlalab: {exact}"]


def _analysis_block(kind: str, cause: list[str], info: _GraphInfo, frames: Sequence[Frame]) -> str:
    prefix = f"{kind} Analysis"
    lines = [f"{kind} Cause", *cause, "Graph Info: "]
    lines += [
        f"  Graph Hash: {info.hash:x}",
        f"  Number of Graph Inputs: {info.inputs}",
        f"  Number of Graph Outputs: {info.outputs}",
        "Python Frame Triggered Execution: ",
    ]
    lines += [f"  {_frame_str(f)}" for f in frames[: max(_S.max_frame, 0)]]
    return _block(prefix, lines)


def _post_compilation_block(mem: tuple[int, int, int, int, int]) -> str:
    inp, out, alias, mid, prog = mem
    return _block(
        "Post Compilation Analysis",
        [
            f"Graph input size: {_gb(inp)}",
            f"Graph output size: {_gb(out)}",
            f"Aliased Input size: {_gb(alias)}",
            f"Intermediate tensor size: {_gb(mid)}",
            f"Compiled program size: {_gb(prog)}",
        ],
    )


def _render_sync(ev: events.SyncEvent, pending: _Pending) -> Callable[[str | None], str]:
    """The blocks for one execution, as a function of the fallback op (known only later)."""
    info = _graph_info(ev.graph, ev.graph_hash, ev.num_tensors)
    comp = pending.compile
    compiled = comp is not None and not comp.cached and comp.graph_hash == ev.graph_hash
    comp_hash = _computation_hash(ev.graph, ev.graph_hash) if compiled else ""
    mem = _memory(ev.graph) if compiled and ev.graph is not None else (0, 0, 0, 0, 0)
    executed = _S.level >= 2  # every sync is one execution (op-by-op ones publish no ExecuteEvent)

    def render(op: str | None) -> str:
        cause = _cause_lines(ev.reason, op)
        out = ""
        if compiled:
            out += _analysis_block("Compilation", cause, info, ev.frames)
            out += f"\nComputation hash: {comp_hash}\n"
            out += _post_compilation_block(mem)
        if executed:
            out += _analysis_block("Execution", cause, info, ev.frames)
        return out

    return render


def _flush_held(op: str | None = None) -> None:
    for render, _ in _S.held:
        _emit(render(op))
    _S.held.clear()


# --------------------------------------------------------------------------- event handling


def _on_event(ev: events.Event) -> None:
    try:
        with _LOCK:
            _handle(ev)
    except Exception as e:  # never let the debugger break the program it watches
        try:
            _emit(f"{_PROFILER}: internal error while analysing {type(ev).__name__}: {e!r}\n")
        except Exception:
            pass
        analysis_errors.failed("pt_xla_debug", ev, e, log=False)


def _site(frames: Sequence[Frame]) -> Frame | None:
    return frames[0] if frames else None


def _marks() -> int:
    """xm.mark_step() calls so far: the MarkStep counter, which also counts steps with nothing to
    run (those publish no event), kept monotonic across ``met.clear_counters()``."""
    raw = metrics.COUNTERS.get("MarkStep", 0)
    if raw < _S.raw_marks:  # the counters were cleared: carry what they had counted
        _S.marks_offset += _S.raw_marks
    _S.raw_marks = raw
    return raw + _S.marks_offset


def _steps() -> int:
    """Closed steps since the records were reset; during a barrier, the step it closes is included."""
    st = _S.stats
    return _marks() - st.base_marks + st.extra_steps


def _handle(ev: events.Event) -> None:
    st = _S.stats
    if isinstance(ev, events.CompileEvent) and ev.reason == _DYNAMO_COMPILE:
        _dynamo_compile(ev)
    elif isinstance(ev, events.ExecuteEvent) and getattr(ev, "reason", "") == _DYNAMO_EXECUTE:
        _dynamo_execute(ev)
    elif ev.kind == _GRAPH_BREAK:
        key = (getattr(ev, "function", ""), getattr(ev, "reason", ""), _site(ev.frames))
        st.graph_breaks[key] += 1
        st.graph_break_advice[key] = getattr(ev, "advice", "")
    elif ev.kind == _DYNAMO_RECOMPILE:
        words = getattr(ev, "explanation", "") or getattr(ev, "guard", "")
        advice = getattr(ev, "advice", "") or "keep the value fixed from call to call"
        st.dynamo_recompiles[(getattr(ev, "function", ""), _site(ev.frames))].append((words, advice))
    elif isinstance(ev, events.CompileEvent):
        old = _S.pending.get(threading.get_ident())
        if old is not None and old.compile is not None and not old.compile.cached:
            _record_compile(old.compile, _steps())  # its execution failed: count it anyway
        _S.pending[threading.get_ident()] = _Pending(compile=ev)
        if ev.cached:
            st.cached += 1
    elif isinstance(ev, events.ExecuteEvent):
        st.executions += 1
        _S.pending.setdefault(threading.get_ident(), _Pending()).execute = ev
        if ev.seconds > SLOW_EXECUTE_SECONDS:
            st.slow_executes[_site(ev.frames)].append(ev.seconds)
    elif isinstance(ev, events.SyncEvent):
        pending = _S.pending.pop(threading.get_ident(), None) or _Pending()
        if _blocks_on():
            render = _render_sync(ev, pending)
            if ev.reason == "fallback":
                _S.held.append((render, ev))  # an older runtime: the FallbackEvent with the op follows
            else:
                _flush_held()
                _emit(render(None))
        closing = ev.reason == "mark_step" and _close_step(ev)
        step = _steps() - 1 if ev.reason == "mark_step" else _steps()
        if pending.compile is not None and not pending.compile.cached:
            _record_compile(pending.compile, step)
        if ev.reason != "mark_step" and _S.barrier_watch.missing:
            _no_barrier(len(ev.graph.nodes) if ev.graph is not None else 0)
        if ev.reason != "mark_step":
            st.last_barrier = None
            st.early[_site(ev.frames)][ev.reason.partition(":")[0]] += 1
        if closing:
            _step_end()
    elif isinstance(ev, events.FallbackEvent):
        st.last_barrier = None
        if _S.held:
            _flush_held(ev.op)
        site = _site(ev.frames)
        st.unlowered[(ev.op, tuple(ev.frames))] += 1
        st.fallbacks[(ev.op, site)] += 1
        st.fallback_steps[(ev.op, site)].add(_steps())
    elif isinstance(ev, events.TransferEvent):
        step = _steps()
        if ev.direction == "to_device":
            if step != st.upload_step:  # only the open step's uploads can explain its new shapes
                st.uploads.clear()
                st.upload_step = step
            if ev.frames:
                st.uploads.append((ev.nbytes, ev.frames[0]))
                del st.uploads[:-256]
        else:
            st.last_barrier = None
            site = _site(ev.frames)
            st.transfers[site] += 1
            st.transfer_steps[site].add(step)
            st.transfer_total += 1


def _dynamo_compile(ev: events.CompileEvent) -> None:
    """Compiled mode compiles a graph when dynamo hands it over, with no barrier and no sync
    event after it: the Compilation and Post Compilation blocks are printed right away."""
    st = _S.stats
    if ev.cached:
        st.cached += 1
        return
    st.compiles += 1
    st.compile_seconds += ev.seconds
    if ev.seconds > SLOW_COMPILE_SECONDS:
        st.slow_compiles[_site(ev.frames)].append(ev.seconds)
    if not _blocks_on():
        return
    info = _graph_info(ev.graph, ev.graph_hash, 0)
    mem = _memory(ev.graph) if ev.graph is not None else (0, 0, 0, 0, 0)
    out = _analysis_block("Compilation", ["  dynamo is compiling a FX graph to HLO"], info, ev.frames)
    out += f"\nComputation hash: {_computation_hash(ev.graph, ev.graph_hash)}\n"
    out += _post_compilation_block(mem)
    _flush_held()
    _emit(out)


def _dynamo_execute(ev: events.ExecuteEvent) -> None:
    """One run of a compiled program: an Execution block at level 2, as torch_xla prints it."""
    st = _S.stats
    st.executions += 1
    if ev.seconds > SLOW_EXECUTE_SECONDS:
        st.slow_executes[_site(ev.frames)].append(ev.seconds)
    if _blocks_on() and _S.level >= 2:
        graph = getattr(ev, "graph", None)
        info = _graph_info(graph, ev.graph_hash, 0)
        _flush_held()
        _emit(_analysis_block("Execution", ["  dynamo is executing a compiled program"], info, ev.frames))


def _no_barrier(nodes: int) -> None:
    """Optimizer steps ran with no step barrier: say so once per place, keep the largest graph."""
    watch, st = _S.barrier_watch, _S.stats
    site = _site(watch.frames)
    first = site not in st.no_barrier
    old = st.no_barrier.get(site, (0, 0, ()))
    st.no_barrier[site] = (max(old[0], watch.steps), max(old[1], nodes), watch.frames)
    if first and _S.debug:
        _emit(
            f"{_PROFILER}: no step barrier: {barriers.explain(watch.steps, nodes, _barrier_name())} "
            f"(optimizer.step() at {_where(site)})\n"
        )


def _record_compile(ev: events.CompileEvent, step: int) -> None:
    st = _S.stats
    st.compiles += 1
    st.step_compiles += 1
    st.compile_seconds += ev.seconds
    site = _site(ev.frames)
    st.compile_steps[site].append(step)
    if ev.graph is not None:
        sig = signature(ev.graph)
        old = st.last_sig.get(site)
        if old is not None and step >= WARMUP_STEPS:
            dynamic = {site: op for op, site in st.fallbacks if op in _DYNAMIC_SHAPE_OPS}
            what, example = _describe_change(old, sig, st.uploads, dynamic)
            st.changes[site].setdefault(what, []).append((step, example))
        st.last_sig[site] = sig
    if ev.seconds > SLOW_COMPILE_SECONDS:
        st.slow_compiles[site].append(ev.seconds)


def _close_step(ev: events.SyncEvent) -> bool:
    """Whether this barrier sync closes a step (False: the same barrier syncing another device)."""
    st = _S.stats
    device = getattr(ev.graph, "key", (None,))[-1]
    frames = tuple(ev.frames)
    marks = _marks()
    if marks != st.close_marks:  # mark_step() was called (and counted) since the last barrier
        st.close_marks = marks
    elif st.last_barrier == frames and device not in st.barrier_devices:
        st.barrier_devices.add(device)
        return False
    else:  # a barrier that the MarkStep counter does not see (xlalab.sync())
        st.extra_steps += 1
    st.last_barrier = frames
    st.barrier_devices = {device}
    return True


def _step_end() -> None:
    """Say what looks wrong so far, once per step, as torch_xla's profiler does (PT_XLA_DEBUG only)."""
    st = _S.stats
    compiled_now, st.step_compiles = st.step_compiles, 0
    if not _S.debug:
        return
    steps = _steps()
    lines = []
    if st.transfer_total and st.transfer_total >= steps:
        lines.append(
            f"{_PROFILER}: TransferFromDeviceTime too frequent: {st.transfer_total} counts during "
            f"{steps} steps (most at {_where(_top(st.transfers))})"
        )
    after = steps - WARMUP_STEPS
    if compiled_now and after >= 2:
        late = {s: sum(1 for k in ks if k >= WARMUP_STEPS) for s, ks in st.compile_steps.items()}
        n = sum(late.values())
        if 2 * n > after:
            top = max(late, key=lambda s: late[s])
            lines.append(
                f"{_PROFILER}: CompileTime too frequent: {n} counts during {after} steps after warm-up "
                f"(most at {_where(top)})"
            )
    new_ops = [k for k in st.fallbacks if k[0] != _ITEM_OP and k not in st.announced_ops]
    if new_ops:
        st.announced_ops.update(new_ops)
        ops = ", ".join(f"{op} ({_where(site)})" for op, site in new_ops)
        lines.append(f"{_PROFILER}: Op(s) not lowered: {ops}. They run on the CPU: see the summary at exit.")
    if lines:
        _emit("".join(line + "\n" for line in lines))


def _top(counter: Counter[Frame | None]) -> Frame | None:
    return counter.most_common(1)[0][0] if counter else None


# --------------------------------------------------------------------------- the analysis


def _findings() -> list[list[str]]:
    """Each finding: a headline ``file:line (function): kind: ...`` and indented details."""
    st = _S.stats
    n_steps = _steps()
    # ((category, -size), lines): recompilation first (the costliest), then CPU fallbacks, transfers, slowness
    out: list[tuple[tuple[int, float], list[str]]] = []

    # Recompilation after warm-up, per sync site.
    after = n_steps - WARMUP_STEPS
    if after >= 2:
        late = {s: [k for k in ks if WARMUP_STEPS <= k < n_steps] for s, ks in st.compile_steps.items()}
        total = sum(len(v) for v in late.values())
        if 2 * total > after:
            for site, ks in sorted(late.items(), key=lambda kv: -len(kv[1])):
                if not ks:
                    continue
                lines = [
                    f"{_where(site)}: recompilation: the graph synced here compiled {_times(len(ks))} in "
                    f"{after} steps after warm-up ({total} in all: more often than every other step)"
                ]
                closed = {w: [e for k, e in ex if k < n_steps] for w, ex in st.changes.get(site, {}).items()}
                for what, examples in sorted(closed.items(), key=lambda kv: -len(kv[1]))[:3]:
                    if not examples:
                        continue
                    shown = ", ".join(e for e in examples[:3] if e) + (", ..." if len(examples) > 3 else "")
                    lines.append(f"  changed {len(examples)}x: {what}" + (f": {shown}" if shown else ""))
                lines.append(
                    "  keep shapes and Python ints fixed from step to step (pad the last batch, "
                    "drop_last=True, pass step counters as tensors)"
                )
                out.append(((0, -len(ks)), lines))

    # Compiled mode: dynamo's recompiles (the guard that failed) and graph breaks (its reason).
    for (function, call), explained in st.dynamo_recompiles.items():
        shown = "; ".join(w for w, _ in explained[:3]) + ("; ..." if len(explained) > 3 else "")
        lines = [
            f"{_where(call)}: recompilation: dynamo compiled {function} again "
            f"{_times(len(explained))}: {shown}",
            *(f"  {advice}" for advice in dict.fromkeys(a for _, a in explained)),
        ]
        out.append(((0, -len(explained)), lines))
    for (function, reason, site), n in st.graph_breaks.most_common():
        lines = [
            f"{_where(site)}: graph break: dynamo split {function} here ({_times(n)}): {reason}",
            "  "
            + (
                st.graph_break_advice.get((function, reason, site))
                or "the function runs as several graphs with Python in between: move the line out of the "
                "compiled function, or use tensor ops"
            ),
        ]
        out.append(((1, -n), lines))

    # Device-to-host transfers inside the step loop, per line.
    fallback_sites = {site for (op, site) in st.fallbacks if op != _ITEM_OP}
    per = max(n_steps, 1)
    for site, n in st.transfers.most_common():
        in_steps = {k for k in st.transfer_steps[site] if k < n_steps}
        if site in fallback_sites or len(in_steps) < TRANSFER_MIN_STEPS or 2 * len(in_steps) < n_steps:
            continue
        reasons = st.early.get(site, Counter())
        how = ", ".join(_ACCESS_SHORT.get(r, r) for r, _ in reasons.most_common()) or "a device-to-host copy"
        early = sum(reasons.values())
        lines = [
            f"{_where(site)}: transfer: {how} copied device values to the host {_times(n)} in "
            f"{len(in_steps)} of {n_steps} steps ({n / per:.1f} per step)"
        ]
        if early:
            lines.append(
                f"  {early} of them ran the pending graph early, outside the step barrier "
                "(an extra execution, and a compilation for each new graph)"
            )
        lines.append(
            "  keep values on the device (accumulate the loss in a tensor) and read them every N steps, "
            "after the step barrier"
        )
        out.append(((2, -n), lines))

    # Slow compilations and executions.
    for site, secs in st.slow_compiles.items():
        out.append(
            (
                (3, -sum(secs)),
                [
                    f"{_where(site)}: slow compile: {len(secs)} compilations over {SLOW_COMPILE_SECONDS:g} s "
                    f"(max {max(secs):.1f} s, {sum(secs):.1f} s in all)",
                    "  a large graph: sync more often (a barrier per step), or avoid unrolled Python loops",
                ],
            )
        )
    for site, secs in st.slow_executes.items():
        out.append(
            (
                (4, -sum(secs)),
                [
                    f"{_where(site)}: slow execution: {len(secs)} executions over {SLOW_EXECUTE_SECONDS:g} s "
                    f"(max {max(secs):.2f} s, {sum(secs):.2f} s in all)",
                    "  time with XLA_SYNC_WAIT=1 to see device time; profile the step if it stays slow",
                ],
            )
        )

    # Ops that are not lowered.
    for (op, site), n in st.fallbacks.most_common():
        if op == _ITEM_OP:
            continue
        seen_in = len(st.fallback_steps[(op, site)])
        lines = [
            f"{_where(site)}: not lowered: {op} ran on the CPU {_times(n)} (in {seen_in} of {n_steps} "
            "steps); each call copies its inputs to the host and its result back"
        ]
        if op in _DYNAMIC_SHAPE_OPS:
            lines.append("  its output shape depends on the data, so graphs using the result recompile too")
        lines.append(
            "  avoid it in the step (e.g. a mask and torch.where), or add a lowering (docs/runtime.md §6)"
        )
        out.append(((1, -n), lines))

    # Loops that never reached their step barrier: the costliest mistake, first.
    for site, (steps, nodes, frames) in st.no_barrier.items():
        lines = [f"{_where(site)}: no step barrier: {barriers.explain(steps, nodes, _barrier_name())}"]
        lines += [f"  called from {_where(f)}" for f in frames[1:3]]
        lines.append(f"  {barriers.ADVICE}")
        out.append(((-1, -nodes), lines))

    out.sort(key=lambda wl: wl[0])
    return [lines for _, lines in out]


def _unlowered_summary() -> list[str]:
    """torch_xla's exit summary of CPU fallbacks, grouped by op and Python stack."""
    lines = [
        _RULE,
        "Unlowered Op usage summary (more of these ops, lower performance)",
        "Note: _local_scalar_dense typically indicates CPU context access",
        _DASH,
    ]
    for (op, frames), n in _S.stats.unlowered.most_common():
        lines.append(f"FRAME (count={n}):")
        lines.append(f'Unlowered Op: "{op.removeprefix("aten::")}"')
        lines += [f"  {_frame_str(f)}" for f in frames[: max(_S.max_frame, 0)]]
        lines += ["", ""]
    lines.append(_RULE)
    return lines


def _analysis_lines() -> list[str]:
    st = _S.stats
    findings = _findings()
    head = (
        f"xlalab analysis: {len(findings)} finding{'s' if len(findings) != 1 else ''} "
        f"({_steps()} steps, {st.compiles} compilations ({st.compile_seconds:.2f} s), {st.cached} cached, "
        f"{st.executions} executions, {st.transfer_total} device-to-host transfers, "
        f"{sum(n for (op, _), n in st.fallbacks.items() if op != _ITEM_OP)} CPU fallbacks)"
    )
    lines = [_RULE, head, _DASH]
    if not findings:
        lines.append("no recompilation, frequent transfer, slow compile or unlowered op found")
    for f in findings:
        lines += [*f, ""]
    lines += _unchecked_indices()
    lines.append(_RULE)
    return lines


_INDEXING = ("index", "_unsafe_index", "index_select", "gather", "embedding", "take", "index_put",
             "_index_put_impl", "scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy",
             "index_fill")  # fmt: skip


def _unchecked_indices() -> list[str]:
    """Where XLA cannot match eager, say so: indexing ops ran, and an index out of range is clamped
    by XLA where eager raises, unless XLALAB_CHECK_INDICES is on."""
    if config.get("XLALAB_CHECK_INDICES"):
        return []
    counts = metrics.COUNTERS
    ran = [(op, counts.get(f"xla::{op}", 0)) for op in _INDEXING]
    ran = [(op, n) for op, n in ran if n]
    if not ran:
        return []
    ops = ", ".join(f"aten::{op} ({n})" for op, n in ran)
    return [
        f"indexing ops ran: {ops}. XLA clamps an index that is out of range where eager PyTorch "
        "raises IndexError; set XLALAB_CHECK_INDICES=1 to have such an index raise at the sync, "
        "naming the op and its line.",
        "",
    ]


def report() -> str:
    """The exit summary as text: torch_xla's unlowered-op summary, then xlalab's findings.

    For notebooks: ``print(pt_xla_debug.report())`` at any point. It only reads what the
    event handlers recorded (and walks the pending IR), so calling it syncs nothing. A program
    that printed it needs no second copy at exit: the exit summary is skipped when nothing
    changed since.
    """
    with _LOCK:
        text = _report_text()
        _S.last_report = text
        return text


def _report_text() -> str:
    if _S.barrier_watch.missing:  # optimizer steps still pending: the graph they built so far
        _no_barrier(barriers.pending_nodes())
    lines = _unlowered_summary() + _analysis_lines()
    if not enabled() and not _S.stats.compiles and not _S.stats.executions:
        lines.insert(0, "PT_XLA_DEBUG is off: nothing was recorded (config.set('PT_XLA_DEBUG', True))")
    return "\n".join(lines) + "\n"


def reset() -> None:
    """Forget what was recorded (steps, compilations, transfers, fallbacks)."""
    with _LOCK:
        _S.stats = _Stats(base_marks=_marks())
        _S.pending.clear()
        _S.held.clear()


def _at_exit() -> None:
    with _LOCK:
        try:
            _flush_held()
            text = _report_text() if _S.debug else ""
            if text and text != _S.last_report:  # not when the program printed this very summary
                _emit("".join(f"WARNING:{_PROFILER}:{line}\n" for line in text.splitlines()))
        except Exception:
            pass  # at exit stderr or the file may already be gone
        finally:
            _close()


# --------------------------------------------------------------------------- settings


def _update() -> None:
    """Subscribe while anything is on; unsubscribe (keeping the records) when all is off."""
    want = _S.debug or _S.level_explicit
    if want and _S.unsubscribe is None:
        st = _S.stats
        if not (st.compiles or st.cached or st.executions or st.transfers or st.fallbacks):
            st.base_marks = _marks()  # count the steps from here (a notebook turning it on mid-run)
        _S.unsubscribe = events.subscribe(_on_event)
        _S.barrier_watch.start()
    elif not want and _S.unsubscribe is not None:
        _S.unsubscribe()
        _S.unsubscribe = None
        _S.barrier_watch.stop()
        _flush_held()


def _set_debug(value: bool) -> None:
    with _LOCK:
        _S.debug = bool(value)
        if _S.installed and not value:
            _S.level_explicit = False  # an explicit "off" wins over a level set earlier
        _update()


def _set_level(value: int) -> None:
    with _LOCK:
        # The first call is config.watch's own (at install): explicit only if the env says so.
        _S.level_explicit = _S.installed or "PT_XLA_DEBUG_LEVEL" in os.environ
        _S.level = int(value)
        _update()


def _set_file(value: str) -> None:
    with _LOCK:
        _S.file = str(value)
        if _S.handle_path != _S.file:
            _close()


def _set_max_frame(value: int) -> None:
    with _LOCK:
        _S.max_frame = int(value)


def install() -> None:
    """Follow the PT_XLA_DEBUG settings (now and on every ``config.set``). Idempotent."""
    with _LOCK:
        if _S.installed:
            return
        config.watch("PT_XLA_DEBUG_FILE", _set_file)
        config.watch("PT_XLA_DEBUG_MAX_FRAME", _set_max_frame)
        config.watch("PT_XLA_DEBUG_LEVEL", _set_level)
        config.watch("PT_XLA_DEBUG", _set_debug)
        _S.installed = True
        atexit.register(_at_exit)
