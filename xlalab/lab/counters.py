"""Live counters: an ipywidgets view of compiles, executions, transfers and fallbacks.

The view is updated from the watcher's events, throttled (a training loop publishes
thousands of events a second), with a trailing update so it always ends on the latest
numbers. It reads the metrics registry only, never a tensor. While a compile runs it says
so; a timer keeps that line ticking because the compiling thread is blocked in XLA.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

from xlalab.runtime import metrics

from . import render
from .throttle import Throttle
from .watcher import Watcher


def _widgets() -> Any:
    try:
        import ipywidgets
    except ImportError as e:
        raise ImportError(
            "xlalab.lab.counters() needs ipywidgets: pip install ipywidgets (or xlalab[lab])"
        ) from e
    return ipywidgets


class CountersView:
    """One live counters widget; ``.widget`` is what the notebook displays."""

    FIELDS = (
        ("compiles", "compiles"),
        ("dynamo graphs", "dynamo_graphs"),
        ("cache hits", "cache_hits"),
        ("compile time", "compile_time"),
        ("executions", "executions"),
        ("execute time", "execute_time"),
        ("to device", "to_device"),
        ("from device", "from_device"),
        ("CPU fallbacks", "fallbacks"),
    )

    def __init__(self, watcher: Watcher, interval: float = 0.25) -> None:
        w = _widgets()
        self.watcher = watcher
        self.labels = {key: w.HTML(value="0") for _, key in self.FIELDS}
        cells = [
            w.VBox(
                [w.HTML(value=f"<small>{html.escape(title)}</small>"), self.labels[key]],
                layout=w.Layout(margin="0 16px 0 0"),
            )
            for title, key in self.FIELDS
        ]
        self.status = w.HTML(value="")
        self.widget = w.VBox([w.HBox(cells, layout=w.Layout(flex_flow="row wrap")), self.status])
        self.widget.add_class("xlalab-counters")
        self._throttle = Throttle(interval, self.refresh)
        self._ticker: threading.Timer | None = None
        watcher.listeners.append(self._on_event)
        self.refresh()

    def _on_event(self, event: dict[str, Any]) -> None:
        if event["kind"] == "compile_start":
            self._throttle.flush()
            self._tick()
        else:
            self._throttle.poke()

    def _tick(self) -> None:
        """Keep "compiling… N s" moving while the kernel's thread is inside XLA's compiler."""
        if self.watcher.compiling is None:
            self._ticker = None
            return
        self.refresh()
        self._ticker = threading.Timer(0.5, self._tick)
        self._ticker.daemon = True
        self._ticker.start()

    def refresh(self) -> None:
        s = render.snapshot()
        c, x, t = s["compiles"], s["executions"], s["transfers"]
        # Compiled mode's counts (xlalab.dynamo.report): graphs dynamo captured, and recompiles.
        graphs = s["counters"].get("DynamoExtractCompiledGraph", 0)
        recompiles = s["counters"].get("DynamoRecompile", 0)
        values = {
            "compiles": str(c["uncached"]),
            "dynamo_graphs": f"{graphs} ({recompiles} recompile{'' if recompiles == 1 else 's'})",
            "cache_hits": str(c["cached"]),
            "compile_time": f"{c['seconds_total']:.2f} s",
            "executions": str(x["count"]),
            "execute_time": f"{x['seconds_total']:.2f} s",
            "to_device": f"{t['to_device']} ({metrics.format_bytes(t['bytes_to_device'])})",
            "from_device": f"{t['from_device']} ({metrics.format_bytes(t['bytes_from_device'])})",
            "fallbacks": str(sum(s["fallbacks"].values())),
        }
        for key, value in values.items():
            text = f"<b>{html.escape(value)}</b>"
            if self.labels[key].value != text:
                self.labels[key].value = text
        compiling = self.watcher.compiling
        if compiling is not None:
            since = time.time() - compiling["time"]
            graph = f"{compiling['graph_hash'][:8]} ({compiling['num_nodes']} nodes)"
            status = f"compiling graph {graph}: {since:.1f} s"
        else:
            fb = s["fallbacks"]
            status = ", ".join(f"{op} x {n}" for op, n in sorted(fb.items()))
        value = f"<small>{html.escape(status)}</small>"
        if self.status.value != value:
            self.status.value = value

    def close(self) -> None:
        self._throttle.close()
        if self._ticker is not None:
            self._ticker.cancel()
        if self._on_event in self.watcher.listeners:
            self.watcher.listeners.remove(self._on_event)
        self.widget.close()
