"""Hypothesis strategies for fuzz programs, checked step by step on eager CPU.

Every drawn step is run eagerly (the tensors are tiny) before it is kept: that gives the
shapes, dtypes, autograd flags and value ranges the next draws choose from, and drops steps
eager PyTorch rejects (a program may still end with one such step on purpose: then xla
must raise too).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from hypothesis import strategies as st

from . import menu
from .menu import BY_NAME, FLOATS, INTS, MENU, Value
from .program import Input, Program, Step, input_line, loss_line

PROBE = torch.device("cpu")
# Errors eager raises that XLA cannot raise, by design (see docs/fuzzing.md): a program
# never ends on purpose with one of these.
UNMATCHABLE_ERRORS = ("ZeroDivisionError", "UnspecifiedTies", "UnspecifiedInfinity", "Subnormal")

SHAPES: tuple[tuple[int, ...], ...] = (
    (3,),
    (2, 3),
    (),
    (0,),
    (1,),
    (4, 5),
    (2, 1),
    (1, 3),
    (2, 0),
    (3, 4),
    (2, 1, 3),
)
# float32 first: hypothesis shrinks towards the start of a sampled_from.
DTYPE_ORDER = (
    "float32",
    "int64",
    "bool",
    "float64",
    "bfloat16",
    "float16",
    "int32",
    "uint8",
    "int8",
    "int16",
)


def values_for(dtype: str, n: int, specials: bool) -> st.SearchStrategy[list[Any]]:
    if dtype == "bool":
        element: st.SearchStrategy[Any] = st.booleans()
    elif dtype == "uint8":
        element = st.one_of(st.integers(0, 5), st.integers(0, 255))
    elif dtype == "int8":
        element = st.one_of(st.integers(-5, 5), st.integers(-127, 127))
    elif dtype in INTS:
        element = st.integers(-20, 20)
    else:
        element = st.sampled_from(menu.NICE_FLOATS + (menu.SPECIAL_FLOATS if specials else ()))
    return st.lists(element, min_size=n, max_size=n)


def value_lines(program: Program) -> tuple[list[list[str]], int]:
    """Source lines per step (inputs first, as step -1) and the number of values."""
    chunks = [[input_line(k, inp) for k, inp in enumerate(program.inputs)]]
    count = len(program.inputs)
    for step in program.steps:
        op = BY_NAME[step.op]
        outs = [f"v{count + j}" for j in range(op.n_out)]
        count += op.n_out
        chunks.append(menu.render(op, step.args, step.params, outs))
    return chunks, count


class Probe:
    """A program executed eagerly, step by step, tracking what generation needs."""

    def __init__(self, inputs: tuple[Input, ...]) -> None:
        self.ns: dict[str, Any] = {"torch": torch, "dev": PROBE}
        self.last_error = ""
        self.tensors: list[torch.Tensor] = []
        self.exact: list[bool] = []
        self.special: list[bool] = []
        self.signless: list[bool] = []  # the sign of a zero may legitimately differ
        for k, inp in enumerate(inputs):
            exec(input_line(k, inp), self.ns)
            self.tensors.append(self.ns[f"v{k}"])
            self.exact.append(True)
            self.special.append(_special(self.tensors[-1]))
            self.signless.append(False)

    def values(self) -> list[Value]:
        return [self._value(k) for k in range(len(self.tensors))]

    def _value(self, k: int) -> Value:
        t = self.tensors[k]
        base = t._base
        grad_leaf = (t.is_leaf and t.requires_grad) or (
            base is not None and base.is_leaf and base.requires_grad
        )
        return Value(
            shape=tuple(t.shape),
            dtype=str(t.dtype).removeprefix("torch."),
            exact=self.exact[k],
            special=self.special[k],
            requires_grad=t.requires_grad,
            writable=not grad_leaf and torch._debug_has_internal_overlap(t) == 0,
            contiguous=base is None and t.is_contiguous() and t.storage_offset() == 0,
        )

    def step(self, op: menu.Op, args: tuple[int, ...], params: dict[str, Any]) -> bool:
        """Run one step; False (and nothing recorded) when eager rejects it."""
        n = len(self.tensors)
        outs = [f"v{n + j}" for j in range(op.n_out)]
        if op.name in menu.TIES_UNSPECIFIED and _ties_reach_gradient(self.tensors[args[0]], params["dim"]):
            self.last_error = "UnspecifiedTies"
            return False
        if op.name in menu.INFINITY_UNSPECIFIED and bool(self.tensors[args[0]].detach().isinf().any()):
            self.last_error = "UnspecifiedInfinity"
            return False
        if not self._cast_defined(op, args, params):
            self.last_error = "UndefinedCast"
            return False
        try:
            exec("\n".join(menu.render(op, args, params, outs)), self.ns)
        except Exception as e:  # eager's verdict on the step
            self.last_error = f"{type(e).__name__}: {e}"
            return False
        results = [self.ns[o] for o in outs]
        if not all(isinstance(r, torch.Tensor) for r in results):
            return False
        if any(_subnormal(r) for r in results):
            # XLA on CPU flushes subnormal floats to zero; log or 1/x would then differ wildly.
            self.last_error = "Subnormal"
            return False
        if not op.exact and not op.inplace and self._ill_conditioned(op, args, params, results):
            # A few ulps of legitimate difference in an inexact input would move the result
            # beyond the tolerance (log1p of erf(-3) near -1, sin of exp(13)).
            self.last_error = "IllConditioned"
            return False
        exact = op.exact and all(self.exact[a] for a in args)
        signless = op.name in menu.SIGN_OF_ZERO_OPEN or any(self.signless[a] for a in args)
        for r in results:
            self.tensors.append(r)
            self.exact.append(exact)
            self.special.append(_special(r))
            self.signless.append(signless)
        if op.inplace:
            # The write changes every alias of the target: bases and views share storage.
            root = _root(self.tensors[args[0]])
            for k, t in enumerate(self.tensors):
                if _root(t) is root:
                    self.exact[k] = self.exact[k] and exact
                    self.special[k] = _special(t)
                    self.signless[k] = self.signless[k] or signless
        return True

    def _cast_defined(self, op: menu.Op, args: tuple[int, ...], params: dict[str, Any]) -> bool:
        """Float to int of NaN, infinity or a value beyond int32's range is undefined in C++.
        Generation draws only defined casts, but a variant's changed argument (an added NaN)
        can make one: checked here on the values the step sees."""
        if op.name == "to":
            source = self._value(args[0])
            return menu.cast_defined(source, replace(source, dtype=str(params["dtype"]["dtype"])))
        if op.name == "copy_":
            return menu.cast_defined(self._value(args[1]), self._value(args[0]))
        return True

    def _ill_conditioned(
        self, op: menu.Op, args: tuple[int, ...], params: dict[str, Any], results: list[torch.Tensor]
    ) -> bool:
        """Whether moving each inexact float input by ``SLACK_ULPS`` ulps (both ways) moves a
        result beyond the comparison's tolerance: then xla and eager, each a few ulps from
        the exact value, may legitimately disagree there."""
        inexact = [a for a in args if not self.exact[a] and self.tensors[a].dtype.is_floating_point]
        if not inexact:
            return False
        outs = [f"_conditioning{j}" for j in range(op.n_out)]
        code = "\n".join(menu.render(op, args, params, outs))

        def run(sign: float) -> list[Any] | None:
            ns = dict(self.ns)
            for a in inexact:
                t = self.tensors[a].detach()
                ns[f"v{a}"] = t + sign * SLACK_ULPS * torch.finfo(t.dtype).eps * t.abs()
            try:
                with torch.no_grad():
                    exec(code, ns)
            except Exception:  # (eager's verdict on a moved input says nothing here)
                return None
            return [ns[o] for o in outs]

        same = run(0.0)
        if same is None or any(not _close(x, r) for x, r in zip(same, results)):
            return False  # the op draws random numbers, or is not a function of its inputs' values
        for moved in (run(1.0), run(-1.0)):
            if moved is not None and any(not _close(x, r) for x, r in zip(moved, results)):
                return True
        return False

    def backward_works(self) -> bool:
        losses = loss_names(self)
        if not losses:
            return True
        try:
            exec(loss_line(losses) + "\nloss.backward()", self.ns)
        except Exception:  # eager's verdict on the backward pass
            return False
        return True


def _ties_reach_gradient(t: torch.Tensor, dim: int) -> bool:
    """Whether equal values along ``dim`` would decide where a gradient flows.

    Which of equal values topk picks is unspecified (eager's choice depends on its
    partial sort); the values agree, but the gradient lands on a different element.
    """
    if not t.requires_grad or t.dim() == 0 or t.numel() == 0 or not -t.dim() <= dim < t.dim():
        return False  # (an invalid dim: eager's own error decides)
    ordered = t.detach().sort(dim=dim).values
    same = ordered.narrow(dim, 1, ordered.shape[dim] - 1) == ordered.narrow(dim, 0, ordered.shape[dim] - 1)
    both_nan = (
        ordered.narrow(dim, 1, ordered.shape[dim] - 1).isnan()
        & ordered.narrow(dim, 0, ordered.shape[dim] - 1).isnan()
    )
    return bool((same | both_nan).any())


# How far, in ulps of its dtype, an inexact input may legitimately be from eager's: an ulp or two
# per transcendental, a few more along a chain of them.
SLACK_ULPS = 4


def _close(x: Any, r: Any) -> bool:
    """Whether ``x`` is within the differential comparison's tolerance of ``r``."""
    if not isinstance(x, torch.Tensor) or not isinstance(r, torch.Tensor) or not r.dtype.is_floating_point:
        return True
    if x.shape != r.shape or x.dtype != r.dtype:
        return True
    from .differential import TOLERANCE

    rtol, atol = TOLERANCE.get(r.dtype, (0.0, 0.0))
    close = torch.isclose(x.detach().double(), r.detach().double(), rtol=rtol, atol=atol, equal_nan=True)
    return bool(close.all())


def _subnormal(t: torch.Tensor) -> bool:
    if not t.dtype.is_floating_point or t.numel() == 0:
        return False
    magnitude = t.detach().abs()
    return bool(((magnitude > 0) & (magnitude < torch.finfo(t.dtype).tiny)).any())


def _root(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


def _special(t: torch.Tensor) -> bool:
    """Whether a float tensor holds values a float-to-int cast leaves undefined."""
    if not t.dtype.is_floating_point or t.numel() == 0:
        return False
    t = t.detach().double()
    return not bool(t.isfinite().all()) or float(t.abs().max()) >= 2.0**31


def replay(program: Program) -> Probe | None:
    """The program run eagerly, or None if eager rejects some step."""
    run = Probe(program.inputs)
    for s in program.steps:
        if not run.step(BY_NAME[s.op], s.args, s.params):
            return None
    return run


@st.composite
def inputs(draw: Any, backward: bool, specials: bool) -> tuple[Input, ...]:
    count = draw(st.integers(1, 3))
    out: list[Input] = []
    for k in range(count):
        if k > 0 and draw(st.booleans()):
            # Often the same shape as the first input (or its last dim): binary ops then broadcast.
            first = out[0].shape
            shape = draw(st.sampled_from((first, first[-1:], (1, *first[1:]) if first else ())))
        else:
            shape = draw(st.sampled_from(SHAPES))
        dtype = draw(st.sampled_from(DTYPE_ORDER))
        if backward and k == 0:
            dtype = draw(st.sampled_from(FLOATS[::-1]))
        numel = 1
        for s in shape:
            numel *= s
        values = draw(values_for(dtype, numel, specials))
        grad = backward and dtype in FLOATS and (k == 0 or draw(st.booleans()))
        out.append(Input(dtype, tuple(shape), tuple(values), grad))
    return tuple(out)


VARIED = ("dim", "s", "min", "max")


@st.composite
def programs(draw: Any, *, grad: bool | None = None, max_steps: int = 6) -> Program:
    """A random program; ``grad`` forces (or forbids) a backward pass."""
    backward = draw(st.booleans()) if grad is None else grad
    specials = draw(st.integers(0, 3)) == 0
    ins = draw(inputs(backward, specials))
    run = Probe(ins)
    allow_error = draw(st.integers(0, 9)) == 0
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, max_steps))):
        op = draw(st.sampled_from(MENU))
        picked = op.draw(draw, run.values())
        if picked is None:
            continue
        args, params = picked
        if op.discrete and any(not run.exact[a] for a in args):
            continue  # an ulp of legitimate difference would flip the result
        if op.name in menu.READS_SIGN_OF_ZERO and any(run.signless[a] for a in args):
            continue  # would turn an unspecified zero sign into a different value
        if run.step(op, args, params):
            steps.append(Step(op.name, args, params))
        elif allow_error and not any(e in run.last_error for e in UNMATCHABLE_ERRORS):
            steps.append(Step(op.name, args, params))
            break
    if backward and not run.backward_works():
        # Eager rejects this backward pass (e.g. a formula negating a bool): keep the forward.
        backward = False
    program = Program(ins, tuple(steps), backward)
    return replace(program, variant=draw(variants(program)))


@st.composite
def variants(draw: Any, program: Program) -> tuple[int, str, Any] | None:
    """One argument of one step changed (a dim, a Python number), if the result still runs."""
    spots = [(k, name) for k, s in enumerate(program.steps) for name in VARIED if name in s.params]
    if not spots or not draw(st.booleans()):
        return None
    k, name = draw(st.sampled_from(spots))
    old = program.steps[k].params[name]
    if name == "dim":
        if not isinstance(old, int):
            return None
        new: Any = draw(st.sampled_from((-1, -2, 0, 1)))
    else:
        new = menu.python_scalar(draw)
    if type(new) is type(old) and repr(new) == repr(old):
        return None
    candidate = replace(program, variant=(k, name, new))
    alt = candidate.with_variant()
    probe = replay(alt) if alt is not None else None
    if probe is None or (alt is not None and alt.backward and not probe.backward_works()):
        return None
    return (k, name, new)


def loss_names(run: Probe) -> list[str]:
    """The values a backward program sums into its loss: every float value requiring grad."""
    return [f"v{k}" for k, t in enumerate(run.tensors) if t.requires_grad and t.dtype.is_floating_point]


def source(program: Program) -> str:
    """The program as a runnable Python script comparing xla with eager."""
    chunks, count = value_lines(program)
    body = [line for chunk in chunks for line in chunk]
    run = replay(program)
    results = [f"v{k}" for k in range(count)]
    if program.backward and run is not None and loss_names(run):
        body.append(loss_line(loss_names(run)))
        body.append("loss.backward()")
        results += [f"v{k}.grad" for k, i in enumerate(program.inputs) if i.grad]
    lines = [
        "import torch",
        "import xlalab.core.xla_model as xm",
        "",
        "",
        "def program(dev):",
        *[f"    {line}" for line in body],
        f"    return [{', '.join(results)}]",
        "",
        "",
        "eager = program(torch.device('cpu'))",
        "lazy = [t.cpu() if t is not None else None for t in program(xm.xla_device())]",
        "for k, (e, x) in enumerate(zip(eager, lazy)):",
        "    print(k, 'eager', e, '\\n  xla', x)",
    ]
    if program.variant is not None:
        k, name, value = program.variant
        lines.insert(0, f"# also run with step {k}'s {name}={value!r} (see the finding)")
    return "\n".join(lines) + "\n"
