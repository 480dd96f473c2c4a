"""Run a fuzz program on eager CPU and on ``xla:0`` and compare every value.

Compared: every program value (inputs too: a write through a view must reach its base)
and, for backward programs, the inputs' ``.grad``. Shapes, dtypes and layouts (contiguity,
the strides of dims with more than one element) must be identical;
integers, bools and the float values the menu marks exact must be equal bit for bit
(NaN positions and the sign of zero included); other floats are compared with the dtype's
tolerance. If eager raises, xla must raise too (anywhere up to the sync); xla raising
where eager did not is a crash.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

import torch

from .menu import BY_NAME
from .program import Program, loss_line
from .strategies import loss_names, replay, value_lines

# (rtol, atol) for values that may legitimately differ by a few ulps (transcendentals,
# reductions, chains of them); half precision rounds every intermediate, hence looser.
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-6, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


@dataclass(frozen=True)
class Finding:
    """A difference between xla and eager on one program."""

    kind: str  # "mismatch" or "crash"
    op: str  # the menu op whose result differs first ("input", "grad", "backward", "sync"...)
    detail: str
    variant: bool = False  # found on the program's second (changed-argument) run

    @property
    def signature(self) -> str:
        """What tells two findings apart when deduplicating: kind, op and the error type."""
        head = self.detail.split(":", 1)[0] if self.kind == "crash" else ""
        return f"{self.kind}:{self.op}:{head}"


@dataclass
class Run:
    # (step index, "Type: message"); step -1: the inputs, len(steps): the backward pass or sync.
    # Only text is kept: an exception's traceback chain would keep the failed tensors alive.
    error: tuple[int, str] | None
    values: list[Any]  # CPU tensors (or None for an absent grad)
    names: list[str]
    layouts: list[Any] = field(default_factory=list)  # per value, as the program saw it (layout())


def execute(program: Program, dev: torch.device) -> Run:
    """Execute the program's source on ``dev``; results brought back to the CPU."""
    lazy = dev.type == "xla"
    ns: dict[str, Any] = {"torch": torch, "dev": dev}
    chunks, count = value_lines(program)
    names = [f"v{k}" for k in range(count)]
    values: list[Any] = []
    for k, chunk in enumerate(chunks):
        try:
            exec("\n".join(chunk), ns)
        except Exception as e:  # any exception is a result here
            return _failed(ns, k - 1, e)
    end = len(program.steps)
    try:
        losses = losses_of(program)
        if losses:
            exec(loss_line(losses) + "\nloss.backward()", ns)
            names += [f"v{k}.grad" for k, i in enumerate(program.inputs) if i.grad]
        values = [eval(n, ns) for n in names]  # the program's own expressions
        if lazy:
            import xlalab.core.xla_model as xm

            xm.mark_step()
        layouts = [layout(v) for v in values]
        out = [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in values]
    except Exception as e:
        values.clear()
        return _failed(ns, end, e)
    return Run(None, out, names, layouts)


def layout(v: Any) -> Any:
    """What a program can see of a tensor's layout: whether it is contiguous, and the strides of
    its dims that have more than one element (a size-1 dim's stride is never used)."""
    if not isinstance(v, torch.Tensor):
        return None
    return v.is_contiguous(), tuple(st for n, st in zip(v.shape, v.stride()) if n > 1)


def losses_of(program: Program) -> list[str]:
    """The values a backward program's loss sums (none for a forward-only program)."""
    if not program.backward:
        return []
    probe = replay(program)
    return loss_names(probe) if probe is not None else []


def _failed(ns: dict[str, Any], step: int, error: BaseException) -> Run:
    ns.clear()
    return Run((step, f"{type(error).__name__}: {error}"), [], [])


def step_of_value(program: Program) -> list[str]:
    """For each value index, the menu op that produced it ("input" for inputs)."""
    owners = ["input"] * len(program.inputs)
    for s in program.steps:
        owners += [s.op] * BY_NAME[s.op].n_out
    return owners


def compare(program: Program, eager: Run, lazy: Run) -> Finding | None:
    ops = [s.op for s in program.steps]

    def op_at(step: int) -> str:
        if step < 0:
            return "input"
        return ops[step] if step < len(ops) else ("backward" if program.backward else "sync")

    if eager.error is not None:
        if lazy.error is None:
            step, e = eager.error
            return Finding("mismatch", op_at(step), f"eager raised {e}; xla did not")
        return None
    if lazy.error is not None:
        step, e = lazy.error
        return Finding("crash", op_at(step), e[:2000])
    probe = replay(program)
    exact = probe.exact if probe is not None else []
    signless = probe.signless if probe is not None else []
    owners = step_of_value(program)
    for k, (name, e, x) in enumerate(zip(eager.names, eager.values, lazy.values)):
        owner = owners[k] if k < len(owners) else "grad"
        is_exact = k < len(exact) and exact[k]
        problem = _differs(e, x, is_exact, zero_sign=k < len(signless) and not signless[k])
        laid_out = k < len(eager.layouts) and k < len(lazy.layouts)  # (compiled runs keep none)
        if problem is None and laid_out and eager.layouts[k] != lazy.layouts[k]:
            problem = f"layout (contiguous, strides): eager {eager.layouts[k]}, xla {lazy.layouts[k]}"
        if problem:
            return Finding("mismatch", owner, f"{name} ({owner}): {problem}")
    return None


def _differs(e: Any, x: Any, exact: bool, zero_sign: bool = True) -> str | None:
    if e is None or x is None:
        return None if e is None and x is None else f"eager {e!r}, xla {x!r}"
    if e.shape != x.shape:
        return f"shape: eager {list(e.shape)}, xla {list(x.shape)}"
    if e.dtype != x.dtype:
        return f"dtype: eager {e.dtype}, xla {x.dtype}"
    if e.requires_grad != x.requires_grad:
        return f"requires_grad: eager {e.requires_grad}, xla {x.requires_grad}"
    if e.numel() == 0:
        return None
    if not e.dtype.is_floating_point:
        if torch.equal(e, x):
            return None
        return f"values: eager {e.tolist()}, xla {x.tolist()}"
    ef, xf = e.double(), x.double()
    nan_e, nan_x = ef.isnan(), xf.isnan()
    if not torch.equal(nan_e, nan_x):
        return f"NaN positions: eager {_show(e)}, xla {_show(x)}"
    if exact:
        same = (ef == xf) | nan_e
        if zero_sign:  # (a NaN's sign bit means nothing)
            same &= (ef.signbit() == xf.signbit()) | nan_e
    else:
        rtol, atol = TOLERANCE[e.dtype]
        same = torch.isclose(ef, xf, rtol=rtol, atol=atol, equal_nan=True)
    if bool(same.all()):
        return None
    return f"values ({'exact' if exact else 'tolerance'}): eager {_show(e)}, xla {_show(x)}"


def _show(t: torch.Tensor) -> str:
    return str(t.double().tolist() if t.dim() else t.item())


def check(program: Program) -> Finding | None:
    """Run ``program`` (and its variant) on eager and xla; the first finding, if any."""
    finding = _check_one(program)
    if finding is not None:
        return finding
    alt = program.with_variant()
    if alt is None:
        return None
    finding = _check_one(alt)
    if finding is None:
        return None
    return Finding(finding.kind, finding.op, finding.detail, variant=True)


def _check_one(program: Program) -> Finding | None:
    eager = execute(program, torch.device("cpu"))
    lazy = execute(program, xla_device())
    if lazy.error is not None:
        # The failed run's tensors sit in reference cycles (exception, traceback, frames):
        # collect them now, so that the next program's sync does not compute them again.
        gc.collect()
    return compare(program, eager, lazy)


def xla_device() -> torch.device:
    import xlalab.core.xla_model as xm

    return xm.xla_device()
