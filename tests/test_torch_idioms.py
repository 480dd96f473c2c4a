"""Everyday PyTorch idioms on xla against eager CPU: generators, CPU operands, foreach ops."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import xlalab.debug.metrics as met

aten = torch.ops.aten


def _foreach_overloads() -> list[Any]:
    schemas = torch._C._jit_get_all_schemas()
    names = sorted({s.name.split("::")[1] for s in schemas if s.name.startswith("aten::_foreach_")})
    packets = [getattr(aten, n) for n in names]
    return [getattr(p, ov) for p in packets for ov in p.overloads() if "out" not in ov]


def _foreach_args(op: Any) -> tuple[list[Any], dict[str, Any]] | None:
    """Arguments for ``op`` from its schema: two tensors per list, positive values (every
    foreach op is defined there), numbers and per-tensor numbers; keyword-only ones by name,
    as torch.optim passes ``alpha=``."""
    g = torch.Generator().manual_seed(len(op._schema.arguments))
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for a in op._schema.arguments:
        t = str(a.type)
        if t == "List[Tensor]":
            v: Any = [(torch.rand(3, 2, generator=g) + 0.5), (torch.rand(4, generator=g) + 0.5)]
        elif t in ("number", "Optional[number]"):
            v = 0.7
        elif t == "List[number]":
            v = [0.3, 1.5]
        elif t == "Tensor" and a.name == "scalars":
            v = torch.tensor([0.5, 2.0])  # per-tensor numbers: a CPU tensor, as torch.optim passes
        elif t == "Tensor":
            v = torch.tensor(0.25)
        elif t == "bool":
            v = False
        elif t.startswith("Optional["):
            v = None
        else:
            return None
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return args, kwargs


# Foreach ops with no per-tensor aten op to record (DTensor's ``_foreach_powsum``): they run
# on the CPU, correctly.
_NO_PER_TENSOR_OP = {"aten::_foreach_powsum"}


@pytest.mark.parametrize("op", _foreach_overloads(), ids=str)
def test_foreach_ops_equal_eager(op: Any, dev: torch.device) -> None:
    made = _foreach_args(op)
    assert made is not None, f"{op} takes an argument kind this sweep does not make"
    eager_args, eager_kwargs = made
    name = op._schema.name
    if name == "aten::_foreach_mm":  # matrices that multiply
        eager_args[0] = [torch.rand(3, 2) + 0.5, torch.rand(4, 3) + 0.5]
        eager_args[1] = [torch.rand(2, 5) + 0.5, torch.rand(3, 2) + 0.5]
    if "_foreach_copy" in name:  # a source of the same shapes
        eager_args[1] = [t.clone() * 2 for t in eager_args[0]]
    args = [[t.to(dev) for t in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
            else a.to(dev) if isinstance(a, torch.Tensor) and a.dim() == 0 else a
            for a in eager_args]  # fmt: skip
    want = op(*eager_args, **eager_kwargs)
    met.clear_all()
    got = op(*args, **eager_kwargs)
    if name not in _NO_PER_TENSOR_OP:  # per-tensor ops recorded into the graph, no trip to the CPU
        assert met.executed_fallback_ops() == []
    if want is None:  # in place: the first list holds the results
        want, got = eager_args[0], args[0]
    for w, x in zip(want, got):
        torch.testing.assert_close(x.cpu(), w, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_clip_grad_value_with_foreach(dev: torch.device) -> None:
    def clipped(device: Any) -> list[torch.Tensor]:
        ps = [torch.arange(4.0, device=device), torch.ones(2, 3, device=device)]
        ps = [p.requires_grad_() for p in ps]
        for p in ps:
            p.grad = p.detach() * 2 - 1
        torch.nn.utils.clip_grad_value_(ps, 0.5, foreach=True)
        return [p.grad.cpu() for p in ps if p.grad is not None]

    met.clear_all()
    for w, x in zip(clipped("cpu"), clipped(dev)):
        torch.testing.assert_close(x, w)
    assert met.executed_fallback_ops() == []


def test_a_cpu_generator_draws_as_eager_does(dev: torch.device) -> None:
    def draws(device: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(3, device=device, generator=g)
        y = torch.empty(3, device=device).normal_(generator=g)
        return x.cpu(), y.cpu(), g.get_state()

    for w, x in zip(draws("cpu"), draws(dev)):
        assert torch.equal(x, w)  # the same numbers, and the generator moved on as in eager


def test_indexing_by_a_cpu_mask_then_by_an_xla_mask(dev: torch.device) -> None:
    a = torch.randn(4, 5)
    mask = torch.tensor([True, False, True, False])
    x = a.to(dev)
    assert torch.equal(x[mask].cpu(), a[mask])
    assert torch.equal(x[mask.to(dev)].cpu(), a[mask])
    assert torch.equal(x[x[:, 0] > -100].cpu(), a[a[:, 0] > -100])


def test_an_lstm_over_a_packed_sequence(dev: torch.device) -> None:
    rnn = torch.nn.utils.rnn
    x, lengths = torch.randn(3, 6, 4), torch.tensor([6, 4, 2])  # lengths on the CPU, as torch requires
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 5, batch_first=True)

    def run(m: torch.nn.Module, inp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed = rnn.pack_padded_sequence(inp, lengths, batch_first=True)
        out, out_lengths = rnn.pad_packed_sequence(m(packed)[0], batch_first=True)
        return out, out_lengths

    want, want_lengths = run(lstm, x)
    got, got_lengths = run(lstm.to(dev), x.to(dev))
    torch.testing.assert_close(got.cpu(), want)
    assert got_lengths.device.type == "cpu" and torch.equal(got_lengths, want_lengths)


def test_a_tensor_made_of_xla_numbers(dev: torch.device) -> None:
    losses = [torch.tensor(1.5), torch.tensor(2.5)]
    xla_losses = [t.to(dev) for t in losses]
    assert torch.equal(torch.tensor(xla_losses), torch.tensor(losses))  # on the CPU, as eager's
    made = torch.tensor([xla_losses, [3.0, 4.0]], device=dev)
    assert made.device.type == "xla" and made.cpu().tolist() == [[1.5, 2.5], [3.0, 4.0]]


def test_a_transformer_encoder_in_eval_with_a_padding_mask(dev: torch.device) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, 2).eval()
    q = torch.randn(2, 5, 8)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        want = encoder(q, src_key_padding_mask=padding)  # eager packs the batch: zeros where padded
        got = encoder.to(dev)(q.to(dev), src_key_padding_mask=padding.to(dev)).cpu()
    kept = ~padding
    torch.testing.assert_close(got[kept], want[kept], rtol=1e-4, atol=1e-5)  # the dense path, as torch_xla


_MASKS = {
    "none": (None, None),
    "padding": (None, torch.tensor([[False] * 5, [False, False, False, True, True]])),
    "causal": (torch.ones(5, 5, dtype=torch.bool).triu(1), None),
    "both": (torch.ones(5, 5, dtype=torch.bool).triu(1), torch.tensor([[False] * 5, [False] * 4 + [True]])),
}


@pytest.mark.parametrize("masks", sorted(_MASKS))
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_in_eval_stays_on_the_device(
    masks: str, need_weights: bool, dev: torch.device
) -> None:
    attn_mask, padding = _MASKS[masks]
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = torch.randn(2, 5, 8)

    def run(m: torch.nn.Module, d: Any) -> tuple[Any, Any]:
        moved = [None if t is None else t.to(d) for t in (attn_mask, padding)]
        with torch.no_grad():  # torch's fused kernel: eval mode, no grad
            x = q.to(d)
            return m(x, x, x, attn_mask=moved[0], key_padding_mask=moved[1], need_weights=need_weights)

    want = run(mha, "cpu")
    met.clear_all()
    got = run(mha.to(dev), dev)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-4, atol=1e-5)
    assert (got[1] is None) == (want[1] is None)
    if want[1] is not None:
        torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-4, atol=1e-5)
    assert met.executed_fallback_ops() == []


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_in_eval_stays_on_the_device(
    norm_first: bool, activation: str, dev: torch.device
) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    x, causal = torch.randn(2, 5, 8), torch.ones(5, 5, dtype=torch.bool).triu(1)
    with torch.no_grad():
        want = layer(x, src_mask=causal)
        met.clear_all()
        got = layer.to(dev)(x.to(dev), src_mask=causal.to(dev)).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert met.executed_fallback_ops() == []


_OUT_CALLS = {
    "inv, out of its shape": lambda d: torch.linalg.inv(
        torch.eye(4, device=d) * 2, out=torch.zeros(4, 4, device=d)
    ),
    "nonzero, out resized from empty": lambda d: torch.nonzero(
        torch.tensor([0, 1, 1], device=d), out=torch.empty(0, dtype=torch.long, device=d)
    ),
    "svdvals, out resized": lambda d: torch.linalg.svdvals(
        torch.eye(3, device=d), out=torch.empty(0, device=d)
    ),
}


@pytest.mark.parametrize("call", sorted(_OUT_CALLS))
def test_out_arguments_of_ops_that_run_on_the_cpu(call: str, dev: torch.device) -> None:
    want = _OUT_CALLS[call]("cpu")
    got = _OUT_CALLS[call](dev)
    assert got.device.type == "xla" and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want)


def test_set_makes_an_alias(dev: torch.device) -> None:
    def run(d: Any) -> tuple[list[float], list[float]]:
        a, b = torch.arange(6.0, device=d), torch.empty(0, device=d)
        b.set_(a)
        b[0] = 42.0  # one storage: each sees the other's writes
        a[1] = 7.0
        return a.cpu().tolist(), b.cpu().tolist()

    assert run(dev) == run("cpu")


def test_is_set_to_tells_the_same_view_of_one_storage(dev: torch.device) -> None:
    def run(d: Any) -> list[bool]:
        a, b = torch.arange(6.0, device=d), torch.empty(0, device=d)
        b.set_(a)
        window = torch.empty(0, device=d)
        window.set_(a.as_strided((2,), (1,), 2))
        return [b.is_set_to(a), a.is_set_to(b), a.is_set_to(a[:2]), window.is_set_to(a[2:4]),
                window.is_set_to(a), a.is_set_to(torch.arange(6.0, device=d))]  # fmt: skip

    assert run(dev) == run("cpu")


def test_set_with_a_storage_says_what_works_instead(dev: torch.device) -> None:
    a = torch.arange(6.0, device=dev)
    with pytest.raises(NotImplementedError, match=r"b.set_\(a.as_strided\(size, stride, storage_offset\)\)"):
        torch.empty(0, device=dev).set_(a, 2, (2,), (1,))


def test_deepcopy_takes_graph_leaves_only_as_eager_does(dev: torch.device) -> None:
    import copy

    x = torch.ones(3, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user"):
        copy.deepcopy(x * 2)
    assert copy.deepcopy(x).requires_grad and copy.copy(x * 2).requires_grad


def test_an_inplace_op_on_a_cpu_tensor_with_an_xla_operand_names_the_devices(dev: torch.device) -> None:
    with pytest.raises(RuntimeError, match="found at least two devices, xla:0 and cpu"):
        torch.zeros(3).add_(torch.ones(3, device=dev))
    with pytest.raises(RuntimeError, match="index_put_ writes into a cpu tensor"):
        torch.zeros(4, 5)[torch.tensor([True, False, True, False])] = torch.ones(2, 5, device=dev)


def test_a_model_left_on_the_cpu_is_an_error_at_its_first_layer(dev: torch.device) -> None:
    # The step forgot model.to(device): eager (CUDA) and torch_xla refuse the CPU weights at the
    # layer's op, with the two devices named; the error is raised there and says the fix.
    # (Before, the weights were sent over at each op and backward() died in autograd's engine.)
    import inspect
    import traceback

    import torch.nn.functional as F

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x, y = torch.randn(16, 4).to(dev), torch.randint(0, 2, (16,)).to(dev)
    with pytest.raises(RuntimeError, match=r"two devices, xla:0 and cpu! \(aten::addmm got a CPU") as info:
        F.cross_entropy(model(x), y)  # THE-LAYER
    assert "model.to(device)" in str(info.value)
    lines, first = inspect.getsourcelines(test_a_model_left_on_the_cpu_is_an_error_at_its_first_layer)
    line = first + next(i for i, t in enumerate(lines) if "# THE-LAYER" in t)
    assert any(f.lineno == line for f in traceback.extract_tb(info.value.__traceback__))


@pytest.mark.parametrize(
    "op",
    [
        lambda x, c: x @ c,
        lambda x, c: torch.cat([x, c]),
        lambda x, c: x.index_select(0, c[:, 0].long().abs() % 2),
        lambda x, c: x.gather(1, c.long().abs() % 2),
        lambda x, c: torch.nn.functional.embedding(c.long().abs() % 2, x),
        lambda x, c: x * torch.nn.Parameter(c),  # elementwise, but its gradient could not reach it
    ],
    ids=["mm", "cat", "index_select", "gather", "embedding", "mul_by_cpu_parameter"],
)
def test_a_cpu_operand_eager_refuses_is_refused_at_the_op(op: Any, dev: torch.device) -> None:
    x = torch.randn(2, 2, device=dev)
    with pytest.raises(RuntimeError, match="found at least two devices, xla:0 and cpu"):
        op(x, torch.randn(2, 2))


@pytest.mark.parametrize(
    "op",
    [
        lambda x, c: x + c,  # elementwise: torch_xla's binary ops take a CPU operand too
        lambda x, c: torch.where(x > 0, x, c),
        lambda x, c: x[c[:, 0] > 0],  # indices and masks may live anywhere, as in eager
        lambda x, c: x[torch.tensor([1, 0])] * c,
        lambda x, c: x + c.sum(),  # a 0-d CPU tensor is a number
    ],
    ids=["add", "where", "cpu_mask", "cpu_index", "zero_dim"],
)
def test_cpu_operands_eager_or_torch_xla_accept_still_work(op: Any, dev: torch.device) -> None:
    x, c = torch.randn(2, 2), torch.randn(2, 2)
    torch.testing.assert_close(op(x.to(dev), c).cpu(), op(x, c))


def test_data_pointers_tell_storages_apart_as_in_eager(dev: torch.device) -> None:
    def pointers(d: Any) -> tuple[int, int, bool]:
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)).to(d)
        a = torch.ones(3, 4, device=d)
        return len({p.data_ptr() for p in m.parameters()}), a[1].data_ptr() - a.data_ptr(), a.data_ptr() != 0

    assert pointers(dev) == pointers("cpu")


def test_fourier_mixing_trains_compiled_as_one_program(dev: torch.device) -> None:
    import xlalab.dynamo as dynamo

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = torch.fft.fftn(x, dim=(-1, -2)).real.pow(2).mean()  # FNet's mixing layer
        loss.backward()
        return loss.detach()

    x = torch.randn(2, 8, 4, requires_grad=True)
    want = step(x)
    on_dev = x.detach().to(dev).requires_grad_()
    dynamo.reset()
    got = torch.compile(step, backend="xlalab")(on_dev)
    torch.testing.assert_close(got.cpu(), want)
    assert on_dev.grad is not None and x.grad is not None
    torch.testing.assert_close(on_dev.grad.cpu(), x.grad)
    assert not [f.name for f in dynamo.compiled_functions() if f.lazy], dynamo.summary()


@pytest.mark.parametrize(
    "draw, low, high",
    [
        (lambda x: torch.rand_like(x), 0.0, 1.0),
        (lambda x: torch.randn_like(x, dtype=torch.float64), -6.0, 6.0),
        (lambda x: torch.randint_like(x, 10), 0.0, 9.0),
        (lambda x: torch.randint_like(x, 3, 10), 3.0, 9.0),
    ],
    ids=["rand_like", "randn_like", "randint_like", "randint_like low"],
)
def test_random_like_ops_draw_on_the_device(draw: Any, low: float, high: float, dev: torch.device) -> None:
    x = torch.zeros(4000, device=dev)
    met.clear_all()
    torch.manual_seed(3)
    first = draw(x).cpu()
    torch.manual_seed(3)
    again = draw(x).cpu()
    assert met.executed_fallback_ops() == []  # no draw on the CPU and copy over
    want = draw(torch.zeros(4000))
    assert first.dtype == want.dtype and first.shape == want.shape
    assert torch.equal(first, again) and not torch.equal(first, draw(x).cpu())
    assert low <= first.min().item() and first.max().item() <= high
    assert abs(first.double().mean().item() - want.double().mean().item()) < 0.2


def test_randperm_draws_a_permutation_on_the_device(dev: torch.device) -> None:
    met.clear_all()
    torch.manual_seed(5)
    first = torch.randperm(500, device=dev).cpu()
    torch.manual_seed(5)
    again = torch.randperm(500, device=dev).cpu()
    small = torch.randperm(7, device=dev, dtype=torch.int32).cpu()
    assert met.executed_fallback_ops() == []
    assert sorted(first.tolist()) == list(range(500)) and first.dtype == torch.int64
    assert torch.equal(first, again) and not torch.equal(first, torch.arange(500))
    assert small.dtype == torch.int32 and sorted(small.tolist()) == list(range(7))
    g = torch.Generator().manual_seed(0)  # a CPU generator draws as eager does
    want = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.randperm(9, device=dev, generator=g).cpu(), want)


def test_multinomial_draws_on_the_device(dev: torch.device) -> None:
    weights = torch.tensor([[0.2, 0.8, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    met.clear_all()
    torch.manual_seed(1)
    rows = torch.multinomial(weights.to(dev), 3).cpu()  # without replacement
    torch.manual_seed(1)
    assert torch.equal(torch.multinomial(weights.to(dev), 3).cpu(), rows)
    for row in rows.tolist():
        assert len(set(row)) == 3
    assert 2 not in rows[0].tolist()  # a zero weight is never drawn while others remain
    many = torch.multinomial(weights[0].to(dev), 20000, replacement=True).cpu()
    freq = torch.bincount(many, minlength=4).double() / many.numel()
    torch.testing.assert_close(freq, (weights[0] / weights[0].sum()).double(), rtol=0, atol=0.02)
    assert met.executed_fallback_ops() == []


@pytest.mark.parametrize(
    "probs, n", [([1.0, 1.0], 3), ([1, 1], 1), ([1.0, 1.0], 0)], ids=["too many", "integers", "none"]
)
def test_multinomial_refuses_what_eager_refuses_at_the_call(probs: list[Any], n: int, dev: Any) -> None:
    with pytest.raises(RuntimeError) as eager:
        torch.multinomial(torch.tensor(probs), n)
    with pytest.raises(RuntimeError) as lazy:
        torch.multinomial(torch.tensor(probs, device=dev), n)
    assert str(lazy.value) == str(eager.value)


def test_multinomial_of_a_negative_weight_raises_at_the_next_sync(dev: torch.device) -> None:
    drawn = torch.multinomial(torch.tensor([-1.0, 2.0], device=dev), 1)  # no wait at the call
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        drawn.cpu()


def test_torch_func_linearize_and_make_fx_trace_xla_ops(dev: torch.device) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    x, t = torch.randn(4), torch.randn(4)

    def f(v: torch.Tensor) -> torch.Tensor:
        return v.sin() * v.sum()

    want = torch.func.jvp(f, (x,), (t,))[1]
    _, jvp_fn = torch.func.linearize(f, x.to(dev))  # traced with make_fx over xla tensors
    torch.testing.assert_close(jvp_fn(t.to(dev)).cpu(), want)
    traced = make_fx(f)(x.to(dev))
    targets = {str(n.target) for n in traced.graph.nodes if n.op == "call_function"}
    assert {"aten.sin.default", "aten.sum.default", "aten.mul.Tensor"} <= targets
    assert not [t for t in targets if "empty" in t or "full" in t]  # not the runtime's own helpers


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_dropout_with_the_same_mask(reentrant: bool) -> None:
    # torch.utils.checkpoint restores the device's RNG state before recomputing, as HF's
    # gradient_checkpointing_enable() relies on: with another mask, the gradient belongs to
    # another forward. With w = 1 the gradient of sum(h^2) is 2 h^2, whatever the mask.
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    a = torch.randn(64).to("xla")
    w = torch.ones(64, device="xla", requires_grad=True)
    h = checkpoint(lambda a, w: F.dropout(a * w, 0.5, training=True), a, w, use_reentrant=reentrant)
    (h * h).sum().backward()
    assert w.grad is not None
    torch.testing.assert_close(w.grad.cpu(), (2 * h * h).detach().cpu())
    assert (h.detach().cpu() == 0).any()  # dropout did drop
