"""The compile cache: keyed on graph structure, shapes and dtypes, never on values."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met
from xlalab.runtime import events, graph

from .conftest import counter


def _step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + y).relu().sum(0)


def test_same_graph_new_values_hits_the_cache(dev: torch.device, fresh_metrics: None) -> None:
    for i in range(4):
        x = torch.full((5, 3), float(i), device=dev)
        y = torch.randn(5, 3).to(dev)
        out = _step(x, y)
        xlalab.mark_step()
        torch.testing.assert_close(out.cpu(), _step(x.cpu(), y.cpu()))
    assert counter("UncachedCompile") == 1
    assert counter("CachedCompile") == 3
    assert counter("MarkStep") == 4


def test_python_floats_are_inputs_not_constants(dev: torch.device, fresh_metrics: None) -> None:
    w = torch.ones(3, device=dev)
    xlalab.mark_step()
    met.clear_all()
    for lr in (0.1, 0.01, 0.003, 1e-4):
        w.sub_(w * lr)  # a changing learning rate must not recompile
        xlalab.mark_step()
    assert counter("UncachedCompile") == 1
    expect = torch.ones(3)
    for lr in (0.1, 0.01, 0.003, 1e-4):
        expect.sub_(expect * lr)
    torch.testing.assert_close(w.cpu(), expect)


def test_new_shape_recompiles(dev: torch.device, fresh_metrics: None) -> None:
    for n in (17, 19, 17):  # shapes no other test compiles: the cache lives for the process
        out = _step(torch.ones(n, 3, device=dev), torch.ones(n, 3, device=dev))
        xlalab.mark_step()
        assert out.shape == (3,)
    assert counter("UncachedCompile") == 2
    assert counter("CachedCompile") == 1


def test_aliasing_is_part_of_the_key(dev: torch.device) -> None:
    # a + a and a + b have the same node hashes modulo leaf identity: they must not share a program.
    a = torch.tensor([1.0, 2.0]).to(dev)
    b = torch.tensor([10.0, 20.0]).to(dev)
    m, n = a * 2, b * 2
    r1 = (m + n) + m
    assert r1.tolist() == [24.0, 48.0]
    m, n = a * 2, b * 2
    r2 = (m + n) + n
    assert r2.tolist() == [42.0, 84.0]


def test_linearize_orders_roots_deterministically(dev: torch.device) -> None:
    a = torch.ones(2, device=dev)
    b = a + 1
    c = b * 3
    g1 = graph.linearize([b._st.node, c._st.node])  # type: ignore[attr-defined]
    g2 = graph.linearize([b._st.node, c._st.node])  # type: ignore[attr-defined]
    assert g1.key == g2.key and len(g1.nodes) == len(g2.nodes)
    xlalab.mark_step()


def test_item_cuts_the_step_and_is_counted(dev: torch.device, fresh_metrics: None) -> None:
    x = torch.ones(4, device=dev)
    loss = (x * 3).sum()
    assert loss.item() == 12.0
    assert counter("aten::_local_scalar_dense") == 1
    assert counter("UncachedCompile") == 1


def test_dead_tensors_are_not_computed(dev: torch.device, fresh_metrics: None) -> None:
    _step(torch.ones(23, 3, device=dev), torch.ones(23, 3, device=dev))  # result dropped
    xlalab.mark_step()
    assert counter("UncachedCompile") == 0 and counter("ExecuteComputation") == 0


def test_matmul_precision_setting_is_part_of_the_key(dev: torch.device, fresh_metrics: None) -> None:
    a = torch.randn(5, 7).to(dev)
    b = torch.randn(7, 3).to(dev)
    before = torch.get_float32_matmul_precision()
    try:
        for precision in ("highest", "high", "highest"):
            torch.set_float32_matmul_precision(precision)
            out = a @ b
            xlalab.mark_step()
            assert out.shape == (5, 3)
    finally:
        torch.set_float32_matmul_precision(before)
    assert counter("UncachedCompile") == 2 and counter("CachedCompile") == 1


def test_the_in_memory_cache_is_bounded_least_recently_used_first(
    dev: torch.device, fresh_metrics: None
) -> None:
    from xlalab.runtime import config

    before = config.get("XLA_COMPILATION_CACHE_SIZE")
    config.set("XLA_COMPILATION_CACHE_SIZE", 2)
    graph.CACHE.clear()
    try:
        x = {n: torch.ones(n).to(dev) for n in (2, 3, 4)}  # data: one graph per size
        for n in (2, 3, 2, 4):  # 3 is the least recently used when 4 arrives
            (x[n] * 2).sum().item()
        assert len(graph.CACHE) == 2
        assert counter("CompileCacheEviction") == 1
        assert counter("UncachedCompile") == 3
        (x[2] * 2).sum().item()  # still cached
        assert counter("UncachedCompile") == 3
        (x[3] * 2).sum().item()  # evicted: compiles again, with the same result
        assert counter("UncachedCompile") == 4
        assert "CompileCacheEviction" in met.metrics_report()
    finally:
        config.set("XLA_COMPILATION_CACHE_SIZE", before)



def test_programs_are_dropped_before_the_process_reaches_its_memory_map_limit(
    dev: torch.device, fresh_metrics: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each XLA:CPU kernel holds memory maps; past vm.max_map_count XLA's LLVM cannot allocate and
    # the process crashes. Here the limit is made to sit a few hundred maps above what the
    # process holds, and a program that changes shape every step compiles again and again.
    from xlalab.runtime import compile_cache

    now = compile_cache.maps_in_use()
    if now is None:  # no /proc (macOS, Windows): no map count to keep down, and nothing is dropped
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile_cache.make_room_for_maps()
            (torch.arange(3.0, device=dev) * 2).sum().item()
        assert counter("CompileCacheEviction") == 0
        return
    limit = now + 1000
    monkeypatch.setattr(compile_cache, "map_limit", lambda: limit)
    monkeypatch.setattr(compile_cache, "MAPS_HIGH", (now + 60) / limit)
    monkeypatch.setattr(compile_cache, "MAPS_LOW", (now + 30) / limit)
    monkeypatch.setattr(compile_cache, "_warned", [False])
    peak = 0
    with pytest.warns(UserWarning, match=r"vm\.max_map_count") as caught:
        for n in range(1, 41):
            x = torch.arange(n, dtype=torch.float32, device=dev)
            out = ((x * 2).sin() @ x.exp() + x.cos().sum()).item()
            peak = max(peak, compile_cache.maps_in_use() or 0)
            expect = ((torch.arange(n, dtype=torch.float32) * 2).sin() @ torch.arange(n).float().exp())
            assert out == pytest.approx(float(expect + torch.arange(n).float().cos().sum()), rel=1e-5)
    assert len([w for w in caught if "vm.max_map_count" in str(w.message)]) == 1  # warned once
    assert counter("UncachedCompile") == 40
    assert counter("CompileCacheEviction") > 0
    assert peak < now + 100  # the high-water mark and one program's maps: never near the limit
    x = torch.arange(1, dtype=torch.float32, device=dev)  # the first program: dropped, compiles again
    assert ((x * 2).sin() @ x.exp() + x.cos().sum()).item() == pytest.approx(1.0)
    assert counter("UncachedCompile") == 41

_SECOND_RUN = """
import torch
import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met
from xlalab.runtime import compile_cache, graph
compile_cache.configure({path!r}, min_compile_seconds=0)
traced = []
build = graph.build_function
graph.build_function = lambda g: traced.append(1) or build(g)
x = torch.arange(12.0, device=xm.xla_device()).reshape(3, 4)
print((x @ x.t()).relu().sum().item(), met.counter_value("PersistentCacheHit") or 0, len(traced))
"""


def _runs(code: str, n: int, env: dict[str, str] | None = None) -> list[list[str]]:
    import os
    import subprocess
    import sys

    env = {**os.environ, **(env or {})}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
            for _ in range(n)]  # fmt: skip
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    return [[*r.stdout.split(), r.stderr] for r in runs]


def test_a_second_run_finds_its_programs_in_the_persistent_cache(tmp_path: Path) -> None:
    code = _SECOND_RUN.format(path=str(tmp_path))
    (value1, hits1, traced1, _), (value2, hits2, traced2, _) = _runs(code, 2)
    assert value1 == value2 == "1134.0"
    assert int(hits2) > int(hits1)  # the program the first run compiled was read back
    # ... without tracing the graph again: xlalab keeps the executable by the graph's structure.
    assert (traced1, traced2) == ("1", "0")
    assert len(list((tmp_path / "xlalab-programs").glob("*.program"))) == 1


def test_a_stored_program_is_used_only_for_its_own_graph(tmp_path: Path) -> None:
    code = _SECOND_RUN.format(path=str(tmp_path))
    _runs(code, 1)
    (graph_text,) = (tmp_path / "xlalab-programs").glob("*.graph")
    text = graph_text.read_text()
    graph_text.write_text(text + "\nanother graph with the same digest")
    ((value, _, traced, _),) = _runs(code, 1)
    assert (value, traced) == ("1134.0", "1")  # not loaded: traced and compiled afresh
    # A damaged program file warns once and the program goes on.
    graph_text.write_text(text)
    (program,) = (tmp_path / "xlalab-programs").glob("*.program")
    program.write_bytes(b"not a program")
    ((value, _, traced, stderr),) = _runs(code, 1)
    assert (value, traced) == ("1134.0", "1")
    assert "XLA_PERSISTENT_CACHE_PATH" in stderr


def test_an_executable_read_from_jaxs_cache_is_not_stored_again(tmp_path: Path) -> None:
    """Serialized again, an executable JAX loaded from its cache can lack its kernels (XLA:CPU):
    the store keeps only what XLA compiled in the process."""
    code = _SECOND_RUN.format(path=str(tmp_path))
    _runs(code, 1)
    store = tmp_path / "xlalab-programs"
    for f in store.iterdir():
        f.unlink()
    ((value, _, traced, _),) = _runs(code, 1)  # JAX's cache gives the executable
    assert (value, traced) == ("1134.0", "1")
    assert not list(store.glob("*.program"))



def test_a_process_with_several_devices_compiles_without_the_store(tmp_path: Path) -> None:
    """JAX's deserializer binds an executable to every device of the process: with several, the
    program store stands aside (JAX's own cache still serves) and every device computes right."""
    code = _SECOND_RUN.format(path=str(tmp_path)).replace("xm.xla_device()", "xm.xla_device(2)")
    (first, second) = _runs(code, 2, {"XLA_NUM_DEVICES": "4"})
    assert first[0] == second[0] == "1134.0"
    assert int(second[1]) > 0  # JAX's cache
    assert not (tmp_path / "xlalab-programs").exists()


def test_trimming_the_store_skips_programs_another_process_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xlalab.runtime import program_store

    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.program").write_bytes(b"x" * 10)
        (tmp_path / f"{name}.graph").write_text(name)
    listed = list(tmp_path.glob("*.program"))
    (tmp_path / "b.program").unlink()  # another rank trimmed it after this one listed the folder
    monkeypatch.setattr(Path, "glob", lambda self, pattern: iter(listed))
    monkeypatch.setattr(program_store, "STORE_LIMIT_BYTES", 15)
    program_store._trim(tmp_path)
    assert [p.suffix for p in tmp_path.iterdir()].count(".program") == 1  # 20 bytes were over 15


def test_a_read_keeps_the_values_its_graph_computed_on_the_way(
    dev: torch.device, fresh_metrics: None
) -> None:
    """A loop that reads a value each iteration with no step barrier (transformers' generate
    checking its stopping criteria per token): each read's graph computes the loop's state on
    its way, and keeps it. Left pending, the state was computed again by every later read, whose
    graph grew by one iteration each time (and compiled anew)."""
    state, eager = torch.zeros(4, device=dev), torch.zeros(4)
    sizes: list[int] = []

    def on_compile(ev: Any) -> None:
        if isinstance(ev, events.CompileEvent) and not ev.cached:
            sizes.append(ev.num_nodes)

    unsubscribe = events.subscribe(on_compile)
    try:
        for _ in range(6):
            state, eager = state * 2 + 1, eager * 2 + 1
            assert state.sum().item() == eager.sum().item()
    finally:
        unsubscribe()
    # The first graph (its state a constant), then one graph for every later iteration.
    assert counter("UncachedCompile") == len(sizes) <= 2 and max(sizes) <= 5, sizes
    assert torch.equal(state.cpu(), eager)
