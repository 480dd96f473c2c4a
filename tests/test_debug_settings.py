"""XLA_METRICS_FILE, XLA_SAVE_HLO_FILE / XLA_DUMP_HLO_GRAPH, logging and the settings registry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import xlalab
from xlalab.runtime import config, graph
from xlalab.runtime.lowering.registry import LOWERINGS

aten = torch.ops.aten


def test_metrics_file_gets_a_report_per_step(dev: torch.device, tmp_path: Path) -> None:
    target = tmp_path / "metrics.txt"
    config.set("XLA_METRICS_FILE", str(target))
    try:
        for _ in range(3):
            out = (torch.ones(2, device=dev) * 3).sum()
            xlalab.mark_step()
            assert out.shape == ()
    finally:
        config.set("XLA_METRICS_FILE", "")
    text = target.read_text()
    steps = [line for line in text.splitlines() if line.startswith("[MetricsData; step=")]
    assert len(steps) == 3
    assert "Counter: MarkStep" in text and "Metric: ExecuteTime" in text


def test_failed_lowering_saves_the_graph_and_says_where(dev: torch.device, tmp_path: Path) -> None:
    target = tmp_path / "bad.hlo"
    original = LOWERINGS[aten.relu.default]

    def broken(x):  # type: ignore[no-untyped-def]
        raise ValueError("deliberately broken lowering")

    LOWERINGS[aten.relu.default] = broken
    config.set("XLA_SAVE_HLO_FILE", str(target))
    config.set("XLA_DUMP_HLO_GRAPH", True)
    try:
        x = torch.ones(3, 31, device=dev)
        y = (x * 2).relu()  # a shape no other test compiles
        with pytest.raises(graph.LoweringError) as info:
            y.cpu()
    finally:
        LOWERINGS[aten.relu.default] = original
        config.set("XLA_SAVE_HLO_FILE", "")
        config.set("XLA_DUMP_HLO_GRAPH", False)
        xlalab.runtime.storage._pending.clear()
    message = str(info.value)
    assert "deliberately broken lowering" in message
    assert f"saved to {target}" in message
    assert "aten::relu" in target.read_text() and "aten::relu" in message  # XLA_DUMP_HLO_GRAPH


def test_vlog_tensor_5_logs_executions() -> None:
    code = "import torch, xlalab; x = torch.ones(3, device=xlalab.device()) * 2; xlalab.mark_step()"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="tensor=5")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "xlalab/runtime/graph.py" in out.stderr and "Executing IR graph hash" in out.stderr
    assert "on device xla:0 done!" in out.stderr
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Executing IR graph hash" not in quiet.stderr


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("XLA_SAVE_TENSORS_FMT", "png", "is not one of text, dot, hlo, stablehlo"),
        ("XLA_IR_DEBUG", "maybe", "is not a boolean"),
        ("TF_CPP_MIN_LOG_LEVEL", "loud", "is not an integer"),
        ("TF_CPP_VMODULE", "tensor", "is not name=level"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str, says: str) -> None:
    env = dict(os.environ, **{name: value})
    out = subprocess.run(
        [sys.executable, "-c", "import xlalab"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert name in out.stderr and says in out.stderr


def test_settings_change_at_run_time_and_unknown_names_are_refused() -> None:
    with pytest.raises(KeyError, match="unknown xlalab setting 'XLA_NOPE'"):
        config.set("XLA_NOPE", 1)
    with pytest.raises(ValueError, match="XLA_SYNC_WAIT='sometimes' is not a boolean"):
        config.set("XLA_SYNC_WAIT", "sometimes")


def test_env_var_doc_is_generated_from_the_registry() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "env-vars.md").read_text()
    assert doc == config.markdown(), "regenerate: python -m xlalab.runtime.config > docs/env-vars.md"
    for name in (
        "XLA_IR_DEBUG",
        "XLA_SAVE_TENSORS_FMT",
        "PT_XLA_DEBUG_MAX_FRAME",
        "XLA_USE_EAGER_DEBUG_MODE",
    ):
        assert f"`{name}`" in doc
