"""The troubleshooting guide's switches, set at run time from Python (as a notebook must).

    python examples/debug_settings.py

Each section turns one setting on, shows what it does, and turns it off again. The same names
work as environment variables set before start (`XLA_IR_DEBUG=1 python train.py`).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.runtime import config, graph
from xlalab.runtime.tensor import value

dev = xlalab.device()


def section(title: str) -> None:
    print(f"\n=== {title}")


def helper(a: torch.Tensor) -> torch.Tensor:
    return (a * 2 + 1).relu()


section("XLA_IR_DEBUG: every IR node remembers the user frames that created it")
config.set("XLA_IR_DEBUG", True)
w = torch.ones(4, 2, device=dev, requires_grad=True)
loss = helper(w).sum()
loss.backward()
for node in graph.linearize([value(w.grad)]).nodes:  # type: ignore[arg-type]
    if node.frames:  # backward nodes carry the frames of the forward op they differentiate
        print(f"  {node.name:<24} created at {node.frames[0]}")
config.set("XLA_IR_DEBUG", False)
xlalab.mark_step()

section("XLA_USE_BF16: float32 tensors live in bfloat16 on the device (the seeds' 4096 + 1)")
config.set("XLA_USE_BF16", True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("  4096 + 1 =", (torch.tensor(4096.0, device=dev) + 1).item())
print("  warning:", caught[0].message if caught else "(none)")
config.set("XLA_USE_BF16", False)

section("XLA_SYNC_TENSORS_OPBYOP: mark_step runs every node as its own computation")
config.set("XLA_SYNC_TENSORS_OPBYOP", True)
met.clear_all()
y = ((torch.arange(6.0, device=dev) * 3).relu() + 1).sum()
xlalab.mark_step()
print("  executions:", met.counter_value("ExecuteComputation"), "result:", y.item())
config.set("XLA_SYNC_TENSORS_OPBYOP", False)

section("XLA_METRICS_FILE: the metrics report appended at every step")
path = Path(tempfile.mkdtemp()) / "metrics.txt"
config.set("XLA_METRICS_FILE", str(path))
for _ in range(2):
    z = torch.ones(3, device=dev) * 2
    xlalab.mark_step()
config.set("XLA_METRICS_FILE", "")
print(f"  {path}: {path.read_text().count('[MetricsData; step=')} blocks")

section("TF_CPP_VMODULE=tensor=5 with TF_CPP_MIN_LOG_LEVEL=0: one log line per graph execution")
config.set("TF_CPP_MIN_LOG_LEVEL", 0)
config.set("TF_CPP_VMODULE", "tensor=5")
z = torch.ones(3, device=dev) + 5
xlalab.mark_step()
config.set("TF_CPP_VMODULE", "")
config.set("TF_CPP_MIN_LOG_LEVEL", 1)

section("A bad value is refused with the name and what it accepts")
try:
    config.set("XLA_SAVE_TENSORS_FMT", "png")
except ValueError as e:
    print(" ", e)
