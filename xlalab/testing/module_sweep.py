"""Differential sweep over PyTorch's ModuleInfo database: every ``nn`` module on ``xla:0``
against eager CPU.

For each ModuleInfo in ``torch.testing._internal.common_modules.module_db`` (LSTM, GRU,
Transformer layers, MultiheadAttention, the norms, pools, paddings and losses), the first few
of its samples run twice from the same initial weights: eagerly on the CPU, and with the
module moved to ``xla:0`` (``copy.deepcopy(module).to(dev)``). In training mode, and in eval
mode too where the ModuleInfo says the two differ, the sweep compares:

* the forward's outputs;
* the module's buffers after the forward (BatchNorm's running statistics, its batch count);
* after one backward with the same random output gradients, every parameter's ``.grad`` and
  each input's gradient.

Float32 results that are not close to eager's are checked against a float64 run of the same
module (``opinfo_sweep.compare``'s ``reference``): a different summation order is as accurate
as eager, a wrong formula is not.

The ModuleInfo's error inputs are checked too: a forward that eager refuses must raise the
same exception type with eager's message (the ``error_regex`` torch's own tests match) on
xla. That is what a user reads when a shape or dtype is wrong. Index range checks run on the
device, so they are on for these (``XLALAB_CHECK_INDICES``), and the error may come at the
sync that follows the forward.

``--compiled`` runs the xla module through ``torch.compile(backend="xlalab")`` instead: dynamo's
graph, AOTAutograd's forward and backward, lowered by the same table (dynamo runs RNN modules
eagerly by default, so those stay lazy). Each module lands in one class, as ops do in the
OpInfo sweep: ``lowered``, ``fallback``, ``wrong``, ``error`` or ``skipped``.
``python -m xlalab.testing.module_sweep --out docs/module-coverage.md`` writes the report;
``sweep_module`` is the entry the tests use.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from xlalab.testing import opinfo_sweep as ops

MAX_SAMPLES = 3  # per module and mode
DTYPE = torch.float32

# Modules whose outputs draw random numbers inside the forward: xlalab draws from JAX's
# threefry, so only shapes and dtypes can match eager (and their gradients are not compared).
RANDOM = {"nn.FractionalMaxPool2d", "nn.FractionalMaxPool3d"}

# Modules left out, with the reason the report gives.
SKIP: dict[str, str] = {}


def load_module_db() -> list[Any]:
    """``module_db``, importable where the ``expecttest`` test helper is not installed."""
    ops.load_op_db()  # installs the stand-in for expecttest when it is missing
    from torch.testing._internal.common_modules import module_db

    return list(module_db)


@dataclass
class ModuleResult:
    name: str
    cls: str = "skipped"  # lowered | fallback | wrong | error | skipped
    reason: str = ""
    modes: list[str] = field(default_factory=list)  # "train", "eval"
    samples: int = 0
    grads: int = 0  # samples whose gradients were compared
    error_inputs: int = 0  # eager errors xla reproduced
    fallback_ops: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


# --------------------------------------------------------------------------- one sample


def _floating(tree: Any) -> list[torch.Tensor]:
    return [
        x
        for x in ops._leaves(tree)
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
    ]


def _inputs_grads(tree: Any) -> list[torch.Tensor | None]:
    return [x.grad for x in ops._leaves(tree) if isinstance(x, torch.Tensor) and x.requires_grad]


@dataclass
class _Run:
    """What one run of a sample produced, every tensor on the CPU."""

    outputs: Any
    buffers: list[torch.Tensor]
    grads: list[torch.Tensor | None] | None  # None: nothing to differentiate


def _run(
    module: torch.nn.Module,
    args: Any,
    kwargs: Any,
    grads_out: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None,
) -> _Run:
    torch.manual_seed(1)
    out = module(*args, **kwargs)
    outputs = ops._to_cpu(out)
    buffers = [b.detach().cpu() for b in module.buffers()]
    diff = [o for o in _floating(out) if o.requires_grad]
    if not diff or grads_out is None:
        return _Run(outputs, buffers, None)
    torch.autograd.backward(diff, [g.to(o.device) for g, o in zip(grads_out(diff), diff)])
    grads = [None if p.grad is None else p.grad.cpu() for p in module.parameters()]
    grads += [None if g is None else g.cpu() for g in _inputs_grads((args, kwargs))]
    return _Run(outputs, buffers, grads)


def _grads_out(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]


def _built(info: Any, sample: Any, training: bool) -> torch.nn.Module:
    """The sample's module on the CPU, with fixed weights; a lazy module gets its shapes from a
    CPU forward first (its parameters start uninitialized, and their draws would differ)."""
    torch.manual_seed(0)
    c = sample.constructor_input
    module = info.module_cls(*c.args, **c.kwargs).to(DTYPE)  # as torch's own module tests build them
    if info.is_lazy:
        with torch.no_grad():
            f = sample.forward_input
            module(*ops._clone(f.args), **ops._clone(f.kwargs))
    return module.train(training)


def run_module_sample(
    info: Any, sample: Any, training: bool, dev: torch.device, compiled: bool = False
) -> tuple[set[str], bool]:
    """Run one sample eagerly and on ``dev`` (through ``torch.compile(backend="xlalab")`` if
    ``compiled``) and compare; return the CPU-fallback counters the xla run hit and whether
    gradients were compared. Raises ``opinfo_sweep.Mismatch``."""
    f = sample.forward_input
    random = info.name in RANDOM
    try:
        module = _built(info, sample, training)
        on_xla = copy.deepcopy(module).to(dev)
        wide = copy.deepcopy(module).double()
        want = _run(module, ops._clone(f.args), ops._clone(f.kwargs), None if random else _grads_out)
    except Exception as e:
        raise ops._EagerFailed(ops._describe(e)) from e
    ops._clear_counters()
    x_args, x_kwargs = ops._to_device((f.args, f.kwargs), dev)
    runner: Any = on_xla
    if compiled:
        import xlalab.dynamo

        runner = torch.compile(on_xla, backend=xlalab.dynamo.backend)
    got = _run(runner, x_args, x_kwargs, None if random else _grads_out)
    used = ops._fallbacks()
    reference: _Run | None = None

    def check(what: str, actual: Any, expected: Any, pick: Callable[[_Run], Any]) -> None:
        nonlocal reference
        try:
            ops.compare(actual, expected, 0.0, 0.0, shape_only=random)
            return
        except ops.Mismatch as e:
            first = e
        if reference is None:
            w_args, w_kwargs = ops._widen((f.args, f.kwargs))
            for t in ops._leaves((w_args, w_kwargs)):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    t.requires_grad_(True)
            reference = _run(wide, w_args, w_kwargs, lambda outs: [g.double() for g in _grads_out(outs)])
        try:
            ops.compare(actual, expected, 0.0, 0.0, reference=pick(reference))
        except ops.Mismatch:
            raise ops.Mismatch(f"{what}: {first}") from None

    check("outputs", got.outputs, want.outputs, lambda r: r.outputs)
    check("buffers", got.buffers, want.buffers, lambda r: r.buffers)
    if want.grads is None or got.grads is None:
        if (want.grads is None) != (got.grads is None) and not random:
            raise ops.Mismatch("gradients: one side has nothing to differentiate")
        return used, False
    for i, (g, w) in enumerate(zip(got.grads, want.grads)):
        if (g is None) != (w is None):
            other = g if g is not None else w
            assert other is not None
            if bool(torch.count_nonzero(other)):
                raise ops.Mismatch(f"gradient {i}: None on one side, nonzero on the other")
    pairs = [
        (i, g, w) for i, (g, w) in enumerate(zip(got.grads, want.grads)) if g is not None and w is not None
    ]
    check(
        "gradients",
        [g for _, g, _ in pairs],
        [w for _, _, w in pairs],
        lambda r: [r.grads[i] for i, _, _ in pairs] if r.grads is not None else None,
    )
    return used, True


def check_error_input(info: Any, error_input: Any, dev: torch.device) -> bool:
    """Whether xla raises what eager raises for a forward eager refuses; False when the input
    is not a forward error (a constructor's error never reaches xla). Raises Mismatch."""
    from torch.testing._internal.common_modules import ModuleErrorEnum

    import xlalab.core.xla_model as xm
    from xlalab.runtime import config

    if error_input.error_on != ModuleErrorEnum.FORWARD_ERROR:
        return False
    sample = error_input.module_error_input
    c, f = sample.constructor_input, sample.forward_input
    torch.manual_seed(0)
    module = info.module_cls(*c.args, **c.kwargs)
    x_module = copy.deepcopy(module).to(dev)
    x_args, x_kwargs = ops._to_device((f.args, f.kwargs), dev)
    try:
        with config.overridden("XLALAB_CHECK_INDICES", True):
            x_module(*x_args, **x_kwargs)
            xm.mark_step()  # an index out of range is found on the device, and raises at the sync
    except error_input.error_type as e:
        if not re.search(error_input.error_regex, str(e)):
            raise ops.Mismatch(
                f"error input: xla raised {type(e).__name__}({str(e)[:200]!r}); eager's matches "
                f"{error_input.error_regex!r}"
            ) from None
        return True
    except Exception as e:
        raise ops.Mismatch(
            f"error input: xla raised {ops._describe(e)}; eager raises "
            f"{error_input.error_type.__name__} matching {error_input.error_regex!r}"
        ) from None
    raise ops.Mismatch(
        f"error input: xla ran a forward eager refuses ({error_input.error_type.__name__} "
        f"matching {error_input.error_regex!r})"
    )


# --------------------------------------------------------------------------- one module


def module_samples(info: Any, training: bool) -> list[Any]:
    torch.manual_seed(0)  # the samples are random: the same ones each run
    return list(
        info.module_inputs_func(info, device="cpu", dtype=DTYPE, requires_grad=True, training=training)
    )


def sweep_module(
    info: Any, dev: torch.device | None = None, max_samples: int = MAX_SAMPLES, compiled: bool = False
) -> ModuleResult:
    """Every mode and the first ``max_samples`` samples of one ModuleInfo, and its error inputs
    (those in lazy mode only: they are about eager's checks, which dynamo's tracing wraps)."""
    import xlalab.core.xla_model as xm

    dev = dev or xm.xla_device()
    res = ModuleResult(info.name)
    t0 = time.perf_counter()
    if info.name in SKIP:
        res.reason = SKIP[info.name]
        return res
    if DTYPE not in info.dtypes:
        res.reason = f"no {DTYPE} samples"
        return res
    fallbacks: set[str] = set()
    eager_failed: list[str] = []
    modes = (True, False) if info.train_and_eval_differ else (True,)
    for training in modes:
        for k, sample in enumerate(module_samples(info, training)[:max_samples]):
            where = f"{'train' if training else 'eval'} sample {k} ({sample.desc or 'default'})"
            try:
                if compiled:
                    torch._dynamo.reset()  # each sample's module is new: no guard failures, no cache limit
                used, graded = run_module_sample(info, sample, training, dev, compiled)
                fallbacks |= used
                res.samples += 1
                res.grads += graded
                mode = "train" if training else "eval"
                if mode not in res.modes:
                    res.modes.append(mode)
            except ops._EagerFailed as e:
                eager_failed.append(f"{where}: {e}")
            except ops.Mismatch as e:
                res.problems.append(f"{where}: {e}")
            except Exception as e:
                res.problems.append(f"{where}: raised {ops._describe(e)}")
                res.cls = "error"
            ops.settle()
    if info.module_error_inputs_func is not None and not compiled:
        errors = info.module_error_inputs_func(
            info, device="cpu", dtype=DTYPE, requires_grad=False, training=True
        )
        for k, err in enumerate(errors):
            try:
                res.error_inputs += check_error_input(info, err, dev)
            except ops.Mismatch as e:
                res.problems.append(f"error input {k}: {e}")
            ops.settle()
    res.fallback_ops = sorted(fallbacks)
    res.seconds = round(time.perf_counter() - t0, 2)
    if res.problems:
        res.cls = "error" if res.cls == "error" else "wrong"
    elif res.samples == 0:
        res.reason = "eager refuses every sample in float32: " + (
            eager_failed[0] if eager_failed else "no samples"
        )
    else:
        res.cls = "fallback" if fallbacks else "lowered"
    return res


# --------------------------------------------------------------------------- report


def report(results: list[ModuleResult], seconds: float, max_samples: int) -> str:
    counts = Counter(r.cls for r in results)
    lines = [
        "# Module coverage: PyTorch's ModuleInfo samples, lazy (`xla:0`) against eager CPU",
        "",
        "Generated by `make coverage` (`python -m xlalab.testing.module_sweep --out "
        "docs/module-coverage.md`); do not edit by hand.",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- versions: {ops._versions()}",
        f"- samples: the first {max_samples} float32 samples per module, in training mode and, where "
        "the module behaves differently, in eval mode; outputs, buffers after the forward, and the "
        "gradients of every parameter and input after one backward",
        f"- error inputs: forwards eager refuses, which must raise eager's error on xla "
        f"({sum(r.error_inputs for r in results)} checked)",
        f"- sweep time: {seconds / 60:.1f} min",
        "",
        "| class | modules | meaning |",
        "|---|---:|---|",
        f"| lowered | {counts['lowered']} | every sample compiled through XLA and matched eager |",
        f"| fallback | {counts['fallback']} | matched eager, with at least one aten op on the CPU fallback |",
        f"| wrong | {counts['wrong']} | an output, buffer, gradient or error differs from eager |",
        f"| error | {counts['error']} | xla raised where eager did not |",
        f"| skipped | {counts['skipped']} | nothing to compare (reasons below) |",
        "",
    ]
    bad = [r for r in results if r.cls in ("wrong", "error")]
    if bad:
        lines += ["## Wrong or error", ""]
        lines += [f"- `{r.name}`: " + "; ".join(r.problems[:3]).replace("|", "/") for r in bad]
        lines.append("")
    lines += [
        "## Per module",
        "",
        "| module | class | modes | samples | with gradients | error inputs | CPU fallbacks |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in sorted(results, key=lambda r: r.name):
        if r.cls != "skipped":
            fb = ", ".join(f"`{a}`" for a in r.fallback_ops)
            note = " (shape/dtype only)" if r.name in RANDOM else ""
            lines.append(
                f"| `{r.name}` | {r.cls}{note} | {', '.join(r.modes)} | {r.samples} | {r.grads} | "
                f"{r.error_inputs} | {fb} |"
            )
    lines += ["", "## Skipped", "", "| module | reason |", "|---|---|"]
    lines += [f"| `{r.name}` | {r.reason.replace('|', '/')} |" for r in results if r.cls == "skipped"]
    lines.append("")
    return "\n".join(lines)


def _select(infos: list[Any], names: Iterable[str] | None) -> list[Any]:
    wanted = set(names or ())
    return [i for i in infos if not wanted or i.name in wanted or i.name.removeprefix("nn.") in wanted]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the markdown report here")
    p.add_argument("--json", help="also write the per-module results as JSON here")
    p.add_argument("--modules", nargs="*", help="only these ModuleInfos (nn.LSTM or LSTM)")
    p.add_argument("--max-samples", type=int, default=MAX_SAMPLES)
    p.add_argument("--compiled", action="store_true", help='through torch.compile(backend="xlalab")')
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    results = []
    infos = _select(load_module_db(), args.modules)
    for n, info in enumerate(infos, 1):
        r = sweep_module(info, max_samples=args.max_samples, compiled=args.compiled)
        why = f": {r.problems[0][:300]}" if r.problems else (f": {r.reason}" if r.cls == "skipped" else "")
        print(f"[{n}/{len(infos)}] {r.name}: {r.cls} ({r.seconds}s){why}", file=sys.stderr, flush=True)
        results.append(r)
    seconds = time.perf_counter() - t0
    counts = Counter(r.cls for r in results)
    print(" ".join(f"{c}={counts[c]}" for c in ops.CLASSES) + f" in {seconds:.0f}s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report(results, seconds, args.max_samples))
    return 0 if not (counts["wrong"] or counts["error"]) else 1


if __name__ == "__main__":
    sys.exit(main())
