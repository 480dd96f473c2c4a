"""The metrics registry prints what torch_xla 2.9 prints (see shared/reference/.../02_metrics.txt).

Samples and timestamps come from the reference's own ``metric_data`` output where it gives
them; the clock is faked so Rate lines are deterministic. No JAX or torch involved.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import xlalab.debug.metrics as met
import xlalab.runtime.metrics as rm

REFERENCE_DIR = Path("/work/shared/reference/torch_xla-2.9-cpu")
REFERENCE = REFERENCE_DIR / "02_metrics.txt"

# From the reference: met.metric_data('ExecuteTime') / ('CompileTime') after 5 MNIST steps.
EXECUTE_TIME = (
    (1795340696.5512884, 164148092.0),
    (1795340697.9383962, 29616179.0),
    (1795340697.9535623, 14824994.0),
    (1795340697.9696183, 10811298.0),
    (1795340697.9886763, 13692357.0),
)
COMPILE_TIME = ((1795340696.3851314, 1962791342.0), (1795340697.907999, 1489920726.0))


class FakeClock:
    """Stands in for ``time.time_ns``; tests set ``now`` (ns) before each record()."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    rm.clear_all()
    yield
    rm.clear_all()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(rm, "_now_ns", fake)
    return fake


def feed(clock: FakeClock, name: str, samples: Any, kind: str = "time") -> None:
    """Record ``(unix_seconds, value)`` pairs at their timestamps."""
    for ts, value in samples:
        clock.now = round(ts * 1e9)
        rm.record(name, value, kind)


def feed_spaced(clock: FakeClock, name: str, values: list[float], span_ns: int, kind: str) -> None:
    """Record values evenly over ``span_ns`` (first to last sample)."""
    start = clock.now
    for i, value in enumerate(values):
        clock.now = start + (span_ns * i) // max(len(values) - 1, 1)
        rm.record(name, value, kind)


def block(report: str, header: str) -> list[str]:
    """The lines of the entry that starts with ``header`` in a report."""
    lines = report.splitlines()
    start = lines.index(header)
    end = start + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return lines[start:end]


def line(report: str, header: str, key: str) -> str:
    return next(ln for ln in block(report, header) if ln.startswith(f"  {key}:"))


def reference_text() -> str:
    return REFERENCE.read_text()


def reference_section(title: str) -> str:
    """The text printed under ``===== title =====`` in the reference, up to the next one."""
    text = reference_text()
    start = text.index(f"===== {title} =====\n") + len(f"===== {title} =====\n")
    end = text.find("\n=====", start)
    return text[start:end] if end != -1 else text[start:]


# ----------------------------------------------------------------- a torch_xla report parser
# A user's parser for torch_xla reports, written against the reference only. Ours must
# satisfy it line for line.

TIME_RE = r"(?:\d+d)?(?:\d+h)?(?:\d+m(?!s))?(?:\d+s)?(?:\d+ms)?\d+\.\d{3}us"
BYTES_RE = r"-?\d+\.\d{2}(?:B|KB|MB|GB|TB|PB)"
NUMBER_RE = r"-?\d+\.\d{2}"
VALUE_RE = f"(?:{TIME_RE}|{BYTES_RE}|{NUMBER_RE})"
RATE_RE = r"[-+0-9.e]+"

LINE_RES = {
    "metric": re.compile(r"^Metric: (?P<name>\S+)$"),
    "counter": re.compile(r"^Counter: (?P<name>\S+)$"),
    "total": re.compile(r"^  TotalSamples: (?P<v>\d+)$"),
    "acc": re.compile(rf"^  Accumulator: (?P<v>{VALUE_RE})$"),
    "vrate": re.compile(rf"^  ValueRate: (?P<v>{VALUE_RE}) / second$"),
    "rate": re.compile(rf"^  Rate: (?P<v>{RATE_RE}) / second$"),
    "pct": re.compile(rf"^  Percentiles: (?P<v>(?:\d+%={VALUE_RE}(?:; )?)+)$"),
    "value": re.compile(r"^  Value: (?P<v>-?\d+)$"),
}
# Lines that look like part of a report, so a grammar miss is caught rather than skipped.
REPORTISH = re.compile(
    r"^(Metric: |Counter: |  (TotalSamples|Accumulator|ValueRate|Rate|Percentiles|Value): )"
)


def parse_value(text: str) -> float:
    """A report value back to a float: ns for times, bytes for sizes."""
    if text.endswith("us"):
        ns = 0.0
        for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(d|h|ms|m|s|us)", text):
            scale = {"d": 86400e9, "h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3}[unit]
            ns += float(amount) * scale
        return ns
    m = re.fullmatch(r"(-?\d+\.\d+)(B|KB|MB|GB|TB|PB)", text)
    if m:
        power = ["B", "KB", "MB", "GB", "TB", "PB"].index(m.group(2))
        return float(m.group(1)) * float(1024**power)
    return float(text)


def parse_report(text: str) -> list[dict[str, Any]]:
    """Entries in order; every report-looking line must match the grammar."""
    entries: list[dict[str, Any]] = []
    for raw in text.splitlines():
        if not REPORTISH.match(raw):
            continue
        hits = [(kind, m) for kind, rx in LINE_RES.items() if (m := rx.match(raw))]
        assert hits, f"unparsable report line: {raw!r}"
        kind, m = hits[0]
        if kind in ("metric", "counter"):
            entries.append({"type": kind, "name": m.group("name")})
        elif kind == "pct":
            pairs = (item.split("=", 1) for item in m.group("v").split("; "))
            entries[-1]["percentiles"] = {int(p.rstrip("%")): v for p, v in pairs}
        else:
            entries[-1][kind] = m.group("v")
    return entries


def test_parser_reads_the_reference() -> None:
    entries = parse_report(reference_text())
    assert len(entries) > 100
    execute = next(e for e in entries if e["name"] == "ExecuteTime")
    assert execute["total"] == "5"
    assert parse_value(execute["acc"]) == pytest.approx(233092920)
    assert sorted(execute["percentiles"]) == list(rm.PERCENTILES)
    # The other reports in the reference folder use the same grammar.
    assert len(parse_report((REFERENCE_DIR / "04_metrics_file_m.txt").read_text())) > 100
    # 05 holds grepped fragments (lines without their header): check the lines alone.
    for raw in (REFERENCE_DIR / "05_fallback_counters.txt").read_text().splitlines():
        assert not REPORTISH.match(raw) or any(rx.match(raw) for rx in LINE_RES.values()), raw


def test_parser_reads_our_report(clock: FakeClock) -> None:
    feed(clock, "ExecuteTime", EXECUTE_TIME)
    feed(clock, "CompileTime", COMPILE_TIME)
    feed_spaced(clock, "OutboundData", [8, 512, 200704], 922_335, "bytes")
    feed_spaced(clock, "TensorsGraphSize", [80, 122, 122], 10**9, "number")
    rm.record("Long", 369_401_746_001)
    rm.count("MarkStep", 5)
    rm.count("xla::add", 72)
    rm.count("aten::nonzero")
    report = rm.metrics_report()
    entries = parse_report(report)
    # Every line of ours is a report line the parser understood.
    assert sum(1 for ln in report.splitlines() if REPORTISH.match(ln)) == len(report.splitlines())
    by_name = {e["name"]: e for e in entries}
    assert parse_value(by_name["ExecuteTime"]["acc"]) == pytest.approx(233092920)
    assert parse_value(by_name["CompileTime"]["percentiles"][50]) == pytest.approx(1962791342)
    assert parse_value(by_name["Long"]["acc"]) == pytest.approx(369_401_746_001)
    assert parse_value(by_name["OutboundData"]["acc"]) == pytest.approx(201224, rel=1e-3)
    assert by_name["MarkStep"]["value"] == "5"
    # Only the names fed here: the live runtime may add its own (a tensor freed by the garbage
    # collector counts DestroyXlaTensor at any moment).
    fed = {
        "ExecuteTime",
        "CompileTime",
        "OutboundData",
        "TensorsGraphSize",
        "Long",
        "MarkStep",
        "xla::add",
        "aten::nonzero",
    }
    assert [e["type"] for e in entries if e["name"] in fed] == ["metric"] * 5 + ["counter"] * 3


# ------------------------------------------------------------------------------ formatting


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "000.000us"),
        (200, "000.200us"),
        (4777, "004.777us"),
        (219465, "219.465us"),
        (1_479_037, "001ms479.037us"),
        (233_092_920, "233ms092.920us"),
        (2_267_243_584, "02s267ms243.584us"),
        (369_401_746_001, "06m09s401ms746.001us"),
        (3_600_000_000_001, "01h00m00s000ms000.001us"),
        (90_061_000_000_000, "01d01h01m01s000ms000.000us"),
        (1_000_000, "001ms000.000us"),
        (60_000_000_000, "01m00s000ms000.000us"),
        (999.6, "001.000us"),  # the last printed digit is 1 ns
        (162_164_283.4, "162ms164.283us"),
    ],
)
def test_format_time(ns: float, text: str) -> None:
    assert rm.format_time(ns) == text
    assert parse_value(text) == pytest.approx(round(ns))


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (4, "4.00B"),
        (512, "512.00B"),
        (1023, "1023.00B"),
        (1024, "1.00KB"),
        (200704, "196.00KB"),
        (201224, "196.51KB"),
        (20000, "19.53KB"),
        (1.04 * 1024 * 1024, "1.04MB"),
        (3 * 1024**4, "3.00TB"),
        (2048 * 1024**5, "2048.00PB"),  # no unit past PB
    ],
)
def test_format_bytes(n: float, text: str) -> None:
    assert rm.format_bytes(n) == text


def test_format_number() -> None:
    assert rm.format_number(122) == "122.00"
    assert rm.format_number(12.034) == "12.03"
    assert rm.format_value("number", 8) == "8.00"
    assert rm.format_value("bytes", 8) == "8.00B"
    assert rm.format_value("time", 8) == "000.008us"


# ------------------------------------------------------------------ reference entries re-fed


def torch_xla_29_time(ns: float) -> str:
    """torch_xla 2.9's printing of a time, quirk included, to compare with the reference.

    It prints each field above microseconds rounded to the nearest unit but carries only
    the floored amount down, so 10.81 ms shows as ``011ms811.298us``. xlalab prints the
    exact (floored) fields instead; this helper shows that the picks are otherwise equal.
    """
    fields = (("m", 60e9, 2), ("s", 1e9, 2), ("ms", 1e6, 3))
    out, rest = "", float(ns)
    for suffix, unit, width in fields:
        amount = rest / unit
        if amount >= 1 or out:
            out += f"{round(amount):0{width}d}{suffix}"
            rest -= math.floor(amount) * unit
    return out + f"{rest / 1e3:07.3f}us"


def test_execute_time_matches_reference(clock: FakeClock) -> None:
    feed(clock, "ExecuteTime", EXECUTE_TIME)
    report = rm.metrics_report()
    ref = reference_section("met.metrics_report()")
    header = "Metric: ExecuteTime"
    for key in ("TotalSamples", "Accumulator", "Rate"):
        assert line(report, header, key) == line(ref, header, key)
    # ValueRate: the reference's float timestamps lose ~0.2us, so the last digits differ.
    ours = parse_value(line(report, header, "ValueRate").split()[1])
    theirs = parse_value(line(ref, header, "ValueRate").split()[1])
    assert ours == pytest.approx(theirs, rel=1e-6)
    assert line(report, header, "Percentiles") == (
        "  Percentiles: 1%=010ms811.298us; 5%=010ms811.298us; 10%=010ms811.298us; "
        "20%=013ms692.357us; 50%=014ms824.994us; 80%=164ms148.092us; 90%=164ms148.092us; "
        "95%=164ms148.092us; 99%=164ms148.092us"
    )
    # Same picks as torch_xla: re-printing them with its rounding gives the reference line.
    picks = parse_report("\n".join(block(report, header)))[0]["percentiles"]
    quirky = "; ".join(f"{p}%={torch_xla_29_time(parse_value(v))}" for p, v in picks.items())
    assert line(ref, header, "Percentiles") == f"  Percentiles: {quirky}"


def test_compile_time_matches_reference(clock: FakeClock) -> None:
    feed(clock, "CompileTime", COMPILE_TIME)
    report = rm.metrics_report()
    ref = reference_section("met.metrics_report()")
    header = "Metric: CompileTime"
    assert line(report, header, "TotalSamples") == "  TotalSamples: 2"
    assert line(report, header, "Rate") == line(ref, header, "Rate") == "  Rate: 1.31331 / second"
    # 3452712068 ns: torch_xla shows 03s453ms712.068us (453 rounded up from 452.7).
    assert line(report, header, "Accumulator") == "  Accumulator: 03s452ms712.068us"
    assert line(ref, header, "Accumulator") == f"  Accumulator: {torch_xla_29_time(3452712068)}"
    picks = parse_report("\n".join(block(report, header)))[0]["percentiles"]
    assert picks[20] == "01s489ms920.726us"
    assert picks[50] == "01s962ms791.342us"
    quirky = "; ".join(f"{p}%={torch_xla_29_time(parse_value(v))}" for p, v in picks.items())
    assert line(ref, header, "Percentiles") == f"  Percentiles: {quirky}"


def test_single_sample_blocks_match_reference_exactly(clock: FakeClock) -> None:
    rm.record("TransferFromDeviceTime", 219465)
    rm.record("InboundData", 4, "bytes")
    rm.record("TensorsGraphSize", 122, "number")
    rm.record("ExecuteTime", 13_359_843)
    report = rm.metrics_report()
    full = reference_section("met.metrics_report()")
    later = reference_section("metrics_report after 1 more step")
    assert block(report, "Metric: TransferFromDeviceTime") == block(full, "Metric: TransferFromDeviceTime")
    assert block(report, "Metric: InboundData") == block(full, "Metric: InboundData")
    assert block(report, "Metric: TensorsGraphSize") == block(later, "Metric: TensorsGraphSize")
    assert block(report, "Metric: ExecuteTime") == block(later, "Metric: ExecuteTime")
    # No rate lines with one sample.
    assert all("Rate" not in ln for ln in block(report, "Metric: ExecuteTime"))


def test_number_metric_with_rates_matches_reference(clock: FakeClock) -> None:
    # TensorsGraphSize: 5 samples, 568 total, Rate 3.14711/s -> span 4 intervals = 5/rate s.
    feed_spaced(clock, "TensorsGraphSize", [80, 122, 122, 122, 122], round(5 / 3.14711 * 1e9), "number")
    ref = reference_section("met.metrics_report()")
    assert block(rm.metrics_report(), "Metric: TensorsGraphSize") == block(ref, "Metric: TensorsGraphSize")


def test_bytes_metric_with_rates_matches_reference(clock: FakeClock) -> None:
    feed_spaced(clock, "OutboundData", [8, 512, 200704], round(3 / 3252.61 * 1e9), "bytes")
    ref = reference_section("metrics_report after 1 more step")
    assert block(rm.metrics_report(), "Metric: OutboundData") == block(ref, "Metric: OutboundData")


def test_rates_are_over_first_to_last_sample(clock: FakeClock) -> None:
    feed_spaced(clock, "M", [1000, 3000], 2 * 10**9, "time")  # 2 samples over 2 s
    report = rm.metrics_report()
    assert line(report, "Metric: M", "Rate") == "  Rate: 1 / second"
    assert line(report, "Metric: M", "ValueRate") == "  ValueRate: 002.000us / second"
    feed_spaced(clock, "Fast", [1, 1], 2351, "number")  # torch_xla printed e.g. 849979
    assert line(rm.metrics_report(), "Metric: Fast", "Rate") == "  Rate: 850702 / second"


def test_rates_left_out_without_a_time_span(clock: FakeClock) -> None:
    rm.record("Same", 5, "number")
    rm.record("Same", 7, "number")  # clock not advanced
    lines = block(rm.metrics_report(), "Metric: Same")
    assert [ln.split(":")[0].strip() for ln in lines] == [
        "Metric",
        "TotalSamples",
        "Accumulator",
        "Percentiles",
    ]


# ---------------------------------------------------------------------------- percentiles


def test_percentile_picks(clock: FakeClock) -> None:
    for v in reversed(range(100)):  # order of arrival does not matter
        clock.now += 1000
        rm.record("P", v, "number")
    pct = line(rm.metrics_report(), "Metric: P", "Percentiles")
    assert pct == (
        "  Percentiles: 1%=1.00; 5%=5.00; 10%=10.00; 20%=20.00; 50%=50.00; 80%=80.00; "
        "90%=90.00; 95%=95.00; 99%=99.00"
    )


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, [0] * 9),
        (2, [0, 0, 0, 0, 1, 1, 1, 1, 1]),  # CompileTime in the reference
        (5, [0, 0, 0, 1, 2, 4, 4, 4, 4]),  # ExecuteTime / TensorsGraphSize
        (25, [0, 1, 2, 5, 12, 20, 22, 23, 24]),
    ],
)
def test_percentile_index_rule(n: int, expected: list[int]) -> None:
    assert [rm._percentile_index(p, n) for p in rm.PERCENTILES] == expected


def test_window_keeps_recent_samples_but_exact_totals(clock: FakeClock) -> None:
    for v in range(2000):
        clock.now += 1_000_000
        rm.record("W", v, "number")
    data = rm.metric_data("W")
    assert data is not None
    total, acc, samples = data
    assert total == 2000
    assert acc == sum(range(2000))
    assert len(samples) == rm.MAX_SAMPLES
    assert [v for _, v in samples] == [float(v) for v in range(2000 - rm.MAX_SAMPLES, 2000)]
    pct = parse_report(rm.metrics_report())[0]["percentiles"]
    assert pct[1] == f"{2000 - rm.MAX_SAMPLES + rm.MAX_SAMPLES // 100}.00"
    # 1024 samples over 1023 ms.
    assert line(rm.metrics_report(), "Metric: W", "Rate") == "  Rate: 1000.98 / second"


# ------------------------------------------------------------------------ counters & order


def test_report_order_metrics_then_counter_groups(clock: FakeClock) -> None:
    for name in ("ExecuteTime", "CompileTime", "TransferToDeviceTime", "DeviceLockWait"):
        rm.record(name, 1000)
    for name in (
        "aten::nonzero",
        "xla::mul",
        "MarkStep",
        "aten::_local_scalar_dense",
        "CachedCompile",
        "xla::add",
        "CreateDataHandles",
        "UncachedCompile",
    ):
        rm.count(name)
    rm.count("Zero", 0)
    rm.count("Gone", 2)
    rm.count("Gone", -2)
    names = [e["name"] for e in parse_report(rm.metrics_report())]
    expected_counters = [
        "CachedCompile",
        "CreateDataHandles",
        "MarkStep",
        "UncachedCompile",
        "xla::add",
        "xla::mul",
        "aten::_local_scalar_dense",
        "aten::nonzero",
    ]
    expected_metrics = ["CompileTime", "DeviceLockWait", "ExecuteTime", "TransferToDeviceTime"]
    assert names == expected_metrics + expected_counters
    assert rm.counter_names() == expected_counters
    assert rm.metric_names() == expected_metrics
    assert rm.counter_value("Zero") == 0
    assert "Counter: Zero" not in rm.metrics_report()


def test_counter_block_format_and_values() -> None:
    rm.count("MarkStep")
    rm.count("MarkStep", 4)
    rm.COUNTERS["CachedCompile"] = 3  # the runtime may bump the dict directly
    assert rm.metrics_report() == "Counter: CachedCompile\n  Value: 3\nCounter: MarkStep\n  Value: 5\n"
    assert met.counter_value("MarkStep") == 5
    assert met.counter_value("NoSuchCounter") is None


def test_executed_fallback_ops() -> None:
    assert met.executed_fallback_ops() == []
    rm.count("aten::nonzero")
    rm.count("aten::_local_scalar_dense", 2)
    rm.count("aten::unused", 0)
    rm.count("xla::nonzero")
    assert met.executed_fallback_ops() == ["aten::_local_scalar_dense", "aten::nonzero"]


# --------------------------------------------------------------------------- short report


def test_short_report_matches_reference_after_one_step(clock: FakeClock) -> None:
    rm.count("CachedCompile")
    rm.count("MarkStep")
    rm.count("CreateXlaTensor", 91)  # not part of the short report
    rm.count("xla::add", 16)
    rm.record("ExecuteTime", 13_359_843)
    feed_spaced(clock, "TransferToDeviceTime", [7410, 6199, 35553], round(3 / 3252.72 * 1e9), "time")
    rm.record("LazyTracing", 221)  # not part of the short report
    ours = rm.short_metrics_report().splitlines()
    ref = reference_section("short_metrics_report after 1 more step").strip("\n").splitlines()
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        if a.startswith("  ValueRate:"):
            assert parse_value(a.split()[1]) == pytest.approx(parse_value(b.split()[1]), rel=1e-5)
        else:
            assert a == b


def test_short_report_layout_matches_reference(clock: FakeClock) -> None:
    feed(clock, "CompileTime", COMPILE_TIME)
    feed(clock, "ExecuteTime", EXECUTE_TIME)
    rm.record("TransferToDeviceTime", 2013)
    rm.record("TransferFromDeviceTime", 219465)
    rm.record("DeviceLockWait", 1582)
    rm.count("CachedCompile", 3)
    rm.count("UncachedCompile", 2)
    rm.count("MarkStep", 5)
    rm.count("aten::_local_scalar_dense")
    rm.count("xla::add", 72)
    ours = [(e["type"], e["name"]) for e in parse_report(rm.short_metrics_report())]
    ref = [(e["type"], e["name"]) for e in parse_report(reference_section("met.short_metrics_report()"))]
    assert (
        ours
        == ref
        == [
            ("counter", "CachedCompile"),
            ("metric", "CompileTime"),
            ("metric", "ExecuteTime"),
            ("metric", "TransferToDeviceTime"),
            ("metric", "TransferFromDeviceTime"),
            ("counter", "MarkStep"),
            ("counter", "aten::_local_scalar_dense"),
        ]
    )


def test_short_report_with_explicit_names(clock: FakeClock) -> None:
    rm.record("LazyTracing", 300)
    rm.record("CompileTime", 10**9)
    rm.count("UncachedCompile", 2)
    rm.count("CreateXlaTensor", 7)
    rm.count("aten::nonzero")
    short = rm.short_metrics_report(["CreateXlaTensor", "UncachedCompile", "Missing"], ["LazyTracing"])
    assert [e["name"] for e in parse_report(short)] == [
        "UncachedCompile",
        "LazyTracing",
        "CreateXlaTensor",
        "aten::nonzero",
    ]
    # An aten:: counter asked for by name is not printed twice.
    assert rm.short_metrics_report(["aten::nonzero"], ["Nothing"]) == "Counter: aten::nonzero\n  Value: 1\n"


# -------------------------------------------------------------------- queries and clearing


def test_metric_data_shape(clock: FakeClock) -> None:
    feed(clock, "ExecuteTime", EXECUTE_TIME)
    assert met.metric_data("ExecuteTime") == (5, 233092920.0, EXECUTE_TIME)
    data = met.metric_data("ExecuteTime")
    assert data is not None
    assert isinstance(data[0], int) and isinstance(data[1], float)
    assert all(isinstance(ts, float) and isinstance(v, float) for ts, v in data[2])
    assert met.metric_data("NoSuchMetric") is None


def test_clear_functions(clock: FakeClock) -> None:
    rm.record("ExecuteTime", 5)
    rm.count("MarkStep")
    counters_ref = rm.COUNTERS
    met.clear_counters()
    assert met.counter_names() == [] and met.metric_names() == ["ExecuteTime"]
    assert "Metric: ExecuteTime" in met.metrics_report()
    assert rm.COUNTERS is counters_ref  # cleared in place
    rm.count("MarkStep")
    met.clear_metrics()
    assert met.metric_names() == [] and met.counter_names() == ["MarkStep"]
    assert met.metric_data("ExecuteTime") is None
    rm.record("ExecuteTime", 5)
    met.clear_all()
    assert met.counter_names() == [] and met.metric_names() == []
    assert met.metrics_report() == "" and met.short_metrics_report() == ""
    rm.record("ExecuteTime", 7)  # recording after a clear starts afresh
    assert met.metric_data("ExecuteTime") == (1, 7.0, ((clock.now / 1e9, 7.0),))


def test_snapshot_is_json_and_cheap(clock: FakeClock) -> None:
    rm.record("ExecuteTime", 100)
    rm.record("ExecuteTime", 50)
    rm.record("OutboundData", 8, "bytes")
    rm.count("MarkStep", 2)
    snap = rm.snapshot()
    assert json.loads(json.dumps(snap)) == {
        "counters": {"MarkStep": 2},
        "metrics": {
            "ExecuteTime": {"count": 2, "total": 150, "kind": "time"},
            "OutboundData": {"count": 1, "total": 8, "kind": "bytes"},
        },
    }
    rm.count("MarkStep")
    assert snap["counters"] == {"MarkStep": 2}  # a copy, not a view


# ---------------------------------------------------------------------- recording details


def test_kind_is_fixed_by_first_record_and_validated() -> None:
    rm.record("Sizes", 2048, "bytes")
    rm.record("Sizes", 2048, "time")
    assert line(rm.metrics_report(), "Metric: Sizes", "Accumulator") == "  Accumulator: 4.00KB"
    with pytest.raises(ValueError, match="kind"):
        rm.record("Bad", 1, "seconds")
    assert rm.metric_names() == ["Sizes"]


def test_timed_records_elapsed_ns_even_on_error() -> None:
    with rm.timed("Section"):
        pass
    with pytest.raises(RuntimeError), rm.timed("Section"):
        raise RuntimeError("boom")
    data = rm.metric_data("Section")
    assert data is not None and data[0] == 2
    assert all(v >= 0 for _, v in data[2])
    assert rm.snapshot()["metrics"]["Section"] == {"count": 2, "total": data[1], "kind": "time"}


def test_concurrent_recording_and_reporting() -> None:
    stop = threading.Event()

    def writer() -> None:
        for i in range(20000):
            rm.count("xla::add")
            rm.count(f"aten::op{i % 50}")
            rm.record("LazyTracing", i)
            rm.record(f"M{i % 50}", i, "number")

    def reader() -> int:
        reports = 0
        while not stop.is_set():
            parse_report(rm.metrics_report())
            rm.snapshot()
            rm.metric_data("LazyTracing")
            reports += 1
        return reports

    # future.result() re-raises anything a thread hit, e.g. "deque mutated during iteration".
    with ThreadPoolExecutor(max_workers=4) as pool:
        watcher = pool.submit(reader)
        writers = [pool.submit(writer) for _ in range(3)]
        for w in writers:
            w.result()
        stop.set()
        assert watcher.result() > 0
    value = rm.counter_value("xla::add")
    assert value is not None and 0 < value <= 60000
    data = rm.metric_data("LazyTracing")
    assert data is not None and len(data[2]) == rm.MAX_SAMPLES


# ------------------------------------------------------------------------------ public API


def test_debug_module_mirrors_torch_xla_names() -> None:
    expected = {
        "metrics_report",
        "short_metrics_report",
        "counter_names",
        "counter_value",
        "metric_names",
        "metric_data",
        "clear_counters",
        "clear_metrics",
        "clear_all",
        "executed_fallback_ops",
    }
    assert set(met.__all__) == expected
    for name in expected:
        assert getattr(met, name) is getattr(rm, name)
    # torch_xla 2.9 offers the same names (last line of the reference).
    listed = reference_text().strip().splitlines()[-1]
    assert expected <= set(ast.literal_eval(listed))


def test_registry_imports_only_stdlib() -> None:
    tree = ast.parse(Path(rm.__file__).read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    assert roots <= set(sys.stdlib_module_names)


def test_a_view_counts_once_as_its_op(dev: Any) -> None:
    import torch

    import xlalab

    x = torch.ones(2, 3, device=dev)
    xlalab.mark_step()
    met.clear_counters()
    x.t()
    x.view(3, 2)
    assert met.counter_value("xla::t") == 1 and met.counter_value("xla::view") == 1
