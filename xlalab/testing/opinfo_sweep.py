"""Differential sweep over PyTorch's OpInfo database: every op on ``xla:0`` against eager CPU.

For each OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` and each of
float32, int64, bool, bfloat16, float16 and complex64 that the op supports on the CPU, the first few
sample inputs run twice: eagerly on the CPU, and on ``xla:0`` (tensors moved with
``.to(dev)``, results brought back with ``.cpu()``). Outputs are compared with the dtype's
``torch.testing.assert_close`` tolerances, widened by whatever ``toleranceOverride`` /
``precisionOverride`` the OpInfo itself declares. For float32 (complex64 for an op without
it), the gradients of the op's differentiable inputs are compared too (backward runs on
``xla:0``).

Each op lands in one class:

* ``lowered``: every sample ran and matched without a CPU fallback;
* ``fallback``: every sample matched, but at least one needed the CPU fallback (the
  runtime counts those as ``aten::<op>``: the report lists which);
* ``wrong``: some output or gradient differs from eager;
* ``error``: xla raised (or crashed, or hung) where eager did not;
* ``skipped``: nothing to compare (random ops are compared on shape and dtype only, see
  ``SHAPE_ONLY``; ops without a supported real dtype, or whose every sample fails eagerly,
  are skipped with the reason).

``python -m xlalab.testing.opinfo_sweep --out docs/op-coverage.md`` runs the whole sweep
in worker processes (a crash or hang costs one op, not the sweep) and writes the report.
``--shard K/N`` takes every Nth op from the Kth, so N sweeps can share a larger machine; with
``PJRT_DEVICE=CUDA`` the same comparison checks the GPU backend against eager CPU.
``sweep_op`` is the in-process entry the default test run uses for its subset.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
import types
import unittest
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

# The dtypes the sweep covers (``--dtypes`` picks others): float64 because torch computes
# positions and weights in it for float64 inputs, uint8 because images are (and eager has
# kernels of their own for it).
DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.float16, torch.complex64,
    torch.float64, torch.uint8,
)  # fmt: skip

# assert_close's defaults per dtype (rtol, atol); integer and bool results compare exactly.
BASE_TOL: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}

# Random or uninitialised results: the values cannot match eager PyTorch's stream (xlalab
# draws from JAX's threefry), so only shapes and dtypes are compared.
SHAPE_ONLY = {
    "bernoulli", "normal", "normal_in_place", "uniform", "exponential", "geometric", "cauchy",
    "log_normal", "multinomial", "rand_like", "randn_like", "randint_like", "randint", "randn", "rand",
    "nn.functional.dropout", "nn.functional.dropout1d", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "torch.empty", "nn.functional.multi_head_attention_forward", "svd_lowrank", "pca_lowrank",
    "nn.functional.scaled_dot_product_attention",
}  # fmt: skip

# Ops left out entirely, with the reason shown in the report.
SKIP = {
    "to_sparse": "sparse layouts are not supported on xla",
    "sparse.sampled_addmm": "sparse layouts are not supported on xla",
    "sparse.mm": "sparse layouts are not supported on xla",
    "item": "returns a Python number through .item(): covered by the runtime's own tests",
    "allclose": "returns a Python bool",
    "equal": "returns a Python bool",
    "jiterator_unary": "CUDA-only (jiterator)",
    "jiterator_binary": "CUDA-only (jiterator)",
    "jiterator_4inputs_with_extra_args": "CUDA-only (jiterator)",
    "jiterator_binary_return_by_ref": "CUDA-only (jiterator)",
    "jiterator_2inputs_2outputs": "CUDA-only (jiterator)",
}

# Positional arguments (after the input) that torch requires to be CPU tensors.
CPU_ARGS: dict[str, tuple[int, ...]] = {"tensor_split": (0,)}


def _arg(pos: int, name: str, default: int | None) -> Callable[[tuple[Any, ...], dict[str, Any]], int | None]:
    def get(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        v = kwargs.get(name, args[pos] if len(args) > pos else default)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return get


# Ops whose index outputs may legitimately differ on ties: the reduced dim of each sample.
TIE_INDICES: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], int | None]] = {
    "sort": _arg(0, "dim", -1),
    "argsort": _arg(0, "dim", -1),
    "topk": _arg(1, "dim", -1),
    "kthvalue": _arg(1, "dim", -1),
    "mode": _arg(0, "dim", -1),
    "median": _arg(0, "dim", None),
    "nanmedian": _arg(0, "dim", None),
}

# Ops whose algorithm torch itself picks by device type: (rtol, atol) per dtype, and why.
DEVICE_POLICY_TOL: dict[str, dict[torch.dtype, tuple[float, float]]] = {
    # LinearCrossEntropyOptions(acc_policy="auto") resolves to "accurate" on the CPU and to
    # "compact" (half-precision accumulation, as on CUDA) on any other device.
    "nn.functional.linear_cross_entropy.chunked_none": {
        torch.float16: (4e-3, 1e-3),
        torch.bfloat16: (3e-2, 1e-2),
    },
    "nn.functional.linear_cross_entropy.chunked": {torch.float16: (4e-3, 1e-3), torch.bfloat16: (3e-2, 1e-2)},
}

# Ops whose outputs after the first are saved statistics (see _stats_as_eager).
SAVED_STATS = {
    "native_layer_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_batch_norm_with_update",
}

# Dtypes the xla device cannot hold: samples whose eager result has one are not compared.
UNSUPPORTED = {torch.complex32}

MAX_SAMPLES = 3  # per op and dtype
MAX_GRAD_SAMPLES = 3
OP_BUDGET_S = 60.0  # past this, an op's remaining dtypes are not run (recorded as truncated)


# --------------------------------------------------------------------------- loading op_db


def load_op_db() -> list[Any]:
    """``op_db``, importable even where the ``expecttest`` test helper is not installed."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        # torch's test utilities import it only to subclass its TestCase.
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase  # type: ignore[attr-defined]
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def op_id(op: Any) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# --------------------------------------------------------------------------- results


@dataclass
class OpResult:
    name: str
    cls: str = "skipped"  # lowered | fallback | wrong | error | skipped
    reason: str = ""
    dtypes: list[str] = field(default_factory=list)
    samples: int = 0
    fallback_ops: list[str] = field(default_factory=list)
    grad: str = "n/a"  # lowered | fallback | wrong | error | n/a
    grad_samples: int = 0
    grad_fallback_ops: list[str] = field(default_factory=list)
    shape_only: bool = False
    truncated: bool = False
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Mismatch(AssertionError):
    """An xla result that differs from eager's."""


# --------------------------------------------------------------------------- comparing


def tolerances(op: Any, dtype: torch.dtype) -> tuple[float, float]:
    """The OpInfo's own tolerance overrides for samples of ``dtype`` (0 where it has none).

    ``compare`` widens each floating output's default tolerances (by the output's dtype)
    to at least these."""
    rtol, atol = 0.0, 0.0
    for dec in getattr(op, "decorators", ()) or ():
        for d in getattr(dec, "decorators", (dec,)):
            over = getattr(d, "d", None)  # toleranceOverride / precisionOverride
            if not isinstance(over, dict) or dtype not in over:
                continue
            t = over[dtype]
            if hasattr(t, "atol"):
                atol, rtol = max(atol, t.atol), max(rtol, t.rtol)
            elif isinstance(t, (int, float)):
                atol = max(atol, float(t))
    extra = DEVICE_POLICY_TOL.get(op_id(op), {}).get(dtype)
    if extra is not None:
        rtol, atol = max(rtol, extra[0]), max(atol, extra[1])
    return rtol, atol


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, (list, tuple)):
        out: list[Any] = []
        for x in tree:
            out.extend(_leaves(x))
        return out
    if isinstance(tree, dict):
        return _leaves(list(tree.values()))
    return [tree]


def compare(
    actual: Any, expected: Any, rtol: float, atol: float, shape_only: bool = False, reference: Any = None
) -> None:
    """Raise Mismatch unless ``actual`` (brought back from xla) matches eager's ``expected``.

    ``reference``, when given, is eager's result for the same sample computed in a wider
    dtype (float64 for float32 samples, float32 for half ones). A floating output that is
    not close to eager's is still correct when it is at least as accurate as eager's:
    ``|actual - ref| <= 2 |expected - ref| + atol + rtol |ref|`` everywhere, with NaNs in
    the same places. That tells a different (equally valid) summation order or rounding
    sequence from a wrong formula, whose error is far above eager's own.
    """
    got, want = _leaves(actual), _leaves(expected)
    refs = _leaves(reference) if reference is not None else None
    if len(got) != len(want):
        raise Mismatch(f"{len(got)} outputs, eager has {len(want)}")
    if refs is not None and len(refs) != len(want):
        refs = None
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                raise Mismatch(f"output {i}: {type(g).__name__}, eager gives a tensor")
            if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
                raise Mismatch(f"output {i}: {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}")
            if shape_only:
                continue
            rt, at = 0.0, 0.0
            if w.is_floating_point() or w.is_complex():
                base = BASE_TOL.get(w.dtype, (0.0, 0.0))
                rt, at = max(rtol, base[0]), max(atol, base[1])
            try:
                torch.testing.assert_close(
                    g, w, rtol=rt, atol=at, equal_nan=True, check_device=False, check_stride=False,
                    check_layout=False,
                )  # fmt: skip
            except AssertionError as e:
                ref = refs[i] if refs is not None else None
                if not (isinstance(ref, torch.Tensor) and _as_accurate(g, w, ref, rt, at)):
                    raise Mismatch(f"output {i}: {str(e).strip()[:300]}") from None
        elif isinstance(w, float) and isinstance(g, float):
            rt, at = max(rtol, 1.3e-6), max(atol, 1e-5)
            if not (math.isnan(w) and math.isnan(g)) and not math.isclose(g, w, rel_tol=rt, abs_tol=at):
                raise Mismatch(f"output {i}: {g} != {w}")
        elif not shape_only and g != w:
            raise Mismatch(f"output {i}: {g!r} != {w!r}")


def _as_accurate(got: torch.Tensor, want: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> bool:
    """Whether ``got`` is as close to the wide-dtype ``ref`` as eager's ``want`` is (see compare).

    NaNs must sit where eager has them. Where the reference itself is not finite, ``got``
    must equal eager's value; where only eager overflowed, any ``got`` within tolerance of
    the reference is at least as accurate.
    """
    if not (want.is_floating_point() or want.is_complex()) or tuple(ref.shape) != tuple(want.shape):
        return False
    wide = torch.complex128 if want.is_complex() or ref.is_complex() else torch.float64
    g, w, r = got.to(wide), want.to(wide), ref.to(wide)
    if not torch.equal(torch.isnan(g), torch.isnan(w)):
        return False
    ok = (g == w) | torch.isnan(w)
    finite = torch.isfinite(r)
    diff_w = (w - r).abs()
    err_w = torch.where(finite, diff_w, torch.zeros_like(diff_w))
    close = finite & ((g - r).abs() <= 2 * err_w.nan_to_num(posinf=math.inf) + atol + rtol * r.abs())
    return bool((ok | close).all())


# --------------------------------------------------------------------------- running samples


def _to_device(tree: Any, dev: torch.device) -> Any:
    """Every tensor in ``tree`` on ``dev`` (a copy, detached; requires_grad kept)."""
    if isinstance(tree, torch.Tensor):
        t = tree.detach().to(dev)
        return t.requires_grad_() if tree.requires_grad and (t.is_floating_point() or t.is_complex()) else t
    if isinstance(tree, list):
        return [_to_device(x, dev) for x in tree]
    if isinstance(tree, tuple):
        return tuple(_to_device(x, dev) for x in tree)
    if isinstance(tree, dict):
        return {k: _device_kwarg(k, v, dev) for k, v in tree.items()}
    return tree


def _move(op: Any, sample: Any, dev: torch.device) -> tuple[Any, Any, Any]:
    """The sample's tensors on ``dev``, except arguments that torch requires on the CPU."""
    x_inp, x_args, x_kwargs = _to_device((sample.input, sample.args, sample.kwargs), dev)
    for pos in CPU_ARGS.get(op.name, ()):
        if pos < len(sample.args):
            x_args = (*x_args[:pos], _clone(sample.args[pos]), *x_args[pos + 1 :])
    return x_inp, x_args, x_kwargs


def _device_kwarg(key: str, value: Any, dev: torch.device) -> Any:
    # Factory samples name the CPU explicitly: make them build on xla instead.
    if key == "device" and value is not None:
        return dev
    return _to_device(value, dev)


def _clone(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        t = tree.detach().clone()
        return t.requires_grad_() if tree.requires_grad else t
    if isinstance(tree, list):
        return [_clone(x) for x in tree]
    if isinstance(tree, tuple):
        return tuple(_clone(x) for x in tree)
    if isinstance(tree, dict):
        return {k: _clone(v) for k, v in tree.items()}
    return tree


def _to_cpu(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, (list, tuple)):
        return (
            type(tree)(_to_cpu(x) for x in tree)
            if not hasattr(tree, "_fields")
            else tuple(_to_cpu(x) for x in tree)
        )
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    return tree


def _has_xla(tree: Any) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "xla" for x in _leaves(tree))


def _fallbacks() -> set[str]:
    from xlalab.runtime import metrics

    return {n for n, v in metrics.COUNTERS.items() if n.startswith("aten::") and v and n not in _READS}


_READS = {"aten::_local_scalar_dense"}


def _clear_counters() -> None:
    from xlalab.runtime import metrics

    metrics.COUNTERS.clear()


def _samples(op: Any, dtype: torch.dtype, requires_grad: bool, limit: int) -> list[Any]:
    torch.manual_seed(0)
    out = []
    for s in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        out.append(s)
        if len(out) >= limit:
            break
    return out


_WIDER = {
    torch.float32: torch.float64,
    torch.bfloat16: torch.float32,
    torch.float16: torch.float32,
    torch.complex64: torch.complex128,
}


def _widen(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        wide = _WIDER.get(tree.dtype)
        return tree.detach().to(wide) if wide is not None else tree.detach().clone()
    if isinstance(tree, list):
        return [_widen(x) for x in tree]
    if isinstance(tree, tuple):
        return tuple(_widen(x) for x in tree)
    if isinstance(tree, dict):
        return {k: _widen(v) for k, v in tree.items()}
    return tree


def _wide_reference(op: Any, sample: Any) -> Any:
    """Eager's result for ``sample`` with its floating tensors one dtype wider, or None."""
    try:
        inp, args, kwargs = _widen((sample.input, sample.args, sample.kwargs))
        return sample.output_process_fn_grad(_call(op, inp, args, kwargs))
    except Exception:
        return None


def _call(op: Any, inp: Any, args: Any, kwargs: Any) -> Any:
    return op(inp, *args, **kwargs)


def run_sample(
    op: Any, sample: Any, dev: torch.device, rtol: float, atol: float, shape_only: bool
) -> set[str]:
    """Run one sample both ways; return the CPU-fallback counters the xla run hit."""
    inp, args, kwargs = _clone(sample.input), _clone(sample.args), _clone(sample.kwargs)
    expected = sample.output_process_fn_grad(_call(op, inp, args, kwargs))
    if any(isinstance(x, torch.Tensor) and x.dtype in UNSUPPORTED for x in _leaves(expected)):
        raise _NotExercised
    x_inp, x_args, x_kwargs = _move(op, sample, dev)
    _clear_counters()
    out = _call(op, x_inp, x_args, x_kwargs)
    if not (_has_xla(out) or _has_xla((x_inp, x_args, x_kwargs))):
        raise _NotExercised
    actual = _to_cpu(sample.output_process_fn_grad(out))
    used = _fallbacks()
    if op.name in SAVED_STATS:
        actual = _stats_as_eager(actual, expected)
    try:
        compare(actual, expected, rtol, atol, shape_only)
    except Mismatch:
        if op.name in TIE_INDICES:
            actual = _tie_resolved(op, sample, actual, expected)
        reference = _wide_reference(op, sample)
        compare(actual, expected, rtol, atol, shape_only, reference)
    return used


def _stats_as_eager(actual: Any, expected: Any) -> Any:
    """Normalization's saved statistics (outputs after the first) in eager's dtype and shape.

    Their dtype and, in eval mode, their shape are backend-specific: torch's CPU kernels
    keep half statistics in the input dtype and return empty ones in eval, its meta kernels
    (which xlalab follows, as CUDA does) say float32 and (C,). Values are still compared.
    """
    got, want = list(_leaves(actual)), _leaves(expected)
    if len(got) != len(want):
        return actual
    for i in range(1, len(got)):
        g, w = got[i], want[i]
        if not (isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor)):
            continue
        if w.numel() == 0 and g.shape != w.shape:
            got[i] = w
        elif g.dtype != w.dtype and g.shape == w.shape:
            got[i] = g.to(w.dtype)
    return tuple(got)


def _tie_resolved(op: Any, sample: Any, actual: Any, expected: Any) -> Any:
    """``actual`` with each index output replaced by eager's where both pick equal elements.

    Among equal elements, which index sort (unstable), topk, kthvalue, mode or median
    report is unspecified; two answers are equivalent when they select the same values.
    """
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or sample.kwargs.get("stable"):
        return actual
    dim = TIE_INDICES[op.name](sample.args, sample.kwargs)
    if dim is None:
        return actual
    got, want = _leaves(actual), _leaves(expected)
    if len(got) != len(want):
        return actual
    out = list(got)
    for i, (g, w) in enumerate(zip(got, want)):
        if not (isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor) and w.dtype == torch.int64):
            continue
        if g.shape != w.shape or torch.equal(g, w):
            continue
        gi, wi = (g, w) if g.dim() == x.dim() else (g.unsqueeze(dim), w.unsqueeze(dim))
        try:
            same = torch.equal(
                torch.nan_to_num(x.gather(dim, gi), nan=0.5), torch.nan_to_num(x.gather(dim, wi), nan=0.5)
            ) and torch.equal(x.gather(dim, gi).isnan(), x.gather(dim, wi).isnan())
        except Exception:
            continue
        if same:
            out[i] = w
    return out if isinstance(actual, (list, tuple)) else out[0]


class _NotExercised(Exception):
    """Neither the arguments nor the result live on xla."""


class _EagerFailed(Exception):
    """Eager PyTorch itself fails on the sample: nothing to compare."""


def _grad_targets(tree: Any) -> list[torch.Tensor]:
    return [x for x in _leaves(tree) if isinstance(x, torch.Tensor) and x.requires_grad]


def _differentiable(outs: Any) -> list[torch.Tensor]:
    return [
        o
        for o in _leaves(outs)
        if isinstance(o, torch.Tensor) and o.requires_grad and (o.is_floating_point() or o.is_complex())
    ]


def run_grad_sample(op: Any, sample: Any, dev: torch.device, rtol: float, atol: float) -> set[str] | None:
    """Backward of one sample both ways; None when the sample has nothing to differentiate."""
    cpu_in = _clone((sample.input, sample.args, sample.kwargs))
    cpu_targets = _grad_targets(cpu_in)
    if not cpu_targets:
        return None
    try:
        raw = _call(op, cpu_in[0], cpu_in[1], cpu_in[2])
        if any(isinstance(o, torch.Tensor) and o.dtype in UNSUPPORTED for o in _leaves(raw)):
            return None  # a dtype XLA has no type for (chalf's complex32)
        complex_in = any(t.is_complex() for t in cpu_targets)
        if not complex_in and any(isinstance(o, torch.Tensor) and o.is_complex() for o in _leaves(raw)):
            return None  # a real input's complex result (an FFT's): swept with complex64 samples
        cpu_outs = _differentiable(sample.output_process_fn_grad(raw))
        if not cpu_outs:
            return None
        gen = torch.Generator().manual_seed(1)
        grads_out = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in cpu_outs]
        expected = torch.autograd.grad(cpu_outs, cpu_targets, grads_out, allow_unused=True)
    except Exception as e:
        raise _EagerFailed from e

    x_in = _move(op, sample, dev)
    x_targets = _grad_targets(x_in)
    x_outs = _differentiable(sample.output_process_fn_grad(_call(op, x_in[0], x_in[1], x_in[2])))
    if len(x_outs) != len(cpu_outs) or len(x_targets) != len(cpu_targets):
        raise Mismatch(f"{len(x_outs)} differentiable outputs, eager has {len(cpu_outs)}")
    _clear_counters()
    got = torch.autograd.grad(
        x_outs, x_targets, [g.to(o.device) for g, o in zip(grads_out, x_outs)], allow_unused=True
    )
    actual = [None if g is None else g.cpu() for g in got]
    used = _fallbacks()
    want = [None if e is None else e for e in expected]
    for i, (a, w) in enumerate(zip(actual, want)):
        if (a is None) != (w is None):
            # An unused input: eager gives None where a decomposition may give zeros.
            other = a if a is not None else w
            assert other is not None
            if bool(torch.count_nonzero(other)):
                raise Mismatch(f"grad {i}: None on one side, nonzero on the other")
            continue
        if a is not None:
            try:
                compare(a, w, rtol, atol)
            except Mismatch as e:
                refs = _wide_grads(op, sample, grads_out)
                try:
                    compare(a, w, rtol, atol, reference=None if refs is None else refs[i])
                except Mismatch:
                    raise Mismatch(f"grad {i}: {e}") from None
    return used


def _wide_grads(op: Any, sample: Any, grads_out: list[torch.Tensor]) -> list[Any] | None:
    """Eager's gradients for ``sample`` computed in float64 (the accuracy reference)."""
    try:
        wide = _widen((sample.input, sample.args, sample.kwargs))
        flat = [x for x in _leaves(wide) if isinstance(x, torch.Tensor)]
        originals = [
            x for x in _leaves((sample.input, sample.args, sample.kwargs)) if isinstance(x, torch.Tensor)
        ]
        if len(flat) != len(originals):
            return None
        wanted = [w.requires_grad_() for w, o in zip(flat, originals) if o.requires_grad]
        outs = _differentiable(sample.output_process_fn_grad(_call(op, wide[0], wide[1], wide[2])))
        grads = torch.autograd.grad(outs, wanted, [_widen(g) for g in grads_out], allow_unused=True)
        return [None if g is None else g for g in grads]
    except Exception:
        return None


def _describe(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first[:300]}"


def sweep_op(
    op: Any,
    dev: torch.device | None = None,
    max_samples: int = MAX_SAMPLES,
    max_grad_samples: int = MAX_GRAD_SAMPLES,
    dtypes: Iterable[torch.dtype] = DTYPES,
    grads: bool = True,
    budget_s: float = OP_BUDGET_S,
) -> OpResult:
    """Sweep one OpInfo and classify it."""
    from xlalab.runtime.device import xla_device

    dev = dev or xla_device()
    name = op_id(op)
    res = OpResult(name)
    t0 = time.perf_counter()
    if name in SKIP or op.name in SKIP:
        res.reason = SKIP.get(name) or SKIP[op.name]
        return res
    res.shape_only = op.name in SHAPE_ONLY or name in SHAPE_ONLY
    supported = op.supported_dtypes("cpu")
    wanted = [d for d in dtypes if d in supported]
    if not wanted:
        res.reason = "none of the swept dtypes (float64-only, or complex32)"
        return res
    fallbacks: set[str] = set()
    wrong: list[str] = []
    errors: list[str] = []
    eager_failures = 0
    eager_error = ""
    for dtype in wanted:
        if time.perf_counter() - t0 > budget_s:
            res.truncated = True
            break
        rtol, atol = tolerances(op, dtype)
        try:
            samples = _samples(op, dtype, False, max_samples)
        except Exception:
            continue  # the OpInfo cannot make samples for this dtype on the CPU
        ran = False
        for i, sample in enumerate(samples):
            where = f"{str(dtype).removeprefix('torch.')} sample {i}"
            try:
                # Eager first, alone: a sample that fails eagerly tells nothing about xla.
                _call(op, _clone(sample.input), _clone(sample.args), _clone(sample.kwargs))
            except Exception as e:
                eager_failures += 1
                eager_error = eager_error or _describe(e)
                continue
            try:
                fallbacks |= run_sample(op, sample, dev, rtol, atol, res.shape_only)
                res.samples += 1
                ran = True
            except _NotExercised:
                continue
            except Mismatch as e:
                wrong.append(f"{where}: {e}")
                res.samples += 1
                ran = True
            except Exception as e:
                errors.append(f"{where}: {_describe(e)}")
                res.samples += 1
                ran = True
        if ran:
            res.dtypes.append(str(dtype).removeprefix("torch."))
    # Gradients of the first swept dtype autograd takes: float32, or complex64 when swept.
    grad_dtype = next((d for d in _GRAD_DTYPES if d in wanted), None)
    if grads and op.supports_autograd and grad_dtype is not None and not res.shape_only and not res.truncated:
        _sweep_grads(op, dev, res, max_grad_samples, grad_dtype)
    res.fallback_ops = sorted(fallbacks)
    res.problems = (wrong + errors)[:6] + res.problems[:4]
    if errors or res.grad == "error":
        res.cls = "error"
    elif wrong or res.grad == "wrong":
        res.cls = "wrong"
    elif res.samples == 0:
        res.cls = "skipped"
        res.reason = (
            f"every sample fails eagerly ({eager_error})" if eager_failures else "no sample runs on xla"
        )
    else:
        res.cls = "fallback" if fallbacks else "lowered"
    res.seconds = round(time.perf_counter() - t0, 2)
    return res


_GRAD_DTYPES = (torch.float32, torch.complex64)


def _sweep_grads(op: Any, dev: torch.device, res: OpResult, limit: int, dtype: torch.dtype) -> None:
    rtol, atol = tolerances(op, dtype)
    # Gradients go through more (and reassociated) arithmetic than the forward.
    rtol, atol = max(rtol, 1e-5), max(atol, 1e-5)
    try:
        samples = _samples(op, dtype, True, limit)
    except Exception:
        return
    fallbacks: set[str] = set()
    status = "n/a"
    for i, sample in enumerate(samples):
        try:
            used = run_grad_sample(op, sample, dev, rtol, atol)
        except _EagerFailed:
            continue  # not differentiable eagerly either
        except Mismatch as e:
            res.problems.append(f"grad sample {i}: {e}")
            status = "wrong" if status != "error" else status
            res.grad_samples += 1
            continue
        except Exception as e:
            res.problems.append(f"grad sample {i}: {_describe(e)}")
            status = "error"
            res.grad_samples += 1
            continue
        if used is None:
            continue
        res.grad_samples += 1
        fallbacks |= used
        if status == "n/a":
            status = "lowered"
    if status == "lowered" and fallbacks:
        status = "fallback"
    res.grad = status
    res.grad_fallback_ops = sorted(fallbacks)


# --------------------------------------------------------------------------- the sweep


def settle() -> None:
    """Run whatever IR an op left pending, so that it cannot leak into the next op's graphs;
    IR that fails to compile (already reported by that op's samples) is dropped."""
    import xlalab
    from xlalab.runtime import storage

    try:
        xlalab.mark_step()
    except Exception:
        storage._pending.clear()


def _select(ops: list[Any], names: list[str] | None) -> list[Any]:
    if not names:
        return ops
    wanted = set(names)
    return [o for o in ops if op_id(o) in wanted or o.name in wanted]


def _worker(
    names: list[str] | None,
    start: int,
    out_path: str,
    max_samples: int,
    grads: bool,
    dtypes: Iterable[torch.dtype] = DTYPES,
) -> None:
    """Sweep ops from index ``start`` on, appending one JSON line per op to ``out_path``."""
    from xlalab.runtime import graph
    from xlalab.runtime.device import xla_device

    ops = _select(load_op_db(), names)
    dev = xla_device()
    for i in range(start, len(ops)):
        with open(out_path, "a") as f:
            f.write(json.dumps({"start": i, "name": op_id(ops[i])}) + "\n")
        try:
            res = sweep_op(ops[i], dev, max_samples=max_samples, grads=grads, dtypes=dtypes)
        except Exception as e:  # the sweep's own failure on this op: count it as an error
            res = OpResult(op_id(ops[i]), cls="error", problems=[f"sweep: {_describe(e)}"])
            traceback.print_exc()
        with open(out_path, "a") as f:
            f.write(json.dumps({"done": i, "result": asdict(res)}) + "\n")
        # Every graph of this op is distinct from the next op's: don't keep executables.
        graph.CACHE.clear()
        settle()


def run_sweep(
    names: list[str] | None,
    max_samples: int,
    grads: bool,
    op_timeout_s: float,
    log: Callable[[str], None],
    dtypes: Iterable[torch.dtype] = DTYPES,
) -> list[OpResult]:
    """The whole sweep in worker processes; a crash or a hang costs only the op it hit."""
    import tempfile

    total = len(_select(load_op_db(), names))
    results: dict[int, OpResult] = {}
    start = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.jsonl")
        while start < total:
            open(path, "w").close()
            cmd = [sys.executable, "-m", "xlalab.testing.opinfo_sweep", "--worker", str(start)]
            cmd += ["--jsonl", path, "--max-samples", str(max_samples)] + (["--no-grad"] if not grads else [])
            cmd += ["--dtypes", ",".join(str(d).removeprefix("torch.") for d in dtypes)]
            if names:
                cmd += ["--ops", *names]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            current, since, seen = start, time.monotonic(), 0
            while True:
                finished = proc.poll() is not None
                lines = open(path).read().splitlines()
                for line in lines[seen:]:
                    rec = json.loads(line)
                    if "start" in rec:
                        current, since = rec["start"], time.monotonic()
                    else:
                        r = OpResult(**rec["result"])
                        results[rec["done"]] = r
                        failed = r.problems and {"wrong", "error"} & {r.cls, r.grad}
                        why = f": {r.problems[0][:300]}" if failed else ""
                        log(f"[{len(results)}/{total}] {r.name}: {r.cls} grad={r.grad} ({r.seconds}s){why}")
                        current = rec["done"] + 1
                seen = len(lines)
                if finished:
                    break
                if time.monotonic() - since > op_timeout_s:
                    proc.kill()
                    proc.wait()
                    break
                time.sleep(0.2)
            if current >= total:
                break
            if current not in results:
                # The worker died or hung inside this op.
                why = "hung" if proc.returncode in (None, -9) else f"crashed (exit {proc.returncode})"
                ops = _select(load_op_db(), names)
                results[current] = OpResult(op_id(ops[current]), cls="error", problems=[f"worker {why}"])
                log(f"[{len(results)}/{total}] {op_id(ops[current])}: error ({why})")
                current += 1
            start = current
    return [results[i] for i in sorted(results)]


# --------------------------------------------------------------------------- recording cost


def _recording_cases(dev: Any) -> dict[str, Callable[[], Any]]:
    """Representative calls on xla tensors made once: name -> the call."""
    import torch.nn.functional as F

    def t(*shape: int) -> torch.Tensor:
        return torch.randn(*shape).to(dev)

    a, b, v, w = t(64, 64), t(64, 64), t(64), t(64)
    x, wl, bl, g, beta = t(8, 64), t(32, 64), t(32), t(64), t(64)
    img, k, col = t(2, 3, 16, 16), t(8, 3, 3, 3), t(1, 64)
    idx = torch.arange(8).to(dev)
    xi, h, c, wi, wh = t(4, 16), t(4, 32), t(4, 32), t(128, 16), t(128, 32)
    bi, bh = t(128), t(128)
    return {
        "add (tensor, tensor)": lambda: a + b,
        "mul (tensor, float)": lambda: a * 0.5,
        "relu": lambda: torch.relu(a),
        "lerp_ (in place, float weight)": lambda: v.lerp_(w, 0.1),
        "sum (dim)": lambda: a.sum(1),
        "matmul": lambda: a @ b,
        "linear": lambda: F.linear(x, wl, bl),
        "softmax": lambda: torch.softmax(x, -1),
        "layer_norm": lambda: F.layer_norm(x, (64,), g, beta),
        "conv2d": lambda: F.conv2d(img, k, padding=1),
        "max_pool2d": lambda: F.max_pool2d(img, 2),
        "adaptive_max_pool2d": lambda: F.adaptive_max_pool2d(img, 3),
        "reshape (composite, decomposed)": lambda: a.reshape(16, 256),
        "squeeze_ (in-place view)": lambda: col.clone().squeeze_(0),
        "index_select": lambda: a.index_select(0, idx),
        "cat": lambda: torch.cat([x, x]),
        "lstm_cell (fused)": lambda: torch.lstm_cell(xi, (h, c), wi, wh, bi, bh),
    }


def recording_costs(calls: int = 300) -> dict[str, float | str]:
    """Mean recording time per call (microseconds) of each representative op: the
    dispatch-to-IR cost with a warm shape cache, no compile or execution."""
    import xlalab
    from xlalab.runtime import tensor
    from xlalab.runtime.device import xla_device

    dev = xla_device()
    out: dict[str, float | str] = {}
    for name, fn in _recording_cases(dev).items():
        xlalab.mark_step()
        try:
            fn()  # warm the meta cache and the handler
        except Exception as e:
            out[name] = f"error: {_describe(e)}"
            settle()
            continue
        tensor._TRACING.clear()
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter_ns() - t0) / calls / 1e3)
            settle()
        out[name] = round(best, 1)
    return out


# --------------------------------------------------------------------------- the report

CLASSES = ("lowered", "fallback", "wrong", "error", "skipped")


def _versions() -> str:
    import jax
    import jaxlib

    import xlalab

    return (
        f"xlalab {xlalab.__version__}, torch {torch.__version__}, jax {jax.__version__}, "
        f"jaxlib {jaxlib.__version__}, Python {platform.python_version()}, {platform.machine()}"
    )


def report(
    results: list[OpResult],
    seconds: float,
    args: argparse.Namespace,
    costs: dict[str, float | str] | None = None,
) -> str:
    counts = Counter(r.cls for r in results)
    grad_counts = Counter(r.grad for r in results if r.grad != "n/a")
    tested = sum(counts[c] for c in CLASSES[:4])
    lines = [
        "# Op coverage: PyTorch's OpInfo samples, lazy (`xla:0`) against eager CPU",
        "",
        "Generated by `make coverage` (`python -m xlalab.testing.opinfo_sweep --out docs/op-coverage.md`);",
        "do not edit by hand.",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- versions: {_versions()}",
        f"- samples: the first {args.max_samples} per op and dtype "
        f"({args.dtypes.replace(',', ', ')}); "
        f"gradients on the first {MAX_GRAD_SAMPLES} float32 samples (complex64 where an op has no float32)",
        f"- sweep time: {seconds / 60:.1f} min",
        "",
        "## Counts",
        "",
        "| class | OpInfos | meaning |",
        "|---|---:|---|",
        f"| lowered | {counts['lowered']} | every sample compiled through XLA and matched eager |",
        f"| fallback | {counts['fallback']} | matched eager, with at least one aten op on the CPU fallback |",
        f"| wrong | {counts['wrong']} | an output or gradient differs from eager |",
        f"| error | {counts['error']} | xla raised where eager did not |",
        f"| skipped | {counts['skipped']} | nothing to compare (reasons below) |",
        "",
        f"Lowered share of the tested OpInfos: {counts['lowered']}/{tested}"
        f" ({100 * counts['lowered'] / max(tested, 1):.1f}%).",
        "",
        "Gradients (float32 or complex64, ops with autograd): "
        + ", ".join(f"{c} {grad_counts[c]}" for c in ("lowered", "fallback", "wrong", "error")),
        "",
    ]
    bad = [r for r in results if r.cls in ("wrong", "error") or r.grad in ("wrong", "error")]
    if bad:
        lines += ["## Wrong or error", ""]
        for r in bad:
            lines.append(
                f"- `{r.name}` ({r.cls}, grad {r.grad}): " + "; ".join(r.problems[:3]).replace("|", "/")
            )
        lines.append("")
    by_op: dict[str, list[str]] = {}
    for r in results:
        for a in sorted(set(r.fallback_ops) | set(r.grad_fallback_ops)):
            by_op.setdefault(a, []).append(r.name)
    lines += [
        "## Ops that fall back to the CPU",
        "",
        "Each aten op the runtime ran eagerly on the CPU during the sweep (forward or backward),",
        "with the OpInfos that needed it.",
        "",
        "| aten op | OpInfos |",
        "|---|---|",
    ]
    for a in sorted(by_op, key=lambda k: (-len(by_op[k]), k)):
        names = by_op[a]
        shown = ", ".join(f"`{n}`" for n in names[:12]) + (
            f" and {len(names) - 12} more" if len(names) > 12 else ""
        )
        lines.append(f"| `{a}` | {shown} |")
    lines += ["", "## Per OpInfo", "", "| OpInfo | class | dtypes | samples | grad | CPU fallbacks |",
              "|---|---|---|---:|---|---|"]  # fmt: skip
    for r in sorted(results, key=lambda r: r.name):
        if r.cls == "skipped":
            continue
        fb = ", ".join(f"`{a}`" for a in sorted(set(r.fallback_ops) | set(r.grad_fallback_ops)))
        note = " (shape/dtype only)" if r.shape_only else ""
        note += " (truncated)" if r.truncated else ""
        lines.append(
            f"| `{r.name}` | {r.cls}{note} | {', '.join(r.dtypes)} | {r.samples} | {r.grad} | {fb} |"
        )
    if costs:
        lines += [
            "",
            "## Recording cost",
            "",
            "Time to record one call into the IR (dispatch, handler, node; warm caches, best of 3 x 300",
            "calls, no compile or execution), on the machine that ran the sweep. Multi-op rows (linear,",
            "layer_norm, reshape, lstm_cell) include every op torch dispatches for the call.",
            "",
            "| call | us per call |",
            "|---|---:|",
        ]
        lines += [f"| {name} | {us} |" for name, us in costs.items()]
    lines += ["", "## Skipped", "", "| OpInfo | reason |", "|---|---|"]
    for r in sorted(results, key=lambda r: r.name):
        if r.cls == "skipped":
            lines.append(f"| `{r.name}` | {r.reason} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", help="write the markdown report here")
    p.add_argument("--json", help="also write the per-op results as JSON here")
    p.add_argument("--ops", nargs="*", help="only these OpInfos (name or name.variant)")
    p.add_argument("--max-samples", type=int, default=MAX_SAMPLES)
    p.add_argument(
        "--dtypes",
        default=",".join(str(d).removeprefix("torch.") for d in DTYPES),
        help="comma-separated torch dtypes to sweep (complex64 sweeps complex numbers and their gradients)",
    )
    p.add_argument("--no-grad", action="store_true", help="skip the gradient checks")
    p.add_argument("--op-timeout", type=float, default=300.0, help="seconds before a hung op is abandoned")
    p.add_argument("--shard", help="K/N: every Nth op from the Kth (0-based), to run N sweeps side by side")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--jsonl", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    dtypes = [getattr(torch, name.strip()) for name in args.dtypes.split(",") if name.strip()]
    if args.worker is not None:
        _worker(args.ops, args.worker, args.jsonl, args.max_samples, not args.no_grad, dtypes)
        return 0
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        args.ops = [op_id(o) for o in _select(load_op_db(), args.ops)][k::n]
    t0 = time.perf_counter()
    results = run_sweep(args.ops, args.max_samples, not args.no_grad, args.op_timeout,
                        lambda s: print(s, flush=True), dtypes)  # fmt: skip
    seconds = time.perf_counter() - t0
    counts = Counter(r.cls for r in results)
    print(" ".join(f"{c}={counts[c]}" for c in CLASSES), f"in {seconds:.0f}s", flush=True)
    costs = recording_costs() if args.out and not args.ops else None
    if args.out:
        with open(args.out, "w") as f:
            f.write(report(results, seconds, args, costs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    return 1 if counts["wrong"] or counts["error"] else 0


def iter_ops(names: Iterable[str]) -> Iterator[Any]:
    """The OpInfos named (``name`` or ``name.variant``), in op_db order."""
    yield from _select(load_op_db(), list(names))


if __name__ == "__main__":
    sys.exit(main())
