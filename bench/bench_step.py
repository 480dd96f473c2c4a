"""Training-step benchmark: eager PyTorch vs a hand-written pure ``jax.jit`` step vs xlalab.

For each reference workload (``xlalab.testing.workloads``) it prints first-step time (compile included),
steady step time (median), compile count and per-op cost side by side, then the xlalab ratios. A second
table times recording alone on a chain of tiny elementwise ops. See bench/README.md for how to read it.

    python bench/bench_step.py                 # all workloads, 20 timed steps after 3 warmup steps
    python bench/bench_step.py --quick         # a few steps, for a smoke run
    python bench/bench_step.py --workloads mnist,gpt --steps 50
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import jax_reference as jr  # a sibling module: bench/ is sys.path[0] when run as a script
import torch
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from xlalab.testing.workloads import Workload

REPO_ROOT = Path(__file__).resolve().parents[1]
Batch = tuple[torch.Tensor, torch.Tensor]


# ------------------------------------------------------------------------------------------ imports


def import_workloads() -> ModuleType:
    """xlalab.testing.workloads, even while the xlalab package itself does not import.

    workloads.py is plain PyTorch; loading it by path keeps the eager and jax.jit columns working when
    ``xlalab/__init__.py`` (or anything it pulls in) is broken mid-development.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        return importlib.import_module("xlalab.testing.workloads")
    except Exception:  # any import failure means "fall back to the file"
        path = REPO_ROOT / "xlalab" / "testing" / "workloads.py"
        spec = importlib.util.spec_from_file_location("xlalab_testing_workloads", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up in sys.modules
        spec.loader.exec_module(module)
        return module


@dataclass(frozen=True)
class Xlalab:
    xm: ModuleType
    met: ModuleType


def import_xlalab() -> Xlalab | str:
    """The xlalab modules the bench needs, or a one-line reason why the column is unavailable."""
    try:
        xm = importlib.import_module("xlalab.core.xla_model")
        met = importlib.import_module("xlalab.debug.metrics")
    except Exception as exc:  # any failure only disables the xlalab column
        return f"{type(exc).__name__}: {exc}"
    return Xlalab(xm, met)


# ------------------------------------------------------------------------------------------ results


@dataclass
class Result:
    backend: str
    first_ms: float | None = None
    steady_ms: float | None = None
    compiles: str = "-"
    ops: int | None = None
    us_per_op: float | None = None
    note: str = ""
    sync_host_ms: float | None = None
    device_mib: float | None = None
    peak_mib: float | None = None  # the step program's footprint, from XLA's memory analysis


@dataclass(frozen=True)
class Config:
    steps: int
    warmup: int
    batch: int | None
    micro_reps: int
    verbose: bool


@dataclass
class StepTimes:
    """Wall time of every step (first, warmup, steady), plus optional per-step recording time."""

    total: list[float] = field(default_factory=list)
    record: list[float] = field(default_factory=list)

    def first_ms(self) -> float:
        return self.total[0] * 1e3

    def steady_ms(self, warmup: int) -> float:
        return statistics.median(self.total[1 + warmup :]) * 1e3

    def steady_record_s(self, warmup: int) -> float:
        return statistics.median(self.record[1 + warmup :])


def run_steps(step: Callable[[int], object], sync: Callable[[], object], n: int) -> StepTimes:
    """Time ``n`` steps, each including the sync that makes its work actually finish."""
    times = StepTimes()
    for i in range(n):
        t0 = time.perf_counter()
        step(i)
        sync()
        times.total.append(time.perf_counter() - t0)
    return times


def _failure(backend: str, exc: BaseException, cfg: Config) -> Result:
    if cfg.verbose:
        traceback.print_exc()
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Result(backend, note=f"failed: {type(exc).__name__}: {message}"[:160])


# -------------------------------------------------------------------------------------------- eager


class _OpCounter(TorchDispatchMode):
    """Counts aten ops below autograd: what a lazy backend sees (forward, backward and optimizer)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_aten_ops(wl: Workload, train_step: Callable[..., torch.Tensor], batches: list[Batch]) -> int:
    """aten ops in one steady-state step (the second: optimizer state is created lazily on the first)."""
    model = wl.make_model(0)
    opt = wl.make_optimizer(model.parameters())
    train_step(wl, model, opt, *batches[0])
    with _OpCounter() as counter:
        train_step(wl, model, opt, *batches[1])
    return counter.count


def bench_eager(wl: Workload, train_step: Callable[..., torch.Tensor], batches: list[Batch], ops: int,
                cfg: Config) -> Result:
    model = wl.make_model(0)
    opt = wl.make_optimizer(model.parameters())
    times = run_steps(lambda i: train_step(wl, model, opt, *batches[i]), lambda: None, len(batches))
    steady = times.steady_ms(cfg.warmup)
    return Result("eager", times.first_ms(), steady, "0", ops, steady * 1e3 / ops, "µs/op = step / aten ops")


# ------------------------------------------------------------------------------------------ jax.jit


class _JaxCompileCounter:
    """Counts XLA backend compiles via jax.monitoring (registered once, read as deltas)."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1


_jax_compiles: _JaxCompileCounter | None = None


def jax_compile_count() -> int:
    global _jax_compiles
    if _jax_compiles is None:
        _jax_compiles = _JaxCompileCounter()
    return _jax_compiles.count


def _sub_jaxprs(params: dict[str, Any]) -> Iterator[Any]:
    for value in params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(getattr(item, "jaxpr", None), "eqns"):
                yield item.jaxpr


def count_eqns(jaxpr: Any) -> int:
    """Primitive applications in a jaxpr, counting into nested jaxprs (pjit, custom_jvp, ...)."""
    return sum(1 + sum(count_eqns(sub) for sub in _sub_jaxprs(eqn.params)) for eqn in jaxpr.eqns)


def bench_jax(wl: Workload, batches: list[Batch], cfg: Config) -> Result:
    model = wl.make_model(0)
    ref = jr.build_reference(model, wl.make_optimizer(model.parameters()), wl.clip)
    jax_batches = [(jr.to_jax(x), jr.to_jax(y)) for x, y in batches]
    jax.block_until_ready((jax_batches, ref.params, ref.opt_state))
    compiles_before = jax_compile_count()
    times = run_steps(lambda i: ref.run(*jax_batches[i], i), ref.block_until_ready, len(batches))
    compiles = jax_compile_count() - compiles_before

    # Tracing is jit's analogue of lazy recording: time it once more, after the timed steps. JAX caches
    # traces per Python function, so trace a fresh wrapper or this would only time a cache hit.
    args = (ref.params, ref.buffers, ref.opt_state, *jax_batches[0], jnp.int32(0))
    t0 = time.perf_counter()
    traced = jax.jit(lambda *a: ref.step(*a)).trace(*args)
    trace_s = time.perf_counter() - t0
    eqns = count_eqns(traced.jaxpr.jaxpr)
    result = Result("jax.jit", times.first_ms(), times.steady_ms(cfg.warmup), str(compiles), eqns,
                    trace_s * 1e6 / eqns, "µs/op = trace time / jaxpr eqns (once)")
    result.device_mib = _live_device_mib()  # model, optimizer state and batches, after the steps
    result.peak_mib = _program_peak_mib(ref.step_fn.lower(*args).compile())
    return result


def _live_device_mib() -> float:
    """Bytes held in live device arrays (on CPU JAX keeps no allocator statistics)."""
    return sum(a.nbytes for a in jax.live_arrays()) / 2**20


def _program_peak_mib(compiled: Any) -> float | None:
    """What one run of a compiled step needs on the device at its peak, by XLA's own memory
    analysis: its arguments and outputs (less the outputs written over donated arguments) and
    its temporaries. Allocator statistics would say the same on GPU/TPU; CPU JAX has none."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    total = (stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
             + stats.temp_size_in_bytes)
    return float(total) / 2**20


# ------------------------------------------------------------------------------------------- xlalab


def _counter(x: Xlalab, name: str) -> int:
    return x.met.counter_value(name) or 0


def _compile_time_ns(x: Xlalab) -> float:
    data = x.met.metric_data("CompileTime")
    return float(data[1]) if data else 0.0


def bench_xlalab(x: Xlalab, wl: Workload, train_step: Callable[..., torch.Tensor], batches: list[Batch],
                 ops: int, cfg: Config) -> Result:
    xm = x.xm
    dev = xm.xla_device()
    model = wl.make_model(0).to(dev)
    opt = wl.make_optimizer(model.parameters())
    dev_batches = [(inp.to(dev), tgt.to(dev)) for inp, tgt in batches]
    xm.mark_step()
    xm.wait_device_ops()  # the transfers above are not part of any step
    uncached, cached = _counter(x, "UncachedCompile"), _counter(x, "CachedCompile")
    compile_ns = _compile_time_ns(x)

    record: list[float] = []

    def step(i: int) -> None:
        t0 = time.perf_counter()

        def barrier() -> None:
            record.append(time.perf_counter() - t0)  # everything before mark_step is recording
            xm.mark_step()

        train_step(wl, model, opt, *dev_batches[i], barrier=barrier)

    times = run_steps(step, xm.wait_device_ops, len(batches))
    times.record = record
    uncached = _counter(x, "UncachedCompile") - uncached
    cached = _counter(x, "CachedCompile") - cached
    compile_ms = (_compile_time_ns(x) - compile_ns) / 1e6
    synced = Result("xlalab", times.first_ms(), times.steady_ms(cfg.warmup), f"{uncached} (+{cached} hit)",
                    ops, times.steady_record_s(cfg.warmup) * 1e6 / ops,
                    f"µs/op = recording / aten ops; compile {compile_ms:.0f} ms")
    synced.sync_host_ms = _cached_sync_host_ms(xm, lambda i: train_step(wl, model, opt, *dev_batches[i]),
                                               len(dev_batches))
    synced.device_mib = _live_device_mib()
    from xlalab.runtime import graph  # the steady step's program is the most recently used one

    synced.peak_mib = _program_peak_mib(graph.CACHE.values()[-1].executable)
    return synced


def bench_xlalab_pipelined(x: Xlalab, wl: Workload, train_step: Callable[..., torch.Tensor],
                           batches: list[Batch], cfg: Config) -> Result:
    """A barrier every step and one read (``loss.item()``) every 10 steps, as a training loop that
    logs does: recording step i+1 overlaps the device's execution of step i."""
    xm = x.xm
    dev = xm.xla_device()
    model = wl.make_model(0).to(dev)
    opt = wl.make_optimizer(model.parameters())
    dev_batches = [(inp.to(dev), tgt.to(dev)) for inp, tgt in batches]
    for i in range(1 + cfg.warmup):  # compiles happen here, as in the synced column
        train_step(wl, model, opt, *dev_batches[i], barrier=xm.mark_step)
    xm.wait_device_ops()
    steady = range(1 + cfg.warmup, len(dev_batches))
    t0 = time.perf_counter()
    loss = None
    for k, i in enumerate(steady):
        loss = train_step(wl, model, opt, *dev_batches[i], barrier=xm.mark_step)
        if k % 10 == 9:
            loss.item()
    xm.wait_device_ops()
    per_step = (time.perf_counter() - t0) / max(len(steady), 1) * 1e3
    return Result("pipelined", None, per_step, "-", None, None, "barrier every step, one read every 10")


def _cached_sync_host_ms(xm: ModuleType, record_step: Callable[[int], object], n: int) -> float:
    """Host CPU time of ``mark_step`` on a graph already compiled (recording excluded)."""
    samples = []
    for i in range(min(n, 8)):
        record_step(i)
        t0 = time.thread_time()
        xm.mark_step()
        samples.append(time.thread_time() - t0)
        xm.wait_device_ops()
    return statistics.median(samples[1:] or samples) * 1e3


# --------------------------------------------------------------------------------------- workloads


def bench_workload(workloads: ModuleType, name: str, xla: Xlalab | str, cfg: Config) -> list[Result]:
    wl = workloads.WORKLOADS[name]
    batch = cfg.batch or wl.default_batch
    n = 1 + cfg.warmup + cfg.steps
    batches = [wl.make_batch(i, batch, "cpu") for i in range(n)]
    ops = count_aten_ops(wl, workloads.train_step, batches)
    results: list[Result] = []
    for backend, run in (
        ("eager", lambda: bench_eager(wl, workloads.train_step, batches, ops, cfg)),
        ("jax.jit", lambda: bench_jax(wl, batches, cfg)),
    ):
        _progress(f"{name}/{backend}")
        try:
            results.append(run())
        except Exception as exc:  # one broken column must not hide the others
            results.append(_failure(backend, exc, cfg))
    if isinstance(xla, str):
        results.append(Result("xlalab", note=f"unavailable: {xla}"[:160]))
    else:
        _progress(f"{name}/xlalab")
        try:
            results.append(bench_xlalab(xla, wl, workloads.train_step, batches, ops, cfg))
        except Exception as exc:  # xlalab is under construction; report and go on
            results.append(_failure("xlalab", exc, cfg))
        _progress(f"{name}/xlalab pipelined")
        try:
            results.append(bench_xlalab_pipelined(xla, wl, workloads.train_step, batches, cfg))
        except Exception as exc:
            results.append(_failure("pipelined", exc, cfg))
    return results


def _progress(what: str) -> None:
    # stderr, so the tables on stdout stay clean when redirected.
    print(f"  running {what} ...", file=sys.stderr, flush=True)


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_workload_table(rows: list[tuple[str, int, Result]]) -> None:
    header = f"{'workload':<8} {'batch':>5} {'backend':<8} {'first ms':>10} {'steady ms':>10} " \
             f"{'compiles':>13} {'ops/step':>8} {'µs/op':>7}  notes"
    print(header)
    print("-" * len(header))
    for name, batch, r in rows:
        print(f"{name:<8} {batch:>5} {r.backend:<8} {_fmt(r.first_ms, '.1f'):>10} "
              f"{_fmt(r.steady_ms, '.2f'):>10} {r.compiles:>13} {_fmt(r.ops, 'd'):>8} "
              f"{_fmt(r.us_per_op, '.2f'):>7}  {r.note}")


def _ratio(num: Result | None, den: Result | None) -> str:
    if num is None or den is None or num.steady_ms is None or den.steady_ms is None:
        return "n/a"
    return f"{num.steady_ms / den.steady_ms:.2f}x"


def print_ratios(per_workload: dict[str, list[Result]]) -> None:
    print("\nsteady-step ratios (lower is better for xlalab):")
    for name, results in per_workload.items():
        by_backend = {r.backend: r for r in results}
        xla = by_backend.get("xlalab")
        jit = by_backend.get("jax.jit")
        print(f"  {name:<8} xlalab/jax.jit = {_ratio(xla, jit):>7}   "
              f"pipelined/jax.jit = {_ratio(by_backend.get('pipelined'), jit):>7}   "
              f"xlalab/eager = {_ratio(xla, by_backend.get('eager')):>7}   "
              f"jax.jit/eager = {_ratio(jit, by_backend.get('eager')):>7}")
    print("\nhost cost of a cached sync (mark_step CPU time, recording excluded):")
    for name, results in per_workload.items():
        xla = next((r for r in results if r.backend == "xlalab"), None)
        print(f"  {name:<8} {_fmt(xla.sync_host_ms if xla else None, '.2f')} ms")
    _print_memory("device memory held after the steps (live arrays: model, optimizer state, batches)",
                  per_workload, "device_mib")
    _print_memory("peak device memory of one step's program (XLA's memory analysis: arguments + outputs "
                  "- outputs written over donated arguments + temporaries)", per_workload, "peak_mib")


def _print_memory(title: str, per_workload: dict[str, list[Result]], field: str) -> None:
    print(f"\n{title}:")
    for name, results in per_workload.items():
        by_backend = {r.backend: r for r in results}
        ours, theirs = by_backend.get("xlalab"), by_backend.get("jax.jit")
        a = getattr(ours, field) if ours else None
        b = getattr(theirs, field) if theirs else None
        ratio = f"{a / b:.2f}x" if a and b else "n/a"
        print(f"  {name:<8} xlalab {_fmt(a, '.1f')} MiB   jax.jit {_fmt(b, '.1f')} MiB   ({ratio})")


# ------------------------------------------------------------------------------ recording micro-bench

CHAIN = 1000  # iterations of y = y * 1.0001 + x, i.e. 2 * CHAIN elementwise ops


def _chain(x: Any, y: Any) -> Any:
    for _ in range(CHAIN):
        y = y * 1.0001 + x
    return y


def _median_us_per_op(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6 / (2 * CHAIN)


def micro_eager(reps: int) -> Result:
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    samples = []
    for _ in range(reps + 1):  # +1: the first pass warms allocator and dispatcher caches
        t0 = time.perf_counter()
        _chain(x, y)
        samples.append(time.perf_counter() - t0)
    return Result("eager torch", us_per_op=_median_us_per_op(samples[1:]), note="dispatch + compute")


def micro_jax_op_by_op(reps: int) -> Result:
    x, y = jnp.ones((16, 16)), jnp.ones((16, 16))
    samples = []
    for _ in range(reps + 1):  # +1: the first pass compiles the mul/add primitives
        t0 = time.perf_counter()
        out = _chain(x, y)
        samples.append(time.perf_counter() - t0)
        out.block_until_ready()
    return Result("jax op-by-op", us_per_op=_median_us_per_op(samples[1:]),
                  note="un-jitted jnp, async dispatch (sync excluded)")


def micro_jax_trace(reps: int) -> Result:
    x, y = jnp.ones((16, 16)), jnp.ones((16, 16))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.jit(lambda a, b: _chain(a, b)).trace(x, y)  # a fresh function: JAX caches traces per function
        samples.append(time.perf_counter() - t0)
    return Result("jax.jit trace", us_per_op=_median_us_per_op(samples),
                  note="tracing only; paid once under jit")


class _PythonHop(torch.Tensor):
    """The least a backend written in Python can do per op: a wrapper subclass whose
    ``__torch_dispatch__`` unwraps, runs the eager kernel and wraps the result."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> _PythonHop:
        t = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)  # type: ignore[attr-defined]
        t.elem = elem
        return t  # type: ignore[no-any-return]

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        return _PythonHop(func(*[a.elem if type(a) is _PythonHop else a for a in args], **(kwargs or {})))


def micro_python_hop(reps: int) -> Result:
    x, y = _PythonHop(torch.randn(16, 16)), _PythonHop(torch.randn(16, 16))
    samples = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        _chain(x, y)
        samples.append(time.perf_counter() - t0)
    return Result("python hop", us_per_op=_median_us_per_op(samples[1:]),
                  note="eager + a no-op Python __torch_dispatch__: the floor of a Python backend")


def micro_xlalab(x: Xlalab, reps: int) -> Result:
    xm = x.xm
    dev = xm.xla_device()
    a, b = torch.randn(16, 16).to(dev), torch.randn(16, 16).to(dev)
    xm.mark_step()
    xm.wait_device_ops()
    record, sync = [], []
    for _ in range(reps + 1):  # +1: the first sync compiles; recording itself should not care
        t0 = time.perf_counter()
        _chain(a, b)
        t1 = time.perf_counter()
        xm.mark_step()
        xm.wait_device_ops()
        record.append(t1 - t0)
        sync.append(time.perf_counter() - t1)
    steady_sync = statistics.median(sync[1:]) * 1e3
    return Result("xlalab record", us_per_op=_median_us_per_op(record[1:]),
                  note=f"recording only; sync: first {sync[0] * 1e3:.0f} ms, then {steady_sync:.1f} ms")


def run_micro(xla: Xlalab | str, cfg: Config) -> None:
    print(f"\nrecording micro-benchmark: {CHAIN} x (y = y * 1.0001 + x) on 16x16 float32 = {2 * CHAIN} ops, "
          f"median of {cfg.micro_reps}")
    rows: list[Result] = []
    for name, run in (
        ("eager torch", lambda: micro_eager(cfg.micro_reps)),
        ("jax op-by-op", lambda: micro_jax_op_by_op(cfg.micro_reps)),
        ("jax.jit trace", lambda: micro_jax_trace(cfg.micro_reps)),
        ("python hop", lambda: micro_python_hop(cfg.micro_reps)),
    ):
        try:
            rows.append(run())
        except Exception as exc:  # keep the other rows
            rows.append(_failure(name, exc, cfg))
    if isinstance(xla, str):
        rows.append(Result("xlalab record", note=f"unavailable: {xla}"[:160]))
    else:
        try:
            rows.append(micro_xlalab(xla, cfg.micro_reps))
        except Exception as exc:  # xlalab is under construction; report and go on
            rows.append(_failure("xlalab record", exc, cfg))
    print(f"{'backend':<14} {'µs/op':>7}  notes")
    for r in rows:
        print(f"{r.backend:<14} {_fmt(r.us_per_op, '.2f'):>7}  {r.note}")


# ----------------------------------------------------------------- big graphs, cold starts, memory

_FIRST_STEP = """
import sys, time
t0 = time.perf_counter()
import torch
import xlalab.core.xla_model as xm
from xlalab.runtime import compile_cache
from xlalab.testing import workloads as W
compile_cache.configure(sys.argv[1])
wl = W.WORKLOADS[sys.argv[2]]
dev = xm.xla_device()
model = wl.make_model(0).to(dev)
opt = wl.make_optimizer(model.parameters())
batch = [t.to(dev) for t in wl.make_batch(0, wl.default_batch, "cpu")]
xm.mark_step(); xm.wait_device_ops()
t1 = time.perf_counter()
W.train_step(wl, model, opt, *batch, barrier=xm.mark_step)
xm.wait_device_ops()
print((time.perf_counter() - t1) * 1e3, (t1 - t0) * 1e3)
"""


def first_step_ms(name: str, cache_dir: str) -> tuple[float, float]:
    """(first step ms, start-up ms) of a fresh process whose persistent compile cache is ``cache_dir``."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FIRST_STEP, cache_dir, name], capture_output=True,
                         text=True, timeout=600, cwd=REPO_ROOT, check=True).stdout.split()  # fmt: skip
    return float(out[-2]), float(out[-1])


def run_host_and_memory(x: Xlalab, names: list[str], cfg: Config) -> None:
    import tempfile

    xm = x.xm
    dev = xm.xla_device()
    print("\ncached sync of a 10,000-node graph (a chain of adds), host CPU time of mark_step:")
    base = torch.ones(16, device=dev)
    xm.mark_step()
    samples = []
    for _ in range(3 if cfg.micro_reps <= 2 else 5):
        y = base
        for _ in range(10_000):
            y = y + 1.0
        t0 = time.thread_time()
        xm.mark_step()
        samples.append(time.thread_time() - t0)
        xm.wait_device_ops()
    print(f"  {statistics.median(samples[1:]) * 1e3:.1f} ms (first, compiling: {samples[0] * 1e3:.0f} ms)")

    print("\nfirst step of a fresh process, cold and from the persistent compile cache:")
    for name in names[:1] if cfg.micro_reps <= 2 else names:
        with tempfile.TemporaryDirectory() as cache:
            cold, _ = first_step_ms(name, cache)
            warm, startup = first_step_ms(name, cache)
        print(f"  {name:<8} cold {cold:8.0f} ms   warm {warm:8.0f} ms   (start-up before it: "
              f"{startup:.0f} ms)")




# ------------------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> tuple[Config, list[str]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steady steps (median reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    parser.add_argument("--workloads", default="mnist,mlp,gpt", help="comma-separated subset")
    parser.add_argument("--batch", type=int, default=None, help="override every workload's default batch")
    parser.add_argument("--quick", action="store_true", help="3 steps, 1 warmup, 2 micro reps")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failing columns")
    args = parser.parse_args(argv)
    steps, warmup, reps = (3, 1, 2) if args.quick else (args.steps, args.warmup, 5)
    if steps < 1 or warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    return Config(steps, warmup, args.batch, reps, args.verbose), names


def main(argv: list[str] | None = None) -> None:
    cfg, names = parse_args(argv)
    workloads = import_workloads()
    unknown = sorted(set(names) - set(workloads.WORKLOADS))
    if unknown:
        sys.exit(f"unknown workloads {unknown}; choose from {sorted(workloads.WORKLOADS)}")
    xla = import_xlalab()
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), jax {jax.__version__} "
          f"({jax.devices()[0].platform}), steps={cfg.steps} warmup={cfg.warmup}")
    if isinstance(xla, str):
        print(f"xlalab column unavailable: {xla}")
    print()

    rows: list[tuple[str, int, Result]] = []
    per_workload: dict[str, list[Result]] = {}
    for name in names:
        results = bench_workload(workloads, name, xla, cfg)
        per_workload[name] = results
        batch = cfg.batch or workloads.WORKLOADS[name].default_batch
        rows.extend((name, batch, r) for r in results)
    print_workload_table(rows)
    print_ratios(per_workload)
    run_micro(xla, cfg)
    if not isinstance(xla, str):
        run_host_and_memory(xla, names, cfg)


if __name__ == "__main__":
    main()
