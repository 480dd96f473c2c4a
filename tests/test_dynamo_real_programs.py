"""Compiled mode on programs nobody wrote for xlalab, against eager PyTorch on the CPU.

- Hugging Face models from tiny configs: a compiled forward, its gradients, and a whole train
  step (AdamW, SGD with momentum) compiled, three steps: losses and parameters as eager's;
- what a compiled function returns is laid out as eager lays it out (a transposed result,
  ``empty_like`` of a transposed input) and aliases what eager's aliases (``y.t()`` and ``y``);
- in-place view ops (``t_``, ``transpose_``) keep eager's strides, lazily and compiled;
- buffers and inputs written inside a compiled function, graph breaks, recompiles on a new
  batch size, random ops, ``no_grad`` inside the function, barriers between calls.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
from torch import nn

import xlalab
import xlalab.dynamo as dynamo

from .zoo.models import no_dropout

transformers = pytest.importorskip("transformers")


def _close(got: Any, want: Any, **tol: Any) -> None:
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **tol)


def _layout(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


# ----------------------------------------------------------------------------- layouts


def _permuted_results(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.permute(2, 0, 1) * 2, x.permute(2, 0, 1).sin()


def _transpose_of_an_intermediate(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return ((x * 2).t(),)


def _like_a_transposed_input(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.empty_like(x.t()).fill_(1), torch.zeros_like(x.t()), x.t() + 1


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (_permuted_results, (2, 3, 4)),
        (_transpose_of_an_intermediate, (3, 3)),
        (_like_a_transposed_input, (3, 4)),
    ],
    ids=["permuted", "intermediate_t", "like_t"],
)
def test_compiled_results_keep_eager_strides(
    fn: Callable[..., Any], shape: tuple[int, ...], dev: torch.device
) -> None:
    dynamo.reset()
    x = torch.randn(shape)
    want = fn(x)
    got = torch.compile(fn, backend="xlalab")(x.to(dev))
    for g, w in zip(got, want, strict=True):
        assert _layout(g) == _layout(w)
        _close(g, w)
    # What the strides allow works as in eager: a transposed result flattens after ``.t()``.
    _close(got[0].transpose(0, -1).reshape(-1), want[0].transpose(0, -1).reshape(-1))


def test_an_output_before_the_output_it_views_aliases_it(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y.t(), y

    dynamo.reset()
    x = torch.randn(3, 3)
    want = f(x)
    got = torch.compile(f, backend="xlalab")(x.to(dev))
    assert [_layout(g) for g in got] == [_layout(w) for w in want]
    want[1].add_(1)
    got[1].add_(1)  # eager's y.t() sees it
    _close(got[0], want[0])


@pytest.mark.parametrize("op", ["t_", "transpose_", "swapdims_"])
def test_an_inplace_view_op_twice_keeps_eager_strides(op: str, dev: torch.device) -> None:
    args = () if op == "t_" else (0, 1)
    a = torch.arange(6.0).reshape(2, 3)
    b = a.to(dev)
    for _ in range(2):
        getattr(a, op)(*args)
        getattr(b, op)(*args)
        assert _layout(b) == _layout(a)
        assert _layout(b * 2) == _layout(a * 2)
        _close(b, a)


def test_an_inplace_view_of_an_input_in_a_compiled_function(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.t_()
        return x * 2

    dynamo.reset()
    compiled = torch.compile(f, backend="xlalab")
    a = torch.arange(6.0).reshape(2, 3)
    b = a.to(dev)
    for _ in range(3):
        want, got = f(a), compiled(b)
        assert _layout(b) == _layout(a)
        assert _layout(got) == _layout(want)
        _close(got, want)


# ----------------------------------------------------------------------------- Hugging Face models


def _lm_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0  # a padded row
    return {"input_ids": ids, "attention_mask": mask, "labels": ids}


def _classifier_batch(seed: int) -> dict[str, torch.Tensor]:
    batch = _lm_batch(seed)
    batch["labels"] = torch.tensor([0, 2])
    return batch


def _seq2seq_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (2, 8), generator=g)
    return {"input_ids": ids, "labels": torch.randint(0, 64, (2, 5), generator=g)}


def _image_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"pixel_values": torch.randn(2, 3, 16, 16, generator=g), "labels": torch.tensor([0, 2])}


_HIDDEN = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def _bert() -> nn.Module:
    config = transformers.BertConfig(vocab_size=64, max_position_embeddings=32, num_labels=3, **_HIDDEN)
    return transformers.BertForSequenceClassification(config)


def _llama() -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=64, max_position_embeddings=32, num_key_value_heads=1, **_HIDDEN
    )
    return transformers.LlamaForCausalLM(config)


def _t5() -> nn.Module:
    config = transformers.T5Config(
        vocab_size=64, d_model=32, d_kv=16, d_ff=37, num_layers=2, num_heads=2, decoder_start_token_id=0
    )
    return transformers.T5ForConditionalGeneration(config)


def _vit() -> nn.Module:
    config = transformers.ViTConfig(image_size=16, patch_size=8, num_channels=3, num_labels=3, **_HIDDEN)
    return transformers.ViTForImageClassification(config)


_MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], dict[str, torch.Tensor]]]] = {
    "gpt2": (_gpt2, _lm_batch),
    "bert": (_bert, _classifier_batch),
    "llama": (_llama, _lm_batch),
    "t5": (_t5, _seq2seq_batch),
    "vit": (_vit, _image_batch),
}
_BUILT: dict[str, nn.Module] = {}


def _pair(name: str, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """The model on the CPU and its copy on ``device`` (the same weights), dropout off: the
    two devices draw different numbers. Each is built once per test module."""
    if name not in _BUILT:
        torch.manual_seed(0)
        model = _MODELS[name][0]()
        model.config.use_cache = False
        no_dropout(model)
        _BUILT[name] = model
    cpu = copy.deepcopy(_BUILT[name])
    return cpu, copy.deepcopy(cpu).to(device)


def _on(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


@pytest.mark.parametrize("name", [n for n in _MODELS if n != "gpt2"])  # gpt2's: with its gradients
def test_hf_forward_compiled(name: str, dev: torch.device) -> None:
    dynamo.reset()
    cpu, xla = _pair(name, dev)
    cpu.eval()
    xla.eval()
    batch = _MODELS[name][1](1)
    with torch.no_grad():
        want = cpu(**batch).logits
        got = torch.compile(xla, backend="xlalab")(**_on(batch, dev)).logits
    _close(got, want, rtol=1e-4, atol=1e-5)
    assert not [f.lazy for f in dynamo.compiled_functions() if f.lazy], dynamo.summary()


@pytest.mark.parametrize("name", ["gpt2"])
def test_hf_gradients_compiled(name: str, dev: torch.device) -> None:
    xlalab.use_torch_xla_names()  # backend="openxla", as torch_xla code writes it
    dynamo.reset()
    cpu, xla = _pair(name, dev)
    batch = _MODELS[name][1](1)
    want = cpu(**batch).loss
    want.backward()
    got = torch.compile(xla, backend="openxla")(**_on(batch, dev)).loss
    got.backward()
    _close(got, want, rtol=1e-5, atol=1e-6)
    for (pname, p), q in zip(cpu.named_parameters(), xla.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), pname
        if p.grad is not None:
            _close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=pname)


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    opt.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    return loss.detach()


def _sgd_momentum(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1)


@pytest.mark.parametrize(
    ("name", "optimizer", "compile_with"),
    # (gpt2 with plain SGD: tests/test_dynamo.py)
    [("llama", _sgd_momentum, "dynamo"), ("gpt2", _adamw, "torch_xla")],
    ids=["llama-sgd_momentum", "gpt2-adamw-torch_xla.compile"],
)
def test_hf_train_step_compiled_three_steps(
    name: str, optimizer: Callable[[Any], torch.optim.Optimizer], compile_with: str, dev: torch.device
) -> None:
    dynamo.reset()
    cpu, xla = _pair(name, dev)
    cpu_opt, xla_opt = optimizer(cpu.parameters()), optimizer(xla.parameters())
    if compile_with == "dynamo":
        step = torch.compile(_train_step, backend="xlalab")
    else:
        xlalab.use_torch_xla_names()
        import torch_xla

        step = torch_xla.compile(_train_step)
    for i in range(3):
        batch = _MODELS[name][1](i)
        want = _train_step(cpu, cpu_opt, batch)
        got = step(xla, xla_opt, _on(batch, dev))
        _close(got, want, rtol=1e-5, atol=1e-5, msg=f"loss of step {i}")
    for (pname, p), q in zip(cpu.named_parameters(), xla.parameters(), strict=True):
        _close(q, p, rtol=1e-4, atol=1e-5, msg=pname)


# ----------------------------------------------------------------------------- state, breaks, shapes


class _Counted(nn.Module):
    """Batch norm (running statistics written in the graph) and a step counter buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.norm(x) * self.calls


def test_buffers_written_inside_a_compiled_module(dev: torch.device) -> None:
    dynamo.reset()
    torch.manual_seed(0)
    cpu = _Counted()
    xla = copy.deepcopy(cpu).to(dev)
    compiled = torch.compile(xla, backend="xlalab")
    for train in (True, True, False):
        cpu.train(train)
        xla.train(train)
        x = torch.randn(5, 4)
        _close(compiled(x.to(dev)), cpu(x))
        for (name, b), c in zip(cpu.named_buffers(), xla.buffers(), strict=True):
            _close(c, b, msg=name)


def _breaks(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    buf.mul_(2)
    scale = x.sum().item()  # a graph break
    print("scale read")  # another
    if scale > 0:  # a branch on the value read
        buf.add_(scale)
    return buf * x


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_graph_breaks_then_the_rest_as_eager(sign: float, dev: torch.device) -> None:
    dynamo.reset()
    compiled = torch.compile(_breaks, backend="xlalab")
    x, buf = torch.arange(3.0) * sign, torch.ones(3)
    xx, xbuf = x.to(dev), buf.to(dev)
    for _ in range(2):
        _close(compiled(xx, xbuf), _breaks(x, buf))
        _close(xbuf, buf)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_new_batch_size_recompiles_with_right_values(dynamic: bool | None, dev: torch.device) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).softmax(-1).sum(0) / x.shape[0]

    dynamo.reset()
    compiled = torch.compile(f, backend="xlalab", dynamic=dynamic)
    w = torch.randn(4, 5)
    for batch in (2, 3, 7, 2):
        x = torch.randn(batch, 4)
        _close(compiled(x.to(dev), w.to(dev)), f(x, w))


def test_dropout_draws_the_same_after_the_same_seed(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return nn.functional.dropout(x, 0.5, training=True)

    dynamo.reset()
    compiled = torch.compile(f, backend="xlalab")
    x = torch.ones(8, 8, device=dev)
    torch.manual_seed(3)
    first = compiled(x).cpu()
    torch.manual_seed(3)
    again = compiled(x).cpu()
    after = compiled(x).cpu()
    assert first.shape == (8, 8) and first.dtype == torch.float32
    assert set(first.unique().tolist()) <= {0.0, 2.0}
    torch.testing.assert_close(again, first)
    assert not torch.equal(after, first)


def test_no_grad_inside_and_lazy_ops_between_compiled_calls(dev: torch.device) -> None:
    xlalab.use_torch_xla_names()
    import torch_xla

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            frozen = x * w
        return frozen + 1, (x * w).tanh().sum()

    dynamo.reset()
    compiled = torch.compile(f, backend="openxla")
    w = torch.randn(3, requires_grad=True)
    xw = w.detach().to(dev).requires_grad_()
    x = torch.randn(2, 3)
    pending = x.to(dev) + 1  # a lazy op feeds the compiled call
    want = f(x + 1, w)
    got = compiled(pending, xw)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want]
    torch_xla.sync()
    again_want = f(want[0] * 2, w)
    again = compiled(got[0] * 2, xw)
    (want[1] + again_want[1]).backward()
    (got[1] + again[1]).backward()
    for g, e in zip((*got, *again), (*want, *again_want), strict=True):
        _close(g, e)
    _close(xw.grad, w.grad)
