"""The differential fuzzer in compiled mode: a program's steps run inside ``torch.compile``.

A program becomes one Python function, compiled with ``torch.compile(fn, backend="xlalab")``
and called on ``xla:0`` inputs made outside it::

    def program(v0, v1, p):
        v2 = torch.add(v0, p)
        v3 = v2[::2]
        v3.mul_(2)
        loss = v2.double().sum() + v3.double().sum()    # backward programs only
        return (v2, v3, loss)

Its results are compared with eager CPU exactly as ``differential.compare`` compares a lazy
run: every value, the inputs too (a write inside the compiled function must reach the caller's
tensor), and for a backward program the inputs' ``.grad`` after ``loss.backward()`` outside the
function (AOTAutograd's backward graph). The same compiled function is then called on the
inputs' values reversed (no recompile: the executable alone must compute from its inputs), and,
for a program with a variant, with the varied argument ``p`` changed, as a user calling a
compiled function with another number does: dynamo's guard fails and it compiles again.

A graph break is no finding: dynamo runs the rest of the function eagerly (on xla, lazily)
and the values must still be eager's. A finding that ``backend="aot_eager"`` on CPU tensors
shares is dynamo's or AOTAutograd's and is counted, not reported. Dynamo's caches are reset
after every program.
"""

from __future__ import annotations

import gc
import linecache
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import count
from types import TracebackType
from typing import Any

import torch

from .differential import Finding, Run, compare, execute, losses_of, xla_device
from .menu import BY_NAME, INTS, render
from .program import Program, input_line, loss_line
from .strategies import replay

PARAM = "p"  # the varied argument's name in the compiled function
BACKEND: Any = "xlalab"  # what ``torch.compile`` is given (a test plants a faulty one)
_PLACEHOLDER = "__fuzz_varied_argument__"
_serial = count()


@dataclass
class Stats:
    """What compiled mode did over a campaign: graphs, breaks, recompiles, lazy fallbacks."""

    programs: int = 0  # calls of compiled functions (a program, its second call, its variant)
    graphs: int = 0  # graphs dynamo handed to the backend
    recompiles: int = 0
    broken: int = 0  # runs with at least one graph break
    breaks: Counter[str] = field(default_factory=Counter)  # reason -> runs
    lazy: Counter[str] = field(default_factory=Counter)  # why a graph ran lazily -> runs
    # findings torch's own compile path shares (see ``check``) -> programs
    torch_limits: Counter[str] = field(default_factory=Counter)
    limit_examples: dict[str, Program] = field(default_factory=dict)  # the first program of each

    def summary(self) -> str:
        lines = [
            f"compiled: {self.programs} runs, {self.graphs} graphs, {self.recompiles} recompiles, "
            f"{self.broken} runs with a graph break"
        ]
        lines += [f"  break ({n}x): {reason}" for reason, n in self.breaks.most_common(8)]
        lines += [f"  lazy ({n}x): {why}" for why, n in self.lazy.most_common(8)]
        lines += [f"  torch's too, not reported ({n}x): {f}" for f, n in self.torch_limits.most_common(8)]
        return "\n".join(lines)


STATS = Stats()


@dataclass(frozen=True)
class Source:
    """A program as the text of one function, and which step each of its lines belongs to."""

    text: str
    filename: str
    line_steps: dict[int, int]  # line number (1-based) -> step index; len(steps) for the loss
    results: list[str]  # what the function returns
    params: tuple[str, ...]  # its arguments


def function_source(program: Program) -> Source:
    """The body of ``program`` as ``def program(v0, ..., [p])``; the varied argument is ``p``."""
    n_in = len(program.inputs)
    params = [f"v{k}" for k in range(n_in)]
    varied = program.variant
    if varied is not None:
        params.append(PARAM)
    lines = [f"def program({', '.join(params)}):"]
    line_steps: dict[int, int] = {}
    value = n_in
    placed = False
    for k, step in enumerate(program.steps):
        op = BY_NAME[step.op]
        outs = [f"v{value + j}" for j in range(op.n_out)]
        value += op.n_out
        step_params = step.params
        if varied is not None and varied[0] == k:
            step_params = {**step.params, varied[1]: _PLACEHOLDER}
        for line in render(op, step.args, step_params, outs):
            placed = placed or repr(_PLACEHOLDER) in line
            lines.append("    " + line.replace(repr(_PLACEHOLDER), PARAM))
            line_steps[len(lines)] = k
    if varied is not None and not placed:
        raise ValueError(f"step {varied[0]} renders no parameter {varied[1]!r} to vary")
    results = [f"v{k}" for k in range(n_in, value)]
    losses = losses_of(program)
    if losses:
        lines.append("    " + loss_line(losses))
        line_steps[len(lines)] = len(program.steps)
        results.append("loss")
    lines.append(f"    return ({''.join(r + ', ' for r in results)})")
    text = "\n".join(lines) + "\n"
    return Source(text, f"<fuzz-compiled-{next(_serial)}>", line_steps, results, tuple(params))


def check(program: Program) -> Finding | None:
    """Run ``program`` eagerly on the CPU and compiled on xla (its variant too); the first finding.

    A finding torch's own compile path shares (``backend="aot_eager"`` on CPU tensors: dynamo
    and AOTAutograd without xlalab) is dynamo's or AOTAutograd's, not xlalab's: it is counted
    in ``STATS.torch_limits`` and not reported.
    """
    finding = _differential(program, xla_device(), BACKEND)
    if finding is None:
        return None
    reference = _differential(program, torch.device("cpu"), "aot_eager")
    if reference is not None and _same(reference, finding):
        key = f"{finding.signature} {_gist(finding)}"
        STATS.torch_limits[key] += 1
        STATS.limit_examples.setdefault(key, program)
        return None
    return finding


def _gist(finding: Finding) -> str:
    """The start of a finding's message, device names left out (``xlaFloatType``, ``CPUFloatType``)."""
    text = finding.detail.splitlines()[0] if finding.detail else ""
    return re.sub(r"\b(xla|CPU)(?=[A-Z])|device='?(xla|cpu)(:0)?'?", "", text)[:80]


def _same(a: Finding, b: Finding) -> bool:
    """The same failure: the same error (type and the start of its message), or the same wrong
    value of the same op."""
    if a.signature != b.signature:
        return False
    return _gist(a) == _gist(b) if a.kind == "crash" else a.detail == b.detail


def _differential(program: Program, dev: torch.device, backend: Any) -> Finding | None:
    import xlalab.dynamo

    source = function_source(program)
    # The program; the same compiled function again on other input values (no recompile: the
    # executable must read its inputs, not values seen while tracing); then the variant.
    argument: tuple[Any, ...] = ()
    if program.variant is not None:
        index, name, _ = program.variant
        argument = (program.steps[index].params[name],)
    runs = [(program, argument)]
    other = revalued(program)
    if other is not None:
        runs.append((other, argument))
    alt = program.with_variant()
    if alt is not None and program.variant is not None:
        runs.append((alt, (program.variant[2],)))
    try:
        fn = _compile(source, dev, backend)
        for one, value in runs:
            eager = execute(one, torch.device("cpu"))
            compiled = execute_compiled(one, source, fn, value, dev)
            if compiled.error is not None:
                gc.collect()  # the failed run's tensors sit in reference cycles: free them now
            finding = compare(one, eager, compiled)
            if finding is not None:
                if one is other:
                    return replace(finding, detail=f"(second call, inputs reversed) {finding.detail}")
                return replace(finding, variant=one is alt)
        return None
    finally:
        if dev.type == "xla":
            _note_stats(len(runs))
        xlalab.dynamo.reset()
        linecache.cache.pop(source.filename, None)


def revalued(program: Program) -> Program | None:
    """``program`` with each input's values in reverse order, if eager computes it as well defined.

    Eager must accept every step again (ties under topk's gradient, subnormal results and
    integer division by zero are rejected by the replay), and no float-to-int cast may read a
    NaN, an infinity or an out-of-range value it did not read before.
    """
    inputs = tuple(replace(i, values=tuple(reversed(i.values))) for i in program.inputs)
    other = replace(program, inputs=inputs)
    if other.inputs == program.inputs:
        return other  # (still a second call, through the executable alone)
    before, after = replay(program), replay(other)
    if before is None or after is None:
        return None
    if program.backward and not after.backward_works():
        return None
    for step in program.steps:
        if step.op == "to" and step.params["dtype"]["dtype"] in INTS:
            src = step.args[0]
        elif step.op == "copy_" and after.tensors[step.args[0]].dtype in _INT_DTYPES:
            src = step.args[1]
        else:
            continue
        if after.special[src] and not before.special[src]:
            return None
    return other


_INT_DTYPES = frozenset(getattr(torch, name) for name in INTS)


def _compile(source: Source, dev: torch.device, backend: Any) -> Any:
    """The function, compiled by ``backend``; its source where tracebacks look."""
    lines = source.text.splitlines(keepends=True)
    linecache.cache[source.filename] = (len(source.text), None, lines, source.filename)
    # ``dev``: where index literals and 0-d operands are made (a global of the function).
    namespace: dict[str, Any] = {"torch": torch, "dev": dev}
    exec(compile(source.text, source.filename, "exec"), namespace)
    return torch.compile(namespace["program"], backend=backend)


def execute_compiled(
    program: Program, source: Source, fn: Any, argument: tuple[Any, ...], dev: torch.device
) -> Run:
    """Make ``program``'s inputs on ``dev``, call the compiled ``fn`` on them, bring values back."""
    ns: dict[str, Any] = {"torch": torch, "dev": dev}
    try:
        exec("\n".join(input_line(k, inp) for k, inp in enumerate(program.inputs)), ns)
    except Exception as e:  # any exception is a result here
        return _failed(-1, e)
    inputs = [ns[f"v{k}"] for k in range(len(program.inputs))]
    end = len(program.steps)
    try:
        outs = fn(*inputs, *argument)
    except Exception as e:
        return _failed(_step_of(e, source, end), e)
    try:
        by_name = dict(zip(source.results, outs))
        values: list[Any] = inputs + [by_name[r] for r in source.results if r != "loss"]
        names = [f"v{k}" for k in range(len(values))]
        if "loss" in by_name:
            by_name["loss"].backward()
            grads = [(k, inputs[k].grad) for k, i in enumerate(program.inputs) if i.grad]
            names += [f"v{k}.grad" for k, _ in grads]
            values += [g for _, g in grads]
        if dev.type == "xla":
            import xlalab.core.xla_model as xm

            xm.mark_step()
        out = [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in values]
    except Exception as e:
        return _failed(end, e)
    return Run(None, out, names)


def _failed(step: int, error: BaseException) -> Run:
    inner = _unwrap(error)
    return Run((step, f"{type(inner).__name__}: {inner}"), [], [])


def _unwrap(error: BaseException) -> BaseException:
    """The error under dynamo's wrappers (BackendCompilerFailed, TorchRuntimeError...)."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "inner_exception", None) or error.__cause__
        if not isinstance(inner, BaseException) or not type(error).__module__.startswith("torch._dynamo"):
            break
        error = inner
    return error


def _step_of(error: BaseException, source: Source, end: int) -> int:
    """The step whose line raised: the innermost frame in the program's source, else dynamo's
    "from user code" note; else ``end``, as for an error a lazy run raises at its sync."""
    line = None
    tb: TracebackType | None = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == source.filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    noted = re.findall(rf'File "{re.escape(source.filename)}", line (\d+)', str(error))
    if noted:
        line = int(noted[-1])
    return source.line_steps.get(line, end) if line is not None else end


def _note_stats(runs: int) -> None:
    import xlalab.dynamo

    STATS.programs += runs
    for rep in xlalab.dynamo.compiled_functions():
        STATS.graphs += rep.num_graphs
        STATS.recompiles += len(rep.recompiles)
        if rep.breaks:
            STATS.broken += 1
        STATS.breaks.update({reason for reason, _ in rep.breaks})
        STATS.lazy.update(set(rep.lazy))
