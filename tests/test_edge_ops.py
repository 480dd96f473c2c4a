"""Edge cases of everyday ops on xla, each against eager PyTorch on the CPU: the same values,
dtypes and shapes, or the same error (type and message) raised by the op itself, never by a
later sync.

Classes: ops that take a dim, on a 0-d tensor (torch takes dim 0 and -1 there as the one dim
of size 1), padding (every ``F.pad`` mode, in 1-3 spatial dims, padding eager refuses included, and
the backward of reflect/replicate), ``Tensor.view(dtype)`` across element sizes (reads and writes
through the view), the window functions, and ``arange`` with integer dtypes and fractional
arguments (also into ``out=``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xlalab
import xlalab.debug.metrics as met
from xlalab.runtime import backend

Outcome = Any  # the op's result, or the exception it raised


def _outcome(fn: Callable[..., Any], *args: Any) -> Outcome:
    try:
        return fn(*args)
    except Exception as e:  # the exception is what gets compared
        return e


def _assert_same(eager: Outcome, lazy: Outcome) -> None:
    """``lazy`` (computed on xla) is what eager gave: equal tensors, or the same error."""
    if isinstance(eager, Exception):
        assert isinstance(lazy, Exception), f"eager raises {eager!r}; xla gave a value instead"
        # A message that names the device names xla's (as eager's would on another device).
        assert (type(lazy), str(lazy).replace("device=xla:0", "device=cpu")) == (type(eager), str(eager))
        return
    assert not isinstance(lazy, Exception), f"xla raised {lazy!r}; eager gave a value"
    if isinstance(eager, (tuple, list)):
        assert len(lazy) == len(eager)
        for e, x in zip(eager, lazy, strict=True):
            _assert_same(e, x)
        return
    lazy = lazy.cpu()
    assert (lazy.dtype, lazy.shape) == (eager.dtype, eager.shape)
    if eager.dtype in (torch.float16, torch.bfloat16):
        # A few ulps: torch's C++ composites (bartlett_window) round some steps differently
        # from the same ops dispatched one by one.
        torch.testing.assert_close(lazy, eager, rtol=4e-3, atol=1e-3, equal_nan=True)
    elif eager.dtype.is_floating_point or eager.dtype.is_complex:
        torch.testing.assert_close(lazy, eager, rtol=1e-6, atol=1e-6, equal_nan=True)
    else:
        assert torch.equal(lazy, eager)


def _differential(
    fn: Callable[..., Any], inputs: Callable[[], tuple[torch.Tensor, ...]], dev: torch.device
) -> None:
    eager = _outcome(fn, *inputs())
    lazy = _outcome(fn, *[t.to(dev) for t in inputs()])
    _assert_same(eager, lazy)


# --- padding ------------------------------------------------------------------------------

_SHAPES = {1: (2, 3, 4), 2: (1, 2, 3, 4), 3: (1, 1, 2, 3, 4)}
_PADS = {
    "fits": lambda nd: (1, 2) * nd,
    "as_large_as_the_input": lambda nd: (4, 4) * nd,  # reflect refuses: pad >= size
    "one_side_too_large": lambda nd: (0, 3) + (1, 0) * (nd - 1),
    "grow_and_crop": lambda nd: (1, -1) * nd,
    "crop_and_grow": lambda nd: (-1, 2) + (1, 0) * (nd - 1),
    "crop_to_nothing": lambda nd: (-2, -2) * nd,
    "larger_than_twice_the_input": lambda nd: (9, 0) * nd,  # circular refuses: wraps twice
    "odd_length": lambda nd: (1,) * (2 * nd - 1),
    "too_many_dims": lambda nd: (1, 1) * (nd + 3),
}
_MODES = ("reflect", "replicate", "circular", "constant")


@pytest.mark.parametrize("pads", sorted(_PADS))
@pytest.mark.parametrize("nd", (1, 2, 3))
@pytest.mark.parametrize("mode", _MODES)
def test_pad(mode: str, nd: int, pads: str, dev: torch.device) -> None:
    pad = _PADS[pads](nd)
    _differential(
        lambda x: F.pad(x, pad, mode=mode),
        lambda: (torch.arange(float(torch.Size(_SHAPES[nd]).numel())).reshape(_SHAPES[nd]),),
        dev,
    )


@pytest.mark.parametrize(
    "op, shape, pad",
    [
        (torch.ops.aten.reflection_pad1d, (3, 5), [2, 4]),  # unbatched
        (torch.ops.aten.reflection_pad2d, (2, 3, 3), [3, 0, 0, 0]),
        (torch.ops.aten.reflection_pad3d, (1, 2, 2, 2), [1, 1, 1, 1, 2, 1]),
        (torch.ops.aten.replication_pad1d, (0, 2, 3), [1, 1]),  # empty batch
        (torch.ops.aten.replication_pad2d, (4, 4), [1, 1, 1, 1]),  # too few dims
        (torch.ops.aten.replication_pad3d, (1, 2, 2, 2), [-3, 0, 0, 0, 0, 0]),  # negative output size
    ],
    ids=lambda v: getattr(v, "__name__", str(v)).replace(" ", ""),
)
def test_pad_ops_directly(op: Any, shape: tuple[int, ...], pad: list[int], dev: torch.device) -> None:
    _differential(
        lambda x: op(x, pad), lambda: (torch.randn(shape, generator=torch.Generator().manual_seed(0)),), dev
    )


@pytest.mark.parametrize("dtype", (torch.float64, torch.bfloat16, torch.int32, torch.bool))
@pytest.mark.parametrize("mode", ("reflect", "replicate"))
def test_pad_dtypes(mode: str, dtype: torch.dtype, dev: torch.device) -> None:
    _differential(
        lambda x: F.pad(x, (2, 1, 1, 0), mode=mode),
        lambda: ((torch.arange(12) % 5).reshape(1, 3, 4).to(dtype),),
        dev,
    )


@pytest.mark.parametrize("pad", [(2, 1, 1, 2), (-1, 3, 0, 1)], ids=("grow", "crop"))
@pytest.mark.parametrize("mode", ("reflect", "replicate"))
def test_pad_backward(mode: str, pad: tuple[int, ...], dev: torch.device) -> None:
    def grad(x: torch.Tensor) -> torch.Tensor:
        x.requires_grad_(True)
        y = F.pad(x, pad, mode=mode)
        weights = torch.arange(float(y.numel()), device=x.device).reshape(y.shape)
        (y * weights).sum().backward()
        assert x.grad is not None
        return x.grad

    _differential(grad, lambda: (torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(1)),), dev)


# --- Tensor.view(dtype) -------------------------------------------------------------------

_VIEWS = [
    (torch.float32, (4, 5), torch.int32),
    (torch.float32, (4, 5), torch.uint8),
    (torch.float32, (4, 5), torch.int16),
    (torch.float32, (4, 5), torch.bfloat16),
    (torch.float32, (3, 4), torch.float64),
    (torch.float64, (2, 3), torch.float16),
    (torch.uint8, (2, 8), torch.float32),
    (torch.int8, (3, 8), torch.int64),
    (torch.int16, (6,), torch.int8),
    (torch.bool, (2, 4), torch.uint8),
    (torch.uint8, (2, 4), torch.bool),
    (torch.bool, (2, 4), torch.int16),
    (torch.complex64, (2, 3), torch.float32),
    (torch.complex64, (2, 3), torch.float64),
    (torch.float32, (2, 4), torch.complex64),
    (torch.int16, (2, 8), torch.complex64),
    (torch.float32, (), torch.int32),
    (torch.complex64, (), torch.int64),
    (torch.float32, (0, 4), torch.uint8),
]


def _bits(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Values whose bytes vary (and whose views hold no NaN payloads to compare)."""
    n = torch.Size(shape).numel()
    if dtype == torch.bool:
        return (torch.arange(n) % 3 == 0).reshape(shape)
    if dtype.is_complex or dtype.is_floating_point:
        return (torch.arange(n, dtype=torch.float64) / 7 + 0.5).reshape(shape).to(dtype)
    return (torch.arange(n) * 37 % 100).reshape(shape).to(dtype)


@pytest.mark.parametrize("src, shape, target", _VIEWS, ids=lambda v: str(v).removeprefix("torch."))
def test_view_dtype(src: torch.dtype, shape: tuple[int, ...], target: torch.dtype, dev: torch.device) -> None:
    _differential(lambda x: x.view(target), lambda: (_bits(src, shape),), dev)


def _write_through_same_size(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = x.view(torch.int32)
    v.add_(1)
    return x, v


def _write_through_smaller(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = x.view(torch.uint8)
    v[:, 3::4] = 0x40  # the high byte of every element
    return x, v


def _write_row_of_larger(x: torch.Tensor) -> torch.Tensor:
    x.view(torch.int16).view(torch.float64)[1].fill_(2.5)
    return x


def _base_write_seen_by_view(x: torch.Tensor) -> torch.Tensor:
    v = x.view(torch.int16)
    x.mul_(2)
    return v


@pytest.mark.parametrize(
    "case",
    [_write_through_same_size, _write_through_smaller, _write_row_of_larger, _base_write_seen_by_view],
    ids=lambda f: f.__name__.strip("_"),
)
def test_view_dtype_writes(case: Callable[[torch.Tensor], Any], dev: torch.device) -> None:
    _differential(case, lambda: (_bits(torch.float32, (2, 4)),), dev)


# Views eager refuses, for their shapes or (a dtype view) for their strides and storage offset:
# the same error, raised at the view.
_REFUSED_VIEWS = [
    (lambda x: x.view(torch.float32), torch.uint8, (3, 7)),  # size(-1) not divisible
    (lambda x: x.view(torch.uint8), torch.float32, ()),  # 0-d to another size
    (lambda x: x.t().view(torch.uint8), torch.float32, (2, 3)),  # stride(-1) != 1
    (lambda x: x[:, 1:5].view(torch.float32), torch.uint8, (3, 6)),  # storage offset
    (lambda x: x.view(3, 8), torch.float32, (3, 7)),  # not the same number of elements
]


@pytest.mark.parametrize("index", range(len(_REFUSED_VIEWS)))
def test_refused_views_raise_eagers_error(index: int, dev: torch.device) -> None:
    view, dtype, shape = _REFUSED_VIEWS[index]
    _differential(view, lambda: (_bits(dtype, shape),), dev)


# --- window functions ---------------------------------------------------------------------

_WINDOWS = {
    "hann": torch.hann_window,
    "hamming": torch.hamming_window,
    "blackman": torch.blackman_window,
    "bartlett": torch.bartlett_window,
    "kaiser": torch.kaiser_window,
}


@pytest.mark.parametrize("periodic", (True, False))
@pytest.mark.parametrize("length", (0, 1, 2, 7, 16))
@pytest.mark.parametrize("name", sorted(_WINDOWS))
def test_window(name: str, length: int, periodic: bool, dev: torch.device) -> None:
    fn = _WINDOWS[name]
    _assert_same(_outcome(fn, length, periodic), _outcome(lambda: fn(length, periodic, device=dev)))


@pytest.mark.parametrize(
    "call",
    [
        lambda d: torch.hann_window(8, dtype=torch.float64, device=d),
        lambda d: torch.hann_window(8, dtype=torch.bfloat16, device=d),
        lambda d: torch.bartlett_window(9, dtype=torch.float16, device=d),
        lambda d: torch.hamming_window(8, False, 0.6, 0.3, device=d),
        lambda d: torch.kaiser_window(10, False, 5.0, device=d),
        lambda d: torch.kaiser_window(8, True, 3.0, dtype=torch.float64, device=d),
        lambda d: torch.kaiser_window(8, dtype=torch.bfloat16, device=d),
        lambda d: torch.hann_window(-1, device=d),
        lambda d: torch.blackman_window(4, dtype=torch.int64, device=d),
        lambda d: torch.kaiser_window(4, dtype=torch.int32, device=d),
        lambda d: torch.kaiser_window(-2, device=d),
        lambda d: torch.stft(
            torch.arange(64.0, device=d), 16, window=torch.hann_window(16, device=d), return_complex=True
        ),
    ],
    ids=(
        "hann_f64",
        "hann_bf16",
        "bartlett_f16",
        "hamming_alpha_beta",
        "kaiser_beta",
        "kaiser_f64",
        "kaiser_bf16",
        "negative_length",
        "integer_dtype",
        "kaiser_integer_dtype",
        "kaiser_negative_length",
        "stft",
    ),
)
def test_window_arguments(call: Callable[[Any], torch.Tensor], dev: torch.device) -> None:
    _assert_same(_outcome(call, "cpu"), _outcome(call, dev))


# --- arange -------------------------------------------------------------------------------

_RANGES = [
    ((0, 5, 1.5), torch.int64),
    ((-2.5, 2.5, 0.5), torch.int32),  # the step truncates to 0: ten -2s
    ((-2.5, 2.5, 0.5), torch.int64),  # ...which int64 refuses
    ((2.5,), torch.int64),
    ((2.5,), torch.int16),
    ((5, 0, -0.7), torch.int8),
    ((0, 300), torch.uint8),
    ((0.5, 3.7, 0.3), torch.bfloat16),
    ((1, 2.5, 0.25), torch.float16),
    ((0.1, 0.9, 0.1), None),
    ((-3, 7, 3), None),
    ((3,), torch.float64),
    ((0, 5, -1), None),
    ((0, 5, 0), None),
    ((0, float("inf")), None),
    ((0, 5), torch.bool),
    ((0, 5), torch.complex64),
]


@pytest.mark.parametrize("args, dtype", _RANGES, ids=lambda v: str(v).removeprefix("torch."))
def test_arange(args: tuple[float, ...], dtype: torch.dtype | None, dev: torch.device) -> None:
    _assert_same(
        _outcome(lambda: torch.arange(*args, dtype=dtype)),
        _outcome(lambda: torch.arange(*args, dtype=dtype, device=dev)),
    )


@pytest.mark.parametrize(
    "args, out_dtype, out_size",
    [
        ((5,), torch.float32, 0),
        ((0, 5, 1.5), torch.int64, 5),
        ((0, 2, 0.25), torch.float64, 3),
        ((1, 4), torch.float16, 3),
    ],
    ids=("from_empty", "integer_same_size", "resized_larger", "half_same_size"),
)
@pytest.mark.filterwarnings("ignore:The number of elements in the out tensor")  # eager's, on resizing
def test_arange_out(
    args: tuple[float, ...], out_dtype: torch.dtype, out_size: int, dev: torch.device
) -> None:
    def arange_into(device: Any) -> torch.Tensor:
        out = torch.full((out_size,), -1, dtype=out_dtype, device=device)
        result = torch.arange(*args, out=out)
        assert result is out
        return out

    _assert_same(_outcome(arange_into, "cpu"), _outcome(arange_into, dev))


# --- the fixed paths stay on the device ---------------------------------------------------


def test_fixed_ops_run_without_cpu_fallback(dev: torch.device, fresh_metrics: None) -> None:
    import xlalab.debug.metrics as met

    x = torch.randn(1, 2, 5, 6, device=dev, requires_grad=True)
    y = F.pad(x, (2, 3, 1, 1), mode="reflect") + F.pad(x, (-1, 6, 2, 0), mode="replicate")
    y.sum().backward()
    window = torch.hann_window(16, device=dev) + torch.kaiser_window(16, device=dev)
    ints = torch.arange(0, 5, 1.5, dtype=torch.int64, device=dev)
    out = torch.empty(0, device=dev)
    torch.arange(0, 3, 0.5, out=out)
    viewed = torch.randn(4, 5, device=dev).view(torch.uint8).view(torch.bfloat16)
    xlalab.mark_step()
    assert met.executed_fallback_ops() == []
    assert met.counter_value("xla::reflection_pad2d_backward") == 1
    for t in (x.grad, window, ints, out, viewed):
        assert t is not None and t.device == dev


_ZERO_D_DIM_OPS: dict[str, Callable[[torch.Tensor], Any]] = {
    "flip": lambda t: t.flip(0),
    "flip_last": lambda t: t.flip(-1),
    "roll": lambda t: torch.roll(t, 1, 0),
    "cumsum": lambda t: t.cumsum(-1),
    "cumprod": lambda t: t.cumprod(0),
    "logcumsumexp": lambda t: t.logcumsumexp(0),
    "cummax": lambda t: t.cummax(0),
    "sort": lambda t: t.sort(0),
    "argsort": lambda t: t.argsort(-1),
    "topk": lambda t: t.topk(1, 0),
    "kthvalue": lambda t: t.kthvalue(1, 0),
    "softmax": lambda t: t.softmax(0),
    "log_softmax": lambda t: t.log_softmax(-1),
    "logsumexp": lambda t: t.logsumexp(0),
    "sum": lambda t: t.sum(0),
    "amax": lambda t: t.amax(-1),
    "argmax": lambda t: t.argmax(0),
    "norm": lambda t: t.norm(dim=0),
    "squeeze": lambda t: t.squeeze(0),
    "unsqueeze": lambda t: t.unsqueeze(-1),
    "index_select": lambda t: t.index_select(0, torch.tensor([0], device=t.device)),
    "gather": lambda t: t.gather(0, torch.tensor(0, device=t.device)),
}


@pytest.mark.parametrize("op", sorted(_ZERO_D_DIM_OPS))
def test_ops_taking_a_dim_on_a_zero_d_tensor(op: str, dev: torch.device) -> None:
    fn = _ZERO_D_DIM_OPS[op]
    x = torch.tensor(1.5)
    _assert_same(_outcome(fn, x), _outcome(fn, x.to(dev)))


def _integer_conv_cases(count: int) -> list[dict[str, Any]]:
    """Convolution geometries drawn from a fixed seed: 1-3 spatial dims, stride, padding,
    dilation, groups, transposed with output padding."""
    import random

    rng = random.Random(20261126)
    cases = []
    for i in range(count):
        nd, groups = rng.choice((1, 2, 3)), rng.choice((1, 2))
        transposed = i % 3 == 2
        stride = [rng.randint(1, 3) for _ in range(nd)]
        dilation = [rng.randint(1, 2) for _ in range(nd)]
        kernel = [rng.randint(1, 3) for _ in range(nd)]
        case = {
            "nd": nd, "groups": groups, "transposed": transposed, "stride": stride, "dilation": dilation,
            "padding": [rng.randint(0, (k - 1) * d) for k, d in zip(kernel, dilation, strict=True)],
            "output_padding": [rng.randint(0, max(s, d) - 1) for s, d in zip(stride, dilation, strict=True)]
            if transposed else [0] * nd,
            "input": [rng.randint(1, 2), groups * rng.randint(1, 2), *(rng.randint(5, 7) for _ in range(nd))],
            "kernel": kernel, "out_per_group": rng.randint(1, 2), "bias": rng.random() < 0.5,
        }  # fmt: skip
        cases.append(case)
    return cases


def _conv_id(case: dict[str, Any]) -> str:
    return f"{case['nd']}d{'-transposed' if case['transposed'] else ''}"


@pytest.mark.parametrize("case", _integer_conv_cases(12), ids=_conv_id)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_convolution(case: dict[str, Any], dtype: torch.dtype, dev: torch.device) -> None:
    """Integer convolutions equal eager's exactly, overflow wrapping included; they run on every
    backend: XLA:GPU has no integer convolution, so xlalab writes them out of slices and sums."""
    g = case["groups"]
    cin = case["input"][1]
    wshape = [cin, case["out_per_group"]] if case["transposed"] else [g * case["out_per_group"], cin // g]
    info = torch.iinfo(dtype)
    high = min(info.max, 2**40)  # int64 products overflow and wrap, as eager's do
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-high, high, case["input"], generator=gen, dtype=dtype)
    w = torch.randint(-high, high, wshape + case["kernel"], generator=gen, dtype=dtype)
    bias = torch.randint(-high, high, [w.shape[1] * g if case["transposed"] else w.shape[0]], dtype=dtype)
    bias = bias if case["bias"] else None

    def conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.aten.convolution(
            x, w, b, case["stride"], case["padding"], case["dilation"], case["transposed"],
            case["output_padding"], g,
        )  # fmt: skip

    # Where eager's kernels refuse a dtype (dilated int32), xla raises eager's error.
    on_dev = [x.to(dev), w.to(dev), None if bias is None else bias.to(dev)]
    _assert_same(_outcome(conv, x, w, bias), _outcome(lambda *a: conv(*a).cpu(), *on_dev))


def test_integer_convolution_uses_no_hlo_convolution(dev: torch.device) -> None:
    """XLA:GPU refuses an integer HLO convolution ("UNIMPLEMENTED", "All backends failed to
    find supported configs"); the program xlalab builds has none, on any platform."""
    from xlalab.debug.graph_dump import get_tensors_hlo

    x = torch.randint(-9, 9, (2, 4, 6, 6)).to(dev)
    y = F.conv2d(x, torch.randint(-9, 9, (4, 2, 3, 3)).to(dev), stride=2, padding=1, dilation=2, groups=2)
    z = F.conv_transpose2d(x, torch.randint(-9, 9, (4, 2, 2, 2)).to(dev), stride=2, output_padding=1)
    assert "convolution(" not in get_tensors_hlo([y, z])
    assert "convolution(" in get_tensors_hlo([F.conv2d(x.float(), torch.ones(4, 4, 3, 3).to(dev))])


def test_complex_numbers_through_sgn_dot_and_moments(dev: torch.device) -> None:
    # Formulas written for real numbers: sgn(z) is z/|z| (abs's gradient and so every |FFT|
    # loss's), dot does not conjugate (vdot does), a variance is |z - mean|^2 and real.
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(6, dtype=torch.complex64, generator=gen)
    w = torch.randn(6, dtype=torch.complex64, generator=gen)
    z[2] = 0  # sgn(0) is 0
    zx, wx = z.to(dev), w.to(dev)
    torch.testing.assert_close(zx.sgn().cpu(), z.sgn())
    torch.testing.assert_close(torch.dot(zx, wx).cpu(), torch.dot(z, w))
    torch.testing.assert_close(torch.vdot(zx, wx).cpu(), torch.vdot(z, w))
    torch.testing.assert_close((zx @ wx).cpu(), z @ w)
    m = torch.randn(3, 5, dtype=torch.complex64, generator=gen)
    for fn in (torch.var, torch.std):
        torch.testing.assert_close(fn(m.to(dev), dim=1).cpu(), fn(m, dim=1))
    var, mean = torch.var_mean(m.to(dev), dim=0)
    want_var, want_mean = torch.var_mean(m, dim=0)
    torch.testing.assert_close(var.cpu(), want_var)
    torch.testing.assert_close(mean.cpu(), want_mean)

    signal = torch.randn(2, 64, generator=gen)
    grads = []
    for d in ("cpu", dev):
        x = signal.to(d).requires_grad_()
        spec = torch.stft(x, 16, hop_length=4, window=torch.hann_window(16, device=d), return_complex=True)
        (grad,) = torch.autograd.grad(spec.abs().sum(), x)
        grads.append(grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-5)


def test_a_dtype_xla_has_no_type_for_is_refused_at_the_op(dev: torch.device) -> None:
    # complex32 (a float16 tensor times a complex number makes one in eager): the error names
    # the op and the fix where the program made it, not at the next sync.
    half = torch.ones(3, dtype=torch.float16, device=dev)
    with pytest.raises(RuntimeError, match=r"aten::mul makes a torch.complex32 tensor.*cast it to float32"):
        half * 1j
    with pytest.raises(RuntimeError, match=r"no XLA type for torch\.complex32"):
        half.to(torch.complex32)
    with pytest.raises(RuntimeError, match=r"no XLA type for torch\.complex32"):
        torch.ones(2, dtype=torch.complex32).to(dev)
    torch.testing.assert_close((half.float() * 1j).cpu(), torch.ones(3) * 1j)  # the fix works
    xlalab.mark_step()  # nothing was left pending by the refused ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_histc_bins_as_eager_does(dtype: torch.dtype, dev: torch.device) -> None:
    # A value's bin is decided by the last bit of (x - min) * bins / (max - min) in the input's
    # type: half types round after each step, as eager's kernel does, or a count moves bins.
    gen = torch.Generator().manual_seed(0)
    met.clear_all()
    cases = [(1, {"bins": 9}), (3, {"bins": 5, "min": -1.3, "max": 2.1})]
    cases.append((5, {"bins": 17, "min": -3, "max": 3}))
    for scale, kwargs in cases:
        for _ in range(10):
            x = (torch.randn(300, generator=gen) * scale).to(dtype)
            if "max" in kwargs:  # left out, in the last bin, left out
                x[:3] = torch.tensor([float("nan"), kwargs["max"], 1e4])
            assert torch.equal(torch.histc(x.to(dev), **kwargs).cpu(), torch.histc(x, **kwargs))
    assert met.executed_fallback_ops() == []
    # Bins over the data's range: eager refuses a range that is not finite; so does the device,
    # at the next sync (the values are on the device).
    x = torch.tensor([1.0, float("inf"), 3.0], dtype=dtype, device=dev)
    with pytest.raises(RuntimeError, match="range of the data is not finite"):
        torch.histc(x, bins=3).cpu()
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, bins=3, min=3, max=1)


def test_histc_of_integers_follows_cuda(dev: torch.device) -> None:
    # The CPU kernel refuses integers; CUDA's counts them, and Hugging Face's mixture-of-experts
    # layers count tokens per expert so on every accelerator: xla counts them as CUDA does.
    experts = torch.tensor([0, 3, 1, 1, 3, 3, 2, 7, -1], dtype=torch.int32)
    got = torch.histc(experts.to(dev), bins=4, min=0, max=3)
    assert got.dtype == torch.int32
    assert got.cpu().tolist() == torch.histc(experts.float(), bins=4, min=0, max=3).int().tolist()
    spread = torch.histc(torch.tensor([2, 5, 9], device=dev), bins=4)
    assert spread.dtype == torch.int64 and spread.cpu().tolist() == [1, 1, 0, 1]


def _grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> torch.Tensor:
    """torch._grouped_mm's groups one by one: what each defined row, column or group holds."""
    if offs is None:
        return a @ b
    ends = offs.tolist()
    starts = [0, *ends[:-1]]
    if a.dim() == 2 and b.dim() == 3:
        return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(zip(starts, ends))])
    if a.dim() == 3 and b.dim() == 2:
        return torch.cat([a[g] @ b[:, s:e] for g, (s, e) in enumerate(zip(starts, ends))], dim=1)
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])


_GROUPED_SHAPES = [((8, 4), (3, 4, 8)), ((3, 8, 4), (4, 8)), ((8, 8), (8, 8)), ((3, 8, 4), (3, 4, 8))]


@pytest.mark.parametrize("shapes", _GROUPED_SHAPES, ids=["2d-3d", "3d-2d", "2d-2d", "3d-3d"])
def test_grouped_mm_and_its_gradients(shapes: tuple[tuple[int, ...], ...], dev: torch.device) -> None:
    # Mixture-of-experts layers (Hugging Face's Mixtral) multiply each expert's tokens by its own
    # weights: one lowered op, forward and backward. Eager leaves what lies past the last offset
    # unwritten, so only the defined part of each result is compared (xla gives zeros there).
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=gen) for s in shapes)
    offs = None if a.dim() == b.dim() == 3 else torch.tensor([2, 3, 6], dtype=torch.int32)
    ax, bx = a.to(dev).requires_grad_(), b.to(dev).requires_grad_()
    met.clear_all()
    out = torch._grouped_mm(ax, bx, offs=None if offs is None else offs.to(dev))
    want = _grouped(a, b, offs)
    defined = tuple(slice(0, n) for n in want.shape)
    torch.testing.assert_close(out[defined].cpu(), want)
    weights = torch.randn(want.shape, generator=gen)
    grads = torch.autograd.grad((out[defined] * weights.to(dev)).sum(), [ax, bx])
    ae, be = a.clone().requires_grad_(), b.clone().requires_grad_()
    grads_want = torch.autograd.grad((_grouped(ae, be, offs) * weights).sum(), [ae, be])
    for got, w in zip(grads, grads_want):
        torch.testing.assert_close(got.cpu(), w)  # nothing past the groups: zeros on both sides
    assert met.executed_fallback_ops() == []


def test_triangle_indices_are_made_on_the_device(dev: torch.device) -> None:
    # tril_indices/triu_indices (pairwise features, attention over pairs) are constants of the
    # program, in torch's order, where they were made on the CPU and sent over.
    met.clear_all()
    for row, col, offset in [(0, 3, 0), (1, 1, 0), (3, 4, -1), (5, 6, 2), (4, 2, -7), (3, 3, 8)]:
        for make in (torch.tril_indices, torch.triu_indices):
            got = make(row, col, offset, device=dev, dtype=torch.int32)
            assert torch.equal(got.cpu(), make(row, col, offset, dtype=torch.int32))
    assert met.executed_fallback_ops() == []
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device=dev)


# Bags of 4, 0 (empty), 3 and 3 indices; index 4 repeats, and is the padding index where one is set.
_BAG_INDICES = [1, 2, 4, 5, 4, 3, 2, 9, 4, 4]
_BAG_OFFSETS = [0, 4, 4, 7]


_BAG_MODES = [("sum", False), ("sum", True), ("mean", False), ("max", False)]


@pytest.mark.parametrize(("mode", "weighted"), _BAG_MODES)
@pytest.mark.parametrize("padding_idx", [None, 4])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_values_and_gradients(
    mode: str, weighted: bool, padding_idx: int | None, include_last_offset: bool, dev: torch.device
) -> None:
    # Per-sample weights are for sum mode only.
    idx, offsets = torch.tensor(_BAG_INDICES), torch.tensor(_BAG_OFFSETS)
    if include_last_offset:
        offsets = torch.cat([offsets, torch.tensor([len(idx)])])
    gen = torch.Generator().manual_seed(0)
    weight, psw = torch.randn(10, 3, generator=gen), torch.rand(len(idx), generator=gen)

    def run(device: Any) -> list[torch.Tensor]:
        w = weight.to(device).requires_grad_()
        p = psw.to(device).requires_grad_() if weighted else None
        out = F.embedding_bag(
            idx.to(device), w, offsets.to(device), mode=mode, padding_idx=padding_idx,
            include_last_offset=include_last_offset, per_sample_weights=p,
        )  # fmt: skip
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(device)
        return [out, *torch.autograd.grad(out, [w] + ([p] if weighted else []), grad)]

    met.clear_all()
    for got, want in zip(run(dev), run("cpu"), strict=True):
        torch.testing.assert_close(got.cpu(), want)
    assert met.executed_fallback_ops() == []


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scales_gradients_by_each_index_frequency(mode: str, dev: torch.device) -> None:
    # scale_grad_by_freq divides each index's gradient by how often that index occurs, as
    # CUDA's kernel and F.embedding do. (Eager's CPU kernel divides by the count of another
    # index, the i-th smallest, so it is no reference here; the same bags made of F.embedding
    # rows are.)
    idx, offsets = torch.tensor(_BAG_INDICES), torch.tensor(_BAG_OFFSETS)
    bags = torch.searchsorted(offsets, torch.arange(len(idx)), right=True) - 1
    weight = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    grad = torch.randn(len(offsets), 3, generator=torch.Generator().manual_seed(1))

    w = weight.clone().requires_grad_()
    rows = F.embedding(idx, w, scale_grad_by_freq=True)
    want = torch.zeros(len(offsets), 3).index_add(0, bags, rows)
    if mode == "mean":
        want = want / torch.bincount(bags, minlength=len(offsets)).clamp_min(1)[:, None]
    (want_grad,) = torch.autograd.grad(want, w, grad)

    wd = weight.to(dev).requires_grad_()
    got = F.embedding_bag(idx.to(dev), wd, offsets.to(dev), mode=mode, scale_grad_by_freq=True)
    (got_grad,) = torch.autograd.grad(got, wd, grad.to(dev))
    torch.testing.assert_close(got.cpu(), want.detach())
    torch.testing.assert_close(got_grad.cpu(), want_grad)


def test_embedding_max_norm_renormalizes_the_rows_it_reads(dev: torch.device, fresh_metrics: None) -> None:
    weight = torch.randn(10, 4, generator=torch.Generator().manual_seed(0)) * 2
    idx = torch.tensor([[1, 2, 4], [4, 9, 0]])
    for norm_type in (2.0, 1.0, 3.0, float("inf")):
        eager_weight, lazy_weight = weight.clone(), weight.to(dev)
        want = F.embedding(idx, eager_weight, max_norm=1.5, norm_type=norm_type)
        got = F.embedding(idx.to(dev), lazy_weight, max_norm=1.5, norm_type=norm_type)
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(lazy_weight.cpu(), eager_weight)  # rows renormalized in place
    assert met.executed_fallback_ops() == []


def test_fake_quantize_module_runs_on_the_device_as_eager(dev: torch.device) -> None:
    # Quantization-aware training's FakeQuantize: a moving-average observer, then the per-tensor
    # fake quantization with tensor qparams (half steps round to even; the range clamps).
    import torch.ao.quantization as tq

    outs = []
    for device in ("cpu", dev):
        torch.manual_seed(0)
        fake_quant = tq.default_fake_quant().to(device)
        met.clear_all()
        got = []
        for step in range(3):
            x = torch.randn(16, 8, generator=torch.Generator().manual_seed(step)) * (step + 1)
            got.append(fake_quant(x.to(device)).cpu())
            xlalab.mark_step()
        outs.append((got, fake_quant.scale.cpu(), fake_quant.zero_point.cpu()))
    for want, have in zip(outs[0][0], outs[1][0], strict=True):
        assert torch.equal(have, want)
    assert torch.equal(outs[1][1], outs[0][1]) and torch.equal(outs[1][2], outs[0][2])
    # The observer's own check (min <= max) reads a bool; the quantization stays on the device.
    assert met.executed_fallback_ops() == ["aten::_local_scalar_dense"]


# (input lengths, target lengths, blank, reduction, zero_infinity): full and shorter inputs,
# an empty target, an empty input, a target no alignment reaches (an infinite loss, then zeroed
# by zero_infinity), a blank that is not 0.
_CTC_CASES = [
    ([8, 6, 7], [3, 2, 4], 0, "mean", False),
    ([8, 0, 3], [2, 0, 0], 0, "none", False),
    ([8, 2, 8], [4, 3, 0], 0, "none", False),
    ([8, 2, 8], [4, 3, 0], 0, "sum", True),
    ([8, 7, 6], [3, 3, 1], 2, "sum", False),
]


@pytest.mark.parametrize("case", _CTC_CASES, ids=lambda c: f"{c[0]}-{c[1]}-blank{c[2]}-{c[3]}-{c[4]}")
@pytest.mark.parametrize("targets_form", ["padded", "concatenated"])
@pytest.mark.parametrize("lengths_as", ["lists", "tensors"])
def test_ctc_loss_and_its_gradient(case: Any, targets_form: str, lengths_as: str, dev: torch.device) -> None:
    input_lengths, target_lengths, blank, reduction, zero_infinity = case
    gen = torch.Generator().manual_seed(0)
    log_probs = torch.randn(8, 3, 5, generator=gen).log_softmax(2)
    # Labels from a small alphabet, so repeats (which need a blank between them) occur.
    targets = torch.randint(0, 4, (3, 4), generator=gen)
    targets = targets + (targets >= blank).long()  # never the blank
    if targets_form == "concatenated":
        targets = torch.cat([targets[b, :n] for b, n in enumerate(target_lengths)])

    def run(device: Any) -> list[torch.Tensor]:
        lp = log_probs.to(device).requires_grad_()
        lengths = [input_lengths, target_lengths]
        if lengths_as == "tensors":
            lengths = [torch.tensor(v).to(device) for v in lengths]
        loss = F.ctc_loss(lp, targets.to(device), *lengths, blank=blank, reduction=reduction,
                          zero_infinity=zero_infinity)  # fmt: skip
        grad_out = torch.rand(loss.shape, generator=torch.Generator().manual_seed(1)).to(device)
        return [loss, *torch.autograd.grad(loss, lp, grad_out)]

    met.clear_all()
    got, want = run(dev), run("cpu")
    assert met.executed_fallback_ops() == []
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)


@pytest.mark.parametrize(
    ("input_lengths", "target_lengths", "targets_form", "message"),
    [
        ([8, 9], [2, 2], "padded", "input_lengths to have values from 0 to 8"),
        ([8, -1], [2, 2], "padded", "input_lengths to have values from 0 to 8"),
        ([8, 8], [2, 5], "padded", "target_lengths to have values at most 4"),
        ([8, 8], [2, 3], "concatenated", "target_lengths to sum to 4"),
    ],
)
def test_ctc_lengths_that_do_not_fit_raise_at_the_sync(
    input_lengths: list[int], target_lengths: list[int], targets_form: str, message: str, dev: torch.device
) -> None:
    # Tensor lengths stay on the device, so eager's host checks of them become device checks.
    log_probs = torch.randn(8, 2, 5).log_softmax(2).to(dev)
    padded = targets_form == "padded"
    targets = torch.tensor([[1, 2, 3, 4], [2, 2, 1, 3]]) if padded else torch.tensor([1, 2, 2, 2])
    with pytest.raises(RuntimeError, match=message):
        F.ctc_loss(log_probs, targets.to(dev), torch.tensor(input_lengths).to(dev),
                   torch.tensor(target_lengths).to(dev)).cpu()  # fmt: skip
    # Nothing is left to raise later: the next good loss computes.
    good = F.ctc_loss(log_probs, targets.to(dev), torch.tensor([8, 8]).to(dev), torch.tensor([2, 2]).to(dev))
    assert torch.isfinite(good.cpu())


def _fused_fake_quant(kind: str) -> Any:
    import torch.ao.quantization as tq

    if kind == "affine":  # the default QAT activation observer (x86, fbgemm)
        return tq.FusedMovingAvgObsFakeQuantize(
            observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255, reduce_range=True
        )
    if kind == "symmetric":
        return tq.FusedMovingAvgObsFakeQuantize(
            observer=tq.MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
            qscheme=torch.per_tensor_symmetric,
        )  # fmt: skip
    return tq.FusedMovingAvgObsFakeQuantize(  # the default QAT weight observer, one range per row
        observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
        qscheme=torch.per_channel_symmetric,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "shape"),
    [("affine", (16, 8)), ("symmetric", (16, 8)), ("per_row", (6, 4)), ("per_row", (6, 3, 2, 2))],
)
def test_fused_observer_fake_quantize_steps_exactly_as_eager(
    kind: str, shape: tuple[int, ...], dev: torch.device
) -> None:
    # QAT's fused observer: the running range, the scale and zero point it chooses, the quantized
    # values and their gradient must be eager's exactly (a one-ulp range moves a zero point), step
    # after step, with the observer and the fake quantization switched off and on again.
    import copy

    eager_fq = _fused_fake_quant(kind)
    lazy_fq = copy.deepcopy(eager_fq).to(dev)
    for step in range(6):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(step)) * (step + 1) + 0.5 - step % 2
        if step == 2:
            x = x.abs()  # a range that does not reach below zero
        for fq in (eager_fq, lazy_fq):
            {3: fq.disable_observer, 4: fq.disable_fake_quant}.get(step, lambda: None)()
            if step == 4:
                fq.enable_observer()
            if step == 5:
                fq.enable_fake_quant()
        want_x, got_x = x.clone().requires_grad_(), x.to(dev).requires_grad_()
        want, got = eager_fq(want_x), lazy_fq(got_x)
        want.sum().backward()
        got.sum().backward()
        xlalab.mark_step()
        if step == 0:
            met.clear_all()  # a per-row observer's first call, which sizes its empty range, runs eagerly
        observers = (eager_fq.activation_post_process, lazy_fq.activation_post_process)
        pairs = [(want, got), (want_x.grad, got_x.grad), (eager_fq.scale, lazy_fq.scale),
                 (eager_fq.zero_point, lazy_fq.zero_point), (observers[0].min_val, observers[1].min_val),
                 (observers[0].max_val, observers[1].max_val)]  # fmt: skip
        for w, g in pairs:
            assert torch.equal(g.detach().cpu(), w.detach()), (step, w, g)
    assert met.executed_fallback_ops() == []


def test_fused_fake_quantize_of_an_empty_range_raises_eagers_error(dev: torch.device) -> None:
    fq = _fused_fake_quant("affine").to(dev)
    fq.disable_observer()  # never observed: the range is still (inf, -inf)
    with pytest.raises(RuntimeError, match="min should be less than or equal to max"):
        fq(torch.randn(4, 4).to(dev)).cpu()


def test_quantization_aware_training_runs_on_the_device_as_eager(dev: torch.device) -> None:
    # torch.ao's eager-mode QAT with the default x86 config: fused observers on the activations
    # and per-row ones on the weights. After the first step (which sizes the weights' ranges)
    # nothing runs on the CPU and nothing is read back.
    import copy

    import torch.ao.quantization as tq
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        tq.QuantStub(), nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(288, 10), tq.DeQuantStub()
    )
    model.qconfig = tq.get_default_qat_qconfig("x86")
    tq.prepare_qat(model.train(), inplace=True)
    lazy = copy.deepcopy(model).to(dev)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, lazy)]
    for step in range(4):
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 10, (4,), generator=gen)
        losses = []
        for m, opt, device in ((model, opts[0], "cpu"), (lazy, opts[1], dev)):
            loss = F.cross_entropy(m(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        xlalab.mark_step()
        if step == 0:
            met.clear_all()
        torch.testing.assert_close(losses[1].detach().cpu(), losses[0].detach())
    assert met.executed_fallback_ops() == []
    for (name, want), got in zip(model.state_dict().items(), lazy.state_dict().values(), strict=True):
        torch.testing.assert_close(got.cpu(), want, msg=name)


_FRACTIONAL = [  # (input shape, kernel, output size)
    ((2, 3, 9, 11), (3, 2), (4, 5)),
    ((3, 9, 11), (2, 2), (5, 6)),  # no batch dim
    ((1, 1, 5, 5), (5, 5), (1, 1)),  # one window: the whole plane
    ((1, 2, 30, 17), (2, 3), (29, 8)),  # windows one apart
    ((2, 2, 7, 8, 9), (2, 3, 2), (3, 4, 5)),
    ((2, 6, 7, 8), (2, 2, 2), (4, 4, 4)),
]


@pytest.mark.parametrize(("shape", "kernel", "output_size"), _FRACTIONAL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_fractional_max_pool_with_given_samples(
    shape: tuple[int, ...], kernel: tuple[int, ...], output_size: tuple[int, ...], dtype: torch.dtype,
    dev: torch.device,
) -> None:  # fmt: skip
    # Random windows are drawn on the device, so eager and xla are compared on the same samples:
    # window starts computed in the input's type as eager's (half types round every step), the
    # first maximum of a window, a NaN over any number, and the gradient at the indices.
    nd = len(kernel)
    gen = torch.Generator().manual_seed(len(shape) + sum(shape))
    x = torch.randn(shape, generator=gen).to(dtype)
    x[(..., 1, 2) if nd == 2 else (..., 1, 2, 3)] = float("nan")
    samples = torch.rand(shape[0] if len(shape) == nd + 2 else 1, shape[-nd - 1], nd, generator=gen).to(dtype)
    grad = torch.randn((*shape[:-nd], *output_size), generator=gen).to(dtype)
    pool = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d

    def run(device: Any) -> list[torch.Tensor]:
        inp = x.to(device).requires_grad_()
        out, idx = pool(inp, kernel, output_size=output_size, return_indices=True,
                        _random_samples=samples.to(device))  # fmt: skip
        return [out, idx, *torch.autograd.grad(out, inp, grad.to(device))]

    met.clear_all()
    (out, idx, grad_x), (want_out, want_idx, want_grad) = run(dev), run("cpu")
    assert met.executed_fallback_ops() == []
    torch.testing.assert_close(out.cpu(), want_out, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(idx.cpu(), want_idx)
    # Overlapping windows add several gradients into one element: in eager's order on the CPU,
    # where the sum is exact to the bit; XLA:GPU's scatter adds in its own order (as CUDA's does).
    exact = backend.platform() == "cpu"
    torch.testing.assert_close(grad_x.cpu(), want_grad, rtol=0 if exact else None, atol=0 if exact else None)


@pytest.mark.parametrize("rank", [1, 2, 4, 5])
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.channels_last_3d], ids=["2d", "3d"])
@pytest.mark.parametrize("convert", ["float", "to"])
def test_a_conversion_to_a_channels_last_format_of_another_rank_raises(
    convert: str, fmt: torch.memory_format, rank: int, dev: torch.device
) -> None:
    # Eager refuses at the op; the format is otherwise no concern of xla (one layout).
    def fn(t: torch.Tensor) -> torch.Tensor:
        return t.float(memory_format=fmt) if convert == "float" else t.to(torch.float64, memory_format=fmt)

    _differential(fn, lambda: (torch.ones((2,) * rank),), dev)


# --- ldexp ----------------------------------------------------------------------------------

_LDEXP = {
    # An integer exponent scales exactly: 0 * 2**200 is 0 and 2**-100 * 2**200 is 2**100 in
    # float32, though 2.0**200 alone overflows it.
    "integer_exponent_past_the_range": (
        lambda: torch.tensor([0.0, 2.0**-100, 1e-30, 3.0, math.nan, math.inf]),
        lambda: torch.tensor([200, 200, 200, -200, 5, -5]),
    ),
    "exponent_wraps_to_int32": (lambda: torch.tensor([2.0**-10]), lambda: torch.tensor(2**40)),
    "half_with_integer_exponent": (lambda: torch.tensor([2.0**-10]).half(), lambda: torch.tensor([20])),
    # A float exponent multiplies by the power in the result's type: inf, and 0 * inf is NaN.
    "float_exponent": (
        lambda: torch.tensor([1.0, 3.0, 5.0, 0.0, 1.0]),
        lambda: torch.tensor([13.0, 0.1, -2.5, 300.0, -math.inf]),
    ),
    "half_float_exponent": (lambda: torch.tensor([2.0**-10]).half(), lambda: torch.tensor([20.0]).half()),
    "integer_input": (lambda: torch.arange(4), lambda: torch.tensor(3, dtype=torch.uint8)),
    # An integer tensor is multiplied by the float32 power: 0 * 2**200 is NaN there, as in eager.
    "integer_input_past_the_range": (lambda: torch.tensor([0, 1, -2]), lambda: torch.tensor([200, 200, -3])),
    "complex_input": (lambda: torch.tensor([1 + 1j, 0j]), lambda: torch.tensor([3, 200])),
    "complex_exponent": (lambda: torch.tensor([1.0, 2.0]), lambda: torch.tensor(1 + 2j, dtype=torch.cdouble)),
    "float64_exponent": (lambda: torch.tensor([1.0, 3.0]), lambda: torch.tensor([2.5], dtype=torch.float64)),
}


@pytest.mark.parametrize("case", sorted(_LDEXP))
def test_ldexp_scales_as_eager(case: str, dev: torch.device) -> None:
    x, n = _LDEXP[case]
    _differential(lambda a, b: torch.ldexp(a, b), lambda: (x(), n()), dev)
    _differential(lambda a, b: torch.ldexp(a, b.cpu() if b.dim() == 0 else b), lambda: (x(), n()), dev)
