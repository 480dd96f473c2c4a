"""The kernel side of the JupyterLab extension: one comm target, protocol version 1.

docs/lab-protocol.md is the contract. The kernel opens a comm when the extension is loaded
and answers comms the frontend opens; it broadcasts throttled ``update`` messages (a
snapshot of the metrics registry plus the events since the last one) and answers
``request`` messages. ``compile_start`` goes out at once: the compile that follows blocks
the kernel, and the panel shows how long it has been compiling.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from xlalab.runtime import metrics

from . import render
from .throttle import Throttle
from .watcher import Watcher

PROTOCOL = 1
TARGET = "xlalab"
MAX_EVENTS = 200
_log = logging.getLogger("xlalab.lab")


def compile_cache_dir() -> str | None:
    """JAX's persistent compilation cache directory, or None when the cache is off (read from
    JAX's config: nothing is compiled or started to find out)."""
    import jax

    value = getattr(jax.config, "jax_compilation_cache_dir", None)  # None: a JAX without the cache
    return str(value) if value else None


def runtime_info() -> dict[str, Any]:
    """Where the kernel runs: platform, devices, versions, the persistent compile cache.

    The device fields are filled only once the user's code started the backend: starting it
    here would fix the device count (XLA_NUM_DEVICES) before the notebook had a chance to set it.
    """
    import jax
    import torch

    from xlalab.runtime import backend

    info: dict[str, Any] = {
        "started": False,
        "platform": "",
        "hw": "",
        "device_count": 0,
        "device_kind": "",
        "jax": jax.__version__,
        "torch": torch.__version__,
        "compile_cache_dir": compile_cache_dir(),
    }
    if backend.started():
        try:
            devices = backend.jax_devices()
            info.update(
                started=True,
                platform=backend.platform(),
                hw=backend.hw_name(),
                device_count=len(devices),
                device_kind=str(getattr(devices[0], "device_kind", "")) if devices else "",
            )
        except Exception:  # a bad PJRT_DEVICE is reported where the user's code asks for a device
            pass
    return info


class CommServer:
    def __init__(self, watcher: Watcher, interval: float = 0.25) -> None:
        self.watcher = watcher
        self.comms: list[Any] = []
        self.seq = 0
        self._queue: list[dict[str, Any]] = []
        self._dropped = 0
        self._lock = threading.RLock()
        self._throttle = Throttle(interval, self.flush)
        self._registered = False
        self._runtime: dict[str, Any] | None = None  # fixed once the backend started

    # ---- lifecycle
    def start(self) -> None:
        from comm import create_comm, get_comm_manager

        get_comm_manager().register_target(TARGET, self._on_open)
        self._registered = True
        self.watcher.listeners.append(self._on_event)
        # Tell a frontend that is already watching this kernel (its panel said "not enabled").
        try:
            c = create_comm(target_name=TARGET, data=self.hello())
            self._adopt(c)
        except Exception:
            _log.exception("xlalab: could not open the comm to the frontend")

    def stop(self) -> None:
        self._throttle.close()
        if self._on_event in self.watcher.listeners:
            self.watcher.listeners.remove(self._on_event)
        for c in list(self.comms):
            try:
                c.close()
            except Exception:
                pass
        self.comms.clear()
        if self._registered:
            from comm import get_comm_manager

            get_comm_manager().unregister_target(TARGET, self._on_open)
            self._registered = False

    def _on_open(self, c: Any, open_msg: dict[str, Any]) -> None:
        self._adopt(c)
        self._send(c, self.hello())

    def _adopt(self, c: Any) -> None:
        with self._lock:
            self.comms.append(c)
        c.on_msg(lambda msg, c=c: self._on_msg(c, msg))
        c.on_close(lambda msg, c=c: self._forget(c))

    def _forget(self, c: Any) -> None:
        with self._lock:
            if c in self.comms:
                self.comms.remove(c)

    # ---- kernel -> frontend
    def hello(self) -> dict[str, Any]:
        from xlalab import __version__
        from xlalab.runtime import backend, config

        # Only once the user's code started the backend: starting it here would fix the device
        # count (XLA_NUM_DEVICES) before the notebook had a chance to set it.
        platform, devices = "", []
        if backend.started():
            try:
                platform = backend.platform()
                devices = [f"xla:{i}" for i in range(backend.device_count())]
            except Exception:  # a bad PJRT_DEVICE is reported where the user's code asks for a device
                pass
        return {
            "v": PROTOCOL,
            "type": "hello",
            "xlalab": __version__,
            "pid": os.getpid(),
            "platform": platform,
            "devices": devices,
            "settings": {k: config.get(k) for k in ("XLA_IR_DEBUG", "XLA_HLO_DEBUG", "PT_XLA_DEBUG")},
            "runtime": self.runtime(),
            "snapshot": self.snapshot(),
            "warnings": [self.watcher.as_json(f) for f in self.watcher.findings],
        }

    def snapshot(self) -> dict[str, Any]:
        return render.snapshot()

    def runtime(self) -> dict[str, Any]:
        """runtime_info(); its device part is kept once the backend started (devices cannot
        change after that), the compile cache is read each time (a notebook may turn it on)."""
        if self._runtime is None:
            info = runtime_info()
            if not info["started"]:
                return info
            self._runtime = info
        return {**self._runtime, "compile_cache_dir": compile_cache_dir()}

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._queue.append(event)
            if len(self._queue) > MAX_EVENTS:
                self._dropped += len(self._queue) - MAX_EVENTS
                del self._queue[:-MAX_EVENTS]
        if event["kind"] == "compile_start":
            self._throttle.flush()
        else:
            self._throttle.poke()

    def flush(self, cleared: bool = False) -> None:
        """Send one update with everything queued (called by the throttle, and at each cell's end);
        ``cleared`` tells every frontend that warnings and counters were just cleared."""
        with self._lock:
            if not self.comms:
                self._queue.clear()
                self._dropped = 0
                return
            events, dropped = self._queue, self._dropped
            self._queue, self._dropped = [], 0
            self.seq += 1
            message = {
                "v": PROTOCOL,
                "type": "update",
                "seq": self.seq,
                "time": time.time(),
                "snapshot": self.snapshot(),
                "runtime": self.runtime(),
                "events": events,
                "dropped": dropped,
            }
            if cleared:
                message["cleared"] = True
            comms = list(self.comms)
        for c in comms:
            self._send(c, message)

    def end_of_cell(self) -> None:
        self._throttle.flush()

    def _send(self, c: Any, message: dict[str, Any]) -> None:
        try:
            c.send(message)
        except Exception:
            _log.exception("xlalab: could not send to the frontend")

    # ---- frontend -> kernel
    def _on_msg(self, c: Any, msg: dict[str, Any]) -> None:
        data = msg.get("content", {}).get("data", {}) if isinstance(msg, dict) else {}
        rid = data.get("id") if isinstance(data, dict) else None
        try:
            if not isinstance(data, dict) or data.get("type") != "request":
                raise ValueError(
                    f"expected a request message ({{'type': 'request', ...}}), got {data!r:.200}"
                )
            result = self.answer(data)
            reply: dict[str, Any] = {"v": PROTOCOL, "type": "reply", "id": rid, "ok": True, "result": result}
        except Exception as e:  # a bad request is answered, never raised into the kernel
            reply = {"v": PROTOCOL, "type": "reply", "id": rid, "ok": False, "error": f"{e}"}
        self._send(c, reply)
        if reply["ok"] and data.get("what") == "clear":
            self.flush(cleared=True)

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        what = req.get("what")
        if what == "snapshot":
            return self.snapshot()
        if what == "runtime":
            return self.runtime()
        if what == "metrics_report":
            text = metrics.short_metrics_report() if req.get("short") else metrics.metrics_report()
            return {"text": text}
        if what == "warnings":
            return {"warnings": [self.watcher.as_json(f) for f in self.watcher.findings]}
        if what == "clear":
            metrics.clear_all()
            self.watcher.clear()
            with self._lock:  # events from before the clear would bring cleared numbers back
                self._queue.clear()
                self._dropped = 0
            return {}
        if what == "graph":
            from .graphs import graph_payload

            h = str(req.get("hash", "")).lower().removeprefix("0x")
            graph = self.watcher.graphs.get(h)
            if graph is None:
                raise KeyError(
                    f"no graph with hash {h!r} (kept: the last {len(self.watcher.graphs)} compiled)"
                )
            fmt = req.get("format", "json")
            if fmt not in ("json", "dot", "text"):
                raise ValueError(f"unknown graph format {fmt!r}: use json, dot or text")
            return graph_payload(graph, self.watcher.cells, title=f"graph {h}")
        raise ValueError(
            f"unknown request {what!r}: use snapshot, runtime, metrics_report, graph, warnings or clear"
        )
