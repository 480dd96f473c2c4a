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


def _xla_flags_after_start(platform: str, xla_flags: str) -> str:
    code = (
        "import os\nfrom xlalab.runtime import backend\n"
        "try:\n    backend.platform()\nexcept backend.DeviceError:\n    pass\n"
        "print(os.environ.get('XLA_FLAGS', ''))"
    )
    env = dict(os.environ, PJRT_DEVICE=platform, XLA_FLAGS=xla_flags)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_gpu_run_asks_xla_for_ieee_division_and_sqrt_keeping_the_users_flags() -> None:
    # XLA:GPU's own float32 division and sqrt are up to two ulps off; these LLVM options make
    # them round as eager's do. The user's flags stay, and an option they set themselves wins.
    ieee = "-nvptx-prec-divf32=2,-nvvm-reflect-add=__CUDA_PREC_SQRT=1"
    assert _xla_flags_after_start("CUDA", "") == f"--xla_backend_extra_options={ieee}"
    assert _xla_flags_after_start("CUDA", "--xla_dump_to=/tmp/d --xla_backend_extra_options=-x=1") == (
        f"--xla_dump_to=/tmp/d --xla_backend_extra_options=-x=1,{ieee}"
    )
    mine = "--xla_backend_extra_options=-nvptx-prec-divf32=1"
    assert _xla_flags_after_start("CUDA", mine) == mine + ",-nvvm-reflect-add=__CUDA_PREC_SQRT=1"
    assert _xla_flags_after_start("CPU", "--xla_dump_to=/tmp/d") == "--xla_dump_to=/tmp/d"
