"""`make bench` runs: every table it prints comes out (a smoke run; nothing here is timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_prints_every_table() -> None:
    run = subprocess.run(
        [sys.executable, "bench/bench_step.py", "--quick", "--workloads", "mlp"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    headings = ("steady-step ratios", "pipelined/jax.jit", "host cost of a cached sync",
                "recording micro-benchmark", "10,000-node graph", "cold", "warm", "device memory held")
    for heading in headings:
        assert heading in out, out
    rows = [line.split() for line in out.splitlines() if line.startswith("mlp ")]
    backends = {r[2] for r in rows if len(r) > 2}
    assert {"eager", "jax.jit", "xlalab", "pipelined"} <= backends, out
    assert not any("failed:" in line for line in out.splitlines()), out


def test_profile_step_splits_a_compiled_step() -> None:
    run = subprocess.run(
        [sys.executable, "bench/profile_step.py", "--split", "--workload", "mlp", "--steps", "3",
         "--warmup", "2"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    parts = ("jax.jit step: issue", "compiled step: issue", "JAX executable calls", "4 calls", "xlalab")
    for part in parts:
        assert part in out, out


def test_bench_compiled_prints_the_compiled_and_floor_columns() -> None:
    run = subprocess.run(
        [sys.executable, "bench/bench_compiled.py", "--workloads", "mlp", "--steps", "2", "--warmup", "1",
         "--no-lazy"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {line.split()[1]: line for line in run.stdout.splitlines() if line.startswith("mlp ")}
    assert set(rows) == {"jax.jit", "compiled", "floor"}, run.stdout
    assert "x jax.jit" in rows["floor"] and "torch.compile's own host cost" in rows["floor"], run.stdout
    assert "3 dynamo graphs" in rows["compiled"], run.stdout  # the floor's own graphs not counted
