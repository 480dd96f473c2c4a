"""XLA_SAVE_TENSORS_FILE / XLA_SAVE_TENSORS_FMT: append the graph of every sync to a file.

Each sync appends one block to ``<XLA_SAVE_TENSORS_FILE>.<device ordinal>`` in torch_xla's
layout, so tools that split its files read these too::

    [ScheduleSyncTensorsGraph]
    TensorsGraphInfo:
      train_step (/path/train.py:31)
      <module> (/path/train.py:40)

    Root Hashes: (5f0c..., 81d2...)

    ## BEGIN_GRAPH
    IR {
      ...
    }

    Graph Hash: 3a9e...

    ## END_GRAPH

The frames are the sync's user frames, innermost first (library frames skipped). The graph is
``XLA_SAVE_TENSORS_FMT``: text, dot, hlo or stablehlo (see :mod:`xlalab.debug.graph_dump`).
The graph hash is the one PT_XLA_DEBUG and the runtime's events report.

Both settings are read at every sync, so ``config.set`` takes effect at once; while the file
setting is empty nothing subscribes to the runtime's events and the hot path pays nothing.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence

from xlalab.runtime import config, debug_files, events
from xlalab.runtime.frames import Frame
from xlalab.runtime.graph import Graph

from .graph_dump import FORMATS

_MASK = 0xFFFFFFFFFFFFFFFF
_lock = threading.Lock()
_unsubscribe: list[Callable[[], None]] = []  # the live subscription, if any
_installed: list[bool] = []
_warned: set[str] = set()


def install() -> None:
    """Follow XLA_SAVE_TENSORS_FILE from now on (idempotent)."""
    if _installed:
        return
    _installed.append(True)
    config.watch("XLA_SAVE_TENSORS_FILE", _on_setting)


def _on_setting(path: str) -> None:
    if path and not _unsubscribe:
        _unsubscribe.append(events.subscribe(_on_event))
    elif not path and _unsubscribe:
        _unsubscribe.pop()()


def _on_event(ev: events.Event) -> None:
    if not isinstance(ev, events.SyncEvent) or ev.graph is None:
        return
    path = config.get("XLA_SAVE_TENSORS_FILE")
    if not path:
        return
    graph: Graph = ev.graph
    try:
        block = format_block(graph, ev.graph_hash, ev.frames, config.get("XLA_SAVE_TENSORS_FMT"))
        target = f"{path}.{_ordinal(graph)}"
        debug_files.write("XLA_SAVE_TENSORS_FILE", target, block)
    except Exception as e:
        # A debugging side channel must not stop the program it watches: say so once per cause.
        msg = f"xlalab: XLA_SAVE_TENSORS_FILE could not save a graph: {type(e).__name__}: {e}"
        if msg not in _warned:
            _warned.add(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)


def _ordinal(graph: Graph) -> int:
    if not graph.roots:
        return 0
    return int(graph.nodes[graph.roots[0]].device)


def format_block(graph: Graph, graph_hash: int, frames: Sequence[Frame], fmt: str = "text") -> str:
    """One sync's block in torch_xla's XLA_SAVE_TENSORS_FILE layout."""
    frame_lines = "".join(f"  {f.function} ({f.file}:{f.line})\n" for f in frames)
    root_hashes = ", ".join(f"{graph.nodes[r].hash & _MASK:x}" for r in graph.roots)
    return (
        "[ScheduleSyncTensorsGraph]\n"
        "TensorsGraphInfo:\n"
        f"{frame_lines}\n"
        f"Root Hashes: ({root_hashes})\n\n"
        "## BEGIN_GRAPH\n"
        f"{FORMATS[fmt](graph)}\n"
        f"Graph Hash: {graph_hash & _MASK:x}\n\n"
        "## END_GRAPH\n\n"
    )
