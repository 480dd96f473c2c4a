"""torch_xla's names after one opt-in call, and the seeds' caveats as behaviour.

The seeds' snippets run verbatim in fresh interpreters. The API guide's three run one after
the other in one script after ``xlalab.use_torch_xla_names()``, as a user's program would
have them (each interpreter costs seconds of CPU on a shared machine); the troubleshooting
guide's ``met.metrics_report()`` runs after the API guide's first under ``XLALAB_TORCH_XLA=1``.
Those and the CPU-only load of an ``xm.save`` file start together, once per module; the rest
runs here, with the names installed only for the tests that need them.
"""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import xlalab
import xlalab.compat as compat
import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met
from xlalab.core.moved_optimizers import XlaOptimizerBuiltBeforeMoveWarning
from xlalab.core.weight_tying import XlaWeightTyingWarning

from .conftest import counter

ROOT = Path(__file__).resolve().parents[1]
OPT_IN = "import xlalab; xlalab.use_torch_xla_names()\n"

# --------------------------------------------------------------------------- the seeds, verbatim

API_GUIDE = """\
import torch
import torch_xla
import torch_xla_py.xla_model as xm

x = torch.randn(4, 2, device=xm.xla_device())
print(x.device)
print(x)
"""
METRICS_REPORT = """\
import torch_xla.debug.metrics as met
print(met.metrics_report())
"""
XLAC_REPORT = """\
print(torch_xla._XLAC._xla_metrics_report())
"""
# The seeds' alternative to clip_grad_norm_'s .item(). Its leading "..." elides torch's
# inf-norm branch; the test supplies that `if` header and the names the fragment uses.
SEED_CLIP = """\
...
else:
  device = parameters[0].device
  total_norm = torch.zeros([], device=device if parameters else None)
  for p in parameters:
    param_norm = p.grad.data.norm(norm_type) ** norm_type
    total_norm.add_(param_norm)
  total_norm = (total_norm ** (1. / norm_type))
clip_coef = torch.tensor(max_norm, device=device) / (total_norm + 1e-6)
for p in parameters:
  p.grad.data.mul_(torch.where(clip_coef < 1, clip_coef, torch.tensor(1., device=device)))
"""

CLIP_PRELUDE = """\
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
torch.manual_seed(0)
cpu_model = torch.nn.Linear(8, 4)
model = torch.nn.Linear(8, 4).to(xm.xla_device())
model.load_state_dict(cpu_model.state_dict())
data = torch.randn(16, 8)
cpu_model(data).pow(2).sum().backward()
model(data.to(xm.xla_device())).pow(2).sum().backward()
met.clear_all()
parameters = [p for p in model.parameters() if p.grad is not None]
max_norm, norm_type = 0.5, 2.0
if norm_type == float("inf"):
  """
CLIP_CHECK = """\
print("aten::_local_scalar_dense", met.counter_value("aten::_local_scalar_dense") or 0)
xm.mark_step()
torch.nn.utils.clip_grad_norm_(cpu_model.parameters(), max_norm)
for p, q in zip(model.parameters(), cpu_model.parameters()):
  torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)
print("matches eager clip_grad_norm_")
"""
LOAD_ON_CPU_ONLY = """\
import sys, torch
data = torch.load(sys.argv[1], map_location=None)
sd = data["state"]
print(type(sd).__name__, sorted(sd), [str(t.device) for t in sd.values()])
print(data["nested"][1][0].device, data["nested"][1][1])
for k, v in data["expected"].items():
    got = sd[k] if k in sd else data["nested"][0]
    torch.testing.assert_close(got, v, rtol=0, atol=0)
ptr = lambda t: t.untyped_storage().data_ptr()
print("tied storages shared:", ptr(sd["a.weight"]) == ptr(sd["b.weight"]))
print("xla modules loaded:", sorted(m for m in sys.modules if m.startswith(("xlalab", "torch_xla"))))
"""

_REPORT_LINE = re.compile(
    r"^(Metric: \S+|Counter: \S+|  (TotalSamples|Accumulator|ValueRate|Rate|Percentiles|Value): .+)$"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != compat.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _spawn(code: str, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


_finished: dict[int, tuple[str, str]] = {}


def _result(proc: subprocess.Popen[str]) -> str:
    # Several tests read one interpreter's output: wait for it once.
    if id(proc) not in _finished:
        _finished[id(proc)] = proc.communicate(timeout=300)
    out, err = _finished[id(proc)]
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    return out


def _section(name: str) -> str:
    return f'print("##### {name}")\n'


def _sections(out: str) -> dict[str, str]:
    parts = re.split(r"^##### (\w+)\n", out, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _tied_model() -> torch.nn.Module:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4, bias=False)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x).relu())

    return Tied()


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Every subprocess of this file, started at once; each test waits for its own."""
    saved = tmp_path_factory.mktemp("save") / "ckpt.pt"
    dev = xlalab.device()
    torch.manual_seed(0)
    model = _tied_model().to(dev)
    model.b.weight = model.a.weight  # tied after the move, as the seeds advise
    state = model.state_dict()
    nested = torch.arange(6.0, device=dev).view(2, 3).t()  # a view: saved as its own tensor
    expected = {k: v.cpu() for k, v in state.items()}
    expected["nested"] = nested.cpu()
    data = {"state": state, "nested": [nested, (torch.ones(2, device=dev), "tag")], "expected": expected}
    xm.save(data, saved)
    started = {
        "api_guide": _spawn(
            OPT_IN
            + _section("api_guide")
            + API_GUIDE
            + _section("xlac_report")
            + XLAC_REPORT
            + _section("clip")
            + CLIP_PRELUDE
            + SEED_CLIP
            + CLIP_CHECK
        ),
        "metrics_report_env": _spawn("import xlalab\n" + API_GUIDE + METRICS_REPORT, **{compat.ENV: "1"}),
        "load": _spawn(LOAD_ON_CPU_ONLY, str(saved)),
    }
    yield started
    for proc in started.values():
        if proc.poll() is None:  # a test was deselected or failed early: don't leave it running
            proc.kill()
            proc.communicate()


@pytest.fixture
def names() -> Iterator[None]:
    """torch_xla's names for one test; taken away after it unless they were there before."""
    was = compat.torch_xla_names_installed()
    xlalab.use_torch_xla_names()
    yield
    if not was:
        compat.remove_torch_xla_names()


def test_start_the_subprocesses(procs: dict[str, subprocess.Popen[str]]) -> None:
    """First in the file, so the interpreters at the end of it work while the tests below run."""
    assert all(proc.pid for proc in procs.values())


# --------------------------------------------------------------------------- the names


def test_names_resolve_to_xlalab_modules(names: None) -> None:
    import torch_xla
    import torch_xla.core.xla_model as txm
    import torch_xla.debug.metrics as tmet
    import torch_xla.runtime as xr
    import torch_xla_py.xla_model as old_xm

    import xlalab.core.xr
    import xlalab.debug.metrics

    assert txm is xm and old_xm is xm and tmet is xlalab.debug.metrics and xr is xlalab.core.xr
    assert xm.__spec__ is not None and xm.__spec__.name == "xlalab.core.xla_model"  # not renamed
    # `import torch_xla` alone reaches the submodules, as with the real package.
    assert torch_xla.core.xla_model is xm and torch_xla.runtime is xr and torch_xla.debug.metrics is met
    assert torch_xla.device() == torch.device("xla", 0) == torch_xla.device(0) == torch_xla.device(n=0)
    assert torch_xla.devices() == [torch.device("xla", 0)] and torch_xla.device_count() == 1
    assert torch_xla.__version__.endswith("+xlalab")
    x = torch.ones(3, device=torch_xla.device()) * 2
    before = counter("MarkStep")
    torch_xla.sync()
    assert counter("MarkStep") == before + 1
    assert x.sum().item() == 6.0


def test_runtime_queries_match_the_reference_on_one_cpu(names: None) -> None:
    import torch_xla
    import torch_xla.runtime as xr

    # /work/shared/reference/torch_xla-2.9-cpu/01_devices.txt (torch_xla 2.9, PJRT_DEVICE=CPU)
    reference = {
        "device_type": "CPU", "global_device_count": "1", "local_device_count": "1",
        "addressable_device_count": "1", "global_runtime_device_count": "1", "world_size": "1",
        "global_ordinal": "0", "local_ordinal": "0", "process_index": "0", "process_count": "1",
        "host_index": "0", "is_spmd": "False", "global_runtime_device_attributes": "[{'name': 'CPU:0'}]",
    }  # fmt: skip
    assert {name: str(getattr(xr, name)()) for name in reference} == reference
    assert xr.runtime_device_attributes("xla:0") == {}
    assert not hasattr(xr, "using_pjrt") and not hasattr(xr, "global_device_attributes")
    with pytest.raises(RuntimeError, match=r"^IP discovery not supported for device: CPU$"):
        xr.get_master_ip()
    assert torch_xla._XLAC._xla_get_default_device() == "xla:0"
    assert torch_xla._XLAC._xla_real_devices(["xla:0"]) == ["CPU:0"] == xm.xla_real_devices(["xla:0"])
    assert xm.get_xla_supported_devices() == ["xla:0"] and xm.xla_device_hw("xla:0") == "CPU"
    assert xm.get_ordinal() == 0 and xm.get_local_ordinal() == 0 and xm.xrt_world_size() == 1
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)


def test_xlac_graph_dumps_resolve_at_call_time(names: None) -> None:
    import torch_xla

    pending = torch.ones(2, device=xlalab.device()) + 1
    before = counter("ExecuteComputation")
    text = torch_xla._XLAC._get_xla_tensors_text([pending])
    assert isinstance(text, str) and text
    assert counter("ExecuteComputation") == before  # a pending graph is shown, not run
    with pytest.raises(AttributeError, match="no xlalab counterpart"):
        torch_xla._XLAC._xla_not_a_thing  # noqa: B018


def test_module_names_are_xlalabs_modules_at_the_same_place(names: None) -> None:
    import torch_xla.amp
    import torch_xla.amp.syncfree
    import torch_xla.debug.profiler
    import torch_xla.distributed.data_parallel as dp
    import torch_xla.experimental
    import torch_xla.utils.serialization
    import torch_xla.utils.utils
    import torch_xla_py.data_parallel as old_dp

    import xlalab.distributed.data_parallel

    assert dp is old_dp is xlalab.distributed.data_parallel
    same_place = ("amp", "amp.syncfree", "debug.profiler", "experimental", "utils.serialization")
    for name in same_place:
        assert sys.modules[f"torch_xla.{name}"] is importlib.import_module(f"xlalab.{name}")
    import torch_xla

    assert importlib.metadata.version("torch_xla") == torch_xla.__version__


def test_unknown_torch_xla_module_is_not_found(names: None) -> None:
    with pytest.raises(ModuleNotFoundError):
        import torch_xla.experimental.not_here  # noqa: F401
    assert importlib.util.find_spec("torch_xla.debug.not_here") is None


def test_removing_the_names(names: None) -> None:
    import torch_xla  # noqa: F401

    compat.remove_torch_xla_names()
    assert "torch_xla" not in sys.modules and importlib.util.find_spec("torch_xla") is None
    xlalab.use_torch_xla_names()  # and back, for the fixture to take away


def test_refuses_to_shadow_a_real_torch_xla(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "torch_xla"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('the real torch_xla must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    was = compat.torch_xla_names_installed()
    compat.remove_torch_xla_names()
    try:
        with pytest.raises(compat.TorchXlaInstalledError) as info:
            xlalab.use_torch_xla_names()
        assert isinstance(info.value, ImportError) and isinstance(info.value, RuntimeError)
        message = str(info.value)
        assert str(fake) in message and "pip uninstall torch-xla" in message
        assert not compat.torch_xla_names_installed() and "torch_xla" not in sys.modules
        monkeypatch.setenv(compat.ENV, "1")
        with pytest.raises(compat.TorchXlaInstalledError, match=f"unset {compat.ENV}"):
            compat._from_environment()
    finally:
        monkeypatch.undo()
        if was:
            xlalab.use_torch_xla_names()


def test_env_switch_rejects_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compat.ENV, "maybe")
    with pytest.raises(ValueError, match=f"{compat.ENV}='maybe' is not a boolean; use 1"):
        compat._from_environment()
    monkeypatch.setenv(compat.ENV, "0")
    compat._from_environment()  # off: nothing to do


# --------------------------------------------------------------------------- caveats


def _grads(dev: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(1)
    cpu = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    lazy = copy.deepcopy(cpu).to(dev)
    x = torch.randn(5, 6)
    cpu(x).pow(2).sum().backward()
    lazy(x.to(dev)).pow(2).sum().backward()
    xm.mark_step()
    return cpu, lazy


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"foreach": False}, {"foreach": True}, {"norm_type": float("inf")}, {"error_if_nonfinite": False}],
    ids=["default", "foreach-off", "foreach-on", "inf-norm", "nonfinite-ok"],
)
def test_clip_grad_norm_reads_nothing_back(dev: torch.device, kwargs: dict[str, object]) -> None:
    # torch's own clip_grad_norm_ multiplies by a clamped coefficient: no .item(), so xlalab
    # leaves it unpatched (early-bound imports behave the same) and only checks the claim.
    assert torch.nn.utils.clip_grad_norm_ is torch.nn.utils.clip_grad.clip_grad_norm_
    cpu, lazy = _grads(dev)
    met.clear_all()
    total = torch.nn.utils.clip_grad_norm_(lazy.parameters(), 0.1, **kwargs)  # type: ignore[arg-type]
    assert counter("aten::_local_scalar_dense") == 0 and counter("ExecuteComputation") == 0
    expected = torch.nn.utils.clip_grad_norm_(cpu.parameters(), 0.1, **kwargs)  # type: ignore[arg-type]
    xm.mark_step()
    torch.testing.assert_close(total.cpu(), expected)
    for p, q in zip(lazy.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)


def test_clip_grad_norm_error_if_nonfinite_reads_the_norm_once(dev: torch.device) -> None:
    # Raising needs the norm's value on the host: one read, as in eager torch (torch_xla 2.9's
    # patched version makes two). Documented in docs/torch_xla_names.md.
    _, lazy = _grads(dev)
    met.clear_all()
    torch.nn.utils.clip_grad_norm_(lazy.parameters(), 0.1, error_if_nonfinite=True)
    assert counter("aten::_local_scalar_dense") == 1


def test_copy_copy_is_a_deep_copy_and_a_view_is_the_shallow_one(dev: torch.device) -> None:
    t = torch.arange(4.0, device=dev)
    c = copy.copy(t)
    c.add_(10)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0] and c.tolist() == [10.0, 11.0, 12.0, 13.0]
    p = torch.nn.Parameter(torch.ones(2, device=dev))
    cp = copy.copy(p)
    assert cp.requires_grad
    with torch.no_grad():
        cp.mul_(3)
    assert p.tolist() == [1.0, 1.0]
    v = t.view_as(t)  # the seeds' shallow copy
    v.mul_(2)
    assert t.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_strides_are_eagers(dev: torch.device) -> None:
    """Views report the strides and offset eager gives them, so contiguous() and reshape() copy
    where eager copies (torch_xla reports every tensor contiguous; xlalab follows eager)."""
    cpu = torch.randn(3, 4)
    x = cpu.to(dev)
    for view in (lambda t: t, lambda t: t.t(), lambda t: t[:, 1:3], lambda t: t.permute(1, 0),
                 lambda t: t[::2], lambda t: t[:, :1].expand(3, 4)):  # fmt: skip
        lazy, eager = view(x), view(cpu)
        assert tuple(lazy.shape) == tuple(eager.shape)
        assert lazy.stride() == eager.stride() and lazy.storage_offset() == eager.storage_offset()
        assert lazy.is_contiguous() == eager.is_contiguous()


def _train(model: torch.nn.Module, dev: torch.device, steps: int = 2) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(2)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4).to(dev)).pow(2).sum().backward()
        opt.step()
        if dev.type == "xla":
            xm.mark_step()


def test_tie_before_to_is_reported_and_retied(dev: torch.device) -> None:
    torch.manual_seed(0)
    eager = _tied_model()
    eager.b.weight = eager.a.weight  # tied on the CPU: eager PyTorch keeps one Parameter
    model = copy.deepcopy(eager)
    with pytest.warns(XlaWeightTyingWarning) as record:
        model.to(dev)
    message = str(record[0].message)
    assert record[0].filename == __file__  # points at the .to() line
    assert "a.weight and b.weight" in message and "tie them after .to(device)" in message
    assert "re-tied" in message
    assert model.a.weight is model.b.weight  # the model means what it meant
    _train(model, dev)
    _train(eager, torch.device("cpu"))
    torch.testing.assert_close(model.b.weight.cpu(), eager.b.weight)
    with warnings.catch_warnings():
        warnings.simplefilter("error", XlaWeightTyingWarning)
        model.cpu()  # once per model class and tie: the move back re-ties without a second warning
    assert model.a.weight is model.b.weight and model.a.weight.device.type == "cpu"


def test_tie_after_to_is_silent_and_updates_reach_both(dev: torch.device) -> None:
    model = _tied_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", XlaWeightTyingWarning)
        model.to(dev)
        model.b.weight = model.a.weight
        model.to(dev)  # already there: the tie is kept, nothing to say
    before = model.a.weight.detach().cpu()
    _train(model, dev)
    assert model.a.weight is model.b.weight
    assert not torch.equal(model.a.weight.detach().cpu(), before)


def _steps(
    model: torch.nn.Module, opt: torch.optim.Optimizer, dev: torch.device, steps: int = 3
) -> list[float]:
    torch.manual_seed(3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(5, 4).to(dev)).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().cpu()))
    return losses


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.AdamW(ps, lr=0.05),
], ids=["sgd", "adamw"])  # fmt: skip
def test_an_optimizer_built_before_the_move_trains_the_moved_model(
    make: Callable[..., Any], dev: torch.device
) -> None:
    # CUDA's order (optimizer first, then model.to) trains there; the move to xla makes new
    # Parameters, so the optimizer is pointed at them, its state moved along, and told once.
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    model = copy.deepcopy(eager)
    eager_opt, opt = make(eager.parameters()), make(model.parameters())
    want = _steps(eager, eager_opt, torch.device("cpu"), 2)
    assert _steps(model, opt, torch.device("cpu"), 2) == want  # state made on the CPU first
    with pytest.warns(XlaOptimizerBuiltBeforeMoveWarning) as record:
        model.to(dev)
    assert record[0].filename == __file__ and "build the optimizer after model.to(device)" in str(
        record[0].message
    )
    assert all(p is q for p, q in zip(opt.param_groups[0]["params"], model.parameters()))
    got = _steps(model, opt, dev)
    torch.testing.assert_close(got, _steps(eager, eager_opt, torch.device("cpu")))
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach())


def test_an_optimizer_built_after_the_move_is_left_alone(dev: torch.device) -> None:
    model = torch.nn.Linear(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", XlaOptimizerBuiltBeforeMoveWarning)
        model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model.to(dev)
    assert opt.param_groups[0]["params"][0] is model.weight


def test_xm_save_keeps_containers_and_parameters(dev: torch.device, tmp_path: Path) -> None:
    p = torch.nn.Parameter(torch.ones(2, device=dev))
    sd: OrderedDict[str, torch.Tensor] = OrderedDict(w=torch.zeros(2, device=dev))
    sd._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    xm.save({"p": p, "sd": sd, "plain": [1, "x"]}, tmp_path / "c.pt")
    out = torch.load(tmp_path / "c.pt", weights_only=False)
    assert isinstance(out["p"], torch.nn.Parameter) and out["p"].requires_grad
    assert out["p"].device.type == "cpu"
    assert out["sd"]._metadata == {"": {"version": 1}} and out["plain"] == [1, "x"]
    assert p.device.type == "xla" and sd["w"].device.type == "xla"  # the caller's data is untouched


def test_example_script_is_valid_python() -> None:
    source = (ROOT / "examples" / "torch_xla_names.py").read_text()
    compile(source, "torch_xla_names.py", "exec")
    assert "xlalab.use_torch_xla_names()" in source


# --------------------------------------------------------------------------- the subprocesses
# Last in the file: they run while the tests above do.


def test_api_guide_snippet(procs: dict[str, subprocess.Popen[str]]) -> None:
    lines = _sections(_result(procs["api_guide"]))["api_guide"].splitlines()
    assert lines[0] == "xla:0"
    # tensor([[ 1.3344,  1.0886],\n        [...]], device='xla:0'): four rows of two numbers.
    num = r"-?\d+\.\d+(e[+-]\d+)?"  # torch switches to scientific notation for wide ranges
    row = rf"\[\s*{num},\s+{num}\]"
    body = "\n".join(lines[1:])
    assert re.fullmatch(rf"tensor\(\[{row}(,\n\s+{row}){{3}}\], device='xla:0'\)", body), body


def _assert_report_shape(text: str, *extra: str) -> None:
    lines = [ln for ln in text.splitlines() if ln]
    bad = [ln for ln in lines if not _REPORT_LINE.match(ln)]
    assert not bad, bad
    for name in ("Metric: CompileTime", "Metric: ExecuteTime", "Counter: UncachedCompile", *extra):
        assert name in lines, name


def test_metrics_report_snippet_under_the_env_switch(procs: dict[str, subprocess.Popen[str]]) -> None:
    out = _result(procs["metrics_report_env"])
    assert out.startswith("xla:0\ntensor([[")  # the API guide's snippet, opted in by the environment
    _assert_report_shape(out.split("device='xla:0')\n", 1)[1], "Metric: TransferFromDeviceTime")


def test_xlac_metrics_report_snippet(procs: dict[str, subprocess.Popen[str]]) -> None:
    # After the API guide's snippet: one compiled randn, read back by print(x).
    report = _sections(_result(procs["api_guide"]))["xlac_report"]
    _assert_report_shape(report, "Metric: TransferFromDeviceTime")


def test_seed_clip_snippet_reads_nothing_back_and_matches_eager(
    procs: dict[str, subprocess.Popen[str]],
) -> None:
    out = _sections(_result(procs["api_guide"]))["clip"]
    assert "aten::_local_scalar_dense 0" in out
    assert "matches eager clip_grad_norm_" in out


def test_xm_save_loads_on_a_machine_without_xla(procs: dict[str, subprocess.Popen[str]]) -> None:
    lines = _result(procs["load"]).splitlines()
    assert lines[0] == "OrderedDict ['a.weight', 'b.bias', 'b.weight'] ['cpu', 'cpu', 'cpu']"
    assert lines[1] == "cpu tag"
    assert lines[2] == "tied storages shared: True"
    assert lines[3] == "xla modules loaded: []"  # plain torch.load, no xlalab needed
