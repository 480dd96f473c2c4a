"""PJRT_DEVICE picks the platform; a missing one is an error that says what to set."""

from __future__ import annotations

import os
import subprocess
import sys

SNIPPET = (
    "import torch, xlalab.core.xla_model as xm; print(xm.xla_device(), xm.xla_device_hw(xm.xla_device()))"
)


def _run(env_value: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PJRT_DEVICE=env_value)
    return subprocess.run(
        [sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, timeout=120
    )


def test_cpu_platform_by_name() -> None:
    out = _run("CPU")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["xla:0", "CPU"]


def test_missing_platform_names_what_exists_and_what_to_set() -> None:
    out = _run("TPU")
    assert out.returncode != 0
    assert "PJRT_DEVICE=TPU was asked for" in out.stderr
    assert "available: CPU" in out.stderr and "Set PJRT_DEVICE=CPU" in out.stderr


def test_unknown_platform_value() -> None:
    out = _run("QPU")
    assert out.returncode != 0
    assert "is not a platform xlalab knows; use one of CPU, CUDA, TPU" in out.stderr


def test_importing_xlalab_starts_no_jax_backend() -> None:
    # Settings such as XLA_NUM_DEVICES must still take effect after the import (config.set at the
    # top of a script): a JAX value made at import time (a module constant) would start JAX's
    # backends with their defaults first.
    code = (
        "import xlalab, xlalab.core.xla_model, xlalab.dynamo, xlalab.runtime.lowering\n"
        "from jax._src import xla_bridge\n"
        "print(sorted(xla_bridge._backends))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", "importing xlalab started JAX's backends: " + out.stdout
