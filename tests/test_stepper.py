"""Step-through mode: stepping a pending graph gives the fused results and eager's, finds where
numbers diverge, and leaves the user's program (pending IR, compiles, caches) untouched.

Each test uses shapes no other test uses, so the fused program it checks is a fresh compile.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.debug.stepper import NothingPendingError, StepError, Stepper, step
from xlalab.runtime import backend, config, events
from xlalab.runtime import graph as rgraph
from xlalab.runtime.storage import pending_storages

from .conftest import counter

USER_COUNTERS = ("UncachedCompile", "CachedCompile", "ExecuteComputation")


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    """Nothing pending from other tests; settings restored."""
    saved = {name: config.get(name) for name in ("XLA_IR_DEBUG", "XLA_USE_BF16")}
    xlalab.mark_step()
    yield
    for name, v in saved.items():
        config.set(name, v)
    xlalab.mark_step()


def _mlp(in_f: int, hidden: int, out_f: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(in_f, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, out_f))


def _forward_loss(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(x)
    return logits, torch.nn.functional.cross_entropy(logits, y)


def _batch(n: int, in_f: int, out_f: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, in_f, generator=g), torch.randint(0, out_f, (n,), generator=g)


def _mlp_on(dev: torch.device, shape: tuple[int, int, int, int]) -> tuple[Any, ...]:
    """(lazy logits, lazy loss, eager logits, eager loss) of one small MLP forward + loss."""
    n, in_f, hidden, out_f = shape
    x, y = _batch(n, in_f, out_f)
    model = _mlp(in_f, hidden, out_f)
    eager = _forward_loss(model, x, y)
    lazy_model = _mlp(in_f, hidden, out_f).to(dev)
    lazy = _forward_loss(lazy_model, x.to(dev), y.to(dev))
    return (*lazy, *(t.detach() for t in eager))


# --------------------------------------------------------------------------- differential


def test_stepped_mlp_equals_fused_and_eager(dev: torch.device) -> None:
    logits, loss, eager_logits, eager_loss = _mlp_on(dev, (5, 7, 9, 3))
    s = step(logits, loss)
    assert s.cursor == 0 and s.last is None  # nothing runs at construction
    assert s.run_to_end() is not None and s.finished
    stepped_logits, stepped_loss = s.results()
    xlalab.mark_step()
    fused_logits, fused_loss = logits.detach().cpu(), loss.detach().cpu()
    torch.testing.assert_close(stepped_logits, fused_logits, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stepped_loss, fused_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stepped_logits, eager_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stepped_loss, eager_loss, rtol=1e-5, atol=1e-6)


def test_compare_with_eager_float32_is_close(dev: torch.device) -> None:
    _, loss, *_ = _mlp_on(dev, (4, 6, 10, 3))
    s = step(loss)
    s.run_to_end()
    compared = [s.compare_with_eager(k) for k in range(len(s))]
    ops = [c for c in compared if c.comparable]
    assert {c.node.op for c in ops} >= {"aten::addmm", "aten::relu", "aten::_log_softmax"}
    for c in ops:
        assert c.rel_diff < 1e-5, str(c)
    inputs = [c for c in compared if c.node.kind == "data"]
    assert inputs and all(not c.comparable and "input" in c.reason for c in inputs)
    assert "max abs diff" in str(ops[0])
    assert s.divergence() is None


def test_bf16_divergence_finds_the_rounding_op(dev: torch.device) -> None:
    backend._warned.clear()
    config.set("XLA_USE_BF16", True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", backend.PrecisionWarning)
            ones = torch.ones(8, 5).to(dev)
            nudged = ones + 1 / 1024  # exact in float32, rounds back to 1.0 in bfloat16
            total = (nudged * 3).sum()
            s = step(total)
            c = s.divergence()
            assert c is not None and c.node.op == "aten::add", s.listing()
            assert c.max_abs_diff == pytest.approx(1 / 1024)
            assert s.cursor == c.node.row + 1  # stops right after the divergent row
            assert s.value(c.node.row).dtype == torch.float32  # the torch dtype, not bf16

            _, loss, *_ = _mlp_on(dev, (3, 6, 11, 4))
            mlp = step(loss).divergence()
            assert mlp is not None and mlp.node.op in ("aten::addmm", "aten::mm"), str(mlp)
            assert mlp.rel_diff > 1e-3
    finally:
        config.set("XLA_USE_BF16", False)
        backend._warned.clear()


# --------------------------------------------------------------------------- moving


def test_next_run_to_by_index_op_name_and_predicate(dev: torch.device) -> None:
    _, loss, *_ = _mlp_on(dev, (2, 5, 12, 3))
    s = step(loss)
    first = s.current
    assert first is not None and first.row == 0 and not first.computed
    assert s.next().row == 0 and s.cursor == 1 and s.node(0).computed
    assert s.step(2).row == 2
    assert s.run_to(4).row == 4 and s.cursor == 5  # a row number, as the IR text numbers it
    first = s.run_to("aten::addmm")
    relu = s.run_to("aten::relu")
    assert relu.op == "aten::relu" and relu.computed and s.cursor == relu.row + 1
    second = s.run_to("addmm")  # short names match; the search starts at the cursor
    assert second.op == "aten::addmm" and second.row > relu.row > first.row
    k = s.cursor
    assert s.run_to(f"%{k}").computed and s.cursor == k + 1
    assert s.run_to(0).row == 0  # already run: nothing changes
    before = s.cursor
    with pytest.raises(LookupError, match="nothing ran"):
        s.run_to("aten::no_such_op")
    assert s.cursor == before
    view = s.run_to(lambda v: v.kind == "op" and v.shape.startswith("(") and v.op.startswith("aten::nll"))
    assert view.op == "aten::nll_loss_forward" and len(view.operand_rows) == 2
    assert s.preview(f"%{view.row}.0").startswith("f32[]")
    s.run_to_end()
    with pytest.raises(StopIteration):
        s.next()


def test_run_to_source_line(dev: torch.device) -> None:
    config.set("XLA_IR_DEBUG", True)
    a = torch.arange(6.0).reshape(2, 3).to(dev)
    b = a * 2
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    c = torch.tanh(b) - 1
    s = step(c)
    view = s.run_to(f"{os.path.basename(__file__)}:{line}")
    assert view.op == "aten::tanh" and view.location is not None and view.location.endswith(f":{line}")
    assert s.run_to(f":{line}").op == "aten::sub"
    assert f"at test_run_to_source_line@test_stepper.py:{line}" in repr(s)


def test_values_and_previews(dev: torch.device) -> None:
    x = torch.tensor([[-1.5, 2.0, 0.25], [3.0, -4.0, 0.5]]).to(dev)
    positive = x > 0
    best = x.argmax()
    total = x.sum()
    log = torch.log(x)  # NaN for the negatives
    s = step(positive, best, total, log)
    s.run_to_end()
    got_positive, got_best, got_total, got_log = s.results()
    assert got_positive.tolist() == [[False, True, True], [True, False, True]]
    assert int(got_best) == 3 and float(got_total) == pytest.approx(0.25)
    rows = {s.node(k).op: k for k in range(len(s))}
    assert s.preview(rows["aten::gt"]).startswith("pred[2,3] true=4/6 [F, T, T, T, F, T]")
    assert s.preview(rows["aten::argmax"]) == "s64[] 3"
    assert s.preview(rows["aten::sum"]) == "f32[] 0.25"
    assert "nan=2" in s.preview(rows["aten::log"])
    assert torch.isnan(got_log).sum() == 2
    assert "nan" not in str(s.compare_with_eager(rows["aten::log"]).max_abs_diff)  # NaN == NaN
    assert s.compare_with_eager(rows["aten::log"]).max_abs_diff == 0


def test_not_comparable_nodes(dev: torch.device) -> None:
    base = torch.zeros(3, 4).to(dev)
    base[1].add_(2.5)  # a write through a view: xla::update_view
    noise = torch.rand(3, 4, device=dev)
    s = step(base + 0.5, noise)
    s.run_to_end()
    by_op = {s.node(k).op: s.compare_with_eager(k) for k in range(len(s))}
    assert by_op["xla::update_view"].comparable and by_op["xla::update_view"].max_abs_diff == 0
    random = [c for op, c in by_op.items() if op.startswith("aten::uniform")]
    assert random and "random op" in random[0].reason
    scalar = next(c for c in by_op.values() if c.node.kind == "scalar")
    assert "not comparable: a scalar input" in str(scalar)


# --------------------------------------------------------------------------- bad input


def test_errors_for_bad_input(dev: torch.device) -> None:
    with pytest.raises(TypeError, match="tensor 0 is on cpu"):
        step(torch.ones(2))
    with pytest.raises(ValueError, match="at least one xla tensor"):
        step()
    with pytest.raises(TypeError, match="takes xla tensors"):
        Stepper("not a tensor")  # type: ignore[arg-type]
    done = torch.ones(3).to(dev) * 2
    xlalab.mark_step()
    with pytest.raises(NothingPendingError, match="nothing to step"):
        step(done)
    s = step(done + 1)
    with pytest.raises(ValueError, match="nothing has run yet"):
        s.value()
    with pytest.raises(ValueError, match="has not run yet"):
        s.value(len(s) - 1)
    with pytest.raises(IndexError, match="no row %99"):
        s.run_to(99)
    with pytest.raises(ValueError, match="names no row"):
        s.value("%x")


def test_a_failing_node_names_its_row(dev: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    s = step(torch.ones(2, 13).to(dev).exp())

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(rgraph, "node_executable", broken)
    with pytest.raises(StepError, match=r"%1 aten::exp failed: RuntimeError: boom"):
        s.run_to_end()
    assert s.cursor == 1  # the input ran; the failed row did not


# --------------------------------------------------------------------------- changes nothing


def test_stepping_changes_nothing_about_the_program(dev: torch.device) -> None:
    logits, loss, *_ = _mlp_on(dev, (3, 8, 13, 2))
    storages = [t._st for t in (logits, loss)]  # type: ignore[attr-defined]
    nodes = [st.node for st in storages]
    pending = len(pending_storages())
    op_cache, cache = len(rgraph._OP_CACHE), len(rgraph.CACHE)
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)
    met.clear_all()
    try:
        s = step(logits, loss)
        s.run_to_end()
        s.divergence()
        stepped = s.results()
        s.preview(len(s) - 1)
    finally:
        unsubscribe()
    assert [counter(n) for n in USER_COUNTERS] == [0, 0, 0]
    assert counter("xlalab::StepCompile") > 0 and counter("xlalab::StepExecute") >= counter(
        "xlalab::StepCompile"
    )
    assert met.metric_data("CompileTime") is None
    assert seen == []  # no compile, execute, sync or transfer events
    assert [st.node for st in storages] == nodes and len(pending_storages()) == pending
    assert (len(rgraph._OP_CACHE), len(rgraph.CACHE)) == (op_cache, cache)

    xlalab.mark_step()  # compiles exactly as it would have without stepping: one fresh program
    assert [counter(n) for n in USER_COUNTERS] == [1, 0, 1]
    assert len(rgraph.CACHE) == cache + 1
    torch.testing.assert_close(stepped[0], logits.detach().cpu(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stepped[1], loss.detach().cpu(), rtol=1e-6, atol=1e-6)


def test_step_compiles_are_cached_by_signature(dev: torch.device) -> None:
    x = torch.ones(3, 14).to(dev)
    chain = ((x + 1) + 1) + 1  # three nodes, one signature
    met.clear_all()
    step(chain).run_to_end()
    first = counter("xlalab::StepCompile")
    assert first <= 1 and counter("xlalab::StepExecute") == 3
    step(chain).run_to_end()
    assert counter("xlalab::StepCompile") == first


# --------------------------------------------------------------------------- large graphs


def test_ten_thousand_nodes(dev: torch.device) -> None:
    x = torch.zeros(4).to(dev)
    for _ in range(10_000):
        x = x + 1
    s = step(x)
    assert len(s) == 10_001
    listing = s.listing()
    assert listing.count("\n") < 12 and "row(s) below" in listing
    compiled = counter("xlalab::StepCompile")
    s.run_to_end()
    assert s.results()[0].tolist() == [10_000.0] * 4
    assert "-> (end" in repr(s) and "row(s) above" in repr(s)
    # 10,000 like ops run one program, compiled once: no program grows with the graph.
    assert counter("xlalab::StepCompile") - compiled <= 1
    del x  # never fused: a 10k-node program would take the next barrier a long time to compile


# --------------------------------------------------------------------------- frontends


def _find(widget: Any, kind: str, description: str | None = None) -> list[Any]:
    out = []
    if type(widget).__name__ == kind and (description is None or widget.description == description):
        out.append(widget)
    for child in getattr(widget, "children", ()):
        out.extend(_find(child, kind, description))
    return out


def test_widget_buttons_step_and_compare(dev: torch.device) -> None:
    pytest.importorskip("ipywidgets")
    from xlalab.lab.step_widget import stepper_widget

    config.set("XLA_IR_DEBUG", True)
    a = torch.arange(4.0).to(dev)
    b = (lambda t: t.sin())(a) * 2
    w = stepper_widget(b)
    label = _find(w, "HTML")[0]
    assert "next: %0 = f32[4] xla::device_data()" in label.value
    _find(w, "Button", "Next")[0].click()
    assert "next: %1 = f32[4] aten::sin(%0)" in label.value
    assert "&lt;lambda&gt;@test_stepper.py" in label.value and "<lambda>" not in label.value
    text = _find(w, "Text")[0]
    text.value = "aten::mul"
    _find(w, "Button", "Run to node")[0].click()
    assert "finished" in label.value
    _find(w, "Button", "Compare with eager")[0].click()
    html = "".join(h.value for h in _find(w, "HTML"))
    assert "max abs diff 0" in html and "aten::mul" in html
    assert _find(w, "Button", "Next")[0].disabled


def test_widget_reports_errors_in_its_status_line(dev: torch.device) -> None:
    pytest.importorskip("ipywidgets")
    from xlalab.lab.step_widget import stepper_panel

    panel = stepper_panel(step(torch.ones(2, 15).to(dev).neg()))
    panel.target.value = "aten::nope"
    panel.run_to_button.click()
    assert "LookupError" in panel.status.value and panel.stepper.cursor == 0


def test_widget_without_ipywidgets_says_what_to_install(
    dev: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xlalab.lab import step_widget

    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    with pytest.raises(ImportError, match="pip install ipywidgets"):
        step_widget.stepper_widget(torch.ones(2).to(dev) + 1)


def test_stepper_text(dev: torch.device) -> None:
    from xlalab.lab.step_widget import stepper_text

    s = step(torch.ones(2, 16).to(dev).cos())
    assert stepper_text(s).startswith("next: %0 = f32[2,16] xla::device_data()")
    s.next()
    text = stepper_text(s)
    assert "last: %0" in text and "inputs:\n  %0 = f32[2,16] min=1 max=1 mean=1" in text
    s.run_to_end()
    assert stepper_text(s).startswith("finished: all 2 rows have run")
