"""Views, in-place ops and aliases mean on xla what they mean in eager PyTorch."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import xlalab


def _base() -> torch.Tensor:
    return torch.arange(24.0).reshape(4, 6)


def _select_write(a: torch.Tensor) -> torch.Tensor:
    v = a[0]
    v.mul_(2)
    return a


def _setitem_scalar(a: torch.Tensor) -> torch.Tensor:
    a[1] = 5.0
    return a


def _setitem_tensor(a: torch.Tensor) -> torch.Tensor:
    a[:, 2] = a[:, 3] * 10
    return a


def _slice_write_seen_by_transpose(a: torch.Tensor) -> torch.Tensor:
    v = a[:, 1:3]
    w = a.t()
    v.fill_(-1)
    return w


def _detach_alias(a: torch.Tensor) -> torch.Tensor:
    d = a.detach()
    d.add_(1)
    return a


def _parameter_alias(a: torch.Tensor) -> torch.Tensor:
    p = torch.nn.Parameter(a)
    with torch.no_grad():
        p.mul_(3)
    return a


def _view_of_view_write(a: torch.Tensor) -> torch.Tensor:
    v = a.view(24)[2:14].view(3, 4)
    v[1, 1] = 100
    return a


def _data_write(a: torch.Tensor) -> torch.Tensor:
    a.data.sub_(1)
    return a


def _data_assign(a: torch.Tensor) -> torch.Tensor:
    b = a.clone()
    b.data = a * 2
    return b + 1


def _strided_slice_write(a: torch.Tensor) -> torch.Tensor:
    a[::2, 1::3] = 0.5
    return a


def _permute_write(a: torch.Tensor) -> torch.Tensor:
    p = a.view(2, 2, 6).permute(2, 0, 1)
    p[3].add_(1000)
    return a


def _unbind_write(a: torch.Tensor) -> torch.Tensor:
    rows = a.unbind(0)
    rows[2].zero_()
    return a


def _split_write(a: torch.Tensor) -> torch.Tensor:
    parts = a.split(2, dim=1)
    parts[1].mul_(-1)
    return torch.cat([p.sum(0, keepdim=True) for p in parts], 1)


def _diagonal_write(a: torch.Tensor) -> torch.Tensor:
    a[:, :4].diagonal().fill_(7)
    return a


def _view_read_after_base_write(a: torch.Tensor) -> torch.Tensor:
    v = a[1:3]
    a.add_(1)
    return v * 2


def _squeeze_unsqueeze_write(a: torch.Tensor) -> torch.Tensor:
    u = a.unsqueeze(0)[:, 1]
    u.sub_(3)
    return a


def _inplace_chain(a: torch.Tensor) -> torch.Tensor:
    a.mul_(2).add_(1).clamp_(max=30)
    return a


def _index_put(a: torch.Tensor) -> torch.Tensor:
    a[torch.tensor([0, 2])] = torch.tensor(9.0)
    return a


def _expand_read(a: torch.Tensor) -> torch.Tensor:
    return a[0:1].expand(3, 6) + a[1]


def _as_strided_of_a_transpose(a: torch.Tensor) -> torch.Tensor:
    # as_strided addresses the storage, whatever view it is called on (Longformer's chunking)
    w = a.t().as_strided((3, 2), (1, 6))
    w.mul_(-1)
    return w + a[1:, 2:].as_strided(size=(3, 2), stride=(6, 1), storage_offset=3)


def _overlapping_windows_of_a_transpose(a: torch.Tensor) -> torch.Tensor:
    q = a.t()[:, :2]  # strides (1, 6): a view whose value is not its storage's order
    return q.as_strided(size=(5, 2, 2), stride=(1, 6, 1))  # overlapping windows, by keyword


def _overlapping_window_write(a: torch.Tensor) -> torch.Tensor:
    # Windows share elements; a write through one window reaches exactly its own elements.
    w = a[0].unfold(0, 3, 1)
    w[2].fill_(-5)
    return w.clone()


CASES: list[Callable[[torch.Tensor], torch.Tensor]] = [
    _overlapping_window_write,
    _as_strided_of_a_transpose,
    _overlapping_windows_of_a_transpose,
    _select_write,
    _setitem_scalar,
    _setitem_tensor,
    _slice_write_seen_by_transpose,
    _detach_alias,
    _parameter_alias,
    _view_of_view_write,
    _data_write,
    _data_assign,
    _strided_slice_write,
    _permute_write,
    _unbind_write,
    _split_write,
    _diagonal_write,
    _view_read_after_base_write,
    _squeeze_unsqueeze_write,
    _inplace_chain,
    _index_put,
    _expand_read,
]


@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__.strip("_"))
def test_same_values_as_eager(case: Callable[[torch.Tensor], torch.Tensor], dev: torch.device) -> None:
    eager_base = _base()
    lazy_base = _base().to(dev)
    eager = case(eager_base)
    lazy = case(lazy_base)
    xlalab.mark_step()
    torch.testing.assert_close(lazy.cpu(), eager)
    # The base itself must also agree (writes through views reached it).
    torch.testing.assert_close(lazy_base.cpu(), eager_base)


def test_transfer_is_a_snapshot(dev: torch.device) -> None:
    cpu = torch.ones(3)
    x = cpu.to(dev)
    cpu.add_(1)
    assert x.tolist() == [1.0, 1.0, 1.0]


def test_inplace_broadcast_error_matches_eager(dev: torch.device) -> None:
    a = torch.ones(3, device=dev)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        a.add_(torch.ones(2, 3, device=dev))


def test_complex_views_read_and_write_as_in_eager(dev: torch.device) -> None:
    def run(d: Any) -> list[torch.Tensor]:
        c = torch.fft.fftn(torch.arange(12.0, device=d).reshape(3, 4))
        r = torch.view_as_real(c)
        r[..., 1].mul_(-1)  # the conjugate, written through the view
        pairs = torch.arange(8.0, device=d).reshape(4, 2)
        z = torch.view_as_complex(pairs)
        z.mul_(1j)  # seen by the real pairs underneath
        return [c.cpu(), r.cpu(), z.cpu(), pairs.cpu(), torch.view_as_real(c.t()).cpu()]

    for want, got in zip(run("cpu"), run(dev)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_write_through_data_is_unseen_by_autograd() -> None:
    # ``.data`` has a version counter of its own: weight clipping or an old-style update through
    # it between forward and backward is eager's business, not an in-place error.
    results = {}
    for device in ("cpu", "xla"):
        w = torch.ones(3, device=device, requires_grad=True)
        loss = (w * w).sum()
        w.data.mul_(2)
        loss.backward()
        _, second, _ = torch.arange(3.0, device=device, requires_grad=True).split(1)
        second.data.fill_(5)
        assert w._version == 0
        assert w.grad is not None
        results[device] = (w.grad.cpu(), w.detach().cpu(), (second * 2).sum().detach().cpu())
    for want, got in zip(results["cpu"], results["xla"], strict=True):
        assert torch.equal(want, got), (want, got)


def test_as_strided_of_a_view_starts_at_the_views_offset() -> None:
    # With no storage_offset, as_strided keeps the view's own (x[1:3] of a 4x6 starts at 6).
    def program(device: str) -> list[torch.Tensor]:
        rows = torch.arange(24.0, device=device).view(4, 6)[1:3]
        x = torch.arange(10.0, device=device)
        x[2:].as_strided((3,), (1,)).fill_(-1)
        strided = torch.arange(24.0, device=device).view(4, 6)[:, 1::2]
        return [rows.as_strided((2, 2), (1, 2)), rows.t().as_strided((2, 2), (2, 1)), x,
                strided.as_strided((2, 2), (6, 1)), rows.as_strided((2,), (1,), 0)]  # fmt: skip

    for want, got in zip(program("cpu"), program("xla"), strict=True):
        assert torch.equal(want, got.cpu()), (want, got.cpu())


@pytest.mark.parametrize(
    "view",
    [lambda x: x.t().view(6), lambda x: x[:, ::2].view(4), lambda x: x.unsqueeze(0).expand(2, 2, 3).view(12)],
)
def test_a_view_the_strides_do_not_allow_raises_eagers_error(view: Callable[[Any], Any]) -> None:
    # Accepting it made an alias where the user's fix (reshape) copies: writes went to x.
    x = torch.arange(6.0, device="xla").reshape(2, 3)
    with pytest.raises(RuntimeError, match=r"view size is not compatible.*Use \.reshape"):
        view(x)
    assert torch.equal(x[1:].view(3).cpu(), torch.tensor([3.0, 4.0, 5.0]))  # allowed ones still are


_REFUSED_WRITES: dict[str, Callable[[Any, Any], Any]] = {
    "add_": lambda b, d: b.add_(1),
    "relu_": lambda b, d: b.relu_(),
    "copy_": lambda b, d: b.copy_(torch.ones(3, 4, device=d)),
    "setitem of a tensor": lambda b, d: b.__setitem__((slice(None), 0), torch.ones(3, device=d)),
    "uniform_": lambda b, d: b.uniform_(),
    "scatter_": lambda b, d: b.scatter_(0, torch.zeros(1, 4, dtype=torch.long, device=d), 1.0),
    "mm out=": lambda b, d: torch.mm(torch.ones(3, 2, device=d), torch.ones(2, 4, device=d), out=b),
}


@pytest.mark.parametrize("write", _REFUSED_WRITES.values(), ids=_REFUSED_WRITES.keys())
def test_a_write_into_an_expanded_tensor_raises_where_eager_does(write: Callable[[Any, Any], Any]) -> None:
    for d in ("cpu", "xla"):
        a = torch.arange(4.0, device=d)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            write(a.expand(3, 4), d)
        assert a.tolist() == [0.0, 1.0, 2.0, 3.0]  # nothing was written


_ACCEPTED_WRITES: dict[str, Callable[[Any, Any], Any]] = {
    "fill_": lambda b, d: b.fill_(2.0),
    "zero_": lambda b, d: b.zero_(),
    "setitem of a number": lambda b, d: b.__setitem__(1, 5.0),
    "row of the expand": lambda b, d: b[0].copy_(torch.tensor([7.0, 8.0, 9.0, 10.0], device=d)),
    "index_fill_": lambda b, d: b.index_fill_(1, torch.tensor([0, 2], device=d), -1.0),
    "masked_fill_": lambda b, d: b.masked_fill_(torch.tensor([[True, False, True, False]] * 3).to(d), 6.0),
    "fill_diagonal_": lambda b, d: b.fill_diagonal_(3.0),
}


@pytest.mark.parametrize("write", _ACCEPTED_WRITES.values(), ids=_ACCEPTED_WRITES.keys())
def test_writes_eager_makes_through_an_expand_reach_its_base(write: Callable[[Any, Any], Any]) -> None:
    # Each element of ``b`` is an element of ``a``: a write to one row is seen by every row.
    # (Where the written values differ between rows, as ``tril_``'s do, eager's result is the
    # order its kernel visits memory in; torch's ``expand`` docs call that incorrect behaviour.)
    got = []
    for d in ("cpu", "xla"):
        a = torch.arange(4.0, device=d)
        b = a.expand(3, 4)
        write(b, d)
        got.append((a.cpu(), b.cpu()))
    assert all(torch.equal(w, g) for w, g in zip(got[0], got[1])), got


def test_the_conjugate_is_a_view_of_its_base(dev: torch.device) -> None:
    def run(d: Any) -> list[torch.Tensor]:
        a = torch.tensor([1 + 2j, 3 - 1j, -2 + 0.5j], device=d)
        c = a.conj()
        a.mul_(2)  # seen by the conjugate
        seen = c.clone()
        c[1] = 5 + 5j  # written through it: a[1] becomes 5 - 5j
        c.add_(1j)
        return [seen, a.cpu(), c.cpu(), a.reshape(3, 1).mH.cpu()]

    for want, got in zip(run("cpu"), run(dev), strict=True):
        assert torch.equal(want, got.cpu()), (want, got)


def test_as_strided_of_a_dtype_view_counts_in_the_views_own_elements() -> None:
    # Sizes, strides and offset of as_strided on x.view(dtype) are in units of that dtype, and
    # the result keeps it: an int32 view of float32 storage stays int32 (it came back float32),
    # and an int16 window of float32 storage is written at int16 positions.
    def program(device: str) -> list[torch.Tensor]:
        x = torch.arange(8, dtype=torch.float32, device=device)
        window = x.view(torch.int16).as_strided((2, 2), (4, 1), 2)
        window.fill_(7)
        y = torch.arange(12, dtype=torch.float32, device=device).reshape(3, 4)
        y.view(torch.uint8)[1:].as_strided((3, 2), (1, 8), 3).add_(1)
        h = torch.arange(8, dtype=torch.int16, device=device) + 0x4000
        h.view(torch.float32)[1:].as_strided((2,), (1,)).mul_(2)
        seen = x.view(torch.int16).as_strided((3,), (2,), 1)
        x.add_(1)  # a later write to the storage is seen through the view
        return [
            x.view(torch.int16).as_strided((4,), (4,), 1), x.view(torch.int32).as_strided((2,), (1,), 1),
            torch.arange(6, dtype=torch.float64, device=device).view(torch.float32).as_strided((2,), (6,)),
            window, y, h, seen,
        ]  # fmt: skip

    for want, got in zip(program("cpu"), program("xla"), strict=True):
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        assert torch.equal(want.contiguous().view(torch.uint8), got.cpu().contiguous().view(torch.uint8))


def test_resize_keeps_the_storage_and_its_views() -> None:
    # resize_ to the same shape changes nothing (a transpose keeps its strides); to another it
    # lays the storage's elements out contiguously from the same offset, and, within the
    # storage, writes through the resized tensor reach its other views (they were copies).
    def program(device: str) -> list[torch.Tensor]:
        x = torch.arange(12, dtype=torch.float32, device=device).reshape(3, 4)
        flat = x.view(-1)
        x.resize_(2, 2)
        x.fill_(-1)
        t = torch.arange(12, dtype=torch.float32, device=device).reshape(3, 4).t()
        t.resize_(4, 3)
        strides = torch.tensor(t.stride())
        y = torch.arange(12, dtype=torch.float32, device=device).reshape(3, 4).t()
        y.resize_(2, 5)
        z = torch.arange(12, dtype=torch.float32, device=device)
        head = z[:6]
        z.resize_as_(torch.empty(2, 3))
        z.mul_(2)
        g = torch.arange(6, dtype=torch.float32, device=device)[2:]
        g.resize_(2, 3)  # past the storage's end: the kept elements, then new ones
        return [x, flat, t.contiguous(), strides, y, z, head, g.reshape(-1)[:4]]

    for want, got in zip(program("cpu"), program("xla"), strict=True):
        assert torch.equal(want, got.cpu()), (want, got.cpu())


# ----------------------------------------------------------------------------- result layouts


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    """What a program can see of a tensor's layout: shape, contiguity, strides of the dims that
    have more than one element (a size-1 dim's stride is never used), and whether view(-1) works."""
    try:
        t.view(-1)
        flat = True
    except RuntimeError:
        flat = False
    strides = tuple(s for n, s in zip(t.shape, t.stride()) if n > 1)
    return tuple(t.shape), t.is_contiguous(), strides, flat


_PERMUTED = [(1, 0, 2), (2, 1, 0), (0, 2, 1), (2, 0, 1)]


@pytest.mark.parametrize("dims", _PERMUTED)
@pytest.mark.parametrize(
    "op",
    [
        lambda x: x * 2,
        lambda x: x.sin(),
        lambda x: x + x.detach().clone(),
        lambda x: torch.where(x > 3, x, 0.0),
        lambda x: x.clone(),
        lambda x: x.to(torch.float64),
        lambda x: torch.zeros_like(x),
        lambda x: torch.nn.functional.gelu(x),
        lambda x: x.softmax(-1),
        lambda x: x.exp_(),
        lambda x: x.clone().transpose(0, 1).contiguous(),
        lambda x: x.reshape(-1),
    ],
)
def test_results_are_laid_out_as_eagers(dims: tuple[int, ...], op: Callable[[Any], Any]) -> None:
    # Eager lays a result out as its operand is (x.t() * 2 is transposed too): a later view(-1)
    # works or raises as in eager, contiguous() copies where eager copies, and the values agree.
    def program(device: str) -> torch.Tensor:
        x = torch.arange(24.0, device=device).reshape(2, 3, 4).permute(*dims)
        return op(x)

    want, got = program("cpu"), program("xla")
    assert _layout(got) == _layout(want)
    torch.testing.assert_close(got.cpu(), want)
    if want.dim() == 3:  # and back in row-major order, copied where eager copies
        back = got.permute(*dims).contiguous()
        assert _layout(back) == _layout(want.permute(*dims).contiguous())
        torch.testing.assert_close(back.view(-1).cpu(), want.permute(*dims).contiguous().view(-1))


def test_a_laid_out_result_is_written_and_addressed_as_eagers() -> None:
    # The result's storage holds its elements in eager's order: as_strided, a dtype view and an
    # in-place write through a view see them where eager does.
    def program(device: str) -> list[torch.Tensor]:
        y = torch.arange(12.0, device=device).reshape(3, 4).t() * 1  # strides (1, 4)
        flat = y.as_strided((12,), (1,))
        y[0].add_(100)
        bits = y.view(torch.int32)
        return [y, flat.clone(), bits.clone(), y.t().view(-1)]

    for want, got in zip(program("cpu"), program("xla"), strict=True):
        assert _layout(got) == _layout(want)
        assert torch.equal(got.cpu(), want)


def _opinfo_pointwise() -> list[Any]:
    from xlalab.testing import opinfo_sweep

    ops = opinfo_sweep.load_op_db()
    return [op for op in ops if op.name in _POINTWISE_OPINFOS and not op.variant_test_name]


_POINTWISE_OPINFOS = {
    "abs", "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh",
    "sin", "cos", "relu", "nn.functional.silu", "nn.functional.gelu", "clamp", "where", "maximum",
    "minimum", "pow", "lerp", "addcmul", "addcdiv", "masked_fill", "eq", "lt", "logical_not",
    "floor", "round", "sign", "reciprocal", "nn.functional.leaky_relu", "nn.functional.hardtanh",
    "nan_to_num", "clone", "zeros_like", "ones_like", "full_like", "empty_like", "bitwise_not",
}  # fmt: skip


@pytest.mark.parametrize("op", _opinfo_pointwise(), ids=lambda op: op.name)
def test_opinfo_results_on_transposed_operands_have_eagers_strides(op: Any) -> None:
    # torch's own samples, with every 2-d-or-more tensor operand transposed (same values). Only
    # metadata is compared: nothing here compiles.
    xla = torch.device("xla")

    def transposed(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() >= 2:
            return t.transpose(0, 1).contiguous().transpose(0, 1)
        return t

    checked = 0
    dtype = torch.float32 if torch.float32 in op.dtypes else torch.int64
    for sample in op.sample_inputs("cpu", dtype):
        args = [transposed(a) for a in (sample.input, *sample.args)]
        kwargs = {k: transposed(v) for k, v in sample.kwargs.items()}
        if not any(isinstance(a, torch.Tensor) and a.dim() >= 2 for a in args):
            continue
        try:
            want = op.op(*args, **kwargs)
        except Exception:
            continue
        # .to(xla) keeps the strides, as eager's .to does
        moved = [a.to(xla) if isinstance(a, torch.Tensor) else a for a in args]
        got = op.op(*moved, **{k: v.to(xla) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
        if isinstance(want, torch.Tensor):
            assert _layout(got) == _layout(want), sample
            checked += 1
    assert checked, "no sample had a 2-d operand"


def test_an_out_tensor_is_resized_within_its_storage_as_eagers() -> None:
    # An out= tensor of another shape is resized as resize_ does: an empty slice given as out=
    # fills its storage from the slice's offset (fftfreq's negative half is written so), and a
    # short view grows into its base's storage.
    def program(device: str) -> list[torch.Tensor]:
        a = torch.arange(8.0, device=device)
        torch.arange(-4.0, 0.0, out=a[4:0])
        b = torch.ones(4, device=device)
        view = b[:2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager's deprecation of resizing non-empty outputs
            torch.mul(torch.full((3,), 2.0, device=device), 2, out=view)
        return [a, b, view, torch.fft.fftfreq(7, device=device), torch.fft.rfftfreq(8, 0.5, device=device)]

    for want, got in zip(program("cpu"), program("xla"), strict=True):
        assert torch.equal(got.cpu(), want), (want, got.cpu())


@pytest.mark.parametrize(
    "pairs",
    [
        lambda a: a[:3].unsqueeze(-1).expand(3, 2),
        lambda a: a[1:11].view(5, 2),
        lambda a: a[:7].unfold(0, 2, 1),
        lambda a: a.view(2, 6)[:, :4].t()[:2],
    ],
)
def test_view_as_complex_checks_the_layout_as_eager(pairs: Callable[[Any], Any]) -> None:
    # Pairs that are not adjacent, or start at an odd offset, are not complex numbers in memory:
    # eager refuses them, so returning a value reads elements eager never pairs.
    with pytest.raises(RuntimeError) as eager:
        torch.view_as_complex(pairs(torch.arange(12.0)))
    with pytest.raises(RuntimeError, match="Tensor must have") as lazy:
        torch.view_as_complex(pairs(torch.arange(12.0, device="xla")))
    assert str(lazy.value) == str(eager.value)
    fine = torch.view_as_complex(torch.arange(12.0, device="xla")[2:].view(5, 2))
    assert torch.equal(fine.cpu(), torch.view_as_complex(torch.arange(12.0)[2:].view(5, 2)))


_EXPANDED_WRITES: dict[str, Callable[[Any], Any]] = {
    "index_put_": lambda v: v.index_put_((torch.tensor([0], device=v.device),), torch.tensor(9.0)),
    "masked_fill_": lambda v: v.masked_fill_(torch.tensor([[True], [False]], device=v.device), 5.0),
    "index_fill_": lambda v: v.index_fill_(0, torch.tensor([1], device=v.device), -1.0),
    "fill_ of a row": lambda v: v[1].fill_(7.0),
}


@pytest.mark.parametrize("write", _EXPANDED_WRITES.values(), ids=_EXPANDED_WRITES.keys())
def test_a_write_to_some_rows_of_an_expand_reaches_the_shared_elements(write: Callable[[Any], Any]) -> None:
    # Eager writes memory: a row of a[:1].expand(2, 3) that is written is what every row and the
    # base then read. The unwritten row's copy of the old values must not overwrite it.
    def program(device: str) -> list[torch.Tensor]:
        a = torch.arange(6.0, device=device).reshape(2, 3)
        view = a[:1].expand(2, 3)
        write(view)
        return [a, view]

    for want, got in zip(program("cpu"), program("xla"), strict=True):
        assert torch.equal(got.cpu(), want), (want, got.cpu())
