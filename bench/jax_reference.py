"""Hand-written pure-JAX training steps that compute the same thing as the PyTorch workloads.

This is the "jax.jit" column of ``bench_step.py``: the whole training step (forward, loss, grads via
``jax.value_and_grad``, optional global-norm clip, optimizer update, BatchNorm running stats) is one
jitted function of ``(params, buffers, opt_state, inputs, targets, step)``. It is the ceiling xlalab
should approach: same XLA compiler, zero per-op Python overhead at steady state.

Everything is built *from the torch objects* (layer sizes, eps, momentum, optimizer hyperparameters
are read off the module and optimizer), so the two sides cannot silently drift apart.
Parameters are kept in torch layouts under torch names (``"conv1.weight"`` is OIHW, linear weights are
``(out, in)``), which makes comparing against ``model.named_parameters()`` a dict lookup.
``tests/test_bench_jax_reference.py`` checks that a step here matches an eager PyTorch step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

Params = dict[str, jax.Array]
# forward_loss(params, buffers, inputs, targets, key) -> (loss, new_buffers)
ForwardLoss = Callable[[Params, Params, jax.Array, jax.Array, jax.Array], tuple[jax.Array, Params]]
StepFn = Callable[..., tuple[Params, Params, Any, jax.Array]]


# ------------------------------------------------------------------------------------------ layers


def _linear(p: Params, name: str, x: jax.Array) -> jax.Array:
    y = x @ p[f"{name}.weight"].T
    bias = p.get(f"{name}.bias")
    return y if bias is None else y + bias


def _conv2d(p: Params, name: str, x: jax.Array) -> jax.Array:
    y = lax.conv_general_dilated(
        x, p[f"{name}.weight"], (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    return y + p[f"{name}.bias"][None, :, None, None]


def _max_pool2(x: jax.Array) -> jax.Array:
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _batch_norm_train(
    p: Params, buffers: Params, name: str, x: jax.Array, momentum: float, eps: float
) -> tuple[jax.Array, Params]:
    """Training-mode BatchNorm2d: normalize with batch stats, update running stats like torch."""
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))  # biased, as torch uses for normalization
    n = x.size // x.shape[1]
    scale = lax.rsqrt(var + eps) * p[f"{name}.weight"]
    y = (x - mean[:, None, None]) * scale[:, None, None] + p[f"{name}.bias"][:, None, None]
    # torch stores the *unbiased* variance in running_var.
    stats = {
        f"{name}.running_mean": (1 - momentum) * buffers[f"{name}.running_mean"] + momentum * mean,
        f"{name}.running_var": (1 - momentum) * buffers[f"{name}.running_var"]
        + momentum * var * (n / (n - 1)),
    }
    return y, jax.tree.map(lax.stop_gradient, stats)


def _layer_norm(p: Params, name: str, x: jax.Array, eps: float) -> jax.Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = jnp.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
    if rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _nll(log_probs: jax.Array, targets: jax.Array) -> jax.Array:
    return -jnp.take_along_axis(log_probs, targets[:, None], axis=1).mean()


def _cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    return _nll(jax.nn.log_softmax(logits, axis=-1), targets)


# ------------------------------------------------------------------------------------------ models


def _setting(module: torch.nn.Module, name: str) -> Any:
    # Plain (non-parameter) attributes live in __dict__; nn.Module.__getattr__ is typed Tensor | Module.
    return vars(module)[name]


def _bn_config(model: torch.nn.Module, name: str) -> tuple[float, float]:
    bn = cast(torch.nn.BatchNorm2d, model.get_submodule(name))
    if bn.momentum is None:
        raise NotImplementedError("cumulative-average BatchNorm (momentum=None) is not mirrored")
    return float(bn.momentum), float(bn.eps)


def _mnist_forward(model: torch.nn.Module) -> ForwardLoss:
    rate = float(_setting(model, "dropout"))
    bn = {name: _bn_config(model, name) for name in ("bn1", "bn2")}

    def forward_loss(
        p: Params, buffers: Params, x: jax.Array, y: jax.Array, key: jax.Array
    ) -> tuple[jax.Array, Params]:
        h = jax.nn.relu(_max_pool2(_conv2d(p, "conv1", x)))
        h, stats1 = _batch_norm_train(p, buffers, "bn1", h, *bn["bn1"])
        h = jax.nn.relu(_max_pool2(_conv2d(p, "conv2", h)))
        h, stats2 = _batch_norm_train(p, buffers, "bn2", h, *bn["bn2"])
        h = jax.nn.relu(_linear(p, "fc1", h.reshape(h.shape[0], -1)))
        h = _dropout(h, rate, key)
        log_probs = jax.nn.log_softmax(_linear(p, "fc2", h), axis=1)
        return _nll(log_probs, y), {**stats1, **stats2}

    return forward_loss


def _mlp_forward(model: torch.nn.Module) -> ForwardLoss:
    del model  # nothing configurable beyond the parameter shapes

    def forward_loss(
        p: Params, buffers: Params, x: jax.Array, y: jax.Array, key: jax.Array
    ) -> tuple[jax.Array, Params]:
        h = jax.nn.relu(_linear(p, "fc1", x))
        h = jax.nn.relu(_linear(p, "fc2", h))
        return _cross_entropy(_linear(p, "fc3", h), y), buffers

    return forward_loss


def _attention(p: Params, name: str, x: jax.Array, n_head: int, rate: float, key: jax.Array) -> jax.Array:
    b, t, c = x.shape
    head_dim = c // n_head
    q, k, v = jnp.split(_linear(p, f"{name}.qkv", x), 3, axis=-1)
    q, k, v = (z.reshape(b, t, n_head, head_dim).transpose(0, 2, 1, 3) for z in (q, k, v))
    att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(head_dim)
    mask = jnp.triu(jnp.ones((t, t), dtype=bool), 1)
    att = jax.nn.softmax(jnp.where(mask, -jnp.inf, att), axis=-1)
    att = _dropout(att, rate, key)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
    return _linear(p, f"{name}.proj", y)


def _gpt_forward(model: torch.nn.Module) -> ForwardLoss:
    rate, n_head = float(_setting(model, "dropout")), int(_setting(model, "n_head"))
    n_layer = len(cast(torch.nn.ModuleList, model.get_submodule("blocks")))
    eps = float(cast(torch.nn.LayerNorm, model.get_submodule("ln_f")).eps)

    def forward_loss(
        p: Params, buffers: Params, tokens: jax.Array, y: jax.Array, key: jax.Array
    ) -> tuple[jax.Array, Params]:
        keys = iter(jax.random.split(key, 1 + 3 * n_layer))  # one per dropout site, in torch's order
        t = tokens.shape[1]
        h = p["tok_emb.weight"][tokens] + p["pos_emb.weight"][jnp.arange(t)]
        h = _dropout(h, rate, next(keys))
        for i in range(n_layer):
            blk = f"blocks.{i}"
            a = _attention(p, f"{blk}.attn", _layer_norm(p, f"{blk}.ln1", h, eps), n_head, rate, next(keys))
            h = h + _dropout(a, rate, next(keys))
            m = _linear(p, f"{blk}.fc", _layer_norm(p, f"{blk}.ln2", h, eps))
            m = _linear(p, f"{blk}.fc_proj", jax.nn.gelu(m, approximate=False))  # torch's GELU is exact
            h = h + _dropout(m, rate, next(keys))
        logits = _linear(p, "head", _layer_norm(p, "ln_f", h, eps))
        return _cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), buffers

    return forward_loss


# Keyed by class name rather than isinstance, so this module needs no import of xlalab.testing.
_FORWARDS: dict[str, Callable[[torch.nn.Module], ForwardLoss]] = {
    "MNIST": _mnist_forward,
    "MLP": _mlp_forward,
    "TinyGPT": _gpt_forward,
}


# -------------------------------------------------------------------------------------- optimizers


@dataclass(frozen=True)
class SGDMomentum:
    """torch.optim.SGD with momentum, no dampening/nesterov/weight decay."""

    lr: float
    momentum: float

    def init(self, params: Params) -> Params:
        # torch seeds the buffer with the first grad; a zero buffer gives the identical first update.
        return jax.tree.map(jnp.zeros_like, params)

    def update(self, params: Params, grads: Params, state: Params) -> tuple[Params, Params]:
        buf = jax.tree.map(lambda b, g: self.momentum * b + g, state, grads)
        return jax.tree.map(lambda p, b: p - self.lr * b, params, buf), buf


@dataclass(frozen=True)
class AdamW:
    """torch.optim.AdamW (decoupled weight decay, bias-corrected, amsgrad off)."""

    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float

    def init(self, params: Params) -> dict[str, Any]:
        # Two separate zero trees: donation rejects the same buffer appearing twice in the arguments.
        return {
            "step": jnp.zeros((), jnp.float32),
            "exp_avg": jax.tree.map(jnp.zeros_like, params),
            "exp_avg_sq": jax.tree.map(jnp.zeros_like, params),
        }

    def update(self, params: Params, grads: Params, state: dict[str, Any]) -> tuple[Params, dict[str, Any]]:
        step = state["step"] + 1.0
        step_size = self.lr / (1.0 - self.beta1**step)
        bias_correction2_sqrt = jnp.sqrt(1.0 - self.beta2**step)
        exp_avg = jax.tree.map(lambda m, g: m + (1.0 - self.beta1) * (g - m), state["exp_avg"], grads)
        exp_avg_sq = jax.tree.map(
            lambda v, g: self.beta2 * v + (1.0 - self.beta2) * g * g, state["exp_avg_sq"], grads
        )

        def apply(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
            p = p * (1.0 - self.lr * self.weight_decay)
            return p - step_size * m / (jnp.sqrt(v) / bias_correction2_sqrt + self.eps)

        new_params = jax.tree.map(apply, params, exp_avg, exp_avg_sq)
        return new_params, {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}


Optimizer = SGDMomentum | AdamW


def optimizer_from_torch(opt: torch.optim.Optimizer) -> Optimizer:
    """Mirror a torch optimizer's hyperparameters; refuse settings the JAX side does not implement."""
    group = opt.param_groups[0]
    if isinstance(opt, torch.optim.SGD):
        if group["dampening"] or group["nesterov"] or group["weight_decay"] or group["maximize"]:
            raise NotImplementedError(f"unsupported SGD options: {group}")
        return SGDMomentum(lr=float(group["lr"]), momentum=float(group["momentum"]))
    if isinstance(opt, torch.optim.AdamW):
        if group["amsgrad"] or group["maximize"]:
            raise NotImplementedError(f"unsupported AdamW options: {group}")
        beta1, beta2 = group["betas"]
        return AdamW(float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                     float(group["weight_decay"]))
    raise NotImplementedError(f"no JAX mirror for {type(opt).__name__}")


def clip_by_global_norm(grads: Params, max_norm: float) -> Params:
    """torch.nn.utils.clip_grad_norm_: norm of per-tensor norms, eps 1e-6, coefficient capped at 1."""
    norms = jnp.stack([jnp.linalg.norm(g.ravel()) for g in jax.tree.leaves(grads)])
    coef = jnp.minimum(max_norm / (jnp.linalg.norm(norms) + 1e-6), 1.0)
    return jax.tree.map(lambda g: g * coef, grads)


# -------------------------------------------------------------------------------------------- step


def make_step(forward_loss: ForwardLoss, optimizer: Optimizer, clip: float | None) -> StepFn:
    """The whole training step as one pure (not yet jitted) function."""

    def step(params: Params, buffers: Params, opt_state: Any, inputs: jax.Array, targets: jax.Array,
             step_idx: jax.Array) -> tuple[Params, Params, Any, jax.Array]:
        key = jax.random.fold_in(jax.random.key(0), step_idx)
        grad_fn = jax.value_and_grad(forward_loss, has_aux=True)
        (loss, new_buffers), grads = grad_fn(params, buffers, inputs, targets, key)
        if clip is not None:
            grads = clip_by_global_norm(grads, clip)
        new_params, new_opt_state = optimizer.update(params, grads, opt_state)
        return new_params, new_buffers, new_opt_state, loss

    return step


def jit_step(step: StepFn) -> StepFn:
    # Donation lets XLA update params and optimizer state in place, as torch's in-place step does.
    return jax.jit(step, donate_argnums=(0, 1, 2))


@dataclass
class JaxReference:
    """A ready-to-run pure-JAX twin of (model, optimizer): call ``run(inputs, targets, step_idx)``.

    ``step`` is the plain function (e.g. to time a fresh trace), ``step_fn`` its jitted form.
    """

    step: StepFn
    step_fn: StepFn
    params: Params
    buffers: Params
    opt_state: Any

    def run(self, inputs: jax.Array, targets: jax.Array, step_idx: int) -> jax.Array:
        """One step; replaces the held state (the old arrays are donated) and returns the loss."""
        self.params, self.buffers, self.opt_state, loss = self.step_fn(
            self.params, self.buffers, self.opt_state, inputs, targets, np.int32(step_idx)
        )
        return loss

    def block_until_ready(self) -> None:
        jax.block_until_ready((self.params, self.buffers, self.opt_state))


def to_jax(t: torch.Tensor) -> jax.Array:
    """Copy a CPU tensor into JAX; int64 becomes int32 explicitly (JAX runs without x64)."""
    a = t.detach().cpu().numpy()
    return jnp.asarray(a.astype(np.int32) if a.dtype == np.int64 else a)


def state_from_torch(model: torch.nn.Module) -> tuple[Params, Params]:
    """Parameters and the float buffers the step updates (BatchNorm running stats), by torch name."""
    params = {name: to_jax(p) for name, p in model.named_parameters()}
    buffers = {
        name: to_jax(b)
        for name, b in model.named_buffers()
        if name.endswith(("running_mean", "running_var"))
    }
    return params, buffers


def build_reference(model: torch.nn.Module, opt: torch.optim.Optimizer, clip: float | None) -> JaxReference:
    """A JAX twin of a workload's torch model/optimizer, starting from the model's current values."""
    forward = _FORWARDS[type(model).__name__](model)
    optimizer = optimizer_from_torch(opt)
    params, buffers = state_from_torch(model)
    step = make_step(forward, optimizer, clip)
    return JaxReference(step, jit_step(step), params, buffers, optimizer.init(params))
