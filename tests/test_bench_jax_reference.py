"""The benchmark's pure-JAX steps must compute what the eager PyTorch workloads compute.

Otherwise the "jax.jit" column of bench/bench_step.py would be timing a different (maybe cheaper)
computation than the eager and xlalab columns. Two steps are run so optimizer state (momentum,
Adam moments, step count) and BatchNorm running stats are exercised, not just the first update.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from xlalab.testing.workloads import WORKLOADS, train_step

STEPS = 2


def _load_jax_reference() -> ModuleType:
    # bench/ is a scripts folder, not a package, so load the module from its path.
    path = Path(__file__).resolve().parents[1] / "bench" / "jax_reference.py"
    spec = importlib.util.spec_from_file_location("bench_jax_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


jr = _load_jax_reference()


def _as_torch(a: object) -> torch.Tensor:
    return torch.from_numpy(np.array(a))  # np.array copies: JAX buffers are read-only


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_jax_step_matches_eager_torch(name: str) -> None:
    workload = WORKLOADS[name]
    model = workload.make_model(0, dropout=0.0)
    opt = workload.make_optimizer(model.parameters())
    ref = jr.build_reference(model, opt, workload.clip)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    for step in range(STEPS):
        inputs, targets = workload.make_batch(step, workload.default_batch, "cpu")
        torch_loss = train_step(workload, model, opt, inputs, targets).item()
        jax_loss = float(ref.run(jr.to_jax(inputs), jr.to_jax(targets), step))
        assert jax_loss == pytest.approx(torch_loss, rel=1e-4), f"step {step}"

    # Entries whose gradient is ~0 get rounding-noise gradients that differ between the two
    # implementations (e.g. the attention key bias, which softmax ignores), and Adam's normalization
    # turns that noise into moves of up to ~lr. So elementwise we allow a small fraction of lr
    # absolute, and require 1e-4 relative for each tensor as a whole.
    atol = 0.05 * float(opt.param_groups[0]["lr"])
    for n, p in model.named_parameters():
        got = _as_torch(ref.params[n])
        want = p.detach()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=atol, msg=lambda m, n=n: f"{n}: {m}")
        assert ((got - want).norm() / want.norm()).item() < 1e-4, n
        # The update itself must match too (params alone hide gradient errors when lr is small).
        # Norm-wise, for the same rounding-noise entries.
        want_delta, got_delta = want - before[n], got - before[n]
        rel = ((got_delta - want_delta).norm() / want_delta.norm().clamp_min(1e-12)).item()
        assert rel < 5e-3, f"{n}: update differs by {rel:.2e} (relative norm)"

    torch_buffers = dict(model.named_buffers())
    for n, b in ref.buffers.items():
        torch.testing.assert_close(_as_torch(b), torch_buffers[n], rtol=1e-4, atol=1e-6)
