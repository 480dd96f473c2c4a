"""Creating, moving, reading and printing xla tensors."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import xlalab
import xlalab.core.xla_model as xm
from xlalab.runtime.backend import DeviceError


def test_device_names(dev: torch.device) -> None:
    assert xm.xla_device() == torch.device("xla", 0)
    assert str(dev) == "xla:0"
    assert xm.get_xla_supported_devices()[0] == "xla:0"
    assert xm.xla_device_hw(dev) in ("CPU", "CUDA", "TPU")
    assert xlalab.device() == dev


def test_missing_device_is_a_clear_error() -> None:
    with pytest.raises(DeviceError, match="does not exist"):
        xm.xla_device(999)


@pytest.mark.parametrize(
    "make",
    [
        lambda d: torch.zeros(2, 3, device=d),
        lambda d: torch.ones(2, 3, device=d),
        lambda d: torch.full((2, 3), 7.5, device=d),
        lambda d: torch.empty(2, 3, device=d).fill_(1),
        lambda d: torch.arange(5, device=d),
        lambda d: torch.arange(1.0, 2.0, 0.25, device=d),
        lambda d: torch.eye(3, device=d),
        lambda d: torch.linspace(0, 1, 5, device=d),
        lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
        lambda d: torch.as_tensor([1.5, 2.5], device=d),
        lambda d: torch.tensor(3.0, device=d, requires_grad=True),
    ],
)
def test_factories_match_cpu(make, dev: torch.device) -> None:  # type: ignore[no-untyped-def]
    lazy = make(dev)
    eager = make("cpu")
    assert lazy.device == dev
    assert lazy.dtype == eager.dtype and lazy.shape == eager.shape
    torch.testing.assert_close(lazy.cpu().detach(), eager.detach())


def test_random_factories_use_a_seeded_device_rng(dev: torch.device) -> None:
    torch.manual_seed(3)
    a = torch.randn(4, 4, device=dev).cpu()
    torch.manual_seed(3)
    b = torch.randn(4, 4, device=dev).cpu()
    c = torch.randn(4, 4, device=dev).cpu()
    torch.testing.assert_close(a, b)
    assert not torch.equal(b, c)
    u = torch.rand(10000, device=dev).cpu()
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean().item() - 0.5) < 0.02


def test_reading_values(dev: torch.device) -> None:
    x = torch.tensor([[1.5, -2.0], [3.0, 4.0]], device=dev)
    assert x.sum().item() == 6.5
    assert x.tolist() == [[1.5, -2.0], [3.0, 4.0]]
    assert isinstance(x.numpy(), np.ndarray) and x.numpy()[1, 0] == 3.0
    assert np.asarray(x).shape == (2, 2)
    assert bool(x[0, 0] > 1) and int(x[1, 1]) == 4 and float(x[0, 1]) == -2.0
    assert f"{x[1, 0]:.1f}" == "3.0"


def test_print_matches_torch_with_device_suffix(dev: torch.device) -> None:
    cpu = torch.tensor([[1.3344, 1.0886], [-1.3762, 1.0890]])
    assert repr(cpu.to(dev)) == repr(cpu)[:-1] + ", device='xla:0')"
    assert str(torch.tensor([1, 2], device=dev)) == "tensor([1, 2], device='xla:0')"
    assert repr(torch.ones(2, dtype=torch.float64, device=dev)) == (
        "tensor([1., 1.], device='xla:0', dtype=torch.float64)"
    )
    w = torch.ones(2, device=dev, requires_grad=True)
    assert repr(w).endswith("requires_grad=True)")
    assert "grad_fn=<MulBackward0>" in repr(w * 2)


def test_int64_and_float64_keep_their_width(dev: torch.device) -> None:
    big = torch.tensor([2**40 + 1, -(2**50)], device=dev)
    assert big.dtype == torch.int64
    assert (big * 2).tolist() == [2 * (2**40 + 1), -(2**51)]
    d = torch.tensor([1.0 + 1e-12], dtype=torch.float64, device=dev)
    assert (d - 1.0).item() == pytest.approx(1e-12, rel=1e-3)


def test_dtype_conversions(dev: torch.device) -> None:
    x = torch.tensor([1.7, -2.2, 3.5], device=dev)
    for dt in (torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.bool, torch.float64):
        torch.testing.assert_close(x.to(dt).cpu(), x.cpu().to(dt))


def test_cpu_and_to_roundtrip_and_module_to(dev: torch.device) -> None:
    lin = torch.nn.Linear(3, 2)
    ref = lin(torch.ones(1, 3))
    lin_x = lin.to(dev)
    assert all(p.device == dev for p in lin_x.parameters())
    out = lin_x(torch.ones(1, 3, device=dev))
    torch.testing.assert_close(out.cpu(), ref)
    assert out.to("cpu").device.type == "cpu"


def test_copy_copy_is_deep(dev: torch.device) -> None:
    x = torch.ones(3, device=dev)
    y = copy.copy(x)
    y.add_(1)
    assert x.tolist() == [1.0, 1.0, 1.0] and y.tolist() == [2.0, 2.0, 2.0]


def test_strides_look_contiguous(dev: torch.device) -> None:
    x = torch.ones(2, 3, device=dev)
    assert x.stride() == (3, 1)
    assert x.is_contiguous()


def test_deepcopy_of_a_model_keeps_its_parameters(dev: torch.device) -> None:
    model = torch.nn.Linear(3, 2).to(dev)
    twin = copy.deepcopy(model)
    assert [isinstance(p, torch.nn.Parameter) for p in twin.parameters()] == [True, True]
    with torch.no_grad():
        twin.weight.add_(1)
    assert not torch.equal(twin.weight.cpu(), model.weight.cpu())


def test_torch_save_of_xla_tensors_loads_back_on_the_device(dev: torch.device) -> None:
    import io

    buffer = io.BytesIO()
    weight = torch.nn.Parameter(torch.arange(4.0, device=dev))
    torch.save({"x": torch.ones(2, device=dev) * 3, "w": weight}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded["x"].device == dev and loaded["x"].tolist() == [3.0, 3.0]
    assert isinstance(loaded["w"], torch.nn.Parameter) and loaded["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_rng_state_can_be_saved_and_restored(dev: torch.device) -> None:
    state = torch.xla.get_rng_state()  # type: ignore[attr-defined]
    first = torch.rand(5, device=dev).cpu()
    torch.xla.set_rng_state(state)  # type: ignore[attr-defined]
    assert torch.equal(torch.rand(5, device=dev).cpu(), first)


def test_half_ops_apply_float_scalars_at_float32(dev: torch.device) -> None:
    # torch's kernels use the float scalar at float32 ("opmath"), not rounded to bf16 first.
    a = torch.randn(256, dtype=torch.bfloat16)
    b = torch.randn(256, dtype=torch.bfloat16)
    assert torch.equal((a.to(dev) * 0.6).cpu(), a * 0.6)
    assert torch.equal(torch.lerp(a.to(dev), b.to(dev), 0.4).cpu(), torch.lerp(a, b, 0.4))


def test_storage_tells_shared_memory_apart_and_has_no_host_memory(dev: torch.device) -> None:
    base = torch.zeros(4, 6, device=dev)
    view, alias, other = base[1:].t(), base.detach(), torch.zeros(4, 6, device=dev)
    ptr = base.storage().data_ptr()
    assert ptr != 0 and view.storage().data_ptr() == ptr and alias.storage().data_ptr() == ptr
    assert other.storage().data_ptr() != ptr
    assert base.storage().nbytes() == view.storage().nbytes() == 4 * 6 * 4
    with pytest.raises(NotImplementedError, match=r"move the tensor to the CPU"):
        base.storage().tolist()
