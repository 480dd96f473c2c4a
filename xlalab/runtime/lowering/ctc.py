"""Connectionist temporal classification: ``_ctc_loss`` and its backward (``nn.CTCLoss``).

The forward-backward algorithm of Graves et al. (2006) in log space, as eager's CPU kernel
computes it: each batch element's targets become the extended sequence ``l'`` (a blank
before, between and after the labels), ``log_alpha`` runs forward over time, ``log_beta``
backward, and the gradient collects ``alpha * beta`` per label. Eager loops over the batch;
here the batch and the extended positions are array axes and time is one ``lax.scan``, with
each element's lengths as masks, so one program serves every length. Three-term sums take
eager's form (``log(e1 + e2 + e3) + max`` with a -inf maximum read as 0), so impossible
alignments give -inf and an unreachable target an infinite loss, as eager's do.

Entries eager leaves unwritten in ``log_alpha`` (past an element's input or target length;
``at::empty`` memory there) are -inf here. The lengths are lists in ``_ctc_loss`` and
tensors in ``_ctc_loss.Tensor`` (what ``F.ctc_loss`` calls on a tensor subclass); the
tensors stay on the device (see ``width``).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch
from jax import Array, lax

from .registry import lowering

aten = torch.ops.aten


def _lse3(a: Array, b: Array, c: Array) -> Array:
    """``log(exp(a) + exp(b) + exp(c))`` in eager's form: shifted by the largest, 0 if all are -inf."""
    m = jnp.maximum(jnp.maximum(a, b), c)
    m = jnp.where(m == -jnp.inf, jnp.zeros((), m.dtype), m)
    return jnp.log(jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)) + m


def _shift(x: Array, k: int, fill: Array) -> Array:
    """``x`` moved ``k`` places along its last axis (right for k > 0), ``fill`` entering."""
    if k > 0:
        return jnp.concatenate([jnp.broadcast_to(fill, (*x.shape[:-1], k)), x[..., :-k]], axis=-1)
    return jnp.concatenate([x[..., -k:], jnp.broadcast_to(fill, (*x.shape[:-1], -k))], axis=-1)


class _Problem:
    """One batch's extended targets, their log-probabilities and masks, shared by both directions."""

    def __init__(
        self,
        log_probs: Array,
        targets: Array,
        input_lengths: Any,
        target_lengths: Any,
        blank: int,
        width: int,
    ) -> None:
        n = log_probs.shape[1]
        self.il = jnp.asarray(input_lengths, jnp.int64).reshape(n)
        self.tl = jnp.asarray(target_lengths, jnp.int64).reshape(n)
        s = jnp.arange(2 * width + 1)
        label = (s - 1) // 2  # the target each odd position holds
        if targets.ndim == 1:  # concatenated: element b's targets start after those before it
            starts = jnp.cumsum(self.tl) - self.tl
            where = jnp.clip(starts[:, None] + label[None, :], 0, max(targets.shape[0] - 1, 0))
            picked = targets[where] if targets.shape[0] else jnp.zeros(where.shape, targets.dtype)
        else:
            picked = targets[:, jnp.clip(label, 0, max(targets.shape[1] - 1, 0))]
            picked = picked if targets.shape[1] else jnp.zeros(picked.shape, targets.dtype)
        odd = (s % 2 == 1)[None, :]
        self.ext = jnp.where(odd, picked.astype(jnp.int64), blank)  # (N, S) extended targets l'
        self.last = 2 * self.tl  # each element's last valid position
        self.valid = s[None, :] <= self.last[:, None]
        # log_probs at each element's extended targets: (T, N, S).
        self.lpe = jnp.take_along_axis(
            log_probs, jnp.broadcast_to(self.ext[None], (log_probs.shape[0], *self.ext.shape)), 2
        )
        self.s = s
        self.neg = jnp.full((), -jnp.inf, log_probs.dtype)


def _forward(p: _Problem) -> tuple[Array, Array]:
    """(neg_log_likelihood (N,), log_alpha (N, T, S)) as eager's ``ctc_loss_cpu_template``."""
    lpe, neg, s = p.lpe, p.neg, p.s
    skip = (s[None, :] >= 2) & (p.ext != _shift(p.ext, 2, jnp.asarray(-1, p.ext.dtype)))
    first = jnp.where(s[None, :] == 0, lpe[0], neg)
    first = jnp.where((s[None, :] == 1) & (p.tl[:, None] > 0), lpe[0], first)

    def step(prev: Array, lp_t: Array) -> tuple[Array, Array]:
        nxt = _lse3(prev, _shift(prev, 1, neg), jnp.where(skip, _shift(prev, 2, neg), neg)) + lp_t
        return nxt, nxt

    _, rest = lax.scan(step, first, lpe[1:])
    alpha = jnp.concatenate([first[None], rest], axis=0)  # (T, N, S)
    t = jnp.arange(lpe.shape[0])[:, None, None]
    alpha = jnp.where((t < p.il[None, :, None]) & p.valid[None], alpha, neg)
    last_row = jnp.take_along_axis(alpha, jnp.maximum(p.il - 1, 0)[None, :, None], 0)[0]  # (N, S)
    l1 = jnp.take_along_axis(last_row, p.last[:, None], 1)[:, 0]
    l2 = jnp.take_along_axis(last_row, jnp.maximum(p.last - 1, 0)[:, None], 1)[:, 0]
    m = jnp.maximum(l1, l2)
    m = jnp.where(m == -jnp.inf, jnp.zeros((), m.dtype), m)
    nll = jnp.where(p.tl == 0, -l1, -(jnp.log(jnp.exp(l1 - m) + jnp.exp(l2 - m)) + m))
    # No input at all: likelihood 1 of an empty target (eager's -0.0), 0 of any other.
    nll = jnp.where(p.il == 0, jnp.where(p.tl == 0, -jnp.zeros((), nll.dtype), jnp.inf), nll)
    return nll, jnp.transpose(alpha, (1, 0, 2))


def _backward(
    p: _Problem, grad_out: Array, log_probs: Array, nll: Array, log_alpha: Array, zero_infinity: bool
) -> Array:
    """The gradient of the per-element losses, as eager's ``ctc_loss_backward_cpu_template``."""
    lpe, neg, s = p.lpe, p.neg, p.s
    n_steps = lpe.shape[0]
    last = p.last[:, None]
    follow = (s[None, :] < last - 1) & (_shift(p.ext, -2, jnp.asarray(-1, p.ext.dtype)) != p.ext)
    start = jnp.where((s[None, :] == last) | ((s[None, :] == last - 1) & (p.tl[:, None] > 0)), 0, 1)

    def step(nxt: Array, inputs: tuple[Array, Array]) -> tuple[Array, Array]:
        t, lp_t = inputs
        rec = (
            _lse3(
                nxt,
                jnp.where(s[None, :] < last, _shift(nxt, -1, neg), neg),
                jnp.where(follow, _shift(nxt, -2, neg), neg),
            )
            + lp_t
        )
        init = jnp.where(start == 0, lp_t, neg)  # the last blank and the last label at t = il - 1
        il = p.il[:, None]
        beta = jnp.where(t == il - 1, init, jnp.where(t < il - 1, rec, neg))
        return beta, beta

    ts = jnp.arange(n_steps)
    _, betas = lax.scan(step, jnp.full(lpe.shape[1:], neg), (ts, lpe), reverse=True)  # (T, N, S)
    alpha = jnp.transpose(log_alpha, (1, 0, 2))
    both = alpha + betas
    both = jnp.where(p.valid[None] & (ts[:, None, None] < p.il[None, :, None]), both, neg)
    # Per time, element and label: log of the sum of exp(alpha + beta) over the positions holding it.
    t_ix = jnp.broadcast_to(ts[:, None, None], both.shape)
    b_ix = jnp.broadcast_to(jnp.arange(both.shape[1])[None, :, None], both.shape)
    c_ix = jnp.broadcast_to(p.ext[None], both.shape)
    top = jnp.full(log_probs.shape, -jnp.inf, both.dtype).at[t_ix, b_ix, c_ix].max(both)
    safe_top = jnp.where(top == -jnp.inf, jnp.zeros((), top.dtype), top)
    total = (
        jnp.zeros(log_probs.shape, both.dtype)
        .at[t_ix, b_ix, c_ix]
        .add(jnp.exp(both - safe_top[t_ix, b_ix, c_ix]))
    )
    collected = jnp.where(top == -jnp.inf, top, jnp.log(total) + safe_top)
    nll_b = nll[None, :, None]
    grad = (jnp.exp(log_probs) - jnp.exp(collected + nll_b - log_probs)) * grad_out[None, :, None]
    grad = jnp.where(ts[:, None, None] < p.il[None, :, None], grad, jnp.zeros((), grad.dtype))
    if zero_infinity:
        grad = jnp.where(nll_b == jnp.inf, jnp.zeros((), grad.dtype), grad)
    return grad


def width(targets: Any, target_lengths: Any) -> int:
    """How many labels ``log_alpha`` has room for: eager's longest target with listed lengths.
    With tensor lengths that needs their values, so the room is what the targets can hold: the
    padded width of 2-d targets, all of 1-d ones (``log_alpha`` is then wider than eager's,
    -inf in the extra positions; only the backward reads it)."""
    if isinstance(target_lengths, (list, tuple)):
        return max([int(v) for v in target_lengths], default=0)
    return int(targets.shape[-1])


@lowering(aten._ctc_loss.default, aten._ctc_loss.Tensor)
def _ctc_loss(
    log_probs: Array, targets: Array, input_lengths: Any, target_lengths: Any, blank: int = 0,
    zero_infinity: bool = False,
) -> tuple[Array, Array]:  # fmt: skip
    p = _Problem(log_probs, targets, input_lengths, target_lengths, blank, width(targets, target_lengths))
    return _forward(p)


@lowering(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def _ctc_loss_backward(
    grad: Array, log_probs: Array, targets: Array, input_lengths: Any, target_lengths: Any, nll: Array,
    log_alpha: Array, blank: int, zero_infinity: bool = False,
) -> Array:  # fmt: skip
    width = (log_alpha.shape[2] - 1) // 2
    p = _Problem(log_probs, targets, input_lengths, target_lengths, blank, width)
    return _backward(p, grad, log_probs, nll, log_alpha, zero_infinity)
