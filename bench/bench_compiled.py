"""Compiled mode against the hand-written ``jax.jit`` step and lazy mode, on the reference workloads.

The compiled column is ``torch.compile(train_step, backend="xlalab")`` of the workloads' own
``train_step`` (forward, loss, backward, clip, optimizer step): dynamo breaks the graph at
``loss.backward()``, so a step runs the forward program, the backward program (called by
autograd) and the optimizer program, each one executable call after its guards. Every column
times a step until its results are ready on the device, and reports the median.

    python bench/bench_compiled.py                       # all workloads
    python bench/bench_compiled.py --workloads mlp --steps 30
"""

from __future__ import annotations

import argparse
import sys

import bench_step as bs  # a sibling module: bench/ is sys.path[0] when run as a script
import jax
import torch


def bench_compiled(wl: bs.Workload, batches: list[bs.Batch], cfg: bs.Config) -> bs.Result:
    import xlalab.core.xla_model as xm
    import xlalab.dynamo as dynamo
    from xlalab.runtime import metrics
    from xlalab.testing.workloads import train_step

    dev = xm.xla_device()
    model = wl.make_model(0).to(dev)
    opt = wl.make_optimizer(model.parameters())
    dev_batches = [(inp.to(dev), tgt.to(dev)) for inp, tgt in batches]
    xm.mark_step()
    xm.wait_device_ops()
    dynamo.reset()  # this workload's graphs only
    step = torch.compile(train_step, backend=dynamo.backend)
    before = metrics.COUNTERS.get("UncachedCompile", 0)
    losses: list[torch.Tensor] = []

    def one(i: int) -> None:
        losses.append(step(wl, model, opt, *dev_batches[i]))

    times = bs.run_steps(one, xm.wait_device_ops, len(dev_batches))
    compiles = metrics.COUNTERS.get("UncachedCompile", 0) - before  # warm-up steps included
    graphs = sum(f.num_graphs for f in dynamo.compiled_functions())
    return bs.Result(
        "compiled",
        times.first_ms(),
        times.steady_ms(cfg.warmup),
        str(compiles),
        note=f"{graphs} dynamo graphs; last loss {losses[-1].item():.4f}",
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mnist,mlp,gpt")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=None)
    args = parser.parse_args(argv)
    cfg = bs.Config(args.steps, args.warmup, args.batch, 0, False)
    workloads = bs.import_workloads()
    xla = bs.import_xlalab()
    print(
        f"torch {torch.__version__}, jax {jax.__version__} ({jax.devices()[0].platform}), "
        f"steps={cfg.steps} warmup={cfg.warmup}; medians of steady steps (a shared machine: compare ratios)"
    )
    print(f"{'workload':<8} {'column':<9} {'first ms':>10} {'steady ms':>10} {'compiles':>9}  note")
    for name in args.workloads.split(","):
        wl = workloads.WORKLOADS[name]
        batch = cfg.batch or wl.default_batch
        batches = [wl.make_batch(i, batch, "cpu") for i in range(cfg.steps + 1 + cfg.warmup)]
        results = [bs.bench_jax(wl, batches, cfg)]
        if not isinstance(xla, str):
            try:
                ops = bs.count_aten_ops(wl, workloads.train_step, batches)
                results.append(bs.bench_xlalab(xla, wl, workloads.train_step, batches, ops, cfg))
            except Exception as exc:  # a failing column is reported, the others still run
                results.append(bs._failure("xlalab", exc, cfg))
        try:
            results.append(bench_compiled(wl, batches, cfg))
        except Exception as exc:
            results.append(bs._failure("compiled", exc, cfg))
        jax_ms = results[0].steady_ms
        for r in results:
            ratio = f"  {r.steady_ms / jax_ms:.2f}x jax.jit" if r.steady_ms and jax_ms else ""
            first = f"{r.first_ms:10.1f}" if r.first_ms is not None else f"{'-':>10}"
            steady = f"{r.steady_ms:10.2f}" if r.steady_ms is not None else f"{'-':>10}"
            print(f"{name:<8} {r.backend:<9} {first} {steady} {r.compiles:>9}  {r.note}{ratio}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
