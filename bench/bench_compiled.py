"""Compiled mode against the hand-written ``jax.jit`` step and lazy mode, on the reference workloads.

The compiled column is ``torch.compile(train_step, backend="xlalab")`` of the workloads' own
``train_step`` (forward, loss, backward, clip, optimizer step): dynamo breaks the graph at
``loss.backward()``, so a step runs the forward program, the backward program (called by
autograd) and the optimizer program, each one executable call after its guards. Every column
times a step until its results are ready on the device, and reports the median.

The ``floor`` column is the same compiled step with each graph replaying its first outputs: the
host time torch.compile's own machinery takes per step (dynamo's guards and graph breaks,
AOTAutograd's wrappers, the autograd engine, the optimizer's Python) with a backend that
computes nothing. On a CPU the XLA "device" computes on the host's cores, so host time and
device time add up: the compiled step cannot beat ``jax.jit`` step + floor there, whatever the
backend does. On a GPU or TPU the host's work overlaps the device's.

The ``jax.jit``, compiled and floor steps run interleaved, a few steps of one then a few of the other,
so that on a shared machine both see the same load: their ratio is the figure to read. ``cpu
ms`` is the process's CPU time per step (every thread: Python and XLA's), which other jobs move
less than wall time.

    python bench/bench_compiled.py                       # all workloads
    python bench/bench_compiled.py --workloads mlp --steps 40
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import bench_step as bs  # a sibling module: bench/ is sys.path[0] when run as a script
import jax
import jax_reference as jr
import torch

BLOCK = 4  # steps of one column before switching to the other


@dataclass
class Column:
    """One column's step function and what its steps measured."""

    name: str
    step: Callable[[int], object]
    sync: Callable[[], object]
    compile_count: Callable[[], int]  # its compiles so far (both columns compile through JAX)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    compiles: list[int] = field(default_factory=list)

    def run(self, i: int) -> None:
        before = self.compile_count()
        c0, t0 = time.process_time(), time.perf_counter()
        self.step(i)
        self.sync()
        self.wall.append(time.perf_counter() - t0)
        self.cpu.append(time.process_time() - c0)
        self.compiles.append(self.compile_count() - before)


def jax_column(wl: bs.Workload, batches: list[bs.Batch]) -> Column:
    model = wl.make_model(0)
    ref = jr.build_reference(model, wl.make_optimizer(model.parameters()), wl.clip)
    jax_batches = [(jr.to_jax(x), jr.to_jax(y)) for x, y in batches]
    jax.block_until_ready((jax_batches, ref.params, ref.opt_state))

    def one(i: int) -> None:
        ref.run(*jax_batches[i], i)

    return Column("jax.jit", one, ref.block_until_ready, bs.jax_compile_count)


XlaSetup = tuple[torch.nn.Module, torch.optim.Optimizer, list[bs.Batch]]


def _on_xla(wl: bs.Workload, batches: list[bs.Batch]) -> XlaSetup:
    """The workload's model (seed 0), its optimizer and the batches, on the xla device."""
    import xlalab.core.xla_model as xm

    dev = xm.xla_device()
    model = wl.make_model(0).to(dev)
    opt = wl.make_optimizer(model.parameters())
    dev_batches = [(inp.to(dev), tgt.to(dev)) for inp, tgt in batches]
    xm.mark_step()
    xm.wait_device_ops()
    return model, opt, dev_batches


def compiled_column(wl: bs.Workload, batches: list[bs.Batch], losses: list[torch.Tensor]) -> Column:
    import xlalab.core.xla_model as xm
    import xlalab.dynamo as dynamo
    from xlalab.testing.workloads import train_step

    model, opt, dev_batches = _on_xla(wl, batches)
    dynamo.reset()  # this workload's graphs only
    step = torch.compile(train_step, backend=dynamo.backend)

    def one(i: int) -> None:
        losses.append(step(wl, model, opt, *dev_batches[i]))

    from xlalab.runtime import metrics

    return Column("compiled", one, xm.wait_device_ops, lambda: metrics.COUNTERS.get("UncachedCompile", 0))


FLOOR_GRAPHS: list[torch.fx.GraphModule] = []  # the dynamo graphs the floor column compiled


def floor_column(wl: bs.Workload, batches: list[bs.Batch]) -> Column:
    """The same compiled step with every graph replaced by a replay of its first call's outputs:
    what torch.compile itself costs the host per step (dynamo's guards and graph breaks,
    AOTAutograd's wrappers, the autograd engine, the optimizer's Python) when the backend
    computes nothing. On a CPU, where the XLA device shares the cores with the host, no backend
    can make a step cheaper than the jax.jit step plus this."""
    from functorch.compile import make_boxed_func

    import xlalab.core.xla_model as xm
    import xlalab.dynamo as dynamo

    xlalab_backend = importlib.import_module("xlalab.dynamo.backend")  # the module, not its function
    from xlalab.dynamo.executable import CompiledGraph
    from xlalab.testing.workloads import train_step

    model, opt, dev_batches = _on_xla(wl, batches)

    def replaying(label: str, part: str) -> Callable[..., Callable[..., object]]:
        def compile_part(gm: torch.fx.GraphModule, example_inputs: list[object]) -> Callable[..., object]:
            graph, first = CompiledGraph(gm, f"{label}, {part}"), []

            def call(*args: object) -> list[object]:
                if not first:
                    first.append(graph(*args))
                return list(first[0])

            return make_boxed_func(call)  # type: ignore[no-any-return]

        return compile_part

    def floor_backend(gm: torch.fx.GraphModule, example_inputs: list[object], **kw: object) -> object:
        FLOOR_GRAPHS.append(gm)
        real = xlalab_backend._compiler
        xlalab_backend._compiler = replaying  # type: ignore[assignment]
        try:
            return dynamo.backend(gm, example_inputs, **kw)
        finally:
            xlalab_backend._compiler = real

    step = torch.compile(train_step, backend=floor_backend)

    def one(i: int) -> None:
        step(wl, model, opt, *dev_batches[i])

    return Column("floor", one, xm.wait_device_ops, lambda: 0)


def bench_interleaved(wl: bs.Workload, batches: list[bs.Batch], cfg: bs.Config) -> list[bs.Result]:
    """The jax.jit and compiled columns, their steps interleaved in blocks."""
    import xlalab.dynamo as dynamo

    losses: list[torch.Tensor] = []
    FLOOR_GRAPHS.clear()
    columns = [jax_column(wl, batches)]
    try:
        columns.append(compiled_column(wl, batches, losses))
    except Exception as exc:  # a failing column is reported, the other still runs
        failed = bs._failure("compiled", exc, cfg)
    else:
        failed = None
    if failed is None:
        columns.append(floor_column(wl, batches))
    for i in range(1 + cfg.warmup):  # first steps: compiles, the optimizer's state appears
        for col in columns:
            col.run(i)
    for start in range(1 + cfg.warmup, len(batches), BLOCK):
        for col in columns:
            for i in range(start, min(start + BLOCK, len(batches))):
                col.run(i)

    results = []
    for col in columns:
        steady = slice(1 + cfg.warmup, None)
        cpu_ms = statistics.median(col.cpu[steady]) * 1e3
        note = f"cpu {cpu_ms:.2f} ms/step; {sum(col.compiles[steady])} compiles in steady steps"
        if col.name == "floor":
            note = f"cpu {cpu_ms:.2f} ms/step; torch.compile's own host cost (graphs replay their outputs)"
        if col.name == "compiled":
            graphs = sum(f.num_graphs for f in dynamo.compiled_functions()) - len(FLOOR_GRAPHS)
            note += f"; {graphs} dynamo graphs; last loss {losses[-1].item():.4f}"
        wall_ms = statistics.median(col.wall[steady]) * 1e3
        result = bs.Result(col.name, col.wall[0] * 1e3, wall_ms, str(sum(col.compiles)), note=note)
        results.append(result)
    if failed is not None:
        results.append(failed)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mnist,mlp,gpt")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--no-lazy", action="store_true", help="leave out the lazy-mode column")
    args = parser.parse_args(argv)
    cfg = bs.Config(args.steps, args.warmup, args.batch, 0, False)
    workloads = bs.import_workloads()
    xla = bs.import_xlalab()
    print(
        f"torch {torch.__version__}, jax {jax.__version__} ({jax.devices()[0].platform}), "
        f"steps={cfg.steps} warmup={cfg.warmup}; medians of steady steps, jax.jit and compiled "
        "interleaved (a shared machine: compare ratios)"
    )
    print(f"{'workload':<8} {'column':<9} {'first ms':>10} {'steady ms':>10} {'compiles':>9}  note")
    for name in args.workloads.split(","):
        wl = workloads.WORKLOADS[name]
        batch = cfg.batch or wl.default_batch
        batches = [wl.make_batch(i, batch, "cpu") for i in range(cfg.steps + 1 + cfg.warmup)]
        results = bench_interleaved(wl, batches, cfg)
        if not isinstance(xla, str) and not args.no_lazy:
            try:
                ops = bs.count_aten_ops(wl, workloads.train_step, batches)
                results.append(bs.bench_xlalab(xla, wl, workloads.train_step, batches, ops, cfg))
            except Exception as exc:  # a failing column is reported, the others still run
                results.append(bs._failure("xlalab", exc, cfg))
        jax_ms = results[0].steady_ms
        for r in results:
            ratio = f"  {r.steady_ms / jax_ms:.2f}x jax.jit" if r.steady_ms and jax_ms else ""
            first = f"{r.first_ms:10.1f}" if r.first_ms is not None else f"{'-':>10}"
            steady = f"{r.steady_ms:10.2f}" if r.steady_ms is not None else f"{'-':>10}"
            print(f"{name:<8} {r.backend:<9} {first} {steady} {r.compiles:>9}  {r.note}{ratio}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
