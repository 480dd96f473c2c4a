"""XLA_SYNC_TENSORS_OPBYOP, XLA_GET_TENSORS_OPBYOP and XLA_USE_EAGER_DEBUG_MODE really run op by op,
with the same results as fused execution (torch_xla 2.9 silently ignores the first two)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.runtime import config
from xlalab.testing.workloads import WORKLOADS, train_step


@pytest.fixture
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    xlalab.mark_step()
    config.set(request.param, True)
    yield request.param
    config.set(request.param, False)


def _two_steps(dev: torch.device | str) -> tuple[list[float], list[torch.Tensor]]:
    w = WORKLOADS["mlp"]
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    losses = []
    for step in range(2):
        inputs, targets = w.make_batch(step, 4, dev)
        lazy = torch.device(dev).type == "xla"
        losses.append(
            train_step(w, model, opt, inputs, targets, barrier=xlalab.mark_step if lazy else lambda: None)
        )
    return [float(x.detach().cpu()) for x in losses], [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("mode", ["XLA_SYNC_TENSORS_OPBYOP", "XLA_USE_EAGER_DEBUG_MODE"], indirect=True)
def test_training_op_by_op_matches_eager(mode: str, dev: torch.device) -> None:
    met.clear_all()
    lazy_losses, lazy_params = _two_steps(dev)
    graph_sizes = met.metric_data("TensorsGraphSize")
    executions = met.counter_value("ExecuteComputation") or 0
    eager_losses, eager_params = _two_steps("cpu")
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses), rtol=1e-5, atol=1e-6)
    for a, b in zip(lazy_params, eager_params):
        # AdamW normalises near-zero gradients, amplifying float noise: the differential test's bounds.
        torch.testing.assert_close(a, b, rtol=1e-4, atol=5e-5)
    # Op by op: one execution per node, not one per graph.
    assert graph_sizes is not None
    assert executions > 50


@pytest.mark.parametrize("mode", ["XLA_GET_TENSORS_OPBYOP"], indirect=True)
def test_get_tensors_op_by_op(mode: str, dev: torch.device) -> None:
    x = torch.arange(12.0).reshape(3, 4).to(dev)
    xlalab.mark_step()
    met.clear_all()
    y = ((x * 2).relu() + 1).sum(0)
    assert y.tolist() == ((torch.arange(12.0).reshape(3, 4) * 2).relu() + 1).sum(0).tolist()
    assert (met.counter_value("ExecuteComputation") or 0) >= 4  # mul, relu, add, sum each ran alone
