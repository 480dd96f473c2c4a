"""The three reference workloads train on xla:0 exactly as they do in eager PyTorch.

20 steps each: the loss at every step and the final parameters agree within 1e-4
(relative), and after the warm-up steps no step compiles again.
"""

from __future__ import annotations

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.testing.workloads import WORKLOADS, train_step

STEPS = 20
WARMUP = 3
CASES = [
    ("mnist", None, 8),
    ("mlp", False, 8),
    ("mlp", True, 8),
    ("gpt", None, 2),
]


def _run(
    name: str, foreach: bool | None, batch: int, device: torch.device | str
) -> tuple[list[float], list[torch.Tensor], list[int]]:
    w = WORKLOADS[name]
    model = w.make_model(0, dropout=0.0).to(device)
    opt = w.make_optimizer(model.parameters(), foreach=foreach)
    lazy = torch.device(device).type == "xla"
    losses: list[torch.Tensor] = []
    compiles: list[int] = []
    for step in range(STEPS):
        inputs, targets = w.make_batch(step, batch, device)
        loss = train_step(w, model, opt, inputs, targets, barrier=xlalab.mark_step if lazy else lambda: None)
        losses.append(loss.detach())
        compiles.append(met.counter_value("UncachedCompile") or 0)
    values = [float(x) for x in torch.stack([x.cpu() for x in losses])]
    # Parameters and buffers (batch norm's running statistics and step counter) alike.
    state = [p.detach().cpu() for p in model.parameters()] + [b.cpu() for b in model.buffers()]
    return values, state, compiles


@pytest.mark.parametrize(("name", "foreach", "batch"), CASES, ids=[f"{c[0]}-foreach{c[1]}" for c in CASES])
def test_lazy_training_matches_eager(name: str, foreach: bool | None, batch: int, dev: torch.device) -> None:
    eager_losses, eager_params, _ = _run(name, foreach, batch, "cpu")
    xlalab.mark_step()
    met.clear_all()
    lazy_losses, lazy_params, compiles = _run(name, foreach, batch, dev)
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses), rtol=1e-4, atol=1e-5)
    for lp, ep in zip(lazy_params, eager_params):
        # atol: the attention key bias has an analytically zero gradient (softmax ignores a per-query
        # constant), so AdamW normalises float noise there in eager and lazy alike; 5e-5 bounds that.
        torch.testing.assert_close(lp, ep, rtol=1e-4, atol=5e-5)
    # A steady loop compiles a fixed, small number of graphs and then only hits the cache.
    assert compiles[WARMUP - 1] == compiles[-1], f"compiles per step: {compiles}"
    assert compiles[-1] <= WARMUP
    # The only host transfers are the ones this test asked for at the end.
    assert (met.counter_value("aten::_local_scalar_dense") or 0) == 0


def test_dropout_on_xla_drops_and_rescales(dev: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.ones(200, 200, device=dev, requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.25, training=True)
    y.sum().backward()
    out = y.detach().cpu()
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.75))
    # The gradient flows through exactly the kept elements, with the same scale.
    torch.testing.assert_close(x.grad.cpu(), out)  # type: ignore[union-attr]


def test_training_with_dropout_compiles_once(dev: torch.device) -> None:
    w = WORKLOADS["mnist"]
    model = w.make_model(0).to(dev)
    opt = w.make_optimizer(model.parameters())
    before = []
    for step in range(4):
        inputs, targets = w.make_batch(step, 4, dev)
        train_step(w, model, opt, inputs, targets, barrier=xlalab.mark_step)
        before.append(met.counter_value("UncachedCompile") or 0)
    assert before[1] == before[-1], f"dropout's RNG must not recompile: {before}"
