"""How the notebook layer shows things: findings, per-cell metrics and snapshots, as text and HTML.

Every display is a MIME bundle with ``text/plain`` (terminals, nbclient, logs) and
``text/html`` (Jupyter). All user-controlled text (file names, source lines, op and variable
names) goes through ``html.escape``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable
from typing import Any

from xlalab.debug.units import count, format_size
from xlalab.runtime import metrics
from xlalab.runtime.frames import Frame

from .cells import CellMap
from .watcher import ITEM_OP, Finding

_ICON = {
    "recompile": "⟳",
    "fallback": "⇣",
    "transfer": "⇄",
    "no_barrier": "∞",
    "graph_break": "✂",
    "reshard": "⇆",
}
_COLOR = {
    "recompile": "#b45309",
    "fallback": "#b91c1c",
    "transfer": "#1d4ed8",
    "no_barrier": "#7c2d12",
    "graph_break": "#6d28d9",
    "reshard": "#0f766e",
}


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def finding_text(f: Finding, cells: CellMap) -> str:
    lines = [f"xlalab: {f.title} ({_times(f.count)})", f"  {f.message}"]
    lines += [f"  {d}" for d in f.details]
    for i, fr in enumerate(f.frames[:6]):
        head = "  at " if i == 0 else "     "
        src = cells.source_line(fr)
        lines.append(f"{head}{cells.label(fr)} in {fr.function}" + (f": {src}" if src else ""))
    return "\n".join(lines)


def finding_html(f: Finding, cells: CellMap) -> str:
    e = html.escape
    color = _COLOR.get(f.category, "#444")
    rows = []
    for fr in f.frames[:6]:
        src = cells.source_line(fr)
        rows.append(
            f"<div style='font-family:monospace'>{e(cells.label(fr))} in <b>{e(fr.function)}</b>"
            + (f": <code>{e(src)}</code>" if src else "")
            + "</div>"
        )
    details = "".join(f"<div style='opacity:.8'>{e(d)}</div>" for d in f.details)
    return (
        f"<div class='xlalab-finding' data-category='{e(f.category)}' "
        f"style='border-left:4px solid {color};padding:4px 8px;margin:4px 0;"
        "background:rgba(127,127,127,.08)'>"
        f"<div><b style='color:{color}'>{_ICON.get(f.category, '!')} {e(f.title)}</b>"
        f" <span style='opacity:.7'>({e(_times(f.count))})</span></div>"
        f"<div style='font-family:monospace'>{e(f.message)}</div>{details}{''.join(rows)}</div>"
    )


def findings_bundle(findings: Iterable[Finding], cells: CellMap) -> dict[str, str]:
    fs = list(findings)
    return {
        "text/plain": "\n".join(finding_text(f, cells) for f in fs),
        "text/html": "".join(finding_html(f, cells) for f in fs),
    }


# --------------------------------------------------------------------------- metrics


def snapshot() -> dict[str, Any]:
    """The protocol's snapshot (docs/lab-protocol.md): registry totals, nothing computed."""
    snap = metrics.snapshot()
    counters: dict[str, int] = snap["counters"]  # type: ignore[assignment]
    ms: dict[str, dict[str, Any]] = snap["metrics"]  # type: ignore[assignment]

    def count(name: str) -> int:
        return int(ms.get(name, {}).get("count", 0))

    def total(name: str) -> float:
        return float(ms.get(name, {}).get("total", 0.0))

    return {
        "time": time.time(),
        "compiles": {
            "uncached": int(counters.get("UncachedCompile", 0)),
            "cached": int(counters.get("CachedCompile", 0)),
            "seconds_total": total("CompileTime") / 1e9,
            "seconds_last": _last_sample("CompileTime") / 1e9,
        },
        "executions": {
            "count": int(counters.get("ExecuteComputation", 0)),
            "seconds_total": (total("ExecuteTime") + total("ExecuteReplicatedTime")) / 1e9,
        },
        "transfers": {
            "to_device": count("TransferToDeviceTime"),
            "from_device": count("TransferFromDeviceTime"),
            "bytes_to_device": int(total("OutboundData")),
            "bytes_from_device": int(total("InboundData")),
        },
        # .item() counts aten::_local_scalar_dense (as torch_xla does); it is a read, not an op on the CPU.
        "fallbacks": {
            k: int(v) for k, v in counters.items() if k.startswith("aten::") and k != ITEM_OP and v
        },
        "counters": dict(counters),
        "metrics": ms,
        "spmd": _spmd(),
    }


def _spmd() -> dict[str, Any] | None:
    """In SPMD mode: live bytes per device and the collectives the runs carried
    (``xlalab.distributed.spmd.usage``); None otherwise."""
    from xlalab.runtime import sharding

    if not sharding.enabled():
        return None
    from xlalab.distributed.spmd.usage import USAGE

    return USAGE.summary()


def _last_sample(name: str) -> float:
    data = metrics.metric_data(name)
    return float(data[2][-1][1]) if data and data[2] else 0.0


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What happened between two snapshots (counters cleared in between count from zero)."""

    def sub(a: float, b: float) -> float:
        return a - b if a >= b else a

    fallbacks = {
        op: int(sub(n, before["fallbacks"].get(op, 0)))
        for op, n in after["fallbacks"].items()
        if sub(n, before["fallbacks"].get(op, 0)) > 0
    }
    out: dict[str, Any] = {"fallbacks": fallbacks}
    for group in ("compiles", "executions", "transfers"):
        out[group] = {k: sub(v, before[group][k]) for k, v in after[group].items() if k != "seconds_last"}
    out["seconds"] = after["time"] - before["time"]
    return out


def _rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    c, x, t = d["compiles"], d["executions"], d["transfers"]
    rows = [
        (
            "compiles",
            f"{int(c['uncached'])} new, {count(int(c['cached']), 'cache hit')}, {c['seconds_total']:.3f} s",
        ),
        ("executions", f"{int(x['count'])}, {x['seconds_total']:.3f} s"),
        ("to device", f"{count(int(t['to_device']), 'transfer')}, {format_size(t['bytes_to_device'])}"),
        ("from device", f"{count(int(t['from_device']), 'transfer')}, {format_size(t['bytes_from_device'])}"),
    ]
    fb = d["fallbacks"]
    rows.append(("CPU fallbacks", ", ".join(f"{op} x {n}" for op, n in sorted(fb.items())) if fb else "none"))
    return rows


def delta_bundle(d: dict[str, Any], title: str) -> dict[str, str]:
    rows = _rows(d)
    width = max(len(k) for k, _ in rows)
    text = "\n".join([title, *(f"  {k:<{width}}  {v}" for k, v in rows)])
    e = html.escape
    body = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:left'>{e(v)}</td></tr>"
                   for k, v in rows)  # fmt: skip
    return {"text/plain": text, "text/html": f"<div><b>{e(title)}</b><table>{body}</table></div>"}


def pre_bundle(text: str) -> dict[str, str]:
    return {"text/plain": text, "text/html": f"<pre>{html.escape(text)}</pre>"}


# --------------------------------------------------------------------------- compiled functions


def compiled_function_text(report: Any, cells: CellMap, kind: str = "hlo") -> str:
    """A compiled function (``xlalab.dynamo.FunctionReport``) as text: per graph dynamo captured,
    its FX graph, the aten graphs AOTAutograd made of it, and the HLO (or StableHLO) of each
    program compiled for it. Lowering only: nothing is compiled or run."""
    graphs = report.graphs
    defined = cells.label(Frame(report.file, report.line, report.name))
    lines = [f"{report.name} ({defined}): {len(graphs)} graph{'s' if len(graphs) != 1 else ''}"]
    for reason, where in report.breaks:
        lines.append(f"graph break at {cells.label(where)}: {reason}" if where else f"graph break: {reason}")
    for g in graphs:
        lines += ["", f"=== graph {g.index} ({g.num_ops} ops): FX graph", g.fx_code.strip()]
        for part, code in g.aot_code.items():
            lines += ["", f"=== graph {g.index}: {part} (aten)", code.strip()]
        for i, compiled in enumerate(g.compiled):
            text = compiled.hlo(kind)
            what = "HLO" if kind == "hlo" else "StableHLO"
            part = f" {compiled.name.rsplit(', ', 1)[-1]}" if ", " in compiled.name else f" {i}"
            lines += ["", f"=== graph {g.index}:{part} {what}"]
            lines.append(text.strip() if text else "(not compiled yet: call the function once)")
    return "\n".join(lines) + "\n"
