"""torch_xla.debug.profiler on JAX's profiler: a traced run's files hold the user's regions
and XLA's executions, in the formats TensorBoard (XPlane) and Perfetto (trace JSON) open."""

from __future__ import annotations

import gzip
import inspect
import json
from pathlib import Path

import pytest
import torch

import xlalab.core.xla_model as xm
import xlalab.debug.profiler as xp
from xlalab.runtime import events

from .conftest import counter


@xp.trace_me("loss_fn")
def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).pow(2).mean()


def _events(run: Path) -> list[dict[str, object]]:
    data = json.loads(gzip.open(run / "perfetto_trace.json.gz").read())
    return list(data["traceEvents"] if isinstance(data, dict) else data)


def test_trace_of_three_steps_holds_user_regions_and_xla_executions(
    dev: torch.device, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 8).to(dev)
    xp.start_trace(tmp_path)
    marks = counter("MarkStep")
    for step in range(3):
        with xp.StepTrace("train_step", step_num=step):
            with xp.Trace("forward_region"):
                loss = _loss(model, x)
            loss.backward()
            opt.step()
            opt.zero_grad()
    xp.stop_trace()
    assert counter("MarkStep") == marks + 3  # StepTrace ended each step with the barrier
    runs = list((tmp_path / "plugins" / "profile").iterdir())
    assert len(runs) == 1
    assert list(runs[0].glob("*.xplane.pb")), "no XPlane file for TensorBoard"
    names = [str(e.get("name")) for e in _events(runs[0])]
    assert (
        names.count("train_step") == 3 and names.count("forward_region") == 3 and names.count("loss_fn") == 3
    )
    # XLA's side: each step's compiled graph ran (jit(run) is xlalab's graph function).
    assert sum(1 for n in names if n.startswith("PjitFunction(jit(run")) >= 3
    xplane = next(runs[0].glob("*.xplane.pb")).read_bytes()
    assert b"forward_region" in xplane and b"train_step" in xplane


def test_step_trace_does_not_mark_twice(dev: torch.device, tmp_path: Path) -> None:
    before = counter("MarkStep")
    with xp.StepTrace("step", step_num=0):
        (torch.ones(2, device=dev) * 2).sum()
        xm.mark_step()
    assert counter("MarkStep") == before + 1


def test_trace_capture_from_own_server_and_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no trace is running"):
        xp.stop_trace()
    with pytest.raises(RuntimeError, match="no server runs here"):
        xp.trace("localhost:9999", str(tmp_path))
    from xlalab.utils.utils import get_free_tcp_ports

    port = get_free_tcp_ports(1)[0]
    xp.start_server(port)
    thread = xp.trace_detached(f"localhost:{port}", str(tmp_path / "cap"), duration_ms=300)
    with xp.Trace("while_capturing"):
        (torch.ones(3, device=torch.device("xla", 0)) + 1).cpu()
    thread.join(timeout=60)
    assert list((tmp_path / "cap" / "plugins" / "profile").glob("*/*.xplane.pb"))
    with pytest.raises(RuntimeError, match=f"runs on port {port}"):
        xp.trace("localhost:1", str(tmp_path))


def test_regions_are_published_as_they_start_and_end(dev: torch.device) -> None:
    # What the lab's timeline draws: each region's start and end, with its name, nesting and step.
    seen: list[events.RegionEvent] = []
    unsubscribe = events.subscribe(lambda e: seen.append(e) if isinstance(e, events.RegionEvent) else None)
    model = torch.nn.Linear(8, 4).to(dev)
    x = torch.randn(4, 8).to(dev)
    top = inspect.currentframe().f_lineno  # type: ignore[union-attr]
    try:
        with xp.StepTrace("train_step", step_num=7):
            with xp.Trace("forward_region"):
                _loss(model, x).backward()
    finally:
        unsubscribe()
    order = [(e.name, e.phase, e.depth) for e in seen]
    assert order == [
        ("train_step", "start", 0),
        ("forward_region", "start", 1),
        ("loss_fn", "start", 2),
        ("loss_fn", "end", 2),
        ("forward_region", "end", 1),
        ("train_step", "end", 0),
    ]
    by_name = {e.name: [x for x in seen if x.name == e.name] for e in seen}
    for name, (start, end) in by_name.items():
        assert start.region == end.region and end.seconds >= 0 and start.seconds == 0, name
    assert len({e.region for e in seen}) == 3
    assert {e.step for e in seen if e.name == "train_step"} == {7}
    assert all(e.step is None for e in seen if e.name != "train_step")
    # The step region spans its barrier, which StepTrace runs at its end.
    assert by_name["train_step"][1].seconds >= by_name["forward_region"][1].seconds
    # Each region points at the user's line that opened it.
    here = Path(__file__).name
    assert seen[0].frames[0].file.endswith(here) and seen[0].frames[0].line == top + 2
    assert seen[1].frames[0].line == top + 3
    assert seen[2].frames[0].function == "test_regions_are_published_as_they_start_and_end"
