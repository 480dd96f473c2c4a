"""The three reference training workloads, as plain PyTorch.

Tests, examples and ``bench/bench_step.py`` all import these so that "MNIST", "MLP" and "TinyGPT" mean
exactly the same model, optimizer, data and step everywhere. Nothing here imports xlalab: the same code
runs eagerly on CPU and, after ``model.to(xm.xla_device())``, through xlalab.

Data is synthetic but learnable (class prototypes plus noise; arithmetic token sequences), generated
from a ``torch.Generator`` seeded by the step index, so batch ``k`` is identical on every run and device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Device = torch.device | str


# --------------------------------------------------------------------------------------------- models


class MNIST(nn.Module):
    """The convnet from the PyTorch/XLA MNIST example (with BatchNorm after each conv block)."""

    def __init__(self, dropout: float = 0.5) -> None:
        super().__init__()
        self.dropout = dropout
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(10)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(20)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = self.bn1(x)
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = self.bn2(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = _dropout(x, self.dropout, self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class MLP(nn.Module):
    """784-512-512-10 ReLU perceptron."""

    def __init__(self, in_features: int = 784, hidden: int = 512, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        logits: Tensor = self.fc3(x)
        return logits


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention written out op by op (no SDPA), so every primitive is exercised."""

    mask: Tensor  # declared so type checkers see the buffer as a Tensor, not Tensor | Module

    def __init__(self, d_model: int, n_head: int, seq_len: int, dropout: float) -> None:
        super().__init__()
        assert d_model % n_head == 0
        self.n_head = n_head
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        # A non-persistent buffer: it follows model.to(device) but stays out of the state dict.
        self.register_buffer("mask", torch.triu(torch.ones(seq_len, seq_len), 1).bool(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        head_dim = c // self.n_head
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, head_dim).transpose(1, 2) for z in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        att = _dropout(att, self.dropout, self.training)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, c)
        out: Tensor = self.proj(y)
        return out


class Block(nn.Module):
    """Pre-LayerNorm transformer block with a 4x GELU MLP."""

    def __init__(self, d_model: int, n_head: int, seq_len: int, dropout: float) -> None:
        super().__init__()
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, seq_len, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        x = x + _dropout(self.attn(self.ln1(x)), self.dropout, self.training)
        h = self.fc_proj(F.gelu(self.fc(self.ln2(x))))
        return x + _dropout(h, self.dropout, self.training)


class TinyGPT(nn.Module):
    """A 2-block, 4-head, d=128 decoder-only transformer over a 256-token vocabulary."""

    def __init__(
        self,
        vocab: int = 256,
        seq_len: int = 64,
        d_model: int = 128,
        n_head: int = 4,
        n_layer: int = 2,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.seq_len = seq_len
        self.n_head = n_head
        self.dropout = dropout
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, seq_len, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        pos = torch.arange(t, device=tokens.device)
        x = _dropout(self.tok_emb(tokens) + self.pos_emb(pos), self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(self.ln_f(x))
        return logits


def _dropout(x: Tensor, p: float, training: bool) -> Tensor:
    # Skip the op entirely at p == 0 so dropout-free runs record the same graph as a model without it.
    return F.dropout(x, p, training=True) if training and p > 0 else x


# ----------------------------------------------------------------------------------------------- data


@functools.cache
def _prototypes(classes: int, features: int) -> Tensor:
    # Fixed per-class patterns; labels are recoverable from the inputs, so the loss actually goes down.
    return torch.randn(classes, features, generator=torch.Generator().manual_seed(1234))


def _generator(step: int) -> torch.Generator:
    return torch.Generator().manual_seed(10_007 + step)


def _classification_batch(step: int, batch_size: int, features: int) -> tuple[Tensor, Tensor]:
    gen = _generator(step)
    labels = torch.randint(0, 10, (batch_size,), generator=gen)
    noise = torch.randn(batch_size, features, generator=gen)
    return 0.5 * _prototypes(10, features)[labels] + noise, labels


def mnist_batch(step: int, batch_size: int, device: Device = "cpu") -> tuple[Tensor, Tensor]:
    """Float images (B, 1, 28, 28) and int64 labels (B,)."""
    images, labels = _classification_batch(step, batch_size, 28 * 28)
    return images.view(batch_size, 1, 28, 28).to(device), labels.to(device)


def mlp_batch(step: int, batch_size: int, device: Device = "cpu") -> tuple[Tensor, Tensor]:
    """Float features (B, 784) and int64 labels (B,)."""
    features, labels = _classification_batch(step, batch_size, 28 * 28)
    return features.to(device), labels.to(device)


def gpt_batch(
    step: int, batch_size: int, device: Device = "cpu", seq_len: int = 64, vocab: int = 256
) -> tuple[Tensor, Tensor]:
    """int64 tokens (B, seq_len) and next-token targets: arithmetic sequences mod vocab."""
    gen = _generator(step)
    start = torch.randint(0, vocab, (batch_size, 1), generator=gen)
    stride = torch.randint(1, 8, (batch_size, 1), generator=gen)
    seq = (start + stride * torch.arange(seq_len + 1)) % vocab
    return seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)


# ----------------------------------------------------------------------------------------------- specs


class ModelFactory(Protocol):
    def __call__(self, seed: int = 0, *, dropout: float | None = None) -> nn.Module: ...


class OptimizerFactory(Protocol):
    def __call__(
        self, params: Iterable[nn.Parameter], *, foreach: bool | None = None
    ) -> torch.optim.Optimizer: ...


BatchFactory = Callable[[int, int, Device], tuple[Tensor, Tensor]]
LossFn = Callable[[nn.Module, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Workload:
    """Everything needed to run one training step of a reference workload on any device.

    ``make_model(seed, dropout=None)`` builds the model in train mode (``dropout=None`` keeps the
    model's default); ``make_optimizer(params, foreach=None)`` builds its optimizer after the model has
    been moved to the target device; ``make_batch(step, batch_size, device)`` is deterministic in
    ``step``; ``clip`` is the max grad norm applied before ``opt.step()``, or None.
    """

    name: str
    make_model: ModelFactory
    make_optimizer: OptimizerFactory
    make_batch: BatchFactory
    loss_fn: LossFn
    clip: float | None
    default_batch: int


def _seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    # fork_rng keeps the caller's global RNG stream untouched while giving reproducible init.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build().train()


def _make_mnist(seed: int = 0, *, dropout: float | None = None) -> nn.Module:
    return _seeded(lambda: MNIST() if dropout is None else MNIST(dropout=dropout), seed)


def _make_mlp(seed: int = 0, *, dropout: float | None = None) -> nn.Module:
    del dropout  # the MLP has no dropout; accepted so all factories share one signature
    return _seeded(MLP, seed)


def _make_gpt(seed: int = 0, *, dropout: float | None = None) -> nn.Module:
    return _seeded(lambda: TinyGPT() if dropout is None else TinyGPT(dropout=dropout), seed)


def _sgd(params: Iterable[nn.Parameter], *, foreach: bool | None = None) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01, momentum=0.5, foreach=foreach)


def _adamw_mlp(params: Iterable[nn.Parameter], *, foreach: bool | None = None) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=foreach)


def _adamw_gpt(params: Iterable[nn.Parameter], *, foreach: bool | None = None) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=3e-4, foreach=foreach)


def _nll_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    return F.nll_loss(model(inputs), targets)  # MNIST already ends in log_softmax


def _cross_entropy_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(model(inputs), targets)


def _lm_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


WORKLOADS: dict[str, Workload] = {
    "mnist": Workload("mnist", _make_mnist, _sgd, mnist_batch, _nll_loss, clip=None, default_batch=128),
    "mlp": Workload(
        "mlp", _make_mlp, _adamw_mlp, mlp_batch, _cross_entropy_loss, clip=1.0, default_batch=128
    ),
    "gpt": Workload("gpt", _make_gpt, _adamw_gpt, gpt_batch, _lm_loss, clip=None, default_batch=16),
}


def _no_barrier() -> None:
    return None


def train_step(
    workload: Workload,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    inputs: Tensor,
    targets: Tensor,
    barrier: Callable[[], object] = _no_barrier,
) -> Tensor:
    """One optimizer step; ``barrier`` is ``xm.mark_step`` under xlalab and a no-op eagerly.

    Returns the loss without reading it back, so callers decide when (and whether) to synchronize.
    """
    opt.zero_grad(set_to_none=True)
    loss = workload.loss_fn(model, inputs, targets)
    loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
    if workload.clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), workload.clip)
    opt.step()
    barrier()
    return loss
