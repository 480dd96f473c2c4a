"""The runtime publishes compile, execute, sync, fallback and transfer events, with the user's frames."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import xlalab
from xlalab.runtime import events


@pytest.fixture
def seen() -> Iterator[list[events.Event]]:
    got: list[events.Event] = []
    unsubscribe = events.subscribe(got.append)
    yield got
    unsubscribe()


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if marker in line)


def test_a_step_publishes_compile_execute_and_sync(dev: torch.device, seen: list[events.Event]) -> None:
    x = torch.ones(11, 13, device=dev)
    y = (x * 2).sum(1)
    xlalab.mark_step()  # STEP-BARRIER
    assert y.shape == (11,)
    kinds = [e.kind for e in seen]
    assert "compile" in kinds and "execute" in kinds and "sync" in kinds
    compile_ev = next(e for e in seen if isinstance(e, events.CompileEvent))
    execute_ev = next(e for e in seen if isinstance(e, events.ExecuteEvent))
    sync_ev = next(e for e in seen if isinstance(e, events.SyncEvent))
    assert compile_ev.graph_hash == execute_ev.graph_hash == sync_ev.graph_hash
    assert compile_ev.num_nodes >= 3 and compile_ev.seconds > 0
    assert sync_ev.reason == "mark_step" and sync_ev.num_tensors >= 1
    assert compile_ev.frames[0].file == __file__
    assert compile_ev.frames[0].line == _line_of("STEP-BARRIER")


def test_item_is_a_sync_with_its_reason_and_a_transfer(dev: torch.device, seen: list[events.Event]) -> None:
    x = torch.arange(6.0, device=dev)
    value = (x * x).sum().item()  # ITEM-CALL
    assert value == 55.0
    sync_ev = next(e for e in seen if isinstance(e, events.SyncEvent))
    assert sync_ev.reason == "item"
    transfer = [e for e in seen if isinstance(e, events.TransferEvent) and e.direction == "from_device"]
    assert transfer and transfer[0].nbytes == 4 and transfer[0].frames[0].line == _line_of("ITEM-CALL")


def test_cached_compiles_say_so(dev: torch.device, seen: list[events.Event]) -> None:
    for _ in range(2):
        out = torch.ones(3, 29, device=dev) + 1
        xlalab.mark_step()
    compiles = [e for e in seen if isinstance(e, events.CompileEvent)]
    assert [e.cached for e in compiles] == [False, True]
    assert out.shape == (3, 29)


def test_nobody_listening_costs_nothing_observable(dev: torch.device) -> None:
    assert not events.listening()


def test_a_compile_is_announced_before_it_starts(dev: torch.device, seen: list[events.Event]) -> None:
    for _ in range(2):
        out = torch.ones(5, 31, device=dev) - 1
        xlalab.mark_step()
    kinds = [e.kind for e in seen if e.kind in ("compile_start", "compile")]
    assert kinds == ["compile_start", "compile", "compile"]  # the cache hit starts no compile
    start = next(e for e in seen if isinstance(e, events.CompileStartEvent))
    done = next(e for e in seen if isinstance(e, events.CompileEvent))
    assert (start.graph_hash, start.num_nodes, start.device) == (done.graph_hash, done.num_nodes, done.device)
    assert out.shape == (5, 31)


def test_a_failed_compile_is_announced_too(dev: torch.device, seen: list[events.Event]) -> None:
    from torch.ops import aten

    from xlalab.runtime import graph
    from xlalab.runtime.lowering.registry import LOWERINGS

    original = LOWERINGS[aten.relu.default]

    def broken(x):  # type: ignore[no-untyped-def]
        raise ValueError("deliberately broken lowering")

    LOWERINGS[aten.relu.default] = broken
    try:
        y = (torch.ones(3, 37, device=dev) * 2).relu()  # a shape no other test compiles
        with pytest.raises(graph.LoweringError):
            y.cpu()
    finally:
        LOWERINGS[aten.relu.default] = original
        xlalab.runtime.storage._pending.clear()
    kinds = [e.kind for e in seen if e.kind.startswith("compile")]
    assert kinds == ["compile_start", "compile_error"]
    err = next(e for e in seen if isinstance(e, events.CompileErrorEvent))
    assert "deliberately broken lowering" in err.error and err.num_nodes >= 3
