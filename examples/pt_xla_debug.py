"""PT_XLA_DEBUG on a small training loop with three classic mistakes, and what it says about them.

    python examples/pt_xla_debug.py                      # level 2: every compilation and execution
    PT_XLA_DEBUG_LEVEL=1 python examples/pt_xla_debug.py # compilations only
    PT_XLA_DEBUG_FILE=debug.txt python examples/pt_xla_debug.py

The loop (1) feeds a batch whose size changes every step, so every step compiles a new graph;
(2) reads the loss with ``.item()`` inside the step, which runs the graph early and copies the
value to the host; (3) calls ``torch.nonzero``, which has no XLA lowering and runs on the CPU.
The blocks explain each compilation and execution as torch_xla's do; the summary at exit names
the source line of each problem. In a notebook, ``config.set`` the settings after import (as
below) and ``print(pt_xla_debug.report())`` whenever you like.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import xlalab.core.xla_model as xm
from xlalab.debug import pt_xla_debug
from xlalab.runtime import config

config.set("PT_XLA_DEBUG", True)  # or PT_XLA_DEBUG=1 in the environment


def main() -> None:
    torch.manual_seed(0)
    dev = xm.xla_device()
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    for step, batch in enumerate([32, 31, 30, 29, 28, 27]):
        x = torch.randn(batch, 16).to(dev)  # (1) a new shape every step: a new graph every step
        y = torch.randint(0, 4, (batch,)).to(dev)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        print(f"step {step}: loss {loss.item():.4f}")  # (2) .item() inside the step: an early sync
        positives = torch.nonzero(model(x)[:, 0] > 0)  # (3) not lowered: runs on the CPU
        xm.optimizer_step(optimizer)
        del positives

    # The same summary is printed at exit; a notebook can ask for it at any time.
    print(pt_xla_debug.report())


if __name__ == "__main__":
    main()
