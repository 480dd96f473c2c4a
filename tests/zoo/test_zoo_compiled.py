"""The model zoo compiled: ``torch.compile(step, backend="xlalab")`` against eager PyTorch.

Each zoo model (tests/zoo/models.py) is built twice from one seed, on the CPU and on xla, and
trains two SGD steps: eagerly on the CPU, compiled on xla. The compiled function is the whole
step (``zero_grad``, loss, ``backward``, ``step``), with the graph breaks dynamo makes in it
(at ``backward()``, around the optimizer's step, inside a recurrent layer). Losses and every
parameter after the steps must equal eager's. Dropout is set to zero: the two devices draw
different random numbers.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import xlalab.dynamo as dynamo

from .models import COMMON, ZOO, Zoo, no_dropout

STEPS = 2


def _world(zoo: Zoo, device: str) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(COMMON, ns)
    ns["dev"] = torch.device(device)
    torch.manual_seed(0)
    exec(zoo.model, ns)
    no_dropout(ns["model"])
    ns["opt"] = torch.optim.SGD(ns["model"].parameters(), lr=0.01)
    return ns


def step(model: nn.Module, opt: torch.optim.Optimizer, loss_of: Any, x: torch.Tensor, y: torch.Tensor) -> Any:
    opt.zero_grad()
    loss = loss_of(x, y)
    value = loss.detach()
    loss.backward()
    opt.step()
    return value


@pytest.mark.parametrize("zoo", ZOO, ids=[z.name for z in ZOO])
def test_zoo_model_trains_compiled_as_eager(zoo: Zoo, dev: torch.device) -> None:
    dynamo.reset()
    eager, lazy = _world(zoo, "cpu"), _world(zoo, str(dev))
    compiled = torch.compile(step, backend="xlalab")
    for i in range(STEPS):
        torch.manual_seed(100 + i)
        x, y = eager["batch"](*zoo.before)
        want = step(eager["model"], eager["opt"], eager["loss_of"], x, y)
        got = compiled(lazy["model"], lazy["opt"], lazy["loss_of"], x.to(dev), y.to(dev))
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5, msg=f"loss of step {i}")
    for (name, p), q in zip(eager["model"].named_parameters(), lazy["model"].parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=name)
    assert not [f.lazy for f in dynamo.compiled_functions() if f.lazy], dynamo.summary()
