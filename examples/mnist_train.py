"""Train the PyTorch/XLA docs' MNIST convnet on xla:0 (synthetic data) and print the metrics report.

    python examples/mnist_train.py [--steps N] [--batch B]

This is the seeds' training loop as written: the model moves to the xla device, the optimizer is made
afterwards, and ``xm.optimizer_step`` is the barrier that compiles (once) and runs each step.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met
from xlalab.testing.workloads import MNIST, mnist_batch


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    dev = xm.xla_device()
    model = MNIST().to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    print(f"training on {dev} ({xm.xla_device_hw(dev)}), batch {args.batch}")
    start = time.perf_counter()
    for step in range(args.steps):
        data, target = mnist_batch(step, args.batch)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data.to(dev)), target.to(dev))
        loss.backward()
        xm.optimizer_step(optimizer)  # the barrier: one compiled graph per step
        if step % 5 == 4 or step == args.steps - 1:
            # Reading the loss is a device-to-host transfer: do it rarely, not every step.
            print(f"step {step + 1:3d}  loss {loss.item():.4f}  ({time.perf_counter() - start:.1f} s)")
    print()
    print(met.metrics_report())


if __name__ == "__main__":
    main()
