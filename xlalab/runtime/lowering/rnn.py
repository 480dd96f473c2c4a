"""Lowerings of the fused LSTM and GRU cells and their backward ops.

On an accelerator backend (``xla`` is PyTorch's PrivateUse1) ``nn.LSTMCell``/``nn.GRUCell``,
and the cells inside ``nn.LSTM``/``nn.GRU``, compute their two gate matmuls and then call
``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``, ops that have no CPU kernel at all (so
the CPU fallback cannot run them). Their ``workspace`` output carries what the backward
needs; its layout is private to the forward/backward pair, and follows CUDA's:

* LSTM: the activated gates ``[i, f, g, o]``, shape (N, 4H);
* GRU: ``[r, z, n, hn, hx]`` (``hn`` the hidden part of the new gate, bias included), (N, 5H).

PyTorch has meta kernels for the LSTM pair but not the GRU pair; the GRU's are registered
here, so that the runtime can learn the output shapes the usual way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from xlalab.runtime.lowering.elementwise import compute_float, tanh
from xlalab.runtime.lowering.registry import lowering

aten = torch.ops.aten

Array = jax.Array


def _sigmoid(x: Array) -> Array:
    return jax.nn.sigmoid(x)


def _plus(gates: Array, bias: Array | None) -> Array:
    """``gates + bias`` in float; an absent bias adds nothing. The LSTM cell adds both biases
    to the summed gates; the GRU cell adds each to its own gates, since its new gate needs
    the hidden part (bias included) apart."""
    return compute_float(gates) if bias is None else compute_float(gates) + compute_float(bias)


@lowering(aten._thnn_fused_lstm_cell.default)
def _fused_lstm_cell(
    input_gates: Array,
    hidden_gates: Array,
    cx: Array,
    input_bias: Array | None = None,
    hidden_bias: Array | None = None,
) -> tuple[Array, Array, Array]:
    summed = compute_float(input_gates) + compute_float(hidden_gates)
    i, f, g, o = jnp.split(_plus(_plus(summed, input_bias), hidden_bias), 4, axis=1)
    i, f, g, o = _sigmoid(i), _sigmoid(f), tanh(g), _sigmoid(o)
    cy = f * compute_float(cx) + i * g
    hy = o * tanh(cy)
    dt = cx.dtype
    return hy.astype(dt), cy.astype(dt), jnp.concatenate([i, f, g, o], axis=1).astype(input_gates.dtype)


@lowering(aten._thnn_fused_lstm_cell_backward_impl.default)
def _fused_lstm_cell_backward(
    grad_hy: Array | None,
    grad_cy: Array | None,
    cx: Array,
    cy: Array,
    workspace: Array,
    has_bias: bool,
) -> tuple[Array, Array, Array | None]:
    i, f, g, o = jnp.split(compute_float(workspace), 4, axis=1)
    cyf = compute_float(cy)
    tanh_cy = tanh(cyf)
    zero = jnp.zeros_like(cyf)
    ghy = zero if grad_hy is None else compute_float(grad_hy)
    gcy = ghy * o * (1 - tanh_cy * tanh_cy) + (zero if grad_cy is None else compute_float(grad_cy))
    gi = gcy * g * (1 - i) * i
    gf = gcy * compute_float(cx) * (1 - f) * f
    gg = gcy * i * (1 - g * g)
    go = ghy * tanh_cy * (1 - o) * o
    grad_gates = jnp.concatenate([gi, gf, gg, go], axis=1)
    grad_bias = jnp.sum(grad_gates, axis=0) if has_bias else None
    return grad_gates.astype(workspace.dtype), (gcy * f).astype(cx.dtype), grad_bias


@lowering(aten._thnn_fused_gru_cell.default)
def _fused_gru_cell(
    input_gates: Array,
    hidden_gates: Array,
    hx: Array,
    input_bias: Array | None = None,
    hidden_bias: Array | None = None,
) -> tuple[Array, Array]:
    ir, ii, in_ = jnp.split(_plus(input_gates, input_bias), 3, axis=1)
    hr, hi, hn = jnp.split(_plus(hidden_gates, hidden_bias), 3, axis=1)
    r = _sigmoid(ir + hr)
    z = _sigmoid(ii + hi)
    n = tanh(in_ + r * hn)
    h = compute_float(hx)
    hy = n + z * (h - n)
    workspace = jnp.concatenate([r, z, n, hn, h], axis=1)
    return hy.astype(hx.dtype), workspace.astype(input_gates.dtype)


@lowering(aten._thnn_fused_gru_cell_backward.default)
def _fused_gru_cell_backward(
    grad_hy: Array, workspace: Array, has_bias: bool
) -> tuple[Array, Array, Array, Array, Array]:
    r, z, n, hn, hx = jnp.split(compute_float(workspace), 5, axis=1)
    g = compute_float(grad_hy)
    gz = g * (hx - n) * (1 - z) * z
    ghx = g * z
    gn = g * (1 - z) * (1 - n * n)
    ghn = gn * r
    gr = gn * hn * (1 - r) * r
    dt = workspace.dtype
    grad_input = jnp.concatenate([gr, gz, gn], axis=1)
    grad_hidden = jnp.concatenate([gr, gz, ghn], axis=1)
    # Without biases the meta kernel above gives empty stand-ins for their gradients.
    bias_in = jnp.sum(grad_input, axis=0).astype(dt) if has_bias else jnp.zeros((0,), dt)
    bias_hidden = jnp.sum(grad_hidden, axis=0).astype(dt) if has_bias else jnp.zeros((0,), dt)
    return grad_input.astype(dt), grad_hidden.astype(dt), ghx.astype(grad_hy.dtype), bias_in, bias_hidden


# --- meta kernels PyTorch lacks -------------------------------------------------------------


def _gru_cell_meta(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    n, h = hx.shape
    return hx.new_empty((n, h)), input_gates.new_empty((n, 5 * h))


def _gru_cell_backward_meta(
    grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor, ...]:
    n, h = grad_hy.shape
    gates = (workspace.new_empty((n, 3 * h)), workspace.new_empty((n, 3 * h)), grad_hy.new_empty((n, h)))
    if not has_bias:
        # An undefined tensor cannot come out of a Python kernel: empty stands in (unused).
        return (*gates, workspace.new_empty((0,)), workspace.new_empty((0,)))
    return (*gates, workspace.new_empty((3 * h,)), workspace.new_empty((3 * h,)))


_META_LIB: torch.library.Library | None = None


def _register_meta() -> None:
    global _META_LIB
    missing = [
        (name, fn)
        for name, fn in (
            ("_thnn_fused_gru_cell", _gru_cell_meta),
            ("_thnn_fused_gru_cell_backward", _gru_cell_backward_meta),
        )
        if not getattr(aten, name).default.has_kernel_for_dispatch_key(torch._C.DispatchKey.Meta)
    ]
    if not missing:
        return
    _META_LIB = torch.library.Library("aten", "IMPL", "Meta")
    for name, fn in missing:
        _META_LIB.impl(name, fn)


_register_meta()
