"""Run a script with every debug output on and pack what a bug report needs into one tar.gz.

    xlalab debug-run --outfile /tmp/debug_run.tar.gz [--tidy] -- python -u SCRIPT [ARGS...]
    python -m xlalab.tools.debug_run --outfile /tmp/debug_run.tar.gz -- python -u SCRIPT [ARGS...]

The child runs with ``XLA_IR_DEBUG=1 XLA_HLO_DEBUG=1``, its graphs saved as text
(``XLA_SAVE_TENSORS_FILE``), a metrics report per step (``XLA_METRICS_FILE``), ``PT_XLA_DEBUG=1``
into a file, and verbose logging (``TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=tensor=5``). Its stdout
and stderr go through one pipe, so the log keeps the order in which lines were written (the
child gets ``PYTHONUNBUFFERED=1`` as well as your ``-u``); they are also echoed here as they come.
The child's exit code is debug-run's exit code (128+N when it was killed by signal N). Ctrl-C
stops the child and still writes the archive.

The archive holds, under one folder named after OUTFILE:

- ``output.txt``: stdout and stderr, interleaved;
- ``graphs.txt.<ordinal>``, ``metrics.txt``, ``pt_xla_debug.txt``: what the child wrote (absent
  when it never reached a sync, or when this xlalab does not write that output; the summary says so);
- ``versions.txt``: python, platform, torch, jax, jaxlib, xlalab, numpy and the installed packages,
  asked of the child's interpreter when the command starts with a python;
- ``env.txt``: the child's environment, secrets redacted (see below);
- ``summary.txt``: the run (command, exit code, duration), which outputs exist, and for every sync
  location (the first user frame of a sync) whose graph changed: the distinct graphs, and between
  consecutive ones the input shapes that changed and the first node that differs.

Nothing secret reaches the archive (it is made to be attached to a bug report): the values of
secret-named variables and options (``*TOKEN*``, ``*KEY*``, ``*PASSWORD*``..., the argument after
``--token``, ``--api-key``, ``-t``, ``-p``), values that look like tokens wherever they are kept,
and every token-shaped string (``hf_...``, ``ghp_...``, ``sk-...``, ``AKIA...``) are replaced by
``<redacted>`` in every file of the archive, the captured output included. The rules are in
``xlalab.tools.redact``.

Without ``--tidy`` the temporary folder is kept and its path printed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from xlalab.debug.recompiles import PlaceHistory
from xlalab.debug.units import count, format_size, part_of
from xlalab.debug.units import times as units_times

from .redact import REDACTED, Scrubber, looks_like_token, redact_argv, redact_env, secret_values

__all__ = [
    "REDACTED",
    "GraphBlock",
    "GraphNode",
    "SyncFrame",
    "debug_env",
    "diff_graphs",
    "looks_like_token",
    "main",
    "parse_graph_blocks",
    "redact_argv",
    "redact_env",
    "summarize_graphs",
]

PROG = "xlalab debug-run"

# Files the child writes into the temporary folder (names relative to it).
OUTPUT_FILE = "output.txt"
GRAPHS_FILE = "graphs.txt"
METRICS_FILE = "metrics.txt"
PT_XLA_DEBUG_FILE = "pt_xla_debug.txt"


def debug_env(tmpdir: str | os.PathLike[str]) -> dict[str, str]:
    """The variables debug-run sets for the child (they override the caller's values)."""
    d = Path(tmpdir)
    return {
        "XLA_IR_DEBUG": "1",
        "XLA_HLO_DEBUG": "1",
        "XLA_SAVE_TENSORS_FILE": str(d / GRAPHS_FILE),
        "XLA_SAVE_TENSORS_FMT": "text",
        "XLA_METRICS_FILE": str(d / METRICS_FILE),
        "PT_XLA_DEBUG": "1",
        "PT_XLA_DEBUG_FILE": str(d / PT_XLA_DEBUG_FILE),
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "TF_CPP_VMODULE": "tensor=5",
        # Belt and braces for a forgotten `-u`: a block-buffered stdout would come out after stderr.
        "PYTHONUNBUFFERED": "1",
    }


# --------------------------------------------------------------------------- the graph dump
# XLA_SAVE_TENSORS_FMT=text appends one block per sync, in the layout of torch_xla's
# _get_xla_tensors_text (reference 04_save_tensors_text_FULL.txt):
#
#   [ScheduleSyncTensorsGraph]
#   TensorsGraphInfo:
#     sync (<site-packages>/torch_xla/torch_xla.py:87)      <- the sync's frames, innermost first
#     <module> (<scripts>/s4_train.py:24)
#
#   Root Hashes: (...)
#
#   ## BEGIN_GRAPH
#   IR {
#     %0 = f32[10]{0} xla::device_data(), location=convert@module.py:1357, xla_shape=f32[10]{0}
#     ...
#   }
#
#   Graph Hash: 83d0c6563f8ed7ba439d4f64776b66e9
#
#   ## END_GRAPH
#
# The parser is deliberately lenient (a missing header, hash or frame list still yields a block)
# because the file may be cut short by a crash, which is exactly when someone runs debug-run.

_NODE = re.compile(r"^\s*%(?P<id>\d+) = (?P<shape>.+?) (?P<op>[^\s(]+)\((?P<operands>[^)]*)\)(?P<rest>.*)$")
_FRAME = re.compile(r"^\s+(?P<fn>.+?) \((?P<file>.+):(?P<line>\d+)\)\s*$")
_GRAPH_HASH = re.compile(r"^\s*Graph Hash:\s*(?P<hash>\S+)")
_LOCATION = re.compile(r",\s*location=(?P<loc>.*?)(?=,\s*[A-Za-z_]+=|$)")
# Attributes that describe where or with which value, not what is computed: xlalab's extra
# frames= (XLA_IR_DEBUG depth) and scalar= (the current value of a float graph input).
_NOT_STRUCTURE = re.compile(r",\s*(?:location|frames|scalar)=.*?(?=,\s*[A-Za-z_]+=|$)")
_LAYOUT = re.compile(r"\{[\d,]*\}")
_ROOT_INDEX = re.compile(r"\bROOT=\d+")


@dataclasses.dataclass(frozen=True)
class SyncFrame:
    function: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclasses.dataclass(frozen=True)
class GraphNode:
    id: int
    shape: str
    op: str
    operands: str
    attrs: str  # everything after the operands except location=, frames= and scalar=
    location: str | None

    @property
    def is_input(self) -> bool:
        return self.op.endswith("device_data")

    def signature(self) -> tuple[str, str, str, str]:
        # Which output slot a root fills (ROOT=n) shifts whenever outputs are added; that a node
        # is an output is structure, its number is not.
        return (self.op, self.shape, self.operands, _ROOT_INDEX.sub("ROOT", self.attrs))

    def describe(self) -> str:
        # xla_shape repeats the shape in the common case: show it only when it says something.
        attrs = ", ".join(a for a in self.attrs.split(", ") if a and a != f"xla_shape={self.shape}")
        text = f"%{self.id} = {self.shape} {self.op}({self.operands})" + (f", {attrs}" if attrs else "")
        return text + (f"  at {self.location}" if self.location else "")


@dataclasses.dataclass
class GraphBlock:
    index: int  # 1-based position among the syncs of its file
    frames: list[SyncFrame]
    nodes: list[GraphNode]
    graph_hash: str
    source: str = ""

    @property
    def inputs(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.is_input]


def _parse_node(line: str) -> GraphNode | None:
    m = _NODE.match(line)
    if m is None:
        return None
    rest = m["rest"]
    loc = _LOCATION.search(rest)
    attrs = _NOT_STRUCTURE.sub("", rest)
    return GraphNode(
        int(m["id"]),
        m["shape"],
        m["op"],
        m["operands"].strip(),
        attrs.strip(", "),
        loc["loc"].strip() if loc else None,
    )


def parse_graph_blocks(text: str, source: str = "") -> list[GraphBlock]:
    """The sync blocks of an ``XLA_SAVE_TENSORS_FMT=text`` file, in order."""
    blocks: list[GraphBlock] = []
    frames: list[SyncFrame] = []
    nodes: list[GraphNode] = []
    graph_hash = ""
    state = "between"  # between -> frames -> graph -> between

    def finish() -> None:
        nonlocal frames, nodes, graph_hash
        if nodes or graph_hash:
            # A block cut short by a crash has no hash line: derive one from its nodes so that
            # grouping by graph still works.
            h = (
                graph_hash
                or "~"
                + hashlib.sha1("\n".join("|".join(n.signature()) for n in nodes).encode()).hexdigest()[:32]
            )
            blocks.append(GraphBlock(len(blocks) + 1, frames, nodes, h, source))
        frames, nodes, graph_hash = [], [], ""

    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("[ScheduleSyncTensorsGraph]", "TensorsGraphInfo:"):
            if state == "graph" or nodes or graph_hash:
                finish()
            if stripped == "TensorsGraphInfo:":
                frames = []
                state = "frames"
            continue
        if state == "frames":
            fm = _FRAME.match(line)
            if fm:
                frames.append(SyncFrame(fm["fn"], fm["file"], int(fm["line"])))
                continue
            if stripped:
                state = "between"
        if stripped == "## BEGIN_GRAPH" or stripped == "IR {":
            state = "graph"
            continue
        if stripped == "## END_GRAPH":
            finish()
            state = "between"
            continue
        hm = _GRAPH_HASH.match(line)
        if hm:
            graph_hash = hm["hash"]
            continue
        if state == "graph":
            node = _parse_node(line)
            if node is not None:
                nodes.append(node)
    finish()
    return blocks


def _library_prefixes() -> tuple[str, ...]:
    """Folders whose frames are library code: xlalab, torch, torch_xla, jax and the stdlib."""
    dirs = {str(Path(__file__).resolve().parents[1]) + os.sep}
    for name in ("torch", "torch_xla", "jax", "jaxlib"):
        # find_spec on a top-level name locates the package without importing it.
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                dirs.update(str(Path(p).resolve()) + os.sep for p in spec.submodule_search_locations)
    for key in ("stdlib", "platstdlib"):
        dirs.add(str(Path(sysconfig.get_paths()[key]).resolve()) + os.sep)
    return tuple(sorted(dirs))


_LIBRARY_MARKERS = ("site-packages", "dist-packages", "<frozen")


def is_library_file(path: str, prefixes: tuple[str, ...] | None = None) -> bool:
    if any(marker in path for marker in _LIBRARY_MARKERS):
        return True
    prefixes = _library_prefixes() if prefixes is None else prefixes
    if path.startswith(prefixes):
        return True
    with contextlib.suppress(OSError):
        return str(Path(path).resolve()).startswith(prefixes) if os.path.isabs(path) else False
    return False


def sync_location(block: GraphBlock, prefixes: tuple[str, ...] | None = None) -> str:
    """Where the sync came from: its first user frame (innermost non-library frame)."""
    if not block.frames:
        return "(no frames recorded)"
    prefixes = _library_prefixes() if prefixes is None else prefixes
    for frame in block.frames:
        if not is_library_file(frame.file, prefixes):
            return str(frame)
    return str(block.frames[-1])  # all library frames: the outermost is the closest we have


def _short(shape: str) -> str:
    return _LAYOUT.sub("", shape)


def _shapes(a: str, b: str) -> tuple[str, str]:
    """Shapes for display: without layouts unless only the layout differs."""
    sa, sb = _short(a), _short(b)
    return (a, b) if sa == sb else (sa, sb)


def _where(block: GraphBlock, node: GraphNode) -> str:
    """Where an input comes from: its location, else the first located node that uses it.

    Device data uploaded with ``.to(device)`` often has no location of its own; the op that
    consumes it points at the user's line just as well.
    """
    if node.location:
        return f"  (at {node.location})"
    ref = re.compile(rf"%{node.id}(?![\d])")
    for user in block.nodes:
        if user.location and ref.search(user.operands):
            return f"  (used by {user.op} at {user.location})"
    return ""


def diff_graphs(old: GraphBlock, new: GraphBlock, limit: int = 8) -> list[str]:
    """What changed from ``old`` to ``new``: input shapes, node count, the first differing node."""
    lines: list[str] = []
    oi, ni = old.inputs, new.inputs
    if len(oi) == len(ni):
        changed = [(a, b) for a, b in zip(oi, ni) if a.shape != b.shape]
        if changed:
            lines.append(f"input shapes changed ({part_of(len(changed), len(ni), 'input')}):")
            for a, b in changed[:limit]:
                before, after = _shapes(a.shape, b.shape)
                lines.append(f"  input %{b.id}: {before} -> {after}{_where(new, b)}")
            if len(changed) > limit:
                lines.append(f"  ... and {len(changed) - limit} more")
        else:
            lines.append(f"input shapes: unchanged ({count(len(ni), 'input')})")
    else:
        lines.append(f"number of inputs: {len(oi)} -> {len(ni)}")
        before_c = Counter(_short(n.shape) for n in oi)
        after_c = Counter(_short(n.shape) for n in ni)
        for label, diff in (("only before", before_c - after_c), ("only after", after_c - before_c)):
            if diff:
                items = [f"{s} x{k}" if k > 1 else s for s, k in sorted(diff.items())]
                more = f" ... and {len(items) - limit} more" if len(items) > limit else ""
                lines.append(f"  {label}: {', '.join(items[:limit])}{more}")
    if len(old.nodes) != len(new.nodes):
        lines.append(f"number of nodes: {len(old.nodes)} -> {len(new.nodes)}")
    for a, b in zip(old.nodes, new.nodes):
        if a.signature() != b.signature():
            detail = f"{a.op} {_short(a.shape)} -> {b.op} {_short(b.shape)}"
            if a.op == b.op and a.shape == b.shape:
                detail = f"{b.op} {_short(b.shape)}, operands or attributes differ"
            lines.append(f"first differing node: %{b.id}: {detail}")
            lines.append(f"  before: {a.describe()}")
            lines.append(f"  after:  {b.describe()}")
            break
    else:
        if len(new.nodes) > len(old.nodes):
            extra = new.nodes[len(old.nodes)]
            lines.append(f"first differing node: the new graph goes on with {extra.describe()}")
        elif len(new.nodes) < len(old.nodes):
            lines.append(
                f"first differing node: the new graph stops before {old.nodes[len(new.nodes)].describe()}"
            )
        else:
            lines.append(
                "no difference in the dumped nodes: the hash covers something the text does not show "
                "(baked-in constants or settings)"
            )
    return lines


@dataclasses.dataclass
class _Place:
    """The syncs at one location, and how each of its distinct graphs came to be."""

    blocks: list[GraphBlock] = dataclasses.field(default_factory=list)
    history: PlaceHistory = dataclasses.field(default_factory=PlaceHistory)
    # hash -> "first", "warm-up", "recompiled" or "cached" (compiled at another location first)
    verdict: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def hashes(self) -> list[str]:
        return list(dict.fromkeys(b.graph_hash for b in self.blocks))


def _places(blocks: Sequence[GraphBlock], prefixes: tuple[str, ...]) -> dict[str, _Place]:
    """Group the syncs by location and judge each new graph by the notebook's warm-up rule.

    A graph whose hash already ran (here or elsewhere) came from the compilation cache: it is
    not compiled again, and like a cache hit in the notebook it marks the place as settled.
    """
    places: dict[str, _Place] = {}
    compiled: set[str] = set()
    for b in blocks:
        place = places.setdefault(sync_location(b, prefixes), _Place())
        place.blocks.append(b)
        if b.graph_hash in compiled:
            place.history.cache_hit()
            place.verdict.setdefault(b.graph_hash, "cached")
            continue
        compiled.add(b.graph_hash)
        first = place.history.compiles == 0
        recompiled = place.history.compiled([n.op for n in b.nodes])
        place.verdict[b.graph_hash] = "first" if first else "recompiled" if recompiled else "warm-up"
    return places


_VERDICT_NOTE = {
    "first": "",
    "cached": " (compiled for another location first)",
    "warm-up": " (warm-up: expected)",
    "recompiled": " (RECOMPILED)",
}


def summarize_graphs(blocks: Sequence[GraphBlock], prefixes: tuple[str, ...] | None = None) -> list[str]:
    """Which sync locations recompiled, and what changed between their consecutive graphs.

    The first two compilations at a location are warm-up (SGD's momentum or Adam's moments
    appear at step 2 and add inputs), unless they have the same ops: the rule the notebook and
    PT_XLA_DEBUG use (``xlalab.debug.recompiles``). Warm-up is listed, not flagged.
    """
    if not blocks:
        return ["no sync blocks in the graph file"]
    prefixes = _library_prefixes() if prefixes is None else prefixes
    places = _places(blocks, prefixes)
    distinct_all = len({b.graph_hash for b in blocks})
    recompiling = {loc: p for loc, p in places.items() if p.history.recompiles}
    settled = {loc: p for loc, p in places.items() if not p.history.recompiles and len(p.hashes) > 1}
    warmed = sum(1 for p in settled.values() if p.history.warm_up_compiles)
    lines = [
        f"{count(len(blocks), 'sync')}, {count(distinct_all, 'distinct graph')}, "
        f"{count(len(places), 'sync location')}: {len(recompiling)} recompiled, {warmed} warmed up (expected)"
    ]
    ranked = sorted(recompiling.items(), key=lambda kv: -kv[1].history.recompiles) + list(settled.items())
    for loc, place in ranked:
        order = place.hashes
        first = {h: next(b for b in place.blocks if b.graph_hash == h) for h in order}
        uses = Counter(b.graph_hash for b in place.blocks)
        lines.append("")
        head = f"{len(place.blocks)} syncs, {len(order)} distinct graphs"
        if place.history.recompiles:
            lines.append(f"RECOMPILED at {loc}: {head}, {count(place.history.recompiles, 'recompilation')}")
        elif place.history.warm_up_compiles:
            lines.append(
                f"warm-up at {loc}: {head}, no recompilation (step 1 runs without the optimizer's state, "
                "step 2 creates it: expected)"
            )
        else:
            lines.append(f"no recompilation at {loc}: {head}, each compiled for another location first")
        for k, h in enumerate(order, 1):
            b = first[h]
            sizes = f"{count(len(b.nodes), 'node')}, {count(len(b.inputs), 'input')}"
            lines.append(
                f"  graph {k}: hash {h}, first at sync #{b.index}, {count(uses[h], 'sync')}, "
                f"{sizes}{_VERDICT_NOTE[place.verdict[h]]}"
            )
        # Compare each new graph with the one that ran at this location just before it: that is
        # the graph the recompilation replaced.
        seq = [b.graph_hash for b in place.blocks]
        for k, h in enumerate(order[1:], 2):
            pos = seq.index(h)
            prev_hash = seq[pos - 1]
            prev_k = order.index(prev_hash) + 1
            lines.append(f"  graph {prev_k} -> graph {k} (sync #{first[h].index}):")
            lines.extend("    " + s for s in diff_graphs(first[prev_hash], first[h]))
        returns = sum(1 for a, b in itertools.pairwise(seq) if a != b and seq.index(b) < seq.index(a))
        if returns:
            lines.append(f"  (switched back to an earlier, cached graph {units_times(returns)})")
    stable = {loc: p for loc, p in places.items() if len(p.hashes) == 1}
    if stable:
        lines.append("")
        lines.append("locations with a single graph (no recompilation):")
        for loc, place in stable.items():
            b = place.blocks[0]
            syncs = count(len(place.blocks), "sync")
            lines.append(f"  {loc}: {syncs}, hash {b.graph_hash}, {count(len(b.nodes), 'node')}")
    return lines


# --------------------------------------------------------------------------- other outputs

_EXECUTING = re.compile(r"Executing IR graph hash (?P<hash>\S+) on device (?P<device>\S+)")


def hex_hash(text: str) -> str:
    """A graph hash in torch_xla's form (hex, as the graph file and PT_XLA_DEBUG print it).

    A 64-bit hash printed in decimal has 17 to 20 digits, more than its hex form can have:
    those are converted; anything else already is hex.
    """
    if text.isdigit() and len(text) > 16:
        return f"{int(text):x}"
    return text


def summarize_log_hashes(log_text: str) -> list[str]:
    """Without a graph file, TF_CPP_VMODULE=tensor=5's log still tells how many graphs ran."""
    hashes = [hex_hash(m["hash"]) for m in _EXECUTING.finditer(log_text)]
    if not hashes:
        return []
    counts = Counter(hashes)
    listed = ", ".join(f"{h} x{n}" for h, n in counts.items())
    return [
        f"from the tensor=5 log in {OUTPUT_FILE}: {count(len(hashes), 'execution')} of "
        f"{count(len(counts), 'distinct graph')}: {listed} (where they were synced, and what changed, "
        "needs the graph file)"
    ]


_COUNTER = re.compile(r"^Counter: (?P<name>\S+)\s*\n\s+Value: (?P<value>\S+)", re.MULTILINE)
_METRIC = re.compile(r"^Metric: (?P<name>\S+)\s*\n\s+TotalSamples: (?P<value>\S+)", re.MULTILINE)
_STEP_HEADER = re.compile(r"^\[MetricsData; step=(?P<step>\d+)\]\s*$", re.MULTILINE)


def summarize_metrics(text: str) -> list[str]:
    """The last report of an XLA_METRICS_FILE: compile and execute counts, CPU fallbacks."""
    headers = list(_STEP_HEADER.finditer(text))
    last = text[headers[-1].end() :] if headers else text
    counters = {m["name"]: m["value"] for m in _COUNTER.finditer(last)}
    samples = {m["name"]: m["value"] for m in _METRIC.finditer(last)}
    if not counters and not samples:
        return ["no metrics report found in the file"]
    # Reports are numbered from step=0, as torch_xla numbers them: the report after the third
    # step is headed step=2. Say how many steps ran, from MarkStep when the report has it.
    marks = counters.get("MarkStep", "")
    steps = int(marks) if marks.isdigit() else int(headers[-1]["step"]) + 1 if headers else None
    after = f"after {count(steps, 'step')}" if steps is not None else "the report"
    header = f", headed [MetricsData; step={headers[-1]['step']}]" if headers else ""
    lines = [
        f"last report ({after}; {count(len(headers) or 1, 'report')}{header}): "
        f"CompileTime samples={samples.get('CompileTime', 0)}, "
        f"ExecuteTime samples={samples.get('ExecuteTime', 0)}, "
        f"UncachedCompile={counters.get('UncachedCompile', 0)}, "
        f"CachedCompile={counters.get('CachedCompile', 0)}"
    ]
    fallbacks = {k: v for k, v in counters.items() if k.startswith("aten::")}
    if fallbacks:
        lines.append(
            "ops run on the CPU (aten:: counters): " + ", ".join(f"{k}={v}" for k, v in fallbacks.items())
        )
    else:
        lines.append("ops run on the CPU (aten:: counters): none")
    return lines


_PROFILER = re.compile(r"(?:pt-xla|xlalab)-profiler:?(?P<note>.*)$")


_POST_COMPILE_SIZE = re.compile(r"^Post Compilation Analysis: (?P<what>[A-Za-z ]+?) size: (?P<gb>[\d.]+) GB")


def _approx_size(gb: float) -> str:
    """A size PT_XLA_DEBUG printed as GB with six decimals (a resolution of about 1 KB)."""
    nbytes = gb * 2**30
    return "under 1 KB" if nbytes < 1024 else "~" + format_size(nbytes)


def summarize_pt_xla_debug(text: str) -> list[str]:
    """Compilation and execution causes from a PT_XLA_DEBUG file, plus its analysis lines."""
    causes: dict[str, Counter[str]] = {"Compilation": Counter(), "Execution": Counter()}
    lines = text.splitlines()
    notes: list[str] = []
    largest: dict[str, float] = {}
    for i, line in enumerate(lines):
        for kind in causes:
            if line.strip() == f"{kind} Analysis: {kind} Cause" and i + 1 < len(lines):
                causes[kind][lines[i + 1].split(":", 1)[-1].strip()] += 1
        sm = _POST_COMPILE_SIZE.match(line)
        if sm:
            what = sm["what"].lower()
            largest[what] = max(largest.get(what, 0.0), float(sm["gb"]))
        pm = _PROFILER.search(line)
        if pm:
            note = pm["note"].strip()
            if note and note not in notes and set(note) - set("=-"):
                notes.append(note)
    out: list[str] = []
    for kind, counter in causes.items():
        total = sum(counter.values())
        detail = "; ".join(f"{cause} x{n}" for cause, n in counter.most_common())
        out.append(f"{kind.lower()}s: {total}" + (f" ({detail})" if detail else ""))
    if largest:
        sizes = ", ".join(f"{what} {_approx_size(gb)}" for what, gb in largest.items())
        out.append(f"largest compiled graph sizes: {sizes}")
    if notes:
        out.append("analysis:")
        out.extend(f"  {n}" for n in notes[-15:])
    return out


# --------------------------------------------------------------------------- versions

_VERSIONS_SNIPPET = r"""
import importlib.metadata as md, json, platform, sys
def v(name):
    try:
        return md.version(name)
    except Exception:
        return None
pkgs = sorted({(d.metadata["Name"] or "?", d.version) for d in md.distributions()})
print(json.dumps({
    "executable": sys.executable, "python": sys.version.replace("\n", " "),
    "platform": platform.platform(), "machine": platform.machine(),
    "packages": {n: v(n) for n in ("torch", "jax", "jaxlib", "xlalab", "numpy", "torch_xla")},
    "installed": [f"{n}=={ver}" for n, ver in pkgs],
}))
"""


def _python_of(command: Sequence[str]) -> str | None:
    """The child's interpreter when the command starts with one (python, python3.11, /x/bin/python)."""
    if command and re.fullmatch(r"python[\d.]*", os.path.basename(command[0])):
        return command[0]
    return None


def collect_versions(command: Sequence[str], env: Mapping[str, str]) -> str:
    info: dict[str, object] | None = None
    source = ""
    exe = _python_of(command)
    if exe is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
            proc = subprocess.run(
                [exe, "-c", _VERSIONS_SNIPPET], env=dict(env), capture_output=True, text=True, timeout=60
            )
            if proc.returncode == 0:
                info = json.loads(proc.stdout)
                source = f"asked of the child's interpreter ({exe})"
    if info is None:
        # Same snippet, run here: the command is not a python, or asking it failed.
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(_VERSIONS_SNIPPET, {})
        info = json.loads(buf.getvalue())
        source = f"of the interpreter running debug-run ({sys.executable})"
    assert info is not None
    packages = info.get("packages", {})
    lines = [
        f"# versions {source}",
        f"python: {info.get('python')}",
        f"executable: {info.get('executable')}",
        f"platform: {info.get('platform')} ({info.get('machine')})",
        f"cpu count: {os.cpu_count()}",
    ]
    if isinstance(packages, dict):
        lines.extend(f"{name}: {ver or 'not installed'}" for name, ver in packages.items())
    installed = info.get("installed", [])
    if isinstance(installed, list):
        lines.append("")
        lines.append("# installed packages")
        lines.extend(str(x) for x in installed)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- running


class UsageError(Exception):
    """A problem with the command line or the outfile: reported as one line, exit code 2."""


def _check_outfile(outfile: str) -> Path:
    path = Path(outfile).expanduser()
    if path.is_dir():
        raise UsageError(
            f"--outfile {outfile} is a directory; give a file name such as {path / 'debug_run.tar.gz'}"
        )
    parent = path.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"cannot write --outfile {outfile}: the directory {parent} does not exist")
    try:
        # Probe with a real file: os.access says yes to root on a read-only file system.
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".xlalab-probe-"):
            pass
    except OSError as e:
        raise UsageError(f"cannot write --outfile {outfile}: {e.strerror or e} ({parent})") from None
    return path


def _check_command(command: Sequence[str], env: Mapping[str, str]) -> None:
    if not command:
        raise UsageError(
            "no command to run; usage: xlalab debug-run --outfile OUT.tar.gz -- python -u SCRIPT [ARGS...]"
        )
    exe = command[0]
    if os.sep in exe:
        if not os.path.isfile(exe):
            raise UsageError(f"command not found: {exe}")
        if not os.access(exe, os.X_OK):
            raise UsageError(f"command is not executable: {exe}")
    elif shutil.which(exe, path=env.get("PATH")) is None:
        raise UsageError(f"command not found: {exe} (not on PATH)")


def run_captured(command: Sequence[str], env: Mapping[str, str], log_path: Path, echo: bool = True) -> int:
    """Run ``command`` with stdout and stderr on one pipe, tee it to ``log_path``; its returncode.

    One pipe (not two read in turn) is what keeps the order: the kernel queues the bytes in the
    order the child wrote them. Ctrl-C reaches the child through the terminal's process group;
    we keep reading until it exits so its last words (a traceback) land in the log. A second
    Ctrl-C terminates the child, a third kills it.
    """
    out = getattr(sys.stdout, "buffer", None)
    interrupts = 0

    def on_sigint(signum: int, frame: object) -> None:
        # The terminal sent Ctrl-C to the whole process group, the child included: let it stop
        # (and print its traceback) on its own; forwarding it would interrupt its handler
        # halfway. This handler does not raise: a KeyboardInterrupt landing just after os.read
        # returned would drop the very bytes we are here to keep.
        nonlocal interrupts
        interrupts += 1
        if proc.poll() is not None:
            return
        if interrupts == 1:
            _note("interrupted; waiting for the command to exit (Ctrl-C again to terminate it)")
        elif interrupts == 2:
            _note("terminating the command (Ctrl-C again to kill it)")
            proc.terminate()
        else:
            proc.kill()

    with open(log_path, "wb") as log, contextlib.ExitStack() as restore:
        proc = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env), bufsize=0
        )
        assert proc.stdout is not None
        if threading.current_thread() is threading.main_thread():
            restore.callback(signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, on_sigint))
            # A scheduler's SIGTERM to debug-run goes to the child; we still pack what it wrote.
            restore.callback(
                signal.signal,
                signal.SIGTERM,
                signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM)),
            )
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 65536):  # EINTR is retried (PEP 475): our handlers never raise
            log.write(chunk)
            if echo and out is not None:
                with contextlib.suppress(OSError, ValueError):
                    out.write(chunk)
                    out.flush()
        proc.stdout.close()
        return proc.wait()


def _note(message: str) -> None:
    print(f"\n{PROG}: {message}", file=sys.stderr, flush=True)


def exit_code(returncode: int) -> int:
    """A child's returncode as a shell would report it (killed by signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit code {exit_code(returncode)})"
    return f"exited with code {returncode}"


def _output_status(tmpdir: Path, stem: str, what: str, why: str) -> tuple[list[Path], str]:
    files = sorted(p for p in tmpdir.glob(stem + "*") if p.is_file())
    if files:
        sizes = ", ".join(f"{p.name} ({format_size(p.stat().st_size)})" for p in files)
        return files, f"{what}: {sizes}"
    return files, f"{what}: MISSING ({why})"


def _show_command(command: Sequence[str]) -> str:
    """The command on one line, quoted as a shell would need it, secrets redacted."""
    return " ".join(shlex.quote(a) for a in redact_argv(command)).replace("\n", "\\n")


def write_summary(
    tmpdir: Path,
    command: Sequence[str],
    returncode: int,
    seconds: float,
    set_vars: Mapping[str, str],
    tidy: bool,
) -> str:
    lines = [
        "xlalab debug-run summary",
        "========================",
        f"command:   {_show_command(command)}",
        f"cwd:       {os.getcwd()}",
        f"result:    the command {_describe_exit(returncode)} after {seconds:.1f} s",
        f"files:     {'removed after packing (--tidy)' if tidy else tmpdir}",
        "debug variables set for the child: " + " ".join(f"{k}={v}" for k, v in set_vars.items()),
    ]
    replaced = {k: os.environ[k] for k, v in set_vars.items() if os.environ.get(k, v) != v}
    if replaced:
        # The user's own values lose to ours; say so, since they may explain a difference in behaviour.
        shown = redact_env(replaced)
        lines.append("  (these replaced your " + " ".join(f"{k}={v}" for k, v in shown.items()) + ")")
    lines += [
        "",
        "outputs",
        "-------",
    ]
    nosync = "the script never reached a sync, or this xlalab does not write it yet"
    graph_files, status = _output_status(tmpdir, GRAPHS_FILE, "graphs (XLA_SAVE_TENSORS_FILE)", nosync)
    lines.append(status)
    metric_files, status = _output_status(tmpdir, METRICS_FILE, "metrics (XLA_METRICS_FILE)", nosync)
    lines.append(status)
    debug_files, status = _output_status(
        tmpdir,
        PT_XLA_DEBUG_FILE,
        "PT_XLA_DEBUG (PT_XLA_DEBUG_FILE)",
        "no compilation or execution happened, or this xlalab does not write it yet",
    )
    lines.append(status)
    log = tmpdir / OUTPUT_FILE
    log_text = log.read_text(errors="replace") if log.exists() else ""
    n_lines = count(len(log_text.splitlines()), "line")
    lines.append(f"output: {OUTPUT_FILE} ({n_lines}, stdout and stderr interleaved)")

    lines += ["", "graph recompilations", "--------------------"]
    if graph_files:
        prefixes = _library_prefixes()
        for gf in graph_files:
            blocks = parse_graph_blocks(gf.read_text(errors="replace"), gf.name)
            lines.append(f"[{gf.name}]")
            lines.extend(summarize_graphs(blocks, prefixes))
    else:
        lines.append("unknown: no graph file (see outputs above)")
        lines.extend(summarize_log_hashes(log_text))

    if metric_files:
        lines += ["", "metrics", "-------"]
        for mf in metric_files:
            lines.append(f"[{mf.name}]")
            lines.extend(summarize_metrics(mf.read_text(errors="replace")))
    if debug_files:
        lines += ["", "PT_XLA_DEBUG", "------------"]
        for df in debug_files:
            lines.append(f"[{df.name}]")
            lines.extend(summarize_pt_xla_debug(df.read_text(errors="replace")))
    if returncode != 0:
        tail = log_text.splitlines()[-25:]
        title = f"last {count(len(tail), 'line')} of output"
        lines += ["", title, "-" * len(title)]
        lines.extend(tail)
    text = "\n".join(lines) + "\n"
    (tmpdir / "summary.txt").write_text(text)
    return text


def scrub_folder(tmpdir: Path, scrubber: Scrubber) -> None:
    """Scrub every file debug-run packs: whatever the child printed or wrote may hold a secret."""
    for p in sorted(tmpdir.iterdir()):
        if p.is_file():
            scrubber.scrub_file(p)


def pack(tmpdir: Path, outfile: Path) -> list[str]:
    """Write ``tmpdir``'s files into ``outfile`` under one folder named after it; the member names."""
    root = outfile.name
    for suffix in (".tar.gz", ".tgz", ".gz", ".tar"):
        if root.endswith(suffix) and len(root) > len(suffix):
            root = root[: -len(suffix)]
            break
    partial = outfile.with_name(outfile.name + ".partial")
    names: list[str] = []
    # Written aside and renamed, so a failure never leaves a truncated archive under the real name.
    with tarfile.open(partial, "w:gz") as tar:
        for p in sorted(tmpdir.iterdir()):
            if p.is_file():
                name = f"{root}/{p.name}"
                tar.add(p, arcname=name)
                names.append(name)
    os.replace(partial, outfile)
    return names


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    if parser is None:
        parser = argparse.ArgumentParser(prog=PROG)
    parser.description = (
        "Run a command with xlalab's debug outputs on (IR/HLO debug, graph dumps, metrics, PT_XLA_DEBUG, "
        "verbose logs) and pack its interleaved output, graphs, metrics, versions, redacted environment "
        "and a recompilation summary into a tar.gz."
    )
    parser.epilog = (
        "example: xlalab debug-run --outfile /tmp/debug_run.tar.gz -- python -u train.py --steps 20\n\n"
        "Keep the run short (tens of steps). The exit code is the command's. Secrets are redacted in every "
        "file of the archive, the captured output included: the values of variables and options whose names "
        "contain TOKEN, KEY, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH, the argument after -t or -p, and "
        "anything shaped like a token (hf_..., ghp_..., sk-..., AKIA...; see `pydoc xlalab.tools.redact`)."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--outfile", required=True, help="the tar.gz to write")
    parser.add_argument("--tidy", action="store_true", help="remove the temporary folder after packing")
    parser.add_argument("--quiet", action="store_true", help="do not echo the command's output here")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="the command, after --: python -u SCRIPT [ARGS...]"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    try:
        env = dict(os.environ)
        _check_command(command, env)
        outfile = _check_outfile(args.outfile)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    tmpdir = Path(tempfile.mkdtemp(prefix="xlalab-debug-run-"))
    set_vars = debug_env(tmpdir)
    env.update(set_vars)
    start = time.monotonic()
    try:
        returncode = run_captured(command, env, tmpdir / OUTPUT_FILE, echo=not args.quiet)
    except OSError as e:  # e.g. the executable vanished or is not a valid binary
        print(f"{PROG}: error: cannot run {command[0]}: {e}", file=sys.stderr)
        shutil.rmtree(tmpdir, ignore_errors=True)
        return 2
    seconds = time.monotonic() - start

    (tmpdir / "env.txt").write_text("".join(f"{k}={v}\n" for k, v in sorted(redact_env(env).items())))
    try:
        (tmpdir / "versions.txt").write_text(collect_versions(command, env))
    except Exception as e:  # versions are a nicety: never lose the run's archive over them
        (tmpdir / "versions.txt").write_text(f"could not collect versions: {e!r}\n")
    write_summary(tmpdir, command, returncode, seconds, set_vars, args.tidy)
    scrub_folder(tmpdir, Scrubber(secret_values(env, command)))
    summary = (tmpdir / "summary.txt").read_text(errors="replace")
    try:
        members = pack(tmpdir, outfile)
    except OSError as e:
        print(f"{PROG}: error: cannot write {outfile}: {e}; the files are in {tmpdir}", file=sys.stderr)
        return 2
    if args.tidy:
        shutil.rmtree(tmpdir, ignore_errors=True)

    recompiled = [line for line in summary.splitlines() if line.startswith("RECOMPILED at ")]
    print(f"\n{PROG}: the command {_describe_exit(returncode)}", file=sys.stderr)
    for line in recompiled:
        print(f"{PROG}: {line}", file=sys.stderr)
    missing = [line.split(":")[0] for line in summary.splitlines() if ": MISSING (" in line]
    if missing:
        print(f"{PROG}: not produced: {', '.join(missing)}", file=sys.stderr)
    print(f"{PROG}: wrote {outfile} ({count(len(members), 'file')}; start with summary.txt)", file=sys.stderr)
    if not args.tidy:
        print(f"{PROG}: the files are also in {tmpdir} (use --tidy to remove them)", file=sys.stderr)
    return exit_code(returncode)


def main(argv: Iterable[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
