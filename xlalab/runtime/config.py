"""One registry of settings.

Each setting is declared once: name, type, default, meaning. Values come from the
environment at start and can be changed at run time from Python (a notebook cannot set
variables before import): ``config.set("XLA_SYNC_WAIT", True)``. A bad value is an error
that names the setting and what it accepts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    doc: str
    choices: tuple[str, ...] | None = None
    on_change: Callable[[Any], None] | None = None


SETTINGS: dict[str, Setting] = {}
_values: dict[str, Any] = {}
_watchers: dict[str, list[Callable[[Any], None]]] = {}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def declare(
    name: str, type_: type, default: Any, doc: str, choices: tuple[str, ...] | None = None
) -> Setting:
    s = Setting(name, type_, default, doc, choices)
    SETTINGS[name] = s
    raw = os.environ.get(name)
    _values[name] = default if raw is None else parse(s, raw)
    return s


def parse(s: Setting, raw: Any) -> Any:
    """Turn an environment string (or a Python value) into the setting's type."""
    if s.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{s.name}={raw!r} is not a boolean; use 1/0 (or true/false). {s.doc}")
    if s.type is int:
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{s.name}={raw!r} is not an integer. {s.doc}") from None
    value = str(raw)
    if s.choices is not None:
        norm = value.strip().upper() if s.choices[0].isupper() else value.strip().lower()
        if norm not in s.choices:
            raise ValueError(f"{s.name}={raw!r} is not one of {', '.join(s.choices)}. {s.doc}")
        return norm
    return value


def get(name: str) -> Any:
    try:
        return _values[name]
    except KeyError:
        raise KeyError(f"unknown xlalab setting {name!r}; known: {', '.join(sorted(SETTINGS))}") from None


def set(name: str, value: Any) -> None:
    """Change a setting at run time (validated as the environment variable would be)."""
    if name not in SETTINGS:
        raise KeyError(f"unknown xlalab setting {name!r}; known: {', '.join(sorted(SETTINGS))}")
    _values[name] = parse(SETTINGS[name], value)
    for fn in _watchers.get(name, ()):
        fn(_values[name])


@contextlib.contextmanager
def overridden(name: str, value: Any) -> Iterator[None]:
    """``name`` set to ``value`` inside the block, and back to what it was after."""
    before = get(name)
    set(name, value)
    try:
        yield
    finally:
        set(name, before)


def watch(name: str, fn: Callable[[Any], None]) -> None:
    """Call ``fn(value)`` now and whenever ``name`` changes (hot paths cache settings this way)."""
    _watchers.setdefault(name, []).append(fn)
    fn(get(name))


# --------------------------------------------------------------------------- the settings
# Every environment variable of the PyTorch/XLA troubleshooting guide, plus a few of
# xlalab's own (prefixed XLALAB_). docs/env-vars.md is generated from this table.

declare(
    "PJRT_DEVICE",
    str,
    "",
    "Platform for xla devices: CPU, CUDA (or GPU) or TPU. Empty picks the best JAX has.",
)
declare("XLA_SYNC_WAIT", bool, False, "Block at every sync until the device has finished executing.")
declare(
    "XLA_COMPILATION_CACHE_SIZE",
    int,
    2048,
    "How many compiled graphs stay in memory; past it the least recently used is dropped (counted as "
    "CompileCacheEviction) and compiles again if it comes back. Programs are also dropped when the "
    "process nears the kernel's limit of memory maps (vm.max_map_count).",
)
declare(
    "XLA_ENABLE_PARAM_ALIASING",
    bool,
    True,
    "Let a barrier's program write the new values of tensors it overwrites (parameters, optimizer "
    "state) into the buffers of their old values, when nothing else can read those: peak device "
    "memory of a training step drops by about the size of the model and its optimizer state.",
)
declare(
    "XLA_PERSISTENT_CACHE_PATH",
    str,
    "~/.cache/xlalab/xla",
    "Folder of the persistent compilation cache: a later run finds the programs an earlier one "
    "compiled (JAX's cache, by HLO, skips XLA's compile; xlalab's, by graph structure, also skips "
    "tracing). Empty turns it off. Read when the first xla device is used.",
)
declare(
    "XLA_PERSISTENT_CACHE_READ_ONLY",
    bool,
    False,
    "Use the persistent compilation cache without adding to it (a cache shared by several jobs).",
)
declare(
    "XLALAB_ANALYSIS_ERRORS",
    str,
    "log",
    "What the debugging layers do when their own analysis of an event fails: log one line and let "
    "the program go on (log), or raise it in the code that caused the event (raise; the test suite "
    "runs so).",
    choices=("log", "raise"),
)
declare(
    "XLALAB_CHECK_INDICES",
    bool,
    False,
    "Check indices of indexing ops (x[idx], index_select, gather, embedding, scatter, index_put...) and "
    "class targets of nll_loss/cross_entropy (ignore_index exempt) on "
    "the device: an index out of range raises IndexError at the sync, naming the op and the line that "
    "made it. Off, XLA clamps such indices (or fills with NaN) silently, where eager PyTorch raises.",
)
declare(
    "XLA_NUM_DEVICES",
    int,
    0,
    "How many xla devices: on CPU, the number of host devices JAX creates (0 keeps JAX's default: one, "
    "or XLA_FLAGS=--xla_force_host_platform_device_count); on GPU/TPU, the first N. Fixed once the first "
    "xla device is used.",
)
declare(
    "XLALAB_COORDINATOR_ADDRESS",
    str,
    "",
    "host:port of process 0 of a multi-host run: xlalab calls jax.distributed.initialize before the first "
    "xla device is used, and replicated steps span every process's devices (docs/distributed.md).",
)
declare("XLALAB_NUM_PROCESSES", int, 1, "Processes in a multi-host run (with XLALAB_COORDINATOR_ADDRESS).")
declare("XLALAB_PROCESS_ID", int, 0, "This process's index, 0..XLALAB_NUM_PROCESSES-1, in a multi-host run.")
declare(
    "XLA_IR_DEBUG",
    bool,
    False,
    "Record where user code created each IR node (user frames, library frames skipped); backward nodes "
    "get the frames of the forward op they differentiate. Shown in graph dumps as location=fn@file:line.",
)
declare(
    "XLA_HLO_DEBUG",
    bool,
    False,
    "Propagate the frames recorded by XLA_IR_DEBUG into the HLO's op metadata (source_file, source_line).",
)
declare(
    "XLALAB_IR_DEBUG_DEPTH",
    int,
    8,
    "How many user frames XLA_IR_DEBUG keeps per node (torch_xla keeps one).",
)
declare(
    "XLA_SAVE_TENSORS_FILE",
    str,
    "",
    "Append the graph of every sync to this file (the device ordinal is appended to the name: x.txt.0).",
)
declare(
    "XLA_SAVE_TENSORS_FMT",
    str,
    "text",
    "Format of XLA_SAVE_TENSORS_FILE: text, dot, hlo or stablehlo.",
    choices=("text", "dot", "hlo", "stablehlo"),
)
declare(
    "XLA_METRICS_FILE", str, "", "Append the metrics report to this file at every step ('1' means stdout)."
)
declare(
    "XLA_SAVE_HLO_FILE",
    str,
    "",
    "When a compilation or execution fails, save the offending HLO to this file; the error says where.",
)
declare(
    "XLA_DUMP_HLO_GRAPH",
    bool,
    False,
    "When a compilation or execution fails, include the offending HLO graph in the error message.",
)
declare(
    "XLA_GET_TENSORS_OPBYOP",
    bool,
    False,
    "Fetching values to the host runs each IR node as its own small computation (op-by-op).",
)
declare(
    "XLA_SYNC_TENSORS_OPBYOP",
    bool,
    False,
    "mark_step runs each IR node as its own small computation (op-by-op) instead of one fused graph.",
)
declare(
    "XLA_USE_EAGER_DEBUG_MODE",
    bool,
    False,
    "Run every op as soon as it is recorded, as its own computation (eager, for debugging).",
)
declare(
    "XLA_USE_BF16",
    bool,
    False,
    "Store and compute torch.float32 (and float64) tensors as bfloat16 on the device.",
)
declare(
    "XLA_USE_F16",
    bool,
    False,
    "Store and compute torch.float32 (and float64) tensors as float16 on the device.",
)
declare(
    "XLA_USE_32BIT_LONG",
    bool,
    False,
    "Store and compute torch.int64 tensors as 32-bit integers on the device.",
)
declare("TF_CPP_LOG_THREAD_ID", bool, False, "Show the thread id in xlalab's log lines.")
declare(
    "TF_CPP_VMODULE",
    str,
    "",
    "Verbose logging per module, as name=level,... (e.g. tensor=5 logs every graph execution).",
)
declare(
    "TF_CPP_MIN_LOG_LEVEL",
    int,
    1,
    "Lowest level printed: 0 INFO (needed for TF_CPP_VMODULE), 1 WARNING, 2 ERROR, 3 FATAL.",
)
declare(
    "PT_XLA_DEBUG",
    bool,
    False,
    "Explain every compilation and execution (causes, graph info, Python frames) "
    "and analyse the run at exit.",
)
declare(
    "PT_XLA_DEBUG_LEVEL",
    int,
    2,
    "PT_XLA_DEBUG detail: 1 prints Compilation and Post Compilation Analysis (graph info, frames); "
    "2 adds an Execution Analysis for every execution; 0 keeps only the analysis at exit.",
)
declare("PT_XLA_DEBUG_FILE", str, "", "Write PT_XLA_DEBUG output to this file instead of stderr.")
declare("PT_XLA_DEBUG_MAX_FRAME", int, 8, "How many Python frames PT_XLA_DEBUG prints per event.")


def _frames_depth(depth: Any) -> None:
    from .frames import DEFAULT_DEPTH

    DEFAULT_DEPTH[0] = max(8, int(depth))


watch("PT_XLA_DEBUG_MAX_FRAME", _frames_depth)


def markdown() -> str:
    """docs/env-vars.md: the table of settings, generated from the declarations above."""
    lines = [
        "# Settings",
        "",
        "Generated from `xlalab/runtime/config.py` (`python -m xlalab.runtime.config > docs/env-vars.md`).",
        "Each is read from the environment at import and can be changed at run time:",
        "`xlalab.runtime.config.set(NAME, value)`.",
        "",
        "| name | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for s in SETTINGS.values():
        kind = s.type.__name__ if s.choices is None else " / ".join(s.choices)
        default = repr(s.default) if s.default != "" else "(unset)"
        lines.append(f"| `{s.name}` | {kind} | {default} | {s.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
