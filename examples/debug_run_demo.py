"""A tiny training loop that recompiles once: the last batch is smaller.

    xlalab debug-run --outfile /tmp/debug_run.tar.gz -- python -u examples/debug_run_demo.py

The dataset has 20 rows and the batch size is 8, so the steps see batches of 8, 8 and 4. Every
step ends at the same ``xm.optimizer_step`` line, and the third one traces a graph whose input
shapes differ (``f32[8,4]`` becomes ``f32[4,4]``), which XLA must compile anew. debug-run's
summary.txt names that line and the changed input shape. Pad or drop the last batch
(``drop_last=True`` in a DataLoader) to keep one graph.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20, help="dataset size (default 20)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    args = parser.parse_args()

    torch.manual_seed(0)
    dev = xm.xla_device()
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data, target = torch.randn(args.rows, 4), torch.randn(args.rows, 2)

    for step, start in enumerate(range(0, args.rows, args.batch)):
        x = data[start : start + args.batch].to(dev)
        y = target[start : start + args.batch].to(dev)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)  # the barrier: one graph per distinct batch shape
        print(f"step {step}: batch {x.shape[0]}, loss {loss.item():.4f}")
        # stderr too, so the captured log shows both streams in order.
        print(f"step {step}: done", file=sys.stderr)
    # Two compilations (batch 8, then batch 4) and one cache hit (the second batch of 8).
    uncached, cached = met.counter_value("UncachedCompile"), met.counter_value("CachedCompile")
    print(f"UncachedCompile: {uncached}  CachedCompile: {cached}")


if __name__ == "__main__":
    main()
