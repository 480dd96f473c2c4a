"""``torch._assert_async`` on xla: checked on the device, raised at the next sync, as CUDA does.

torch's own decompositions emit it (``one_hot``'s class range in a compiled graph), and users
write it to check a tensor without waiting for the device. It is part of the program, never a
CPU fallback: a compiled graph that makes one still runs as one XLA program.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import pytest
import torch

import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met
import xlalab.dynamo as dynamo
from xlalab.runtime import config


def _line_of(text: str, fn: Any) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _assert_positive(x: torch.Tensor) -> torch.Tensor:
    torch._assert_async((x > 0).all(), "x must be positive")
    return x * 2


def test_a_holding_assertion_costs_no_fallback_and_no_wait(dev: torch.device) -> None:
    met.clear_all()
    y = _assert_positive(torch.tensor([1.0, 2.0], device=dev))
    xm.mark_step()
    assert y.cpu().tolist() == [2.0, 4.0]
    assert met.executed_fallback_ops() == []
    assert (met.counter_value("ExecuteComputation") or 0) == 1  # the assertion ran in the step's program


def test_a_failing_assertion_raises_at_the_next_sync_naming_its_line(dev: torch.device) -> None:
    y = _assert_positive(torch.tensor([1.0, -2.0], device=dev))  # recording does not wait
    xm.mark_step()  # nor does dispatching the program
    line = _line_of("torch._assert_async", _assert_positive)
    made_at = rf"x must be positive \(torch._assert_async at .*test_device_asserts.py:{line}"
    with pytest.raises(RuntimeError, match=made_at):
        xm.wait_device_ops()
    # Reported once; the values and the runtime carry on.
    assert y.cpu().tolist() == [2.0, -4.0]
    assert (torch.ones(2, device=dev) + 1).cpu().tolist() == [2.0, 2.0]


def test_a_read_is_a_sync_that_reports_it(dev: torch.device) -> None:
    x = torch.tensor([0.0, 3.0], device=dev)
    torch._assert_async(x.sum() > 5)  # no message: eager's own
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value, but got zero"):
        (x + 1).cpu()


@pytest.mark.parametrize("cond", [[1, 1], []], ids=["two values", "no values"])
def test_a_condition_of_the_wrong_size_raises_at_the_call(cond: list[int], dev: torch.device) -> None:
    with pytest.raises(RuntimeError) as eager:
        torch._assert_async(torch.tensor(cond))
    with pytest.raises(RuntimeError) as lazy:
        torch._assert_async(torch.tensor(cond, device=dev))
    assert str(lazy.value) == str(eager.value)


def test_eager_debug_mode_checks_it_at_once(dev: torch.device) -> None:
    config.set("XLA_USE_EAGER_DEBUG_MODE", True)
    try:
        x = torch.tensor([-1.0], device=dev)
        torch._assert_async((x > 0).all(), "negative")
        with pytest.raises(RuntimeError, match="negative"):
            x.cpu()
    finally:
        config.set("XLA_USE_EAGER_DEBUG_MODE", False)


def _classes(idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(idx, num_classes=4).to(w.dtype) @ w


def test_one_hot_in_a_compiled_function_is_one_program_and_checks_its_classes(dev: torch.device) -> None:
    dynamo.reset()
    w = torch.arange(8.0).reshape(4, 2)
    compiled = torch.compile(_classes, backend="xlalab")
    good = torch.tensor([0, 3, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs lazily" warning
        got = compiled(good.to(dev), w.to(dev))
    torch.testing.assert_close(got.cpu(), _classes(good, w))
    assert not [f.name for f in dynamo.compiled_functions() if f.lazy], dynamo.summary()
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes") as eager:
        _classes(torch.tensor([0, 4]), w)
    line = _line_of("one_hot", _classes)
    bad = compiled(torch.tensor([0, 4], device=dev), w.to(dev))  # same program: no recompile
    made_at = rf"smaller than num_classes.*test_device_asserts.py:{line}"
    with pytest.raises(RuntimeError, match=made_at) as lazy:
        bad.cpu()
    assert str(eager.value).split(": ")[-1] in str(lazy.value)
    torch.testing.assert_close(compiled(good.to(dev), w.to(dev)).cpu(), _classes(good, w))


def test_an_assertion_pending_before_a_compiled_call_stays_in_the_lazy_graph(dev: torch.device) -> None:
    dynamo.reset()
    x = torch.tensor([1.0, -1.0], device=dev)
    torch._assert_async((x > 0).all(), "recorded lazily")  # pending when the compiled call traces
    compiled = torch.compile(_classes, backend="xlalab")
    w = torch.ones(4, 2, device=dev)
    with pytest.raises(RuntimeError, match="recorded lazily"):  # at the call or at the wait
        compiled(torch.tensor([1, 2], device=dev), w)  # its graph makes one_hot's own checks
        xm.wait_device_ops()
    assert not [f.name for f in dynamo.compiled_functions() if f.lazy], dynamo.summary()
    assert compiled(torch.tensor([3, 0], device=dev), w).cpu().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    xm.wait_device_ops()  # reported once


# Eager's checks of values that torch skips on a device other than the CPU, or that XLA cannot
# raise on: each is a device check, so a bad value raises eager's error instead of giving a
# plausible wrong answer.
def _one_hot_bounds(d: Any) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor([0, 5], device=d), 3)


def _one_hot_negative(d: Any) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor([0, -1], device=d))  # classes inferred


def _bag_offsets_not_from_zero(d: Any) -> torch.Tensor:
    idx, table = torch.tensor([0, 1, 2], device=d), torch.ones(3, 2, device=d)
    return torch.nn.functional.embedding_bag(idx, table, torch.tensor([1, 2], device=d))


def _bag_offsets_past_the_end(d: Any) -> torch.Tensor:
    idx, table = torch.tensor([0, 1, 2], device=d), torch.ones(3, 2, device=d)
    offsets = torch.tensor([0, 4], device=d)
    return torch.nn.functional.embedding_bag(idx, table, offsets, include_last_offset=True)


def _bernoulli_above_one(d: Any) -> torch.Tensor:
    return torch.bernoulli(torch.tensor([0.5, 1.5], device=d))


def _bernoulli_nan_in_place(d: Any) -> torch.Tensor:
    return torch.zeros(2, device=d).bernoulli_(torch.tensor([0.5, float("nan")], device=d))


def _quantile_above_one(d: Any) -> torch.Tensor:
    return torch.quantile(torch.arange(4.0, device=d), torch.tensor([0.5, 1.5], device=d))


def _nanquantile_nan(d: Any) -> torch.Tensor:
    return torch.nanquantile(torch.arange(4.0, device=d), torch.tensor([float("nan")], device=d), dim=0)


@pytest.mark.parametrize(
    "make",
    [_one_hot_bounds, _one_hot_negative, _bag_offsets_not_from_zero, _bag_offsets_past_the_end,
     _bernoulli_above_one, _bernoulli_nan_in_place, _quantile_above_one, _nanquantile_nan],
)  # fmt: skip
def test_values_eager_rejects_raise_its_error_at_the_next_sync(make: Any, dev: torch.device) -> None:
    with pytest.raises(RuntimeError) as eager:
        make("cpu")
    first_words = " ".join(str(eager.value).split()[:4])
    out = make(dev)  # recorded without a wait
    with pytest.raises(RuntimeError, match=rf"{_line_of('return', make)}.*") as lazy:
        out.cpu()
    assert first_words.removeprefix("Expected ") in str(lazy.value)
    # One failure is one error: the next sync is clean, and the runtime carries on.
    assert (torch.ones(2, device=dev) * 2).cpu().tolist() == [2.0, 2.0]


def test_values_eager_accepts_still_run_as_one_program(dev: torch.device) -> None:
    idx, table = torch.tensor([0, 1, 2], device=dev), torch.arange(6.0, device=dev).view(3, 2)
    met.clear_all()
    hot = torch.nn.functional.one_hot(torch.tensor([2, 0], device=dev), 3)
    bags = torch.nn.functional.embedding_bag(idx, table, torch.tensor([0, 1], device=dev))
    drawn = torch.bernoulli(torch.tensor([0.0, 1.0], device=dev))
    quartiles = torch.quantile(torch.arange(5.0, device=dev), torch.tensor([0.25, 0.75], device=dev))
    xm.mark_step()
    assert (met.counter_value("ExecuteComputation") or 0) == 1  # the checks too: one program
    assert met.executed_fallback_ops() == []
    assert hot.cpu().tolist() == [[0, 0, 1], [1, 0, 0]]
    assert bags.cpu().tolist() == [[0.0, 1.0], [3.0, 4.0]]
    assert drawn.cpu().tolist() == [0.0, 1.0]
    assert quartiles.cpu().tolist() == [1.0, 3.0]


@pytest.mark.parametrize(
    "make", [lambda d: torch.tensor([0.0], device=d), lambda d: torch.empty(0, dtype=torch.long, device=d)]
)
def test_one_hot_checks_before_any_value_raise_at_the_call(make: Any, dev: torch.device) -> None:
    with pytest.raises(RuntimeError) as eager:
        torch.nn.functional.one_hot(make("cpu"))
    with pytest.raises(RuntimeError, match=str(eager.value)):
        torch.nn.functional.one_hot(make(dev))
