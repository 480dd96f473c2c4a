"""torch_xla's public API over xlalab, each name doing what torch_xla's documentation says.

The 4-replica collectives and the .pth hook run in subprocesses started together at module
start (each interpreter costs seconds); the rest runs here on one device.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import site
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import xlalab.core.torch_xla_api as torch_xla
import xlalab.core.xla_model as xm
import xlalab.core.xr as xr
import xlalab.utils.serialization as xser
import xlalab.utils.utils as xu
from xlalab import amp
from xlalab.runtime.storage import pending_storages

from .conftest import counter

ROOT = Path(__file__).resolve().parents[1]

COLLECTIVES = textwrap.dedent(
    """
    import json
    import torch
    import xlalab.core.xla_model as xm
    import xlalab.core.torch_xla_api as torch_xla
    from xlalab.runtime import replicated

    def fn(index, results):
        dev = xm.xla_device()
        r = xm.get_ordinal()
        x = (torch.arange(4.0).view(2, 2) + 10 * r).to(dev)
        out = dict(
            gather=xm.all_gather(x, dim=0),
            gather1=xm.all_gather(x, dim=1),
            rs_sum=xm.reduce_scatter(xm.REDUCE_SUM, (torch.arange(8.0) + r).to(dev), 1.0, 0, 4),
            rs_max=xm.reduce_scatter(xm.REDUCE_MAX, (torch.arange(8.0) * (r + 1)).to(dev), 0.5, 0, 4),
            a2a=xm.all_to_all((torch.arange(4.0) + 10 * r).to(dev), 0, 0, 4),
            perm=xm.collective_permute(torch.full((2,), float(r)).to(dev), [[0, 1], [1, 2], [2, 3], [3, 0]]),
        )
        b = [torch.full((3,), float(r + 1)).to(dev)]
        xm.collective_broadcast(b, root_ordinal=2)
        out["bcast"] = b[0]
        model = torch.nn.Linear(2, 2).to(dev)
        with torch.no_grad():
            model.weight.fill_(float(r))
        xm.broadcast_master_param(model)
        out["master_param"] = model.weight
        xm.mark_step()
        results[index] = {k: v.cpu().tolist() for k, v in out.items()}

    results = {}
    torch_xla.launch(fn, args=(results,))
    kinds = ["all-gather", "reduce-scatter", "all-to-all", "collective-permute", "all-reduce"]
    hlo = "".join(p.hlo() for p in replicated.programs())
    print(json.dumps({"results": results, "in_hlo": [k for k in kinds if k in hlo]}))
    """
)

UNCHANGED_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    assert "xlalab" not in sys.modules  # nothing imported xlalab before the script's first line
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    x = torch.ones(2, device=torch_xla.device()) * 3
    torch_xla.sync()
    print(torch_xla.__name__, xm.__name__, xr.device_type(), x.cpu().tolist())
    """
)


def _hook_site(tmp: Path) -> dict[str, str]:
    """A user site-packages holding the wheel's two hook files, as pip installs them."""
    env = {k: v for k, v in os.environ.items() if k != "XLALAB_TORCH_XLA"}
    env["PYTHONUSERBASE"] = str(tmp)
    out = subprocess.run(
        [sys.executable, "-c", "import site; print(site.getusersitepackages())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    target = Path(out.stdout.strip())
    target.mkdir(parents=True)
    for name in ("xlalab_torch_xla.pth", "_xlalab_torch_xla.py"):
        (target / name).write_text((ROOT / "xlalab" / "_hook" / name).read_text())
    return env


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    if not site.ENABLE_USER_SITE:
        pytest.fail("the .pth test needs the user site-packages (python -s or PYTHONNOUSERSITE is set)")
    tmp = tmp_path_factory.mktemp("hook")
    env = _hook_site(tmp / "userbase")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # A fake real torch_xla, found on sys.path ahead of the hook.
    real = tmp / "real"
    (real / "torch_xla").mkdir(parents=True)
    (real / "torch_xla" / "__init__.py").write_text("REAL = True\n")
    started = {
        "collectives": _run(COLLECTIVES, {**env, "XLA_NUM_DEVICES": "4"}, tmp),
        "hook_on": _run(UNCHANGED_SCRIPT, {**env, "XLALAB_TORCH_XLA": "1"}, tmp),
        "hook_off": _run("import torch_xla", env, tmp),
        "hook_after_xlalab": _run(
            "import sys, xlalab, torch_xla\n"
            "print(torch_xla.__version__, [type(f).__name__ for f in sys.meta_path])",
            {**env, "XLALAB_TORCH_XLA": "1"},
            tmp,
        ),
        "hook_real": _run(
            "import sys, torch_xla; print(torch_xla.REAL, 'xlalab' in sys.modules)",
            {**env, "XLALAB_TORCH_XLA": "1", "PYTHONPATH": f"{real}{os.pathsep}{env['PYTHONPATH']}"},
            tmp,
        ),
        "hook_bad": _run("import torch_xla", {**env, "XLALAB_TORCH_XLA": "maybe"}, tmp),
    }
    yield started
    for p in started.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def _out(p: subprocess.Popen[str], ok: bool = True) -> tuple[str, str]:
    out, err = p.communicate(timeout=300)
    if ok:
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err}"
    return out, err


# --------------------------------------------------------------------------- the .pth hook


def test_unchanged_script_imports_torch_xla_under_the_env_switch(
    procs: dict[str, subprocess.Popen[str]],
) -> None:
    out, _ = _out(procs["hook_on"])
    assert out.split() == ["torch_xla", "xlalab.core.xla_model", "CPU", "[3.0,", "3.0]"]


def test_hook_and_import_xlalab_first_agree(procs: dict[str, subprocess.Popen[str]]) -> None:
    out, _ = _out(procs["hook_after_xlalab"])
    version, finders = out.split(" ", 1)
    assert version == "0.1.0+xlalab"
    assert "_Finder" in finders and "DeferredTorchXlaNames" not in finders  # one finder serves the names


def test_hook_does_nothing_without_the_switch(procs: dict[str, subprocess.Popen[str]]) -> None:
    _, err = _out(procs["hook_off"], ok=False)
    assert procs["hook_off"].returncode == 1
    assert "ModuleNotFoundError: No module named 'torch_xla'" in err


def test_hook_never_shadows_a_real_torch_xla(procs: dict[str, subprocess.Popen[str]]) -> None:
    out, _ = _out(procs["hook_real"])
    assert out.split() == ["True", "False"]  # the real one, and xlalab never loaded


def test_hook_rejects_a_bad_switch_value(procs: dict[str, subprocess.Popen[str]]) -> None:
    _, err = _out(procs["hook_bad"], ok=False)
    assert "XLALAB_TORCH_XLA='maybe' is not a boolean" in err


# --------------------------------------------------------------------------- collectives


def test_collectives_over_four_replicas_are_xla_collectives(procs: dict[str, subprocess.Popen[str]]) -> None:
    out, _ = _out(procs["collectives"])
    report = json.loads(out.strip().splitlines()[-1])
    assert report["in_hlo"] == [
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "all-reduce",
    ]
    res = {int(k): v for k, v in report["results"].items()}
    for r in range(4):
        got = res[r]
        assert got["gather"] == [
            row for q in range(4) for row in ([10 * q, 10 * q + 1], [10 * q + 2, 10 * q + 3])
        ]
        assert got["gather1"] == [
            [v for q in range(4) for v in (10 * q + 2 * i, 10 * q + 2 * i + 1)] for i in range(2)
        ]
        total = [4 * i + 6.0 for i in range(8)]
        assert got["rs_sum"] == total[2 * r : 2 * r + 2]
        assert got["rs_max"] == [0.5 * 4 * i for i in range(8)][2 * r : 2 * r + 2]
        assert got["a2a"] == [float(r + 10 * q) for q in range(4)]
        assert got["perm"] == [float((r - 1) % 4)] * 2
        assert got["bcast"] == [3.0] * 3
        assert got["master_param"] == [[0.0, 0.0], [0.0, 0.0]]


def test_collectives_outside_replication_are_the_one_replica_answer(dev: torch.device) -> None:
    x = torch.arange(6.0).view(2, 3).to(dev)
    assert xm.all_gather(x, dim=1).cpu().tolist() == x.cpu().tolist()
    assert xm.reduce_scatter(xm.REDUCE_SUM, x, 2.0, 0, 1).cpu().tolist() == (2 * x).cpu().tolist()
    assert xm.all_to_all(x, 0, 1, 1).cpu().tolist() == x.cpu().tolist()
    assert xm.collective_permute(x, [[0, 0]]).cpu().tolist() == x.cpu().tolist()
    with pytest.raises(ValueError, match="shard_count must be the number of replicas"):
        xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 2)
    with pytest.raises(NotImplementedError, match="sub-groups"):
        xm.all_gather(x, groups=[[0], [1]])


# --------------------------------------------------------------------------- steps


def test_step_closures_run_after_the_barrier_in_order(dev: torch.device, fresh_metrics: None) -> None:
    seen: list[object] = []
    x = torch.ones(3, device=dev) * 2
    xm.add_step_closure(lambda t: seen.append(("first", t.cpu().tolist(), len(pending_storages(0)))), (x,))
    xm.add_step_closure(lambda: seen.append("second"))
    assert seen == []
    executions = counter("ExecuteComputation")
    xm.mark_step()
    # After the barrier: x is device data, so reading it executes nothing more.
    assert seen == [("first", [2.0, 2.0, 2.0], 0), "second"]
    assert counter("ExecuteComputation") == executions + 1
    torch_xla.sync()
    assert len(seen) == 2  # each closure runs once


def test_async_step_closure_runs_off_thread_and_reports_errors(dev: torch.device) -> None:
    import threading

    from xlalab.utils import closures

    where: list[str] = []
    xm.add_step_closure(lambda: where.append(threading.current_thread().name), run_async=True)
    xm.mark_step()
    closures.wait_async_closures()
    assert where == ["xlalab async step closures"]
    xm.add_step_closure(lambda: 1 / 0, run_async=True)
    xm.mark_step()
    with pytest.raises(RuntimeError, match="asynchronous step closure failed: ZeroDivisionError"):
        closures.wait_async_closures()


def test_compile_and_step_run_the_body_as_one_graph(dev: torch.device, fresh_metrics: None) -> None:
    before = torch.ones(2, device=dev) + 1  # pending before the region: synced on entry

    @torch_xla.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() + x.cos()) * 2

    out = f(before)
    assert len(pending_storages(0)) == 0
    assert counter("ExecuteComputation") == 2
    torch.testing.assert_close(out.cpu(), (torch.full((2,), 2.0).sin() + torch.full((2,), 2.0).cos()) * 2)
    with torch_xla.step():
        y = out * 3
    assert len(pending_storages(0)) == 0 and counter("ExecuteComputation") == 3
    with torch_xla.compile():
        z = y + 1
    torch.testing.assert_close(z.cpu(), out.cpu() * 3 + 1)


def test_master_print_and_is_xla_tensor(dev: torch.device) -> None:
    buf = io.StringIO()
    xm.master_print("loss", 1.5, fd=buf)
    assert buf.getvalue() == "loss 1.5\n"
    assert xm.is_xla_tensor(torch.ones(1, device=dev)) and not xm.is_xla_tensor(torch.ones(1))


def test_rng_state_round_trips_and_fork_rng_restores(dev: torch.device) -> None:
    torch_xla.manual_seed(1234)
    assert xm.get_rng_state() == 1234
    state = xm.get_rng_state()
    a = torch.rand(4, device=dev).cpu()
    assert xm.get_rng_state() != state  # the state moves on with each random op
    xm.set_rng_state(state)
    torch.testing.assert_close(torch.rand(4, device=dev).cpu(), a, rtol=0, atol=0)
    after = xm.get_rng_state()
    with xm.fork_rng():
        torch.rand(4, device=dev)
    assert xm.get_rng_state() == after
    torch_xla.manual_seed(1234)
    torch.testing.assert_close(torch.rand(4, device=dev).cpu(), a, rtol=0, atol=0)


def test_unlazy_and_optimization_barrier(dev: torch.device, fresh_metrics: None) -> None:
    x = torch.ones(4, device=dev) * 5
    y = x + 1
    xm.optimization_barrier_([x, y])
    assert "stablehlo.optimization_barrier" in xm.get_stablehlo([x, y])
    xm.unlazy([x, y])
    assert counter("ExecuteComputation") == 1
    assert x.cpu().tolist() == [5.0] * 4 and y.cpu().tolist() == [6.0] * 4
    assert counter("ExecuteComputation") == 1
    with pytest.raises(ValueError, match="unlazy\\(\\) takes xla tensors"):
        xm.unlazy([torch.ones(1)])


def test_stablehlo_text_and_bytecode_without_executing(dev: torch.device, fresh_metrics: None) -> None:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    x = torch.ones(3, 3, device=dev) @ torch.ones(3, 3, device=dev)
    text = xm.get_stablehlo([x])
    assert "stablehlo.dot_general" in text and "func.func public @main" in text
    assert xm.get_stablehlo().count("stablehlo.dot_general") == 1  # everything pending
    code = xm.get_stablehlo_bytecode([x])
    assert code.startswith(b"ML\xefR")
    with mlir.make_ir_context():
        module = ir.Module.parse(code)
        assert "stablehlo.dot_general" in str(module)
    assert counter("ExecuteComputation") == 0


def test_device_facts_and_memory_info(dev: torch.device) -> None:
    assert xm.xla_device_kind() == "cpu"
    assert torch_xla.real_devices() == ["CPU:0"]
    before = xm.get_memory_info(dev)
    assert set(before) == {"bytes_used", "bytes_limit", "peak_bytes_used"}
    big = torch.ones(1024, 256, device=dev) + 1
    xm.mark_step()
    after = xm.get_memory_info(dev)
    assert after["bytes_used"] >= big.numel() * 4  # the live arrays on the device include it
    assert after["peak_bytes_used"] >= after["bytes_used"]
    assert after["bytes_limit"] > after["bytes_used"]


def test_runtime_calls(dev: torch.device, tmp_path: Path) -> None:
    assert xr.is_bf16_supported()
    assert xr.local_process_count() == 1
    assert xr.addressable_runtime_device_count() == 1
    n = xr.get_num_cached_compilation_graph()
    (torch.ones(5, 7, device=dev) * 13).sum().cpu()
    assert xr.get_num_cached_compilation_graph() == n + 1
    with pytest.raises(RuntimeError, match="before the first graph is compiled"):
        xr.initialize_cache(str(tmp_path / "cache"))


def test_use_spmd_says_what_is_there_when_spmd_is_not() -> None:
    import importlib.util

    if importlib.util.find_spec("xlalab.distributed.spmd") is None:
        with pytest.raises(NotImplementedError, match="no SPMD partitioning"):
            xr.use_spmd()
    else:
        assert hasattr(importlib.import_module("xlalab.distributed.spmd"), "use_spmd")


# --------------------------------------------------------------------------- utils, amp


def test_utils(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLALAB_TEST_N", "7")
    monkeypatch.setenv("XLALAB_TEST_B", "0")
    assert xu.getenv_as("XLALAB_TEST_N", int) == 7
    assert xu.getenv_as("XLALAB_TEST_B", bool, True) is False
    assert xu.getenv_as("XLALAB_TEST_MISSING", float, 0.5) == 0.5
    with pytest.raises(ValueError, match="XLALAB_TEST_N='yes': expected an integer"):
        monkeypatch.setenv("XLALAB_TEST_N", "yes")
        xu.getenv_as("XLALAB_TEST_N", bool)
    assert xu.as_list(3) == [3] and xu.as_list((1, 2)) == (1, 2)
    folder = xu.TmpFolder()
    name = folder.name
    Path(name, "f").write_text("x")
    del folder
    assert not os.path.exists(name)
    gen = xu.SampleGenerator(data=("x", "y"), sample_count=3)
    assert len(gen) == 3 and list(gen) == [("x", "y")] * 3 and list(gen) == [("x", "y")] * 3
    fgen = xu.FnDataGenerator(lambda d: d.sum(1), 4, torch.ones, dims=[2], count=2)
    batches = list(fgen)
    assert len(batches) == 2 and batches[0][0].shape == (4, 2) and batches[0][1].tolist() == [2.0] * 4


def test_xser_save_load(dev: torch.device, tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2).to(dev)
    path = str(tmp_path / "ckpt")
    xser.save({"model": model.state_dict(), "step": 5, "pair": (model.weight, "w")}, path)
    # One file per tensor object (the state_dict's weight is another object than the Parameter).
    assert sorted(os.listdir(path + ".tensors")) == ["tensor_0.pt", "tensor_1.pt", "tensor_2.pt"]
    data = xser.load(path)
    assert data["step"] == 5 and data["pair"][1] == "w"
    torch.testing.assert_close(data["model"]["weight"], model.weight.cpu())
    assert data["model"]["bias"].device.type == "cpu"
    fresh = torch.nn.Linear(3, 2).to(dev)
    fresh.load_state_dict(data["model"])
    torch.testing.assert_close(fresh.bias.cpu(), model.bias.cpu())


def test_autocast_on_xla_in_bfloat16(dev: torch.device) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).to(dev)
    x = torch.randn(4, 8).to(dev)
    with amp.autocast(dev):
        h = model[0](x)
        out = model[1](h)
        probs = torch.softmax(out, -1)
        loss = probs.pow(2).sum()
    assert (h.dtype, out.dtype, probs.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    loss.backward()
    assert model[0].weight.grad is not None and model[0].weight.grad.dtype == torch.float32
    with torch.autocast("xla"):  # bfloat16 by default, as torch_xla's
        assert model[0](x).dtype == torch.bfloat16
    assert model[0](x).dtype == torch.float32
    cpu = torch.nn.Linear(8, 8)
    cpu.load_state_dict({k: v.cpu() for k, v in model[0].state_dict().items()})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = cpu(x.cpu())
    torch.testing.assert_close(h.cpu(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_syncfree_optimizer_skips_on_found_inf_without_a_sync(dev: torch.device, name: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to(dev)
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    kwargs = {"lr": 0.1, "momentum": 0.9} if name == "SGD" else {"lr": 0.1}
    opt = getattr(amp.syncfree, name)(model.parameters(), **kwargs)
    ref_opt = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    x = torch.randn(3, 4)
    for found in (1.0, 0.0, 1.0, 0.0):
        opt.zero_grad()
        model(x.to(dev)).pow(2).sum().backward()
        reads = counter("aten::_local_scalar_dense")
        opt.step(found_inf=torch.tensor(found).to(dev))
        xm.mark_step()
        assert counter("aten::_local_scalar_dense") == reads  # the decision stayed on the device
        if not found:
            ref_opt.zero_grad()
            ref(x).pow(2).sum().backward()
            ref_opt.step()
        torch.testing.assert_close(model.weight.cpu(), ref.weight.detach(), rtol=1e-4, atol=1e-5)


def test_grad_scaler_on_xla(dev: torch.device) -> None:
    scaler = amp.GradScaler(init_scale=4.0)
    model = torch.nn.Linear(2, 1).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(1, 2).to(dev)).sum()
    scaler.scale(loss).backward()
    torch.testing.assert_close(model.weight.grad.cpu(), torch.full((1, 2), 4.0))
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 4.0


def test_send_cpu_data_to_device_as_torch_xla_returns_it(dev: torch.device) -> None:
    w = torch.ones(2, requires_grad=True)
    moved = xm.send_cpu_data_to_device(w, dev)
    assert isinstance(moved, list) and len(moved) == 1  # a lone tensor comes back in a list
    assert moved[0].device == dev and moved[0].requires_grad and moved[0].is_leaf
    state = xm.send_cpu_data_to_device({"exp_avg": torch.zeros(3), "step": 4, "nested": [torch.ones(1)]}, dev)
    assert state["exp_avg"].device == dev and state["step"] == 4 and state["nested"][0].device == dev


def test_host_side_helpers_outside_replication(dev: torch.device) -> None:
    assert xm.xla_rendezvous(b"hi") == [b"hi"]
    with pytest.raises(TypeError, match="payload"):
        xm.xla_rendezvous("text")  # type: ignore[arg-type]
    x = torch.full((2,), 3.0, device=dev)
    assert xm.do_on_ordinals(lambda t: t.device.type, (x,)) == "cpu"
    assert xm.do_on_ordinals(lambda: 1, (), ordinals=[5]) is None
    assert xm.xla_replication_devices() == ["CPU:0"]


def test_more_utils_and_xmp_helpers(dev: torch.device, capsys: pytest.CaptureFixture[str]) -> None:
    import xlalab.distributed.xla_multiprocessing as xmp
    from xlalab.runtime import backend

    data = {"a": [torch.ones(1), 2], "b": (torch.zeros(1),)}
    out = xu.for_each_instance_rewrite(data, lambda v: isinstance(v, torch.Tensor), lambda t: t + 1)
    assert out["a"][0].item() == 2.0 and out["a"][1] == 2 and out["b"][0].item() == 1.0
    assert xu.parallel_work(2, lambda a, b: a * b, [1, 2, 3], [4, 5, 6]) == [4, 10, 18]
    ports = xu.get_free_tcp_ports(2)
    assert len(set(ports)) == 2 and all(p > 0 for p in ports)
    with xu.TimedScope("took "):
        pass
    assert capsys.readouterr().err.startswith("took ")
    wrapped = xmp.MpModelWrapper(torch.nn.Linear(2, 2))
    replica_model = wrapped.to(dev)
    assert next(replica_model.parameters()).device == dev
    assert xmp.MpSerialExecutor().run(lambda: 7) == 7
    xr.set_device_type("CPU")  # the platform already running: accepted
    with pytest.raises(backend.DeviceError, match="already CPU"):
        xr.set_device_type("TPU")


def test_compile_full_graph_names_each_graph_break(dev: torch.device) -> None:
    @torch_xla.compile(full_graph=True)
    def step_fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if y.sum().item() > 0:  # a read: the graph breaks here
            y = y + 1
        return y

    lines, first = inspect.getsourcelines(step_fn)
    line = first + next(i for i, text in enumerate(lines) if ".item()" in text)
    expected = rf"of step_fn: the body executed 1 graph\(s\) .*:{line}\)"
    with pytest.raises(torch_xla.GraphBreakError, match=expected):
        step_fn(torch.ones(3, device=dev))
    ok = torch_xla.compile(lambda x: x * 2, full_graph=True)
    assert ok(torch.ones(3, device=dev)).cpu().tolist() == [2.0] * 3


def test_compile_max_different_graphs(dev: torch.device) -> None:
    double = torch_xla.compile(lambda x: x * 2, max_different_graphs=1)
    double(torch.ones(3, device=dev))
    double(torch.ones(3, device=dev))  # the same graph again
    with pytest.raises(torch_xla.GraphBreakError, match="traced 2 different graphs"):
        double(torch.ones(5, device=dev))


def test_xlac_sharding_spec_of_an_unsharded_tensor(dev: torch.device) -> None:
    from xlalab.core import xlac

    assert xlac._get_xla_sharding_spec(torch.ones(2, device=dev)) == ""
