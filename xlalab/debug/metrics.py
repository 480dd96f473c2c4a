"""Metrics and counters, mirroring ``torch_xla.debug.metrics``.

``import xlalab.debug.metrics as met`` then ``print(met.short_metrics_report())`` works as
it does with torch_xla, and the report text has the same line format, so parsers written
for torch_xla's reports read xlalab's too. The registry itself lives in
:mod:`xlalab.runtime.metrics`.
"""

from __future__ import annotations

from xlalab.runtime.metrics import (
    clear_all,
    clear_counters,
    clear_metrics,
    counter_names,
    counter_value,
    executed_fallback_ops,
    metric_data,
    metric_names,
    metrics_report,
    short_metrics_report,
)

__all__ = [
    "clear_all",
    "clear_counters",
    "clear_metrics",
    "counter_names",
    "counter_value",
    "executed_fallback_ops",
    "metric_data",
    "metric_names",
    "metrics_report",
    "short_metrics_report",
]
