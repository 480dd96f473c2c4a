"""The differential fuzzer in compiled mode: random programs inside ``torch.compile(backend="xlalab")``
must match eager CPU, and a wrong compiled value is caught and pinned on its op."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import fx

import xlalab.dynamo
from xlalab.runtime import metrics
from xlalab.testing.fuzz import Program, compiled
from xlalab.testing.fuzz.campaign import describe, run_campaign
from xlalab.testing.fuzz.program import Input, Step

# Findings a campaign may hit that are not xlalab's, by signature, with the reason: none.
# (compiled.check itself counts, and does not report, findings torch's own compile path shares,
# such as AOTAutograd refusing an op without a derivative that eager only refuses at backward.)
KNOWN: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's own warnings (std of one element...)
        yield


def test_a_compiled_campaign_matches_eager() -> None:
    graphs = metrics.COUNTERS.get(xlalab.dynamo.report.GRAPHS_COUNTER, 0)
    executed = metrics.COUNTERS.get("ExecuteComputation", 0)
    runs = compiled.STATS.programs
    report = run_campaign(25, 11, known=set(KNOWN), checker=compiled.check)
    assert not report.findings, "\n\n".join(describe(f, p) for f, p in report.findings)
    assert report.programs == 25 and report.backward > 0
    # Really compiled: dynamo handed graphs to the backend and their programs ran.
    assert compiled.STATS.programs - runs >= 25
    assert metrics.COUNTERS.get(xlalab.dynamo.report.GRAPHS_COUNTER, 0) - graphs >= 20
    assert metrics.COUNTERS.get("ExecuteComputation", 0) - executed >= 20


def _program(op: str) -> Program:
    return Program(
        inputs=(Input("float32", (2, 3), (0.5, -1.0, 2.0, -0.0, 3.0, -7.5), grad=True),),
        steps=(
            Step(op, (0,), {}),
            Step("add", (1,), {"s": 2, "swap": False}),
            Step("sum", (2,), {"dim": -1, "keepdim": False}),
        ),
        backward=True,
        variant=(1, "s", 0.5),
    )


def test_the_compiled_function_takes_the_varied_argument() -> None:
    source = compiled.function_source(_program("neg"))
    assert source.params == ("v0", "p")
    assert "v2 = torch.add(v1, p)" in source.text
    assert source.results == ["v1", "v2", "v3", "loss"]


def _negation_dropped(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """xlalab's backend with a planted bug: ``torch.neg`` compiles to a copy."""
    for node in gm.graph.nodes:
        if node.target is torch.neg:
            node.target = torch.clone
    gm.recompile()
    return xlalab.dynamo.backend(gm, example_inputs)


def test_a_wrong_compiled_value_is_a_finding_on_its_op(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compiled.check(_program("neg")) is None
    monkeypatch.setattr(compiled, "BACKEND", _negation_dropped)
    finding = compiled.check(_program("neg"))
    assert finding is not None and finding.kind == "mismatch" and finding.op == "neg", finding


def _first_outputs_again(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """xlalab's backend with a planted bug: every call returns the first call's values."""
    compiled_fn = xlalab.dynamo.backend(gm, example_inputs)
    first: list[Any] = []

    def call(*args: Any) -> Any:
        if not first:
            first.append(compiled_fn(*args))
        return first[0]

    return call


def test_values_kept_from_the_first_call_are_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    # The second call (the inputs' values reversed) must compute from its own inputs.
    program = Program(
        inputs=(Input("float32", (3,), (0.5, -1.0, 2.0)),),
        steps=(Step("mul", (0,), {"s": 3, "swap": False}),),
    )
    monkeypatch.setattr(compiled, "BACKEND", _first_outputs_again)
    finding = compiled.check(program)
    assert finding is not None and finding.op == "mul" and "second call" in finding.detail, finding


def test_a_failure_torch_compile_has_on_the_cpu_too_is_not_reported() -> None:
    # AOTAutograd refuses floor_divide on a tensor requiring grad (no derivative) when it
    # compiles; eager only when the backward reaches it. aot_eager on the CPU does the same.
    program = Program(
        inputs=(Input("float64", (3,), (0.0, 1.0, 3.0), grad=True),),
        steps=(Step("floor_divide", (0, 0), {}),),
    )
    before = sum(compiled.STATS.torch_limits.values())
    assert compiled.check(program) is None
    assert sum(compiled.STATS.torch_limits.values()) == before + 1


def test_a_wrong_value_torch_compile_gives_on_the_cpu_too_is_not_reported() -> None:
    # torch 2.13's AOTAutograd drops ``alpha`` once the float ``p`` is a graph input (the second
    # call, after dynamo recompiled for another value): torch.add(x, 1.5, alpha=2) gives 1.5.
    program = Program(
        inputs=(Input("float32", (3,), (0.5, -0.5, 0.0)),),
        steps=(Step("add_alpha", (0,), {"s": 1.0, "swap": False}),),
        variant=(0, "s", 1.5),
    )
    before = sum(compiled.STATS.torch_limits.values())
    assert compiled.check(program) is None
    assert sum(compiled.STATS.torch_limits.values()) == before + 1, "torch fixed add's alpha: drop this test"


@pytest.mark.parametrize("op", ["atan2", "pow"])
def test_an_xla_constant_made_in_the_function_computes_under_backward(op: str) -> None:
    # ``op(torch.tensor(1.5, device=dev), x)``: fake tensors on xla carry no real value, so
    # tracing the backward formulas never computes on the constant below the Python key (it
    # used to fail an assert there, inside the autograd engine, and abort the process).
    program = Program(
        inputs=(Input("float32", (3,), (0.5, 1.0, 2.0), grad=True),),
        steps=(Step(op, (0,), {"s": 1.5, "swap": True}),),
        backward=True,
    )
    before = sum(compiled.STATS.torch_limits.values())
    assert compiled.check(program) is None
    assert sum(compiled.STATS.torch_limits.values()) == before
