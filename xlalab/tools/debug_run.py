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

Redaction rule (env.txt and the command line in summary.txt): a variable whose *name* contains
TOKEN, KEY, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH (any case) has its value replaced by
``<redacted>``. Any other value is redacted when it *looks like* a token: a known token prefix
(``ghp_``, ``github_pat_``, ``glpat-``, ``hf_``, ``sk-``, ``xoxb-``, ``AKIA``, ``AIza``, ``ya29.``,
a JWT ``eyJ...``), or one word of 32 or more letters, digits and ``+/=_.-`` that mixes letters and
digits and is not a path. The password in a URL (``scheme://user:PASSWORD@host``) is redacted in
place. Values of command-line options whose name matches the name rule (``--api-key X``,
``--api-key=X``) are redacted too. This errs on the side of hiding: a 40-character git hash in a
variable is hidden as well.

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

__all__ = [
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


# --------------------------------------------------------------------------- redaction

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_TOKEN_PREFIX = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}"
    r"|ya29\.[0-9A-Za-z_\-]{20,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r")"
)
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_.\-]{32,}")
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]+:)(?P<pw>[^@/\s]+)(?=@)")


def looks_like_token(value: str) -> bool:
    """True when a value (not its name) looks like a credential; see the module docstring."""
    if _TOKEN_PREFIX.search(value):
        return True
    if not _OPAQUE.fullmatch(value) or value.startswith(("/", ".", "~")) or "//" in value:
        return False
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    return has_letter and has_digit


def redact_value(name: str, value: str) -> str:
    if value and (_SECRET_NAME.search(name) or looks_like_token(value)):
        return REDACTED
    return _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED, value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with secret values replaced by ``<redacted>`` (names are kept)."""
    return {name: redact_value(name, value) for name, value in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with token-like words and the values of secret-named options redacted."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and "=" in arg:
            opt, _, val = arg.partition("=")
            out.append(f"{opt}={redact_value(opt, val)}")
            continue
        if arg.startswith("--") and _SECRET_NAME.search(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_value("", arg))
    return out


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
            lines.append(f"input shapes changed ({len(changed)} of {len(ni)} inputs):")
            for a, b in changed[:limit]:
                before, after = _shapes(a.shape, b.shape)
                lines.append(f"  input %{b.id}: {before} -> {after}{_where(new, b)}")
            if len(changed) > limit:
                lines.append(f"  ... and {len(changed) - limit} more")
        else:
            lines.append(f"input shapes: unchanged ({len(ni)} inputs)")
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


def summarize_graphs(blocks: Sequence[GraphBlock], prefixes: tuple[str, ...] | None = None) -> list[str]:
    """Which sync locations recompiled, and what changed between their consecutive graphs."""
    if not blocks:
        return ["no sync blocks in the graph file"]
    prefixes = _library_prefixes() if prefixes is None else prefixes
    groups: dict[str, list[GraphBlock]] = {}
    for b in blocks:
        groups.setdefault(sync_location(b, prefixes), []).append(b)
    distinct_all = len({b.graph_hash for b in blocks})
    recompiling = {loc: bs for loc, bs in groups.items() if len({b.graph_hash for b in bs}) > 1}
    lines = [
        f"{len(blocks)} syncs, {distinct_all} distinct graphs, {len(groups)} sync locations; "
        f"{len(recompiling)} location(s) with more than one graph"
    ]
    for loc, bs in sorted(recompiling.items(), key=lambda kv: -len({b.graph_hash for b in kv[1]})):
        order: list[str] = []
        first: dict[str, GraphBlock] = {}
        count: Counter[str] = Counter()
        for b in bs:
            count[b.graph_hash] += 1
            if b.graph_hash not in first:
                first[b.graph_hash] = b
                order.append(b.graph_hash)
        lines.append("")
        lines.append(f"RECOMPILED at {loc}: {len(bs)} syncs, {len(order)} distinct graphs")
        for k, h in enumerate(order, 1):
            b = first[h]
            lines.append(
                f"  graph {k}: hash {h}, first at sync #{b.index}, {count[h]} sync(s), "
                f"{len(b.nodes)} nodes, {len(b.inputs)} inputs"
            )
        # Compare each new graph with the one that ran at this location just before it: that is
        # the graph the recompilation replaced.
        seq = [b.graph_hash for b in bs]
        for k, h in enumerate(order[1:], 2):
            pos = seq.index(h)
            prev_hash = seq[pos - 1]
            prev_k = order.index(prev_hash) + 1
            lines.append(f"  graph {prev_k} -> graph {k} (sync #{first[h].index}):")
            lines.extend("    " + s for s in diff_graphs(first[prev_hash], first[h]))
        returns = sum(1 for a, b in itertools.pairwise(seq) if a != b and seq.index(b) < seq.index(a))
        if returns:
            lines.append(f"  (switched back to an earlier, cached graph {returns} time(s))")
    stable = {loc: bs for loc, bs in groups.items() if loc not in recompiling}
    if stable:
        lines.append("")
        lines.append("locations with a single graph (no recompilation):")
        for loc, bs in stable.items():
            lines.append(f"  {loc}: {len(bs)} sync(s), hash {bs[0].graph_hash}, {len(bs[0].nodes)} nodes")
    return lines


# --------------------------------------------------------------------------- other outputs

_EXECUTING = re.compile(r"Executing IR graph hash (?P<hash>\S+) on device (?P<device>\S+)")


def summarize_log_hashes(log_text: str) -> list[str]:
    """Without a graph file, TF_CPP_VMODULE=tensor=5's log still tells how many graphs ran."""
    hashes = [m["hash"] for m in _EXECUTING.finditer(log_text)]
    if not hashes:
        return []
    counts = Counter(hashes)
    listed = ", ".join(f"{h} x{n}" for h, n in counts.items())
    return [
        f"from the tensor=5 log in {OUTPUT_FILE}: {len(hashes)} executions of {len(counts)} distinct "
        f"graph(s): {listed} (where they were synced, and what changed, needs the graph file)"
    ]


_COUNTER = re.compile(r"^Counter: (?P<name>\S+)\s*\n\s+Value: (?P<value>\S+)", re.MULTILINE)
_METRIC = re.compile(r"^Metric: (?P<name>\S+)\s*\n\s+TotalSamples: (?P<value>\S+)", re.MULTILINE)
_STEP_HEADER = re.compile(r"^\[MetricsData; step=(?P<step>\d+)\]\s*$", re.MULTILINE)


def summarize_metrics(text: str) -> list[str]:
    """The last report of an XLA_METRICS_FILE: compile and execute counts, CPU fallbacks."""
    headers = list(_STEP_HEADER.finditer(text))
    last = text[headers[-1].end() :] if headers else text
    step = f"step={headers[-1]['step']}, " if headers else ""
    counters = {m["name"]: m["value"] for m in _COUNTER.finditer(last)}
    samples = {m["name"]: m["value"] for m in _METRIC.finditer(last)}
    if not counters and not samples:
        return ["no metrics report found in the file"]
    lines = [
        f"last report ({step}{len(headers) or 1} report(s)): "
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


def summarize_pt_xla_debug(text: str) -> list[str]:
    """Compilation and execution causes from a PT_XLA_DEBUG file, plus its analysis lines."""
    causes: dict[str, Counter[str]] = {"Compilation": Counter(), "Execution": Counter()}
    lines = text.splitlines()
    notes: list[str] = []
    for i, line in enumerate(lines):
        for kind in causes:
            if line.strip() == f"{kind} Analysis: {kind} Cause" and i + 1 < len(lines):
                causes[kind][lines[i + 1].split(":", 1)[-1].strip()] += 1
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
        sizes = ", ".join(f"{p.name} ({p.stat().st_size} bytes)" for p in files)
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
    lines.append(f"output: {OUTPUT_FILE} ({len(log_text.splitlines())} lines, stdout and stderr interleaved)")

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
        lines += ["", f"last {len(tail)} lines of output", "-" * 25]
        lines.extend(tail)
    text = "\n".join(lines) + "\n"
    (tmpdir / "summary.txt").write_text(text)
    return text


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
        "Keep the run short (tens of steps). The exit code is the command's. Secrets in the environment "
        "are redacted: names containing TOKEN, KEY, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH, and "
        "values that look like tokens (see `pydoc xlalab.tools.debug_run`)."
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
    summary = write_summary(tmpdir, command, returncode, seconds, set_vars, args.tidy)
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
    print(f"{PROG}: wrote {outfile} ({len(members)} files; start with summary.txt)", file=sys.stderr)
    if not args.tidy:
        print(f"{PROG}: the files are also in {tmpdir} (use --tidy to remove them)", file=sys.stderr)
    return exit_code(returncode)


def main(argv: Iterable[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
