"""Mixed precision on the xla device against eager PyTorch on the CPU: autocast's cast lists
(docs/torch_xla_names.md, ``torch_xla.amp``), GradScaler training, and half-precision kernels."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xlalab.amp  # noqa: F401  (registers torch.autocast("xla"))


def _cast_inputs(args: tuple[torch.Tensor, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    return [a.to(dtype) if a.is_floating_point() and a.dtype is not torch.float64 else a for a in args]


# Norms reached through their modern aten names, and exp's siblings: float32 under autocast, as
# documented ("softmax, norms, losses and long reductions in float32") and as CUDA autocast does.
FLOAT32_CASES: dict[str, Callable[..., torch.Tensor]] = {
    "Tensor.norm": lambda t: t.norm(),
    "linalg.vector_norm": lambda t: torch.linalg.vector_norm(t, ord=1, dim=1),
    "linalg.matrix_norm": lambda t: torch.linalg.matrix_norm(t),
    "normalize": lambda t: F.normalize(t),
    "rms_norm": lambda t: F.rms_norm(t, (6,)),
    "softplus": F.softplus,
    "expm1": torch.expm1,
}


@pytest.mark.parametrize("name", list(FLOAT32_CASES))
def test_autocast_runs_norms_in_float32(dev: torch.device, name: str) -> None:
    fn = FLOAT32_CASES[name]
    x = torch.randn(4, 6).to(torch.bfloat16)
    with torch.autocast("xla"):
        out = fn(x.to(dev)).cpu()
    expected = fn(x.float())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)  # float32 summation order


def test_autocast_runs_attention_in_bfloat16(dev: torch.device) -> None:
    # Eager's autocast lists scaled_dot_product_attention itself; without it only the
    # matmuls inside ran in bfloat16 and a float32 result came out.
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    qx = q.detach().to(dev).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.scaled_dot_product_attention(q, q, q)
    with torch.autocast("xla"):
        out = F.scaled_dot_product_attention(qx, qx, qx)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), expected, rtol=1.6e-2, atol=1e-2)
    out.float().sum().backward()
    expected.float().sum().backward()
    assert qx.grad is not None and q.grad is not None
    assert qx.grad.dtype == torch.float32
    torch.testing.assert_close(qx.grad.cpu(), q.grad, rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize(
    ("self_dtype", "src_dtype"),
    [(torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16)],
)
def test_autocast_promotes_index_copy(
    dev: torch.device, self_dtype: torch.dtype, src_dtype: torch.dtype
) -> None:
    # torch_xla and eager CPU autocast cast index_copy's tensors to the widest; without it a
    # bfloat16 self with a float32 source raised.
    x, src, index = torch.randn(4, 3).to(self_dtype), torch.randn(2, 3).to(src_dtype), torch.tensor([2, 0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = x.index_copy(0, index, src)
    with torch.autocast("xla"):
        out = x.to(dev).index_copy(0, index.to(dev), src.to(dev)).cpu()
    assert out.dtype == expected.dtype
    assert torch.equal(out, expected)


def test_autocast_index_copy_leaves_float64_alone(dev: torch.device) -> None:
    x, src, index = torch.randn(4, 3, dtype=torch.float64), torch.randn(2, 3), torch.tensor([2, 0])
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="same dtype"):
        x.index_copy(0, index, src)
    with torch.autocast("xla"), pytest.raises(RuntimeError, match="same dtype"):
        x.to(dev).index_copy(0, index.to(dev), src.to(dev))


def test_autocast_lists_and_nesting(dev: torch.device) -> None:
    x = torch.randn(4, 6)
    xd = x.to(dev)
    with torch.autocast("xla"):
        mm = xd @ xd.t()
        soft = F.softmax(mm, -1)
        with torch.autocast("xla", enabled=False):
            plain = xd @ xd.t()
        with torch.autocast("xla", dtype=torch.float16):
            half = xd @ xd.t()
    assert (mm.dtype, soft.dtype, plain.dtype, half.dtype) == (
        torch.bfloat16,
        torch.float32,
        torch.float32,
        torch.float16,
    )
    xb = x.to(torch.bfloat16)
    assert torch.equal(mm.cpu(), xb @ xb.t())
    assert torch.equal(soft.cpu(), F.softmax((xb @ xb.t()).float(), -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.complex64])
@pytest.mark.parametrize("op", ["tanh", "sigmoid"])
def test_tanh_sigmoid_backward_round_as_eager(dev: torch.device, dtype: torch.dtype, op: str) -> None:
    # Eager's CPU kernels compute bfloat16 (and tanh's float16) in float32 and round once; the
    # lowerings rounded 1 - y * y in the half type, an ulp off on many gradients.
    torch.manual_seed(0)
    x = (torch.randn(512) * 3).to(dtype)
    g = torch.randn(512).to(dtype)
    forward, backward = {
        "tanh": (torch.tanh, torch.ops.aten.tanh_backward),
        "sigmoid": (torch.sigmoid, torch.ops.aten.sigmoid_backward),
    }[op]
    y = forward(x)
    expected = backward(g, y)
    out = backward(g.to(dev), y.to(dev)).cpu()
    assert out.dtype == expected.dtype
    assert torch.equal(out, expected)


def _train_with_scaler(
    device: torch.device | str, dtype: torch.dtype
) -> tuple[list[float], list[float], list[torch.Tensor], dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(device_type, init_scale=2.0**8, growth_interval=2)
    gen = torch.Generator().manual_seed(1)
    losses, scales = [], []
    for step in range(4):
        x, y = (
            torch.randn(5, 6, generator=gen).to(device),
            torch.randint(0, 3, (5,), generator=gen).to(device),
        )
        with torch.autocast(device_type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if step == 1:  # an overflowing step: skipped, and the scale halves
            model[0].weight.grad[0, 0] = float("inf")
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        state = scaler.state_dict()
        scaler = torch.amp.GradScaler(device_type)
        scaler.load_state_dict(state)
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, [p.detach().cpu() for p in model.parameters()], scaler.state_dict()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grad_scaler_training_matches_eager(dev: torch.device, dtype: torch.dtype) -> None:
    losses, scales, params, state = _train_with_scaler(dev, dtype)
    e_losses, e_scales, e_params, e_state = _train_with_scaler("cpu", dtype)
    assert scales == e_scales == [256.0, 128.0, 128.0, 256.0]
    assert state == e_state
    torch.testing.assert_close(losses, e_losses, rtol=1e-6, atol=1e-6)
    for p, e in zip(params, e_params, strict=True):
        torch.testing.assert_close(p, e, rtol=1e-6, atol=1e-6)
