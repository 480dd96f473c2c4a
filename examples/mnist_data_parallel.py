"""The seeds' "Running a model" on several CPU devices (synthetic MNIST), with per-device counters.

    python examples/mnist_data_parallel.py [--devices 4] [--epochs 2] [--steps 10] [--batch 16]

``--devices`` sets XLA_NUM_DEVICES before the first xla device is used (JAX's host device count
is fixed once its backend starts). Each epoch deals ``steps x devices`` batches of ``--batch``
out to the devices; ``xm.optimizer_step`` all-reduces the gradients inside the step's compiled
program, so the replicas stay identical. The train loop is the seeds' own.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn, optim

import xlalab
import xlalab.debug.metrics as met
from xlalab.runtime import config
from xlalab.testing.workloads import MNIST, mnist_batch

lr, momentum = 0.01, 0.5


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="steps per epoch")
    parser.add_argument("--batch", type=int, default=16, help="batch per device")
    args = parser.parse_args()
    config.set("XLA_NUM_DEVICES", args.devices)  # before the first xla device is used

    # The seeds' names (torch_xla_py.*) resolve to xlalab.
    xlalab.use_torch_xla_names()
    import torch_xla_py.data_parallel as dp
    import torch_xla_py.xla_model as xm

    torch.manual_seed(0)
    train_loader = [mnist_batch(i, args.batch) for i in range(args.steps * args.devices)]

    devices = xm.get_xla_supported_devices()
    model_parallel = dp.DataParallel(MNIST, device_ids=devices)

    def train_loop_fn(model, loader, device, context):  # type: ignore[no-untyped-def]
        loss_fn = nn.NLLLoss()
        optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)

        model.train()
        for _, (data, target) in loader:
            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)
            loss.backward()
            xm.optimizer_step(optimizer)
        # The mean of the replicas' last losses (a barrier: every replica calls it).
        return xm.mesh_reduce("loss", loss.item(), lambda losses: sum(losses) / len(losses))

    print(f"{len(devices)} replicas on {', '.join(devices)}, batch {args.batch} per device")
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        losses = model_parallel(train_loop_fn, train_loader)
        print(f"epoch {epoch}: loss {losses[0]:.4f} ({time.perf_counter() - start:.1f} s)")

    print("\nper-device counters:")
    for name in met.counter_names():
        if name.startswith(("ExecuteComputation", "ExecuteReplicated", "UncachedCompile", "CachedCompile")):
            print(f"  {name:28s} {met.counter_value(name)}")
    print()
    print(met.short_metrics_report(metric_names=["CompileTime", "ExecuteReplicatedTime"]))


if __name__ == "__main__":
    main()
