"""Watch the runtime's events on behalf of the notebook: per-cell findings and live events.

One ``Watcher`` per loaded extension subscribes to the event bus and

- keeps, per place in the user's code that compiles (the barrier's line), the signatures of
  the graphs compiled there, so a new compilation that is a *variant* of an earlier one
  becomes a recompilation finding that says what changed (an input's shape and the name of
  the variable that holds it, the first differing op, a value baked into the graph);
- in compiled mode, turns dynamo's graph breaks (its reason, the user's line) and recompiles
  (the guard that failed, in plain words) into findings;
- in SPMD mode, turns a large all-gather or all-to-all the partitioner inserted into a new
  program into a reshard finding, with the line that made the op that needed it;
- turns CPU fallbacks and reads that cut a step (``.item()``, ``print``, ``.cpu()`` of a
  pending tensor) into findings counted per source line;
- hands every event, in the comm protocol's JSON shape, to its listeners (the JupyterLab
  comm, the counters widget);
- keeps the last compiled graphs, stripped of their device data, for the graph viewer.

It only reads events, frames and the metrics registry: it never touches a tensor's value,
so looking can never compile or transfer anything.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import re
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xlalab.debug import analysis_errors, barriers, graph_diff, recompiles
from xlalab.runtime import events, ir, sharding
from xlalab.runtime.frames import Frame, library_path
from xlalab.runtime.frames import is_library as _is_runtime_library

from .cells import CellMap

# Reads that bring a value to the host; when they had pending IR to run, they cut the step.
ACCESS_REASONS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "cpu": ".cpu()",
    "print": "print",
    "copy": "copy_ to another device",
}
ITEM_OP = "aten::_local_scalar_dense"  # the .item() read, reported as a transfer, not a fallback

DYNAMIC_SHAPE_OPS = {"aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2"}
# The form of a data-shaped op whose shape is fixed, so that it stays on the device.
STATIC_FORMS = {
    "aten::nonzero": "torch.nonzero_static(x, size=N) keeps a fixed shape and runs on the device "
    "(rows past the count hold fill_value)",
    "aten::masked_select": "torch.where(mask, x, 0) keeps x's shape and runs on the device",
    "aten::index": "x[mask] has as many rows as the mask selects: torch.where(mask, x, 0) (or a "
    "loss's ignore_index, a sum weighted by the mask) keeps x's shape and runs on the device",
}
# A masked index_put the autograd engine makes is the backward of x[mask] in the forward.
MASK_BACKWARD = (
    "it is the backward of a boolean-mask index (x[mask]) in the forward: torch.where(mask, x, 0) "
    "there keeps both on the device"
)
KEEP_GRAPHS = 32
KEEP_VARIANTS = 4  # graphs kept per place to compare a new one with
# Compiled mode (xlalab.dynamo) events, told apart by kind and compile reason: the watcher reads
# their fields by name, so the notebook layer does not import the dynamo package.
GRAPH_BREAK = "graph_break"
DYNAMO_GRAPH = "dynamo_graph"
DYNAMO_RECOMPILE = "dynamo_recompile"
DYNAMO_COMPILE = "dynamo_compile"
DYNAMO_INPUT = "dynamo_input"  # lazy work synced because a compiled program takes it as an input
#: An all-gather or all-to-all the SPMD partitioner inserted is a finding from this size (bytes
#: per device) on: below it a reshard costs less than the launch that carries it.
RESHARD_MIN_BYTES = 1 << 20
READ_ADVICE = (
    "read the value after xm.mark_step(), or keep it on the device (accumulate a tensor, read it once)"
)
WHERE_ADVICE = (
    "to pick a value by a condition without a sync, torch.where computes both on the device and "
    "keeps the one the condition picks: y = torch.where(y > 0, y * 2, y)"
)
BRANCH_ADVICE = (
    "when the branches run more than a value's choice, torch.cond(pred, true_fn, false_fn, operands) "
    "keeps both branches in the graph and chooses on the device (torch's while_loop, for a loop)"
)
# Reads a library makes for its own sake, and how to turn them off (by the library's path).
LIBRARY_READ_ADVICE = {
    "torch/distributions/": (
        "torch.distributions checks its arguments by reading them (validate_args): create the "
        "distribution with validate_args=False, or call "
        "torch.distributions.Distribution.set_default_validate_args(False) once"
    ),
    "transformers/masking_utils.py": (
        "transformers reads a 2-d attention_mask to see whether any token is padded (it then skips "
        "building the mask): with no padding, pass attention_mask=None; with padding, pass the mask "
        "expanded to 4-d (batch, 1, query, key; 0 where attended, torch.finfo(dtype).min where "
        "padded), which it takes as it is"
    ),
}
_BRANCHING = re.compile(r"^\s*(if|elif|while)\b|\bif\b.*\belse\b")
# kind is set first; frames become "where"; graphs, programs and uploaded arrays stay here
_NOT_SENT = ("kind", "frames", "graph", "program", "data")


@dataclass
class Finding:
    """A warning the notebook shows: a recompilation, a CPU fallback or a read that cut a step."""

    id: int
    category: str  # recompile | fallback | transfer | no_barrier | graph_break | reshard
    title: str
    message: str
    frames: list[Frame]
    where: Frame | None
    cell: int | None  # execution count of the cell that was running
    graph_hash: str = ""
    details: list[str] = field(default_factory=list)
    count: int = 1
    previous_graph_hash: str = ""  # recompilations: the graph this one replaced at its place
    folded: list[str] = field(default_factory=list)  # findings that follow from this one, said under it

    def fold(self, note: str, replaces: str = "") -> None:
        """Say a consequence under this finding (replacing an earlier note that starts with ``replaces``)."""
        if replaces:
            self.folded = [d for d in self.folded if not d.startswith(replaces)]
            self.details = [d for d in self.details if not d.startswith(replaces)]
        if note not in self.folded:
            self.folded.append(note)
            self.details.append(note)


@dataclass
class _Site:
    """One place in user code that compiles: what it compiled and how often it hit the cache."""

    signature: tuple[graph_diff.NodeSig, ...] | None = None  # of the last graph compiled here
    graph_hash: int = 0  # of the last graph compiled here
    compiles: int = 0
    hits: int = 0
    reads: tuple[Frame | None, ...] = ()  # lines that cut the step before the last compile here
    created_state: bool = False  # the last graph compiled here is a step that created optimizer state
    # Graphs compiled here before the last (signature, hash), newest last: a loop whose steps
    # alternate (accumulating gradients, then stepping) compiles each kind's variants here.
    earlier: list[tuple[tuple[graph_diff.NodeSig, ...], int]] = field(default_factory=list)


@dataclass
class _Read:
    """A read that ran pending IR, until the next barrier shows whether it cut its step."""

    reason: str
    frames: list[Frame]
    nodes: int
    graph_hash: int
    inside: Frame | None


@dataclass
class _Cause:
    """Why a place recompiled: the kind of change, a title and a message in plain words, the
    user's line that made the change (None when unknown) and more lines."""

    kind: str
    title: str
    message: str
    where: Frame | None
    details: list[str]
    inputs: list[tuple[str, str, str]] = field(default_factory=list)  # (name, old, new) per changed input


# Causes a size change explains: an input's, one baked into an op, an op's output shape.
_SHAPE_CAUSES = ("input_shape", "baked_value", "output_shape")


def _first_and_last(changes: list[str]) -> str:
    """A run of changes said short: all of two, the first and the latest of more (a change said
    once for several graphs in a row that saw it)."""
    changes = [c for i, c in enumerate(changes) if i == 0 or c != changes[i - 1]]
    return "; ".join(changes) if len(changes) <= 2 else f"{changes[0]}; ...; {changes[-1]}"


def _run_said(shapes: list[str]) -> str:
    """An input's shapes in the order seen, the middle of a long run left out."""
    shown = shapes if len(shapes) <= 4 else [*shapes[:2], "...", shapes[-1]]
    return " → ".join(shown)


def _runs_said(runs: dict[str, list[str]]) -> str:
    """Inputs' runs of shapes, those that ran alike said once (a model's per-layer caches)."""
    alike: dict[tuple[str, ...], list[str]] = {}
    for name, run in runs.items():
        alike.setdefault(tuple(run), []).append(name)
    return "; ".join(f"{', '.join(names)}: {_run_said(list(run))}" for run, names in alike.items())


def hex_hash(h: int) -> str:
    return f"{h:x}"


def strip_graph(graph: Any) -> Any:
    """A copy of a linearized graph without device data, to keep for the graph viewer.

    Keeping the graph itself would keep every input array alive for as long as it is shown.
    """
    from xlalab.runtime.graph import Graph

    copies: dict[int, ir.Node] = {}
    nodes = []
    for n in graph.nodes:
        c = ir.Node.__new__(ir.Node)
        for slot in ("arg", "device", "dtype", "frames", "hash", "op", "outs", "shape"):
            setattr(c, slot, getattr(n, slot))
        c.src = tuple(copies[id(s)] for s in n.src)
        c.value = 0.0 if n.op is ir.SCALAR else None
        copies[id(n)] = c
        nodes.append(c)
    return Graph(graph.key, nodes, list(graph.roots))


class Watcher:
    def __init__(self, cells: CellMap) -> None:
        self.cells = cells
        self.findings: list[Finding] = []
        self.graphs: OrderedDict[str, Any] = OrderedDict()
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.cell_findings: set[int] = set()  # ids bumped during the cell running now
        self._sites: dict[tuple[Any, ...], _Site] = {}
        self._keyed: dict[tuple[Any, ...], Finding] = {}
        # (the device array it made, where) of recent host -> device copies
        self._uploads: list[tuple[weakref.ref[Any], Frame]] = []
        self._cuts: dict[tuple[str, Frame | None], int] = {}  # reads that ran pending IR, per line, this cell
        self._cell_steps = 0  # step barriers (mark_step) in the cell running now
        self._pending_said = 0  # nodes of the pending graph when it was last said to be too large
        # Reads that ran pending IR since the last step barrier: (reason, user frames).
        self._step_reads: list[tuple[str, list[Frame]]] = []
        # Reads of the step under way not judged yet: a barrier that runs work after them shows
        # that they split the step in two; the cell's end without one, that they ended it.
        self._unjudged: list[_Read] = []
        # finding id -> the recompilations it counts (its own, or those folded under a fallback)
        self._changes: dict[Any, list[str]] = {}  # also (finding id, note) for each place folded under one
        # finding id -> the places (graph sites) it recompiled, with the graphs compiled at each
        self._places: dict[int, dict[str, int]] = {}
        self._input_runs: dict[int, dict[str, list[str]]] = {}  # finding id -> each input's shapes
        self._unchecked: events.CompileEvent | None = None  # a new SPMD program, until it runs
        self._dynamo_recompiled: Finding | None = None  # dynamo's recompile in the step under way
        self._guard_failed = False  # in the step under way, a guard failed: dynamo said why
        self._dynamo_graphs: dict[str, int] = {}  # compiled function -> graphs dynamo captured of it
        self._dynamic_ops: dict[Frame, str] = {}  # lines whose CPU fallback has a data-dependent shape
        self._lock = threading.RLock()
        self._unsubscribe: Callable[[], None] | None = None
        self.compiling: dict[str, Any] | None = None  # the compile_start event of a compile under way
        self.barriers = barriers.BarrierWatch()

    # ---- lifecycle
    def start(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = events.subscribe(self._on_event)
        self.barriers.start(listen=False)

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.barriers.stop()

    def clear(self) -> None:
        with self._lock:
            if sharding.enabled():
                from xlalab.distributed.spmd.usage import USAGE

                USAGE.clear()  # the panel's SPMD figures count from the clear, as its metrics do
            self.findings.clear()
            self._keyed.clear()
            self._changes.clear()
            self._places.clear()
            self._input_runs.clear()
            self.cell_findings.clear()

    def start_cell(self) -> None:
        with self._lock:
            self.cell_findings.clear()
            self._cell_steps = 0
            self._cuts.clear()
            self._unjudged.clear()

    def end_cell(self) -> None:
        """What only shows at a cell's end: a loop that never reached its step barrier."""
        try:
            with self._lock:
                found = self._reads_at_cell_end()
                finding = self._missing_barrier()
        except Exception as e:  # the watcher must never break the program it watches
            analysis_errors.failed("lab", "cell end", e)
            return
        for f in [*found, *([finding] if finding is not None else [])]:
            message = self._warning_event(f)
            for listener in list(self.listeners):
                listener(message)

    def _reads_at_cell_end(self) -> list[Finding]:
        """Reads no barrier followed ended their step, so they cut nothing; but a read at a line
        that cut a step earlier in this cell is the same loop's read: it counts with the others."""
        found = []
        for read in self._unjudged:
            site = read.frames[0] if read.frames else None
            f = self._keyed.get(("transfer", read.reason, site))
            if f is not None and f.id in self.cell_findings:
                f.count = max(f.count, self._cuts.get((read.reason, site), 0))
                found.append(f)
        self._unjudged.clear()
        return found

    def _missing_barrier(self) -> Finding | None:
        watch = self.barriers
        if not watch.missing:
            return self._pending_too_large() if self._cell_steps == 0 else None
        if watch.steps <= watch.said:
            return None  # said at the end of the cell that ran those steps; this one added none
        watch.said = watch.steps
        frames = self.cells.user_frames(watch.frames)
        where = frames[0] if frames else None
        nodes = barriers.pending_nodes()
        in_cell = [f for f in frames if (self.cells.cell_of(f.file) or (None,))[0] == self.cells.current]
        details = [barriers.ADVICE]
        if in_cell:  # the outermost frame in the cell that ran: the loop's body
            loop = in_cell[-1]
            details.insert(0, f"the loop's line: {self.cells.label(loop)}: {self.cells.source_line(loop)}")
        finding = self._finding(
            ("no_barrier", where),
            "no_barrier",
            "No step barrier: the pending graph keeps growing",
            barriers.explain(watch.steps, nodes),
            frames,
            "",
            details,
        )
        finding.count = watch.steps
        return finding

    def _pending_too_large(self) -> Finding | None:
        """A cell that ran no barrier left a huge pending graph: name the line that added most."""
        graph = barriers.pending_graph()
        nodes, said = (0 if graph is None else len(graph.nodes)), self._pending_said
        self._pending_said = nodes if nodes >= barriers.PENDING_LIMIT else 0
        if graph is None or nodes < barriers.PENDING_LIMIT or nodes <= said:
            return None  # small, or said at the end of the cell that grew it: this one added nothing
        lines: dict[Frame, int] = {}
        for n in graph.nodes:
            frames = self.cells.user_frames(n.frames or ())
            if frames:
                lines[frames[0]] = lines.get(frames[0], 0) + 1
        top = max(lines, key=lambda f: lines[f]) if lines else None
        where = f"; {lines[top]} of them made at {self._label(top)}" if top is not None else ""
        return self._finding(
            ("pending_too_large", top),
            "no_barrier",
            "No step barrier: the pending graph keeps growing",
            f"the pending graph has {len(graph.nodes)} nodes and this cell ran no barrier{where}",
            [top] if top is not None else [],
            "",
            [
                "the next read or barrier compiles all of it at once: end each step (or each chunk "
                "of work) with xm.mark_step()"
            ],
        )

    def findings_of_cell(self) -> list[Finding]:
        with self._lock:
            return [f for f in self.findings if f.id in self.cell_findings]

    # ---- events
    def _on_event(self, ev: events.Event) -> None:
        try:
            with self._lock:
                out = self._handle(ev)
        except Exception as e:  # the watcher must never break the program it watches
            analysis_errors.failed("lab", ev, e)
            return
        for message in out:
            for listener in list(self.listeners):
                listener(message)

    def _event(self, ev: events.Event) -> dict[str, Any]:
        """An event in the protocol's JSON shape: its own fields (graph hashes in hex, no graph,
        no frames) plus when and the line to point at (docs/lab-protocol.md)."""
        out: dict[str, Any] = {"kind": ev.kind, "time": time.time()}
        for f in dataclasses.fields(ev):
            if f.name not in _NOT_SENT:
                value = getattr(ev, f.name)
                out[f.name] = hex_hash(value) if f.name == "graph_hash" else value
        where = self.cells.jump_target(self.cells.user_frames(ev.frames))
        out["where"] = None if where is None else self.cells.location(where)
        return out

    def _handle(self, ev: events.Event) -> list[dict[str, Any]]:
        out = [self._event(ev)]
        finding: Finding | None = None
        found: list[Finding] = []
        if isinstance(ev, events.CompileStartEvent):
            self.compiling = out[0]
        elif isinstance(ev, (events.CompileEvent, events.CompileErrorEvent)):
            self.compiling = None
            if isinstance(ev, events.CompileEvent):
                finding = self._on_compile(ev)
        elif isinstance(ev, events.ExecuteEvent):
            finding = self._on_execute(ev)
        elif isinstance(ev, events.SyncEvent):
            found = self._on_sync(ev)
        elif isinstance(ev, events.FallbackEvent):
            finding = self._on_fallback(ev)
        elif ev.kind == DYNAMO_GRAPH:
            self._on_dynamo_graph(ev)
        elif ev.kind == GRAPH_BREAK:
            finding = self._on_graph_break(ev)
        elif ev.kind == DYNAMO_RECOMPILE:
            finding = self._on_dynamo_recompile(ev)
        elif isinstance(ev, events.TransferEvent) and ev.direction == "to_device":
            frames = self.cells.user_frames(ev.frames)
            if frames and ev.data is not None:
                with contextlib.suppress(TypeError):  # an array that takes no weak reference: unnamed
                    self._uploads.append((weakref.ref(ev.data), frames[0]))
                del self._uploads[:-256]
        if finding is not None:
            found.append(finding)
        out += [self._warning_event(f) for f in found]
        return out

    # ---- findings
    def _finding(
        self,
        key: tuple[Any, ...],
        category: str,
        title: str,
        message: str,
        frames: list[Frame],
        graph_hash: str = "",
        details: list[str] | None = None,
    ) -> Finding:
        """A new finding, or the one already made for ``key`` with its count bumped."""
        current = self.cells.current
        f = self._keyed.get(key)
        if f is None:
            f = Finding(
                id=len(self.findings) + 1,
                category=category,
                title=title,
                message=message,
                frames=frames,
                where=self.cells.jump_target(frames),
                cell=current,
                graph_hash=graph_hash,
                details=details or [],
            )
            self.findings.append(f)
            self._keyed[key] = f
        else:
            f.count += 1
            base = details if details else [d for d in f.details if d not in f.folded]
            f.message, f.details = message, list(base) + f.folded
            # The line is the key's; the callers are this time's (a function of an earlier cell,
            # now called from another cell, names the call that ran it now).
            f.frames = frames or f.frames
            f.graph_hash = graph_hash or f.graph_hash
        self.cell_findings.add(f.id)
        return f

    def _on_compile(self, ev: events.CompileEvent) -> Finding | None:
        if not ev.cached and ev.graph is not None and sharding.enabled():
            self._unchecked = ev  # its program enters the cache before it runs: looked at then
        return self._on_new_graph(ev)

    def _on_new_graph(self, ev: events.CompileEvent) -> Finding | None:
        site_frame = ev.frames[0] if ev.frames else None
        site = self._sites.setdefault(_site_key(ev, site_frame), _Site())
        if ev.cached:
            site.hits += 1
            return None
        if ev.reason == DYNAMO_COMPILE:
            if ev.graph is None or ev.graph_hash == site.graph_hash:
                return None  # the same program again, with its inputs' buffers donated
            self._keep_graph(ev)
            if self._guard_failed or site.signature is None:
                # Dynamo recompiled, and said why (a RecompileEvent): this is its new graph.
                site.compiles += 1
                site.signature, site.graph_hash = graph_diff.signature(ev.graph), ev.graph_hash
                return None
            # No guard failed, yet XLA compiles: dynamo's graph is dynamic (it takes any size)
            # and XLA's programs are not. Compared as lazy mode's variants at the calling line.
            finding = self._compared(ev, site, site_frame, warm_up=False)
            if finding is not None:
                self._dynamo_recompiled = finding  # the lazy graphs around it resize with it
            return finding
        return self._compared(ev, site, site_frame, recompiles.in_warm_up(site.compiles, site.hits))

    def _compared(
        self, ev: events.CompileEvent, site: _Site, site_frame: Frame | None, warm_up: bool
    ) -> Finding | None:
        """A graph compiled at ``site`` against the one compiled there before: a finding when it
        is a recompilation, saying what changed."""
        site.compiles += 1
        # The graph after an optimizer's first step (it created its state) is warm-up too, as at
        # step 2, also where that step comes later (a loop that accumulates gradients first).
        warm_up = warm_up or site.created_state
        site.created_state = self.barriers.created_state
        graph = ev.graph
        if graph is None:
            return None
        self._keep_graph(ev)
        sig = graph_diff.signature(graph)
        previous, site.signature = site.signature, sig
        previous_hash, site.graph_hash = site.graph_hash, ev.graph_hash
        if previous is None:
            site.reads = tuple(fr[0] if fr else None for _, fr in self._step_reads)
            return None
        site.earlier = [*site.earlier, (previous, previous_hash)][-KEEP_VARIANTS:]
        # Compared with the newest graph here of the same ops, where there is one: the variant
        # this one replaces (the other kind of an alternating step is not what changed).
        names = [b.name for b in sig]
        previous, previous_hash = next(
            (e for e in reversed(site.earlier) if recompiles.same_ops([a.name for a in e[0]], names)),
            site.earlier[-1],
        )
        # Warm-up (the optimizer's state appears at step 2) is not worth a word: the shared rule.
        same_ops = recompiles.same_ops([a.name for a in previous], [b.name for b in sig])
        if not recompiles.is_recompile(warm_up=warm_up, same_op_sequence=same_ops):
            return None
        change = graph_diff.first_change(previous, sig)
        barrier = self.cells.user_frames(ev.frames)
        cause = self._describe(change, graph, previous, sig)
        reads = tuple(fr[0] if fr else None for _, fr in self._step_reads)
        previous_reads, site.reads = site.reads, reads
        if cause.kind != "input_shape" and reads != previous_reads and self._step_reads:
            folded = self._fold_under_read(cause, barrier)
            if folded is not None:
                return folded
        dynamic = self._dynamic_ops.get(cause.where) if cause.where is not None else None
        fallback = self._keyed.get(("fallback", dynamic, cause.where)) if dynamic else None
        if fallback is not None:  # the data-dependent op already reported explains it
            return self._fold_recompile(fallback, "so the step recompiles as that shape changes ", cause)
        lazy = ev.reason != DYNAMO_COMPILE
        if self._dynamo_recompiled is not None and cause.kind in _SHAPE_CAUSES and lazy:
            # Dynamo recompiled in this step for a changed size: the lazy graphs around the
            # compiled call (the loss on its output) resize with it.
            note = f"so the lazy graph at {self._label(site_frame)} recompiled too "
            return self._fold_recompile(self._dynamo_recompiled, note, cause)
        # The line that caused it first; the barrier that compiled it (and its callers) as context.
        frames = ([cause.where] if cause.where is not None else []) + [f for f in barrier if f != cause.where]
        # One finding per place, kind of change and line: a loop whose every step changes a shape
        # is one finding that counts the steps and says the first and the latest changes. An
        # input whose shape changes recompiles every graph it reaches (the forward cut by a read,
        # the rest of the step): one finding at the line that sent it, naming each place.
        by_input = cause.kind == "input_shape" and cause.where is not None
        place = None if by_input else site_frame
        key = ("recompile", place, cause.title, cause.where)
        known = self._keyed.get(key)
        places = dict(self._places.get(known.id, {})) if known is not None else {}
        place_label = self._label(site_frame)
        if ev.source:  # a compiled function's graph: named, for its line is the function's own
            place_label = f"{ev.source} ({place_label})"
        places[place_label] = site.compiles
        if by_input and known is not None:  # the inputs other places saw change are named still
            sent = [d for d in known.details if " was sent to the device" in d and d not in cause.details]
            cause.details[:0] = sent
        if len(places) == 1:
            cause.details.append(
                f"{site.compiles} graphs compiled at {place_label} so far; this one took "
                f"{ev.seconds:.2f} s"
            )
        else:
            counts = "; ".join(f"{n} at {label}" for label, n in places.items())
            cause.details.append(f"graphs compiled so far: {counts}; the latest took {ev.seconds:.2f} s")
        if ev.reason == DYNAMO_COMPILE:
            cause.details.append(
                "dynamo's graph takes any size here (dynamic shapes), but XLA compiles one program "
                "per shape: each new size compiles again; pad to a few fixed sizes (drop_last=True, "
                "bucketed lengths)"
            )
        elif cause.kind == "input_shape":
            cause.details.append(
                "each new shape compiles a new graph: pad the input to a fixed size (or to a few "
                "bucket sizes) and mask the padding"
            )
        finding = self._finding(
            key,
            "recompile",
            f"Recompiled: {cause.title}",
            cause.message,
            frames,
            hex_hash(ev.graph_hash),
            cause.details,
        )
        self._places[finding.id] = places
        if cause.kind == "input_shape":
            # Each input's run of shapes, the same change seen by every graph it reaches once.
            runs = self._input_runs.setdefault(finding.id, {})
            for name, old, new in cause.inputs:
                run = runs.setdefault(name, [old])
                if run[-1] != new:
                    run += [old, new] if run[-1] != old else [new]
            # Inputs a compiled graph's backward reads (saved activations) have no name of the user's.
            named = {name: run for name, run in runs.items() if not name.startswith("input ")} or runs
            finding.message = _runs_said(named)
        else:
            changes = self._changes.setdefault(finding.id, [])
            changes.append(cause.message)
            finding.message = _first_and_last(changes)
        finding.previous_graph_hash = hex_hash(previous_hash)
        return finding

    def _fold_recompile(self, under: Finding, note: str, cause: _Cause) -> Finding:
        """A recompilation that ``under`` explains, said (and counted) under it."""
        self.cell_findings.add(under.id)
        seen = self._changes.setdefault((under.id, note), [])
        seen.append(cause.message)
        times = "" if len(seen) == 1 else f", {len(seen)} times"
        under.fold(note + f"(Recompiled: {cause.title}{times}: {_first_and_last(seen)})", replaces=note)
        return under

    def _on_execute(self, ev: events.ExecuteEvent) -> Finding | None:
        """A new SPMD program's first run: the large reshards the partitioner inserted into it."""
        compiled, self._unchecked = self._unchecked, None
        if sharding.enabled():
            from xlalab.distributed.spmd.usage import USAGE

            USAGE.ran(ev.graph_hash)  # the panel's collectives per run
        if compiled is None or compiled.graph_hash != ev.graph_hash:
            return None
        from xlalab.distributed.spmd.collectives import program_collectives, reshards
        from xlalab.distributed.spmd.usage import USAGE
        from xlalab.runtime import graph as graph_mod

        prog = compiled.program
        if prog is None:
            # A compile event without its program: the cache key holds the inputs' shardings,
            # which the event does not carry, so the newest program of this graph is the one.
            for candidate in list(graph_mod.CACHE.values()):
                if candidate.graph_hash == compiled.graph_hash:
                    prog = candidate
        if prog is not None:
            USAGE.program_compiled(compiled.graph_hash, prog)
        found = reshards(program_collectives(prog), RESHARD_MIN_BYTES) if prog is not None else []
        if not found:
            return None
        found.sort(key=lambda c: -c.nbytes)
        top = found[0]
        frames: list[Frame] = []
        for n in compiled.graph.nodes:  # the op whose lowering needed it, and the line that made it
            if n.name == top.aten_op and n.frames:
                frames = self.cells.user_frames(n.frames)
                if frames:
                    break
        where = frames[0] if frames else None
        details = [
            "the operands' shardings do not fit the op, so every run moves the tensor between layouts: "
            "shard them compatibly with xs.mark_sharding (or constrain the result's sharding)"
        ]
        if len(found) > 1:
            more = "; ".join(c.describe() for c in found[1:4])
            details.insert(0, f"{len(found) - 1} more in this program: {more}")
        if where is None:
            details.append("run %xla_debug on to record the line that creates every op")
        op = f" for {top.aten_op}" if top.aten_op else ""
        return self._finding(
            ("reshard", top.kind, top.aten_op, where),
            "reshard",
            f"Resharded: the partitioner inserted an {top.kind}{op}",
            top.describe() + self._at(where),
            frames,
            hex_hash(compiled.graph_hash),
            details,
        )

    def _keep_graph(self, ev: events.CompileEvent) -> None:
        self.graphs[hex_hash(ev.graph_hash)] = strip_graph(ev.graph)
        self.graphs.move_to_end(hex_hash(ev.graph_hash))
        while len(self.graphs) > KEEP_GRAPHS:
            self.graphs.popitem(last=False)

    def _on_dynamo_graph(self, ev: events.Event) -> None:
        """Count the graphs dynamo captured per function, said under its graph breaks."""
        function = getattr(ev, "function", "")
        n = self._dynamo_graphs[function] = getattr(ev, "graph_index", 0) + 1
        for key, f in self._keyed.items():
            if key[0] == "graph_break" and key[1] == function:
                _say_graph_count(f, function, n)

    def _on_graph_break(self, ev: events.Event) -> Finding:
        """Dynamo ended a compiled function's graph early: its reason, at the user's line."""
        function, reason = getattr(ev, "function", ""), self.cells.relabel(getattr(ev, "reason", ""))
        frames = self.cells.user_frames(ev.frames)
        where = frames[0] if frames else None
        finding = self._finding(
            ("graph_break", function, where, reason),
            "graph_break",
            f"Graph break in {function}",
            reason,
            frames,
            "",
            [
                getattr(ev, "advice", "")
                or "the function runs as several graphs, with Python (and eager ops) in between: "
                "move the line out of the compiled function, or replace it with tensor ops"
            ],
        )
        _say_graph_count(finding, function, self._dynamo_graphs.get(function, 0))
        return finding

    def _on_dynamo_recompile(self, ev: events.Event) -> Finding:
        """Dynamo compiled a function again: the guard that failed, in plain words."""
        from xlalab.dynamo.report import guard_text  # only compiled mode sends this event

        function = getattr(ev, "function", "")
        words = self.cells.relabel(getattr(ev, "explanation", ""))
        guard = self.cells.relabel(guard_text(getattr(ev, "guard", "")))
        frames = self.cells.user_frames(ev.frames)
        details = [f"dynamo's failed guard: {guard}"] if guard.strip() else []
        details.append(getattr(ev, "advice", "") or "keep the value fixed from call to call")
        self._guard_failed = True
        self._dynamo_recompiled = self._finding(
            ("dynamo_recompile", function, words),
            "recompile",
            f"Recompiled {function}",
            words or guard,
            frames,
            "",
            details,
        )
        return self._dynamo_recompiled

    def _label(self, f: Frame | None) -> str:
        return "an unknown place" if f is None else self.cells.label(f)

    def _at(self, f: Frame | None) -> str:
        """`` at cell [3], line 2: y = x[:n]`` for a line of user code ('' when unknown)."""
        if f is None:
            return ""
        src = self.cells.source_line(f)
        return f" at {self.cells.label(f)}" + (f": {src}" if src else "")

    def _user_made(self, made: Frame | None) -> Frame | None:
        return made if made is not None and self.cells.is_user(made) else None

    def _describe(
        self,
        change: graph_diff.Change,
        graph: Any,
        old: tuple[graph_diff.NodeSig, ...],
        new: tuple[graph_diff.NodeSig, ...],
    ) -> _Cause:
        """What changed between two graphs compiled at one place, in plain words, and the line."""
        made = self._user_made(change.made)
        no_lines = "" if made is not None else "run %xla_debug on to record the line that creates every op"
        if change.kind == "input_shape":
            return self._inputs_changed(graph_diff.input_changes(old, new) or [change], graph)
        held_by = _name_of(graph.nodes[change.index], self.cells) if change.index is not None else None
        details = [f"the changed value is {held_by}"] if held_by else []
        if change.kind == "baked_value" and change.arg:
            number = _number_kind(change.old, change.new)
            details.append(
                f"a Python {number} that changes between calls is baked into the graph: keep it constant "
                + ("(pad to a fixed size), or pass it as a tensor" if number == "int" else
                   "(the op takes it as a fixed argument), or compute with it as a tensor")
            )  # fmt: skip
            details += [no_lines] if no_lines else []
            if change.also:  # fixing the first alone would still recompile: name them all
                shown = "; ".join(change.also[:3]) + ("; ..." if len(change.also) > 3 else "")
                details.insert(0, f"also changed: {shown}")
            return _Cause(
                "baked_value",
                f"{'an integer' if number == 'int' else 'a Python ' + number} baked into the graph changed",
                f"{change.op} {change.arg}: {change.old} → {change.new}{self._at(made)}",
                made,
                details,
            )
        if change.kind == "ops":
            details.append(
                "the code took another path (a Python branch on a value, a flag, a different layer): "
                "keep the step's code path the same from step to step"
            )
            details += [no_lines] if no_lines else []
            return _Cause(
                "ops",
                "the graph's structure changed",
                f"the first different op: {change.old} became {change.new}{self._at(made)}",
                made,
                details,
            )
        if change.kind == "output_shape":
            details += [no_lines] if no_lines else []
            return _Cause(
                "output_shape", "an op's output shape changed",
                f"{change.op}: {change.old} → {change.new}{self._at(made)}", made, details,
            )  # fmt: skip
        if change.kind == "baked_value":
            details += [no_lines] if no_lines else []
            return _Cause(
                "baked_value", "a value baked into the graph changed",
                f"an argument of {change.op}{self._at(made)}", made, details,
            )  # fmt: skip
        if change.kind == "outputs":
            return self._outputs_changed(change, graph, old, new)
        if change.kind == "size":
            longer, shorter = (new, old) if len(new) > len(old) else (old, new)
            first = longer[len(shorter)]
            at = self._user_made(first.made) if longer is new else None
            grew = "grew" if longer is new else "shrank"
            return _Cause(
                "size",
                f"the graph {grew}",
                f"{len(old)} → {len(new)} nodes; the first {'new' if longer is new else 'missing'} op: "
                f"{first.name}{self._at(at)}",
                at,
                [] if at is not None or longer is not new else [no_lines],
            )
        return _Cause(
            "settings",
            "the compile settings changed",
            "same graph; matmul precision, XLA_HLO_DEBUG or a precision switch",
            None,
            [],
        )

    def _inputs_changed(self, changes: list[graph_diff.Change], graph: Any) -> _Cause:
        """Inputs whose shape (or dtype) changed: each by its variable and the upload that sent it."""
        parts: list[str] = []
        details: list[str] = []
        changed: list[tuple[str, str, str]] = []
        where: Frame | None = None
        for change in changes:
            node = graph.nodes[change.index]
            sent = self._sent_at(node)
            # No variable holds it when the barrier runs (a local of a function that returned):
            # named by the line that sent it, which the user can find.
            held = _name_of(node, self.cells)
            name = held or (f"the input sent at {self._label(sent)}" if sent else "")
            name = name or f"input {change.input_position}"
            parts.append(f"{name}: {change.old} → {change.new}")
            changed.append((name, change.old, change.new))
            if sent is None:
                continue
            where = where or sent
            src = self.cells.source_line(sent)
            details.append(f"{name} was sent to the device{self._at(sent)}" if held else f"{name}: {src}")
            dynamic = self._dynamic_ops.get(sent)
            if dynamic is not None:
                details.insert(
                    0,
                    f"{name} is the result of {dynamic}, whose output shape depends on the data: use a "
                    "fixed-size form (a mask and torch.where, or pad to a maximum size)",
                )
        first = changes[0]
        what = "shape" if first.old.partition("[")[0] == first.new.partition("[")[0] else "dtype"
        return _Cause("input_shape", f"an input's {what} changed", ", ".join(parts), where, details, changed)

    def _sent_at(self, node: Any) -> Frame | None:
        """The user's line whose upload made the device data ``node`` holds (None if unknown)."""
        value = getattr(node, "value", None)
        if value is None:
            return None
        for ref, frame in reversed(self._uploads):
            if ref() is value:
                return frame
        return None

    def _outputs_changed(
        self,
        change: graph_diff.Change,
        graph: Any,
        old: tuple[graph_diff.NodeSig, ...],
        new: tuple[graph_diff.NodeSig, ...],
    ) -> _Cause:
        """Same ops, but the graph returns other tensors: something keeps a tensor alive."""
        parts = []
        where: Frame | None = None
        for i in change.extra[:3]:
            made = self._user_made(new[i].made)
            where = where or made
            name = _name_of(graph.nodes[i], self.cells)
            parts.append(f"{name or new[i].name} ({new[i].type}){self._at(made) or ''}")
        more = f" and {len(change.extra) - 3} more" if len(change.extra) > 3 else ""
        message = f"{change.old} → {change.new}"
        if parts:
            message += "; now also returned: " + "; ".join(parts) + more
        elif change.dropped:
            message += f"; no longer returned: {', '.join(old[i].name for i in change.dropped[:3])}"
        return _Cause(
            "outputs",
            "the set of live outputs changed",
            message,
            where,
            [
                "a tensor of this step is still referenced (kept in a list, accumulated across steps, "
                "a variable from an earlier step), so the graph must return it: keep only what you "
                "need, or .detach() and read it after the barrier"
            ],
        )

    def _fold_under_read(self, cause: _Cause, barrier: list[Frame]) -> Finding | None:
        """A recompilation explained by a read that cut the step: said under that read's finding."""
        self._judge_reads()  # this barrier compiles work left after them: they cut the step
        reason, frames = self._step_reads[-1]
        what = ACCESS_REASONS.get(reason, reason)
        site = frames[0] if frames else None
        f = self._keyed.get(("transfer", reason, site))
        if f is None:
            f = self._finding(
                ("transfer", reason, site),
                "transfer",
                f"{what} cut the step",
                f"{what} of a pending tensor compiled and ran its graph before the step's end",
                frames,
                "",
                [READ_ADVICE],
            )
        else:
            self.cell_findings.add(f.id)
        # A loop of reads (generate's stopping check per token) recompiles the rest again and
        # again, each graph unlike the last: counted in one note, the first and latest change said.
        at = self._label(barrier[0] if barrier else None)
        note = f"so the rest of the step is another graph: it recompiled at {at} "
        seen = self._changes.setdefault((f.id, note), [])
        seen.append(f"{cause.title}: {cause.message}")
        times = "" if len(seen) == 1 else f"{len(seen)} times: "
        f.fold(note + f"({times}{_first_and_last(seen)})", replaces=note)
        return f

    def _on_sync(self, ev: events.SyncEvent) -> list[Finding]:
        if ev.reason == "mark_step":
            # Work left after the step's reads runs here: they split the step in two.
            found = self._judge_reads() if ev.graph is not None else []
            self._unjudged.clear()
            self._cell_steps += 1
            self._step_reads.clear()
            self._dynamo_recompiled = None
            self._guard_failed = False
            self.barriers.barrier()
            return found
        if ACCESS_REASONS.get(ev.reason) is None or ev.graph is None:
            return []  # a read of a value that was already computed
        frames = self.cells.user_frames(ev.frames)
        self._step_reads.append((ev.reason, frames))
        del self._step_reads[:-16]
        site = frames[0] if frames else None
        cuts = self._cuts[(ev.reason, site)] = self._cuts.get((ev.reason, site), 0) + 1
        read = _Read(ev.reason, frames, len(ev.graph.nodes), ev.graph_hash, getattr(ev, "inside", None))
        # A read that runs pending IR again and again in a cell with no barrier is a loop's step
        # cut by its read; any other read cuts its step only if a barrier runs work after it.
        if cuts >= 2 and self._cell_steps == 0:
            return [self._read_finding(read)]
        self._unjudged.append(read)
        return []

    def _judge_reads(self) -> list[Finding]:
        """The step's reads not judged yet cut it: their findings."""
        found = [self._read_finding(read) for read in self._unjudged]
        self._unjudged.clear()
        return found

    def _read_finding(self, read: _Read) -> Finding:
        """The finding of a read that cut its step, counted with this cell's reads at its line."""
        frames = read.frames
        site = frames[0] if frames else None
        what, subject, advice = self._read_words(read.reason, site)
        if read.inside is not None:  # the read is a library's: say which line, which the user cannot see
            path = library_path(read.inside.file)
            advice.insert(0, f"the read is inside {self._library_line(read.inside)}")
            advice[1:1] = [text for prefix, text in LIBRARY_READ_ADVICE.items() if path.startswith(prefix)]
        finding = self._finding(
            ("transfer", read.reason, site),
            "transfer",
            f"{what} cut the step",
            f"{subject} compiled and ran its graph ({read.nodes} nodes) before the step's end",
            frames,
            hex_hash(read.graph_hash),
            advice,
        )
        finding.count = max(finding.count, self._cuts.get((read.reason, site), 0))  # earlier reads count too
        return finding

    def _read_words(self, reason: str, site: Frame | None) -> tuple[str, str, list[str]]:
        """A read in words: what it was (the title's), the sentence's subject and the advice."""
        what = ACCESS_REASONS.get(reason, reason)
        line = self.cells.source_line(site) if site is not None else ""
        if reason != "item" or site is None or ".item(" in line:
            return what, f"{what} of a pending tensor", [READ_ADVICE]
        if _BRANCHING.search(line):  # a Python branch on the value: keep the choice on the device
            return (
                "a Python branch on a tensor's value",
                "the branch's read of a pending tensor",
                [WHERE_ADVICE, BRANCH_ADVICE],
            )
        return (
            "reading a Python number (float(), int(), bool(), if tensor)",
            "reading a Python number from a pending tensor",
            [READ_ADVICE],
        )

    def _library_line(self, inside: Frame) -> str:
        """``path:line in function: source`` of a library's line, the path as its package spells it."""
        src = self.cells.source_line(inside)
        where = f"{library_path(inside.file)}:{inside.line} in {inside.function}"
        return where + (f": {src}" if src else "")

    def _on_fallback(self, ev: events.FallbackEvent) -> Finding | None:
        if ev.op == ITEM_OP:
            return None
        frames = self.cells.user_frames(ev.frames)
        site = frames[0] if frames else None
        dynamic = ev.op in DYNAMIC_SHAPE_OPS or ev.data_dependent
        if dynamic and site is not None:
            self._dynamic_ops[site] = ev.op
        details = ["its inputs were copied to the host, the op ran in eager PyTorch, the result came back"]
        inside = getattr(ev, "inside", None)
        if inside is not None:  # a library called it: say which line, which the user cannot see
            details.insert(0, f"the call is inside {self._library_line(inside)}")
        if dynamic:
            details.append(
                "its output shape depends on the data, so graphs that use it recompile as it changes"
            )
            if ev.op in STATIC_FORMS:
                details.append(STATIC_FORMS[ev.op])
        elif ev.reason == events.MASKED_VALUES and ev.backward:
            details.append(MASK_BACKWARD)
        plain = ev.reason in ("", events.NO_LOWERING)
        return self._finding(
            ("fallback", ev.op, site),
            "fallback",
            f"{ev.op} ran on the CPU",
            f"{ev.op} has {events.NO_LOWERING}" if plain else f"{ev.op}: {ev.reason}",
            frames,
            "",
            details,
        )

    def _warning_event(self, f: Finding) -> dict[str, Any]:
        return {
            "kind": "warning",
            "time": time.time(),
            "where": self.location(f.where),
            "warning": self.as_json(f),
        }

    def location(self, f: Frame | None) -> dict[str, Any] | None:
        return None if f is None else self.cells.location(f)

    def as_json(self, f: Finding) -> dict[str, Any]:
        cell = (
            None
            if f.cell is None
            else {"execution_count": f.cell, "cell_id": self.cells.cell_ids.get(f.cell)}
        )
        return {
            "id": f.id,
            "category": f.category,
            "cell": cell,
            "title": f.title,
            "message": f.message,
            "details": list(f.details),
            "where": self.location(f.where),
            "frames": [self.cells.location(fr) for fr in f.frames],
            "count": f.count,
            "graph_hash": f.graph_hash,
            "previous_graph_hash": f.previous_graph_hash,
        }


def _site_key(ev: events.CompileEvent, frame: Frame | None) -> tuple[Any, ...]:
    """The place a graph is compared at: its barrier's line, and for lazy work a compiled program
    takes as an input, the type of what it makes too.

    One call of a compiled function syncs each pending input on its own (the optimizer's state of
    every parameter, created lazily at its first step): those graphs are other tensors, not
    variants of one another. An input whose shape changes from call to call is dynamo's guard to
    tell (its recompile finding), not a lazy-mode recompilation.
    """
    graph = ev.graph
    if ev.reason == DYNAMO_COMPILE:
        return (frame, ev.reason, ev.source)  # one compiled graph's programs, shape by shape
    if ev.reason != DYNAMO_INPUT or graph is None:
        return (frame,)
    return (frame, ev.reason, tuple(graph_diff.node_type(graph.nodes[i]) for i in graph.roots))


def _number_kind(old: str, new: str) -> str:
    """What a baked argument's values are, as Python spells them: ``int`` (or a list of ints, as a
    size), ``float`` or ``value`` (a dtype, a bool)."""
    kinds: set[str] = set()

    def add(value: Any) -> None:
        if isinstance(value, (list, tuple)):  # sizes: what their items are
            for v in value:
                add(v)
        else:
            kinds.add(type(value).__name__)

    for text in (old, new):
        try:
            add(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            kinds.add("value")
    if kinds <= {"int"}:
        return "int"
    return "float" if kinds <= {"int", "float"} else "value"


def _say_graph_count(f: Finding, function: str, n: int) -> None:
    """Keep one line under a graph break with how many graphs dynamo captured of its function."""
    tail = f" graphs of {function} captured so far"
    f.details = [d for d in f.details if not d.endswith(tail)]
    if n > 1:
        f.details.append(f"{n}{tail}")


def _name_of(node: Any, cells: CellMap) -> str | None:
    """The user's variable that holds ``node`` as its value, looked up in the frames on the stack.

    Only identities are compared (``tensor._st.node is node``, or its device data): nothing is
    read or computed.
    """
    from xlalab.runtime.tensor import XlaTensor

    # A compiled function's graph reads its arguments through nodes of its own: their device
    # data is the argument's.
    value = getattr(node, "value", None)
    f = sys._getframe(1)
    while f is not None:
        file = f.f_code.co_filename
        if not _is_runtime_library(file) and cells.is_user(Frame(file, f.f_lineno, f.f_code.co_name)):
            for name, v in list(f.f_locals.items()):
                if (
                    # A view's base counts too: ``labels = upload.squeeze(1)`` names the upload.
                    isinstance(v, XlaTensor)
                    and (
                        v._st.node is node
                        or (value is not None and v._st.node.value is value)
                        # a tensor laid out as eager's (a permute view of its storage) reads as
                        # the node it was made from
                        or (v._vcache is not None and v._vcache[1] is node)
                    )
                    and not name.startswith("_")
                ):
                    return name
        f = f.f_back  # type: ignore[assignment]
    return None
