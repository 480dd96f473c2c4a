"""Process-wide counters and sampled metrics, reported in torch_xla's text format.

The runtime calls :func:`count` and :func:`record` on its hot path, so both are a
handful of bytecodes: a dict increment, or two attribute updates and a deque append.
Everything else (sorting, percentiles, formatting) happens only when a report is asked
for.

Report format (the one ``torch_xla.debug.metrics.metrics_report()`` prints in 2.9)::

    Metric: ExecuteTime
      TotalSamples: 5
      Accumulator: 233ms092.920us
      ValueRate: 162ms164.283us / second
      Rate: 3.47853 / second
      Percentiles: 1%=010ms811.298us; 5%=...; 99%=164ms148.092us
    Counter: MarkStep
      Value: 5

``ValueRate`` and ``Rate`` are left out when a metric has a single sample (no time span
to divide by). Metrics come first (by name), then counters with a non-zero value: plain
names, then ``xla::*``, then ``aten::*`` (each group by name).

One deliberate difference from torch_xla 2.9: its time formatter rounds every field above
microseconds to the nearest unit while subtracting the floored amount, so 10.81 ms prints
as ``011ms811.298us`` and 1.96 s as ``02s963ms...``. Here every field is exact (floored),
so ``010ms811.298us`` means 10.811298 ms; users' parsers read both the same way.

Thread safety: there is no lock. Under the GIL ``dict.get``/``dict.__setitem__``,
``deque.append`` and C-level copies (``tuple(deque)``, ``list(dict.items())``) are atomic,
so concurrent recording from a background thread never corrupts the registry and readers
never see a half-built structure. What is *not* atomic is a read-modify-write such as
``COUNTERS[name] + n`` or ``metric.count += 1``: if two threads bump the same name at the
same instant one increment can, very rarely, be lost. That is acceptable for diagnostics
and keeps the hot path free of lock overhead.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

__all__ = [
    "COUNTERS",
    "MAX_SAMPLES",
    "PERCENTILES",
    "clear_all",
    "clear_counters",
    "clear_metrics",
    "count",
    "counter_names",
    "counter_value",
    "executed_fallback_ops",
    "format_bytes",
    "format_number",
    "format_time",
    "format_value",
    "metric_data",
    "metric_names",
    "metrics_report",
    "record",
    "short_metrics_report",
    "snapshot",
    "timed",
]

# Same window as torch_xla: percentiles and rates cover the most recent samples only,
# while TotalSamples and Accumulator stay exact over the whole run.
MAX_SAMPLES = 1024

# Percentiles shown in a report, as integer percents so index arithmetic is exact.
PERCENTILES: tuple[int, ...] = (1, 5, 10, 20, 50, 80, 90, 95, 99)

_KINDS = ("time", "bytes", "number")

# Wall-clock source for sample timestamps, in integer nanoseconds. Integer ns rather
# than float seconds because float epoch seconds only resolve ~0.2us, which would skew
# the Rate of samples recorded microseconds apart. Tests monkeypatch this name.
_now_ns: Callable[[], int] = time.time_ns

COUNTERS: dict[str, int] = {}
"""Counter name -> value. The runtime may also bump entries directly."""


class _Metric:
    """Exact totals plus a bounded window of ``(timestamp_ns, value)`` samples."""

    __slots__ = ("count", "kind", "samples", "total")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.count = 0
        self.total: float = 0
        self.samples: deque[tuple[int, float]] = deque(maxlen=MAX_SAMPLES)


_METRICS: dict[str, _Metric] = {}
# Called before anything reads metrics: the runtime flushes samples it buffers on its hot path.
BEFORE_READ: list[Callable[[], None]] = []


def _flush() -> None:
    for hook in BEFORE_READ:
        hook()


# --------------------------------------------------------------------------- recording


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` (created at 0 on first use)."""
    COUNTERS[name] = COUNTERS.get(name, 0) + n


def _new_metric(name: str, kind: str) -> _Metric:
    # Validated only here, on first use, so the steady-state path pays nothing for it.
    if kind not in _KINDS:
        raise ValueError(f"metric kind must be one of {_KINDS}, got {kind!r}")
    # setdefault so that two threads creating the same metric end up sharing one object.
    return _METRICS.setdefault(name, _Metric(kind))


def record(name: str, value: float, kind: str = "time") -> None:
    """Add one sample to metric ``name``.

    ``kind`` is ``"time"`` (value in nanoseconds), ``"bytes"`` or ``"number"``; it only
    matters when the metric is first created and decides how values are printed.
    """
    m = _METRICS.get(name)
    if m is None:
        m = _new_metric(name, kind)
    m.count += 1
    m.total += value
    m.samples.append((_now_ns(), value))


def record_many(name: str, values: Sequence[float], kind: str = "time") -> None:
    """Add many samples at once, stamped now: for per-op timings buffered on a hot path."""
    if not values:
        return
    m = _METRICS.get(name)
    if m is None:
        m = _new_metric(name, kind)
    now = _now_ns()
    m.count += len(values)
    m.total += sum(values)
    m.samples.extend([(now, v) for v in values])


# Per-op recording times (ns) since the last flush: the recorder appends to it, and it is
# folded into ``LazyTracing`` at each sync and before any read of the metrics.
LAZY_TRACING: list[int] = []


def flush_tracing() -> None:
    if LAZY_TRACING:
        record_many("LazyTracing", LAZY_TRACING)
        LAZY_TRACING.clear()


BEFORE_READ.append(flush_tracing)


class _Timed:
    """Context manager behind :func:`timed`; a slotted class is cheaper than a generator."""

    __slots__ = ("_name", "_start")

    def __init__(self, name: str) -> None:
        self._name = name
        self._start = 0

    def __enter__(self) -> _Timed:
        self._start = time.perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Recorded even when the body raises: a failed compile still took that long.
        record(self._name, time.perf_counter_ns() - self._start, "time")


def timed(name: str) -> _Timed:
    """``with timed("CompileTime"): ...`` records the elapsed nanoseconds as a sample."""
    return _Timed(name)


# -------------------------------------------------------------------------- formatting

# (suffix, nanoseconds per unit) for the fields printed before the microseconds field.
_TIME_FIELDS: tuple[tuple[str, int], ...] = (
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
)


def format_time(ns: float) -> str:
    """Nanoseconds as torch_xla prints them: ``000.200us``, ``02s267ms243.584us``.

    The microseconds field is always ``DDD.DDDus``; larger fields appear from the largest
    non-zero one down, two digits each (three for ``ms``).
    """
    sign = "-" if ns < 0 else ""
    rest = round(abs(ns))  # the finest printed digit is 1 ns
    parts: list[str] = []
    for suffix, unit in _TIME_FIELDS:
        whole, rest = divmod(rest, unit)
        if whole or parts:
            width = 3 if suffix == "ms" else 2
            parts.append(f"{whole:0{width}d}{suffix}")
    us, frac_ns = divmod(rest, 1000)
    parts.append(f"{us:03d}.{frac_ns:03d}us")
    return sign + "".join(parts)


_BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")


def format_bytes(n: float) -> str:
    """Bytes with binary (1024) steps and two decimals: ``4.00B``, ``196.00KB``."""
    value = float(n)
    unit = 0
    while abs(value) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.2f}{_BYTE_UNITS[unit]}"


def format_number(x: float) -> str:
    """Plain metric values: ``122.00``."""
    return f"{x:.2f}"


_FORMATTERS: dict[str, Callable[[float], str]] = {
    "time": format_time,
    "bytes": format_bytes,
    "number": format_number,
}


def format_value(kind: str, value: float) -> str:
    """Format ``value`` the way a metric of ``kind`` prints it."""
    return _FORMATTERS[kind](value)


# ----------------------------------------------------------------------------- reports


def _counter_sort_key(name: str) -> tuple[int, str]:
    # torch_xla lists its own bookkeeping counters first, then per-op xla:: counters, and
    # the aten:: (CPU fallback) counters last; within a group plain string order.
    if name.startswith("aten::"):
        return (2, name)
    if name.startswith("xla::"):
        return (1, name)
    return (0, name)


def _nonzero_counters() -> list[tuple[str, int]]:
    # list(dict.items()) is one C-level copy: safe while another thread records.
    return [(k, v) for k, v in list(COUNTERS.items()) if v]


def _counter_lines(name: str, value: int) -> list[str]:
    return [f"Counter: {name}", f"  Value: {value}"]


def _percentile_index(p: int, n: int) -> int:
    # Matches the reference picks: floor(p% of n), clamped to the last sample.
    return min(n * p // 100, n - 1)


def _metric_lines(name: str, m: _Metric) -> list[str]:
    samples = tuple(m.samples)  # atomic snapshot of the window
    total_samples, accumulator = m.count, m.total
    fmt = _FORMATTERS[m.kind]
    lines = [f"Metric: {name}", f"  TotalSamples: {total_samples}", f"  Accumulator: {fmt(accumulator)}"]
    if len(samples) > 1:
        stamps = [ts for ts, _ in samples]
        span_s = (max(stamps) - min(stamps)) / 1e9
        # Samples with identical timestamps have no span; printing inf helps nobody.
        if span_s > 0:
            window_total = sum(v for _, v in samples)
            lines.append(f"  ValueRate: {fmt(window_total / span_s)} / second")
            # %g gives the 6 significant digits of a default C++ ostream: 3.14711, 849979.
            lines.append(f"  Rate: {len(samples) / span_s:g} / second")
    if samples:
        values = sorted(v for _, v in samples)
        picks = "; ".join(f"{p}%={fmt(values[_percentile_index(p, len(values))])}" for p in PERCENTILES)
        lines.append(f"  Percentiles: {picks}")
    return lines


def _join(lines: list[str]) -> str:
    # Every line ends with a newline (so print() leaves a blank line, as torch_xla's
    # does); an empty registry gives ''.
    return "".join(line + "\n" for line in lines)


def metrics_report() -> str:
    """Every metric (by name), then every non-zero counter (plain, ``xla::``, ``aten::``)."""
    _flush()
    lines: list[str] = []
    for name, m in sorted(_METRICS.items()):
        lines.extend(_metric_lines(name, m))
    for name, value in sorted(_nonzero_counters(), key=lambda kv: _counter_sort_key(kv[0])):
        lines.extend(_counter_lines(name, value))
    return _join(lines)


_SHORT_COUNTERS: tuple[str, ...] = ("CachedCompile", "MarkStep")
_SHORT_METRICS: tuple[str, ...] = (
    "CompileTime",
    "ExecuteTime",
    "ExecuteReplicatedTime",
    "TransferToDeviceTime",
    "TransferFromDeviceTime",
)
# torch_xla prints its lazy-core registry before its runtime registry, which is why the
# compile-cache counters come before the metrics in its short report and MarkStep after.
_LEADING_COUNTERS = frozenset({"CachedCompile", "UncachedCompile"})


def short_metrics_report(
    counter_names: Iterable[str] | None = None, metric_names: Iterable[str] | None = None
) -> str:
    """The few entries that tell whether a step recompiles, in torch_xla's layout.

    Defaults: counters ``CachedCompile`` and ``MarkStep``; metrics ``CompileTime``,
    ``ExecuteTime``, ``ExecuteReplicatedTime``, ``TransferToDeviceTime``,
    ``TransferFromDeviceTime``. Every non-zero ``aten::*`` counter is always appended.
    Order: compile-cache counters, the metrics in the order asked, the other counters in
    the order asked, then ``aten::*`` by name. Missing or zero entries are skipped.
    """
    _flush()
    counters = list(dict.fromkeys(counter_names if counter_names else _SHORT_COUNTERS))
    metrics = list(dict.fromkeys(metric_names if metric_names else _SHORT_METRICS))
    values = dict(_nonzero_counters())
    lines: list[str] = []

    def add_counter(name: str) -> None:
        if values.get(name):
            lines.extend(_counter_lines(name, values[name]))

    for name in counters:
        if name in _LEADING_COUNTERS:
            add_counter(name)
    for name in metrics:
        m = _METRICS.get(name)
        if m is not None:
            lines.extend(_metric_lines(name, m))
    for name in counters:
        if name not in _LEADING_COUNTERS:
            add_counter(name)
    asked = set(counters)
    for name in sorted(n for n in values if n.startswith("aten::") and n not in asked):
        add_counter(name)
    return _join(lines)


# ---------------------------------------------------------------------------- queries


def counter_names() -> list[str]:
    """Names of the non-zero counters, in report order."""
    return sorted((k for k, _ in _nonzero_counters()), key=_counter_sort_key)


def counter_value(name: str) -> int | None:
    """Current value of a counter, or None if it was never bumped (or was cleared)."""
    return COUNTERS.get(name)


def metric_names() -> list[str]:
    """Names of the metrics that hold samples, in report order."""
    _flush()
    return sorted(_METRICS)


def metric_data(name: str) -> tuple[int, float, tuple[tuple[float, float], ...]] | None:
    """``(total_samples, accumulator, ((unix_seconds, value), ...))`` or None if absent.

    The samples are the retained window (at most :data:`MAX_SAMPLES`), oldest first.
    """
    _flush()
    m = _METRICS.get(name)
    if m is None:
        return None
    samples = tuple((ts / 1e9, float(v)) for ts, v in tuple(m.samples))
    return (m.count, float(m.total), samples)


def executed_fallback_ops() -> list[str]:
    """``aten::*`` counters with a non-zero value: ops that ran on the CPU fallback."""
    return sorted(k for k, _ in _nonzero_counters() if k.startswith("aten::"))


def snapshot() -> dict[str, dict[str, object]]:
    """Cheap JSON-able copy for before/after diffs (no percentiles, no formatting).

    ``{"counters": {name: value}, "metrics": {name: {"count", "total", "kind"}}}``.
    """
    _flush()
    return {
        "counters": dict(list(COUNTERS.items())),
        "metrics": {
            name: {"count": m.count, "total": m.total, "kind": m.kind} for name, m in list(_METRICS.items())
        },
    }


def clear_counters() -> None:
    """Forget every counter (in place, so references to :data:`COUNTERS` stay valid)."""
    COUNTERS.clear()


def clear_metrics() -> None:
    """Forget every metric and its samples."""
    _METRICS.clear()


def clear_all() -> None:
    """Forget counters and metrics; :func:`metrics_report` then returns ''."""
    clear_counters()
    clear_metrics()
