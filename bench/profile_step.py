"""Where a steady step's host time goes: cProfile over steady steps of one workload.

Profile before you cut: this prints the functions that cost the most host time per step, in a
compiled step (``torch.compile(train_step, backend="xlalab")``) or a lazy one (``mark_step`` as
the barrier), after the warm-up steps that compile.

    python bench/profile_step.py --workload mlp --mode compiled
    python bench/profile_step.py --workload gpt --mode lazy --steps 50 --top 40
    python bench/profile_step.py --split            # host time per step by layer, no cProfile
    PJRT_DEVICE=CUDA python bench/profile_step.py      # the same on a GPU
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable

import torch

Step = tuple[Callable[[int], object], Callable[[], None]]  # a step of index i, and the wait for the device


def make_step(workload: str, mode: str, batch: int | None) -> Step:
    """The step function for step ``i`` and the call that waits for the device."""
    import xlalab.core.xla_model as xm
    import xlalab.dynamo as dynamo
    from xlalab.testing.workloads import WORKLOADS, train_step

    wl = WORKLOADS[workload]
    dev = xm.xla_device()
    model = wl.make_model(0).to(dev)
    opt = wl.make_optimizer(model.parameters())
    batches = [wl.make_batch(i, batch or wl.default_batch, "cpu") for i in range(8)]
    dev_batches = [(x.to(dev), y.to(dev)) for x, y in batches]
    xm.mark_step()
    xm.wait_device_ops()
    if mode == "compiled":
        compiled = torch.compile(train_step, backend=dynamo.backend)

        def step(i: int) -> object:
            return compiled(wl, model, opt, *dev_batches[i % len(dev_batches)])
    else:

        def step(i: int) -> object:
            return train_step(wl, model, opt, *dev_batches[i % len(dev_batches)], barrier=xm.mark_step)

    return step, xm.wait_device_ops


def jax_reference_step(workload: str, batch: int | None) -> Step:
    """The hand-written ``jax.jit`` step of the same workload (bench/jax_reference.py)."""
    import jax_reference as jr  # a sibling module: bench/ is sys.path[0] when run as a script

    from xlalab.testing.workloads import WORKLOADS

    wl = WORKLOADS[workload]
    model = wl.make_model(0)
    ref = jr.build_reference(model, wl.make_optimizer(model.parameters()), wl.clip)
    batches = [wl.make_batch(i, batch or wl.default_batch, "cpu") for i in range(8)]
    jax_batches = [(jr.to_jax(x), jr.to_jax(y)) for x, y in batches]

    def step(i: int) -> object:
        return ref.run(*jax_batches[i % len(jax_batches)], i)

    return step, ref.block_until_ready


class CallTimer:
    """Host time spent in JAX executable calls and in xlalab's program runs around them."""

    def __init__(self) -> None:
        import jax._src.stages as stages

        from xlalab.dynamo import executable
        from xlalab.runtime import graph

        self.jax_s = 0.0
        self.xlalab_s = 0.0
        self.calls = 0
        self.args = 0
        timer = self

        def timed_call(fn: Callable[..., object], attr: str) -> Callable[..., object]:
            def call(*args: object, **kwargs: object) -> object:
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    dt = time.perf_counter() - t0
                    if attr == "jax":
                        timer.jax_s += dt
                        timer.calls += 1
                        timer.args += sum(len(a) if isinstance(a, (list, tuple)) else 1 for a in args[1:])
                    else:
                        timer.xlalab_s += dt

            return call

        stages.Compiled.__call__ = timed_call(stages.Compiled.__call__, "jax")  # type: ignore[method-assign]
        executable.Variant.run = timed_call(executable.Variant.run, "xlalab")  # type: ignore[method-assign]
        graph.execute = timed_call(graph.execute, "xlalab")  # type: ignore[attr-defined]

    def reset(self) -> None:
        self.jax_s = self.xlalab_s = 0.0
        self.calls = self.args = 0


def split(args: argparse.Namespace) -> None:
    """Median host time to issue a step, and per step: JAX's calls, xlalab around them, the rest."""
    import jax

    ref_step, ref_sync = jax_reference_step(args.workload, args.batch)
    step, sync = make_step(args.workload, args.mode, args.batch)
    timer = CallTimer()
    for i in range(args.warmup):
        step(i)
        ref_step(i)
    sync()
    ref_sync()
    ref_issue, ref_total, issue, total = [], [], [], []
    timer.reset()
    for i in range(args.steps):
        t0 = time.perf_counter()
        ref_step(i)
        t1 = time.perf_counter()
        ref_sync()
        t2 = time.perf_counter()
        step(i)
        t3 = time.perf_counter()
        sync()
        t4 = time.perf_counter()
        ref_issue.append(t1 - t0)
        ref_total.append(t2 - t0)
        issue.append(t3 - t2)
        total.append(t4 - t2)
    n = args.steps
    med = statistics.median
    jax_ms, xlalab_ms = timer.jax_s / n * 1e3, (timer.xlalab_s - timer.jax_s) / n * 1e3
    print(
        f"{args.workload} {args.mode} on {jax.devices()[0].platform}, torch {torch.__version__}, "
        f"jax {jax.__version__}; medians of {n} steps, interleaved with the jax.jit step\n"
        f"  jax.jit step: issue {med(ref_issue) * 1e3:.3f} ms, step {med(ref_total) * 1e3:.3f} ms\n"
        f"  {args.mode} step: issue {med(issue) * 1e3:.3f} ms, step {med(total) * 1e3:.3f} ms "
        f"({med(total) / med(ref_total):.2f}x)\n"
        f"  per step (means): JAX executable calls {jax_ms:.3f} ms ({timer.calls / n:.0f} calls, "
        f"{timer.args / n:.0f} arguments), xlalab around them {xlalab_ms:.3f} ms, the rest "
        f"(torch, the step's Python) {sum(issue) / n * 1e3 - jax_ms - xlalab_ms:.3f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--mode", choices=("compiled", "lazy"), default="compiled")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--split", action="store_true", help="host time by layer instead of cProfile")
    args = parser.parse_args(argv)
    if args.split:
        split(args)
        return

    import jax

    step, sync = make_step(args.workload, args.mode, args.batch)
    for i in range(args.warmup):
        step(i)
    sync()

    issue, total = [], []  # host time to issue a step; the step through to its results
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(i)
        t1 = time.perf_counter()
        sync()
        issue.append(t1 - t0)
        total.append(time.perf_counter() - t0)
    print(
        f"{args.workload} {args.mode} on {jax.devices()[0].platform}, torch {torch.__version__}, "
        f"jax {jax.__version__}: issue {statistics.median(issue) * 1e3:.3f} ms, "
        f"step {statistics.median(total) * 1e3:.3f} ms (medians of {args.steps})"
    )

    profile = cProfile.Profile()
    profile.enable()
    for i in range(args.steps):
        step(i)
        sync()
    profile.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(key).print_stats(args.top)
        text = out.getvalue()
        print(f"--- by {key}, {args.steps} steps\n" + text[text.find("   ncalls") :])


if __name__ == "__main__":
    main()
