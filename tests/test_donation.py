"""Buffer donation at a barrier: tensors a step overwrites give their old buffers to XLA, and
nothing a user can still read is ever overwritten."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import xlalab.core.xla_model as xm
import xlalab.debug.metrics as met
from xlalab.runtime import config, graph
from xlalab.runtime import tensor as rt


@pytest.fixture
def aliasing() -> Iterator[None]:
    before = config.get("XLA_ENABLE_PARAM_ALIASING")
    config.set("XLA_ENABLE_PARAM_ALIASING", True)
    # What a program gives is decided when it compiles: compile these tests' graphs here, not
    # reuse an earlier test's program for the same graph.
    graph.CACHE.clear()
    yield
    config.set("XLA_ENABLE_PARAM_ALIASING", before)


def _last_program() -> graph.Program:
    return graph.CACHE.values()[-1]  # most recently used last


def _copies() -> int:
    return met.counter_value("xlalab::DonationCopy") or 0


def _array(t: torch.Tensor) -> object:
    node = rt.value(t)  # type: ignore[arg-type]
    assert node.op is rt.ir.DATA
    return node.value


def _models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    cpu = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    dev = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to(xm.xla_device())


def _step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    ],
    ids=["sgd-momentum", "adamw"],
)
def test_a_training_loop_updates_in_place_and_matches_eager(aliasing: None, make_opt) -> None:  # type: ignore[no-untyped-def]
    cpu, dev = _models()
    opt_cpu, opt_dev = make_opt(cpu.parameters()), make_opt(dev.parameters())
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    xd, yd = x.to(xm.xla_device()), y.to(xm.xla_device())
    for step in range(4):
        _step(cpu, opt_cpu, x, y)
        _step(dev, opt_dev, xd, yd)
        xm.mark_step()
        # The parameters' (and, once it exists, the optimizer state's) previous buffers went to
        # XLA, which writes the new values over them; the inputs, which the user holds, did not.
        prog = _last_program()
        n_params = len(list(dev.parameters()))
        assert len(prog.donated) >= n_params * (1 if step == 0 else 2), (step, prog.donated)
        assert "input_output_alias" in prog.executable.as_text()
        assert not _array(xd).is_deleted()  # type: ignore[attr-defined]
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.cpu(), p_cpu, rtol=1e-5, atol=1e-6)
    for s_cpu, s_dev in zip(opt_cpu.state.values(), opt_dev.state.values()):
        for k in s_cpu:
            torch.testing.assert_close(torch.as_tensor(s_dev[k]).cpu(), torch.as_tensor(s_cpu[k]))


def test_a_value_the_user_still_holds_is_never_overwritten(aliasing: None) -> None:
    """`copy_` and `detach` share the old value's node: that holder keeps its buffer, both when
    the program is compiled and on a later run of the already-compiled program."""
    dev = xm.xla_device()
    w = torch.ones(3, device=dev)
    xm.mark_step()
    for step in range(4):
        keep = torch.empty(3, device=dev)
        keep.copy_(w)  # holds w's current value
        before = w.cpu().clone()
        w.mul_(2.0).add_(1.0)
        xm.mark_step()
        torch.testing.assert_close(keep.cpu(), before, msg=f"step {step}")
        torch.testing.assert_close(w.cpu(), before * 2 + 1)
    # Compiled while `keep` held w's value: the program gives nothing to XLA.
    assert _last_program().donated == ()


def test_a_holder_that_appears_after_the_compile_gets_a_copy(aliasing: None) -> None:
    dev = xm.xla_device()
    w = torch.zeros(5, device=dev)
    xm.mark_step()
    w.add_(1.0)
    xm.mark_step()  # compiled with w's old buffer donated
    compiles = met.counter_value("UncachedCompile") or 0
    snapshot = torch.empty(5, device=dev)
    snapshot.copy_(w)  # now something holds the value the next run would overwrite
    w.add_(1.0)
    before = _copies()
    xm.mark_step()
    assert _copies() == before + 1
    torch.testing.assert_close(snapshot.cpu(), torch.full((5,), 1.0))
    torch.testing.assert_close(w.cpu(), torch.full((5,), 2.0))
    assert (met.counter_value("UncachedCompile") or 0) == compiles  # the same program ran


def test_reading_one_tensor_donates_nothing(aliasing: None) -> None:
    """A read syncs part of the pending IR: other pending values may still need the leaves."""
    dev = xm.xla_device()
    w = torch.ones(4, device=dev)
    xm.mark_step()
    old = _array(w)
    a = w * 3.0
    b = w + 1.0
    w.mul_(0.0)
    assert a.sum().item() == 12.0
    assert not old.is_deleted()  # type: ignore[attr-defined]
    torch.testing.assert_close(b.cpu(), torch.full((4,), 2.0))
    torch.testing.assert_close(w.cpu(), torch.zeros(4))


def test_aliasing_off_keeps_every_buffer(aliasing: None) -> None:
    config.set("XLA_ENABLE_PARAM_ALIASING", False)
    dev = xm.xla_device()
    w = torch.ones(2, 2, device=dev)
    xm.mark_step()
    w.add_(1.0)
    xm.mark_step()
    assert _last_program().donated == ()


def test_steps_dispatched_back_to_back_still_donate(aliasing: None) -> None:
    """Pipelined steps (no wait between barriers): the execution timer's wait on the previous
    step's outputs does not count as a holder."""
    cpu, dev = _models(1)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.05)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.05)
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    xd, yd = x.to(xm.xla_device()), y.to(xm.xla_device())
    copies = []
    for _ in range(6):
        _step(cpu, opt_cpu, x, y)
        _step(dev, opt_dev, xd, yd)
        before = _copies()
        xm.mark_step()
        copies.append(_copies() - before)
    xm.wait_device_ops()
    assert len(_last_program().donated) == len(list(dev.parameters()))
    assert copies[1:] == [0] * 5, copies
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.cpu(), p_cpu, rtol=1e-5, atol=1e-6)


def test_a_read_runs_the_barriers_program_on_copies(aliasing: None) -> None:
    """Reading the one pending tensor builds the graph a barrier builds: the same program runs,
    on copies of what it would give to XLA, and compiles nothing new."""
    dev = xm.xla_device()
    w = torch.full((3,), 2.0, device=dev)
    xm.mark_step()
    w.mul_(3.0)
    xm.mark_step()  # compiled at the barrier, giving w's old buffer
    assert _last_program().donated == (0,)
    compiles = met.counter_value("UncachedCompile") or 0
    keep = torch.empty(3, device=dev)
    keep.copy_(w)
    w.mul_(3.0)
    before = _copies()
    torch.testing.assert_close(w.cpu(), torch.full((3,), 18.0))
    assert _copies() == before + 1
    assert (met.counter_value("UncachedCompile") or 0) == compiles
    torch.testing.assert_close(keep.cpu(), torch.full((3,), 6.0))


def test_donation_survives_a_failed_torch_compile(aliasing: None) -> None:
    # After a compile that fails, torch 2.13 leaves each Python call holding one more reference
    # to its arguments; donation counts references inline, so it still sees free leaves.
    def fails(v: torch.Tensor) -> torch.Tensor:
        return torch.floor_divide(v, v).sum()  # no derivative: AOTAutograd refuses it

    with pytest.raises(Exception, match="floor_divide"):
        torch.compile(fails, backend="aot_eager")(torch.ones(3, dtype=torch.float64, requires_grad=True))
    w = torch.ones(3, device=xm.xla_device())
    xm.mark_step()
    w.mul_(2)
    xm.mark_step()
    assert _last_program().donated == (0,)


def _same_shape_model() -> torch.nn.Module:
    # Every parameter, and with Adam each of its two state tensors, has one shape: a buffer
    # given to the wrong output of that shape is an easy mistake here.
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 8, bias=False) for _ in range(3)]
    return torch.nn.Sequential(layers[0], torch.nn.Tanh(), layers[1], torch.nn.Tanh(), layers[2])


def _buffers(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[int]:
    """Where each parameter's and optimizer state tensor's value lives on the device."""
    tensors = [*model.parameters(), *[s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]]
    return [_array(t).unsafe_buffer_pointer() for t in tensors]  # type: ignore[attr-defined]


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_each_tensor_keeps_its_buffer_across_steps(aliasing: None, compiled: bool) -> None:
    # Donation means an update in place: the parameter's new value is written over its own old
    # buffer, not over its exp_avg's (then XLA copies every input before the step and every
    # result after it, and the step needs twice the memory).
    import xlalab.dynamo as dynamo

    dev = _same_shape_model().to(xm.xla_device())
    opt = torch.optim.Adam(dev.parameters(), lr=0.01)
    x = torch.randn(4, 8, device=xm.xla_device())
    xm.mark_step()
    dynamo.reset()
    step = torch.compile(_step, backend="xlalab") if compiled else _step
    for i in range(4):
        step(dev, opt, x, x)
        xm.mark_step()
        xm.wait_device_ops()
        if i == 2:
            before = _buffers(dev, opt)
    assert _buffers(dev, opt) == before
    cpu = _same_shape_model()
    opt_cpu = torch.optim.Adam(cpu.parameters(), lr=0.01)
    for _ in range(4):
        _step(cpu, opt_cpu, x.cpu(), x.cpu())
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.cpu(), p_cpu, rtol=1e-5, atol=1e-6)
