"""Vision ops on xla:0 against eager CPU: values, gradients of inputs and weights, and the
strides eager gives results, channels-last inputs included.

Eager's CPU convolution, batch norm, ``cat`` and the random ``*_like`` ops lay out their result
as a channels-last input (or, for a convolution, weight) is; a later ``view``, ``is_contiguous``
or ``stride()`` sees it. Convolutions and resampling with groups, dilation, padding modes,
``align_corners``, antialiasing and im2col, norms, and a small ResNet block and UNet trained a
few SGD steps, equal eager's too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xlalab

DEV = xlalab.device()
N, C, H, W = 2, 4, 6, 6


def _cl(*shape: int) -> torch.Tensor:
    """A channels-last tensor of ``shape`` (NCHW or NCDHW)."""
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    return torch.randn(*shape).contiguous(memory_format=fmt)


def _leaves(inputs: tuple[torch.Tensor, ...], device: str | torch.device) -> list[torch.Tensor]:
    """Copies of ``inputs`` on ``device``, keeping their strides; floating ones require grad."""
    out = []
    for t in inputs:
        leaf = t.detach().to(device)
        out.append(leaf.requires_grad_() if t.is_floating_point() else leaf)
    return out


def _strides(t: torch.Tensor) -> tuple[int | None, ...]:
    """``t``'s strides, but for its dims of size 1 (where eager's kernels write arbitrary ones:
    a depthwise weight's gradient, channels-last, has a stride of 1 for its one input channel)."""
    return tuple(None if n == 1 else s for n, s in zip(t.shape, t.stride()))


def _compare(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, atol: float = 1e-4) -> None:
    """``fn`` on xla equals ``fn`` on the CPU: the result's values and strides, and the
    gradients (values and strides) of every floating input after a backward."""
    eager_in, lazy_in = _leaves(inputs, "cpu"), _leaves(inputs, DEV)
    expected, got = fn(*eager_in), fn(*lazy_in)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected, atol=atol, rtol=1e-4)
    seed = torch.randn(expected.shape)
    (expected * seed).sum().backward()
    (got * seed.to(DEV)).sum().backward()
    for e, x in zip(eager_in, lazy_in):
        if e.grad is not None:
            assert x.grad is not None
            assert _strides(x.grad) == _strides(e.grad)
            torch.testing.assert_close(x.grad.cpu(), e.grad, atol=atol, rtol=1e-4)


def _nhwc(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 3, 1, 2)


# A channels-last input or weight makes eager's CPU kernel give a channels-last result.
CHANNELS_LAST: list[tuple[str, Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]] = [
    (
        "conv2d_input",
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
        (_cl(N, C, H, W), torch.randn(6, C, 3, 3), torch.randn(6)),
    ),
    ("conv2d_weight", lambda x, w: F.conv2d(x, w, stride=2), (torch.randn(N, C, H, W), _cl(6, C, 3, 3))),
    (
        "conv2d_permuted",
        lambda x, w: F.conv2d(_nhwc(x), w, padding="same"),
        (torch.randn(N, H, W, C), torch.randn(3, C, 3, 3)),
    ),
    (
        "depthwise",
        lambda x, w: F.conv2d(x, w, groups=C, padding=1),
        (_cl(N, C, H, W), torch.randn(2 * C, 1, 3, 3)),
    ),
    (
        "conv3d",
        lambda x, w: F.conv3d(x, w, padding=1, groups=2),
        (_cl(N, C, 3, 4, 5), torch.randn(2, 2, 3, 3, 3)),
    ),
    (
        "conv1d_permuted",
        lambda x, w: F.conv1d(x.permute(0, 2, 1), w, padding=1),
        (torch.randn(N, 7, C), torch.randn(3, C, 3)),
    ),
    (
        "conv_transpose2d",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1),
        (_cl(N, C, H, W), torch.randn(C, 3, 3, 3)),
    ),
    (
        "batch_norm_train",
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        (_cl(N, C, H, W), torch.randn(C), torch.randn(C)),
    ),
    (
        "cat",
        lambda x, y: torch.cat([_nhwc(x), _nhwc(y)], 1),
        (torch.randn(N, H, W, C), torch.randn(N, H, W, 2)),
    ),
    (
        "stack",
        lambda x, y: torch.stack([_nhwc(x), _nhwc(y)]),
        (torch.randn(N, H, W, C), torch.randn(N, H, W, C)),
    ),
]


@pytest.mark.parametrize(("fn", "inputs"), [c[1:] for c in CHANNELS_LAST], ids=[c[0] for c in CHANNELS_LAST])
def test_a_channels_last_operand_gives_eagers_layout_values_and_gradients(
    fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]
) -> None:
    _compare(fn, *inputs)


def test_batch_norm_module_on_a_channels_last_input_updates_its_statistics_and_keeps_the_layout() -> None:
    torch.manual_seed(0)
    eager = nn.BatchNorm2d(C)
    lazy = copy.deepcopy(eager).to(DEV)
    x = _cl(N, C, H, W)
    expected, got = eager(x), lazy(x.to(DEV))
    assert got.stride() == expected.stride() == x.stride()
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(lazy.running_mean.cpu(), eager.running_mean)
    torch.testing.assert_close(lazy.running_var.cpu(), eager.running_var)


@pytest.mark.parametrize(
    "draw",
    [
        lambda t: F.dropout(t, 0.5),
        torch.rand_like,
        torch.randn_like,
        lambda t: torch.randint_like(t, 5),
    ],
    ids=["dropout", "rand_like", "randn_like", "randint_like"],
)
def test_random_ops_lay_out_their_result_as_a_channels_last_input(
    draw: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    x = _cl(N, C, H, W)
    got = draw(x.to(DEV))
    assert got.stride() == draw(x).stride() == x.stride()
    assert got.cpu().shape == x.shape


def test_dropout_of_a_channels_last_input_scales_the_elements_it_keeps() -> None:
    x = _cl(N, C, H, W) + 10  # no element is 0: a kept one is 2x
    got = F.dropout(x.to(DEV), 0.5).cpu()
    kept = got != 0
    torch.testing.assert_close(got[kept], 2 * x[kept])


# Convolutions, resampling, im2col and norms with their options, row-major inputs.
SWEEP: list[tuple[str, Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]] = [
    (
        "conv2d_groups_dilation",
        lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=2, dilation=2, groups=2),
        (torch.randn(N, C, H, W), torch.randn(6, 2, 3, 3), torch.randn(6)),
    ),
    (
        "conv1d_same",
        lambda x, w: F.conv1d(x, w, padding="same", dilation=2),
        (torch.randn(N, C, 9), torch.randn(3, C, 4)),
    ),
    (
        "conv2d_circular",
        lambda x, w: F.conv2d(F.pad(x, (2, 2, 1, 1), mode="circular"), w, stride=2),
        (torch.randn(N, C, H, W), torch.randn(3, C, 3, 3)),
    ),
    (
        "conv_transpose3d",
        lambda x, w, b: F.conv_transpose3d(
            x, w, b, stride=(2, 1, 2), padding=1, output_padding=(1, 0, 1), groups=2
        ),
        (torch.randn(N, C, 3, 4, 3), torch.randn(C, 1, 3, 3, 2), torch.randn(2)),
    ),
    (
        "conv_transpose1d",
        lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1, groups=C, dilation=2),
        (torch.randn(N, C, 7), torch.randn(C, 2, 3)),
    ),
    (
        "bicubic_align_corners",
        lambda x: F.interpolate(x, scale_factor=(1.7, 0.6), mode="bicubic", align_corners=True),
        (torch.randn(N, C, H, W),),
    ),
    (
        "bilinear_antialias",
        lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True),
        (torch.randn(N, C, H, W),),
    ),
    (
        "trilinear_recompute",
        lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear", recompute_scale_factor=True),
        (torch.randn(N, C, 3, 4, 5),),
    ),
    ("area", lambda x: F.interpolate(x, size=(4, 5), mode="area"), (torch.randn(N, C, H, W),)),
    (
        "nearest_exact",
        lambda x: F.interpolate(x, scale_factor=1.7, mode="nearest-exact"),
        (torch.randn(N, C, H, W),),
    ),
    (
        "grid_sample_bicubic_reflection",
        lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode="reflection", align_corners=False),
        (torch.randn(N, C, H, W), torch.rand(N, 5, 7, 2) * 2.6 - 1.3),
    ),
    (
        "affine_grid_sample",
        lambda x, theta: F.grid_sample(
            x,
            F.affine_grid(theta, [N, C, 5, 7], align_corners=True),
            padding_mode="border",
            align_corners=True,
        ),
        (torch.randn(N, C, H, W), torch.randn(N, 2, 3)),
    ),
    (
        "pixel_unshuffle",
        lambda x: F.pixel_shuffle(F.pixel_unshuffle(x, 2) * 2, 2),
        (torch.randn(N, C, H, W),),
    ),
    (
        "unfold_fold",
        lambda x: F.fold(
            F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(2, 3)),
            (H, W),
            (2, 3),
            dilation=(2, 1),
            padding=1,
            stride=(2, 3),
        ),
        (torch.randn(N, C, H, W),),
    ),
    (
        "group_norm",
        lambda x, w, b: F.group_norm(x, 2, w, b),
        (torch.randn(N, C, H, W), torch.randn(C), torch.randn(C)),
    ),
    (
        "instance_norm",
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
        (torch.randn(N, C, H, W), torch.randn(C), torch.randn(C)),
    ),
    ("local_response_norm", lambda x: F.local_response_norm(x, 3), (torch.randn(N, C, H, W),)),
]


@pytest.mark.parametrize(("fn", "inputs"), [c[1:] for c in SWEEP], ids=[c[0] for c in SWEEP])
def test_vision_op_values_and_gradients_equal_eager(
    fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]
) -> None:
    _compare(fn, *inputs, atol=1e-3)


class _ResBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(C, C, 3, padding=1, bias=False), nn.BatchNorm2d(C)
        self.c2, self.b2 = nn.Conv2d(C, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8)
        self.down = nn.Sequential(nn.Conv2d(C, 8, 1, stride=2, bias=False), nn.BatchNorm2d(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(x + self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(x)) + self.down(x))


class _UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(C, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU())
        self.e2 = nn.Sequential(
            nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.d1 = nn.Sequential(
            nn.Conv2d(16, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU(), nn.Conv2d(8, 3, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.e1(x)
        return self.d1(torch.cat([self.up(self.e2(a)), a], 1))


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("model", [_ResBlock, _UNet], ids=["resnet_block", "unet"])
def test_training_steps_equal_eager(model: type[nn.Module], channels_last: bool) -> None:
    torch.manual_seed(0)
    eager = model()
    lazy = copy.deepcopy(eager).to(DEV)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, lazy)]
    x = _cl(N, C, H, W) if channels_last else torch.randn(N, C, H, W)
    for _ in range(2):
        expected, got = eager(x), lazy(x.to(DEV))
        assert got.stride() == expected.stride()
        seed = torch.randn(expected.shape)
        (expected * seed).sum().backward()
        (got * seed.to(DEV)).sum().backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        xlalab.sync()
        torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
    for e, x_ in zip(eager.state_dict().values(), lazy.state_dict().values()):
        torch.testing.assert_close(x_.cpu(), e, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_reads_a_nan_or_infinite_grid_value_as_eager(mode: str, padding_mode: str) -> None:
    # Eager's clip to the border takes a NaN to 0 (max(NaN, 0)); reflected, an infinity is a NaN.
    x = torch.arange(20.0).reshape(1, 1, 4, 5)
    nan, inf = float("nan"), float("inf")
    grid = torch.tensor([[[[0.1, 0.2], [nan, 0.0], [inf, 0.3], [-inf, 0.5], [0.0, nan]]]])
    expected = F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=False)
    got = F.grid_sample(x.to(DEV), grid.to(DEV), mode=mode, padding_mode=padding_mode, align_corners=False)
    torch.testing.assert_close(got.cpu(), expected)
