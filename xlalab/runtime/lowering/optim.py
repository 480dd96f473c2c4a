"""Fused optimizer steps (``torch.optim.Adam(fused=True)``, ``AdamW(fused=True)``) and the two
ops of ``GradScaler`` that feed them (at the end of the module).

The fused optimizers (AdamW's is Hugging Face Trainer's default, ``adamw_torch_fused``) hand the
whole update of a parameter group to one op, ``aten._fused_adam_``/``_fused_adamw_``, which writes
lists of tensors in place: the parameters, their moment estimates, AMSGrad's running maxima and,
with a gradient scale, the unscaled gradients. The runtime's generic in-place path handles ops
that write one tensor; these ops get a handler of their own (an entry of ``tensor._SPECIAL``, like
those in ``special.py``) that records the call as one multi-output node and writes each output
back into its tensor. The functional variants (``_fused_adam``/``_fused_adamw``, what a
functionalized graph from ``torch.compile`` calls) record the same node and return new tensors.

The lowering follows torch's CPU kernel (``FusedAdamKernel.cpp``) operation by operation, so that
the lazy step equals the eager one to the last bit or two:

* the bias corrections and the step size are computed in float64 from the step count (a device
  tensor, so a new step never recompiles), as the kernel does on the host in double;
* everything else runs in the parameter's ``opmath`` type (float32 for bfloat16/float16), and
  the update of the parameter uses the moments before they are rounded to the parameter dtype;
* the first moment is torch's ``lerp`` (two formulas depending on the weight);
* with ``found_inf`` equal to 1 (GradScaler found an inf/NaN) nothing is written, gradients
  included, exactly as the kernel returns early.

The learning rate is a graph input (a float64 scalar), so a scheduler changing it every step
does not recompile; betas, eps and weight decay are baked into the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch._ops import OpOverload

from .. import ir, metrics
from .. import tensor as rt
from ..frames import ir_frames
from .registry import lowering

aten = torch.ops.aten

Array = jax.Array

LISTS = ("self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps")
OPTIONS = ("lr", "beta1", "beta2", "weight_decay", "eps", "amsgrad", "maximize", "grad_scale", "found_inf")

INPLACE: dict[OpOverload, bool] = {  # overload -> decoupled weight decay (AdamW)
    aten._fused_adam_.default: False,
    aten._fused_adam_.tensor_lr: False,
    aten._fused_adamw_.default: True,
    aten._fused_adamw_.tensor_lr: True,
}
FUNCTIONAL: dict[OpOverload, bool] = {
    aten._fused_adam.default: False,
    aten._fused_adam.tensor_lr: False,
    aten._fused_adamw.default: True,
    aten._fused_adamw.tensor_lr: True,
}


def written(has_grad_scale: bool, amsgrad: bool) -> tuple[bool, ...]:
    """Which of the five state lists (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs) the
    kernel writes: the gradients only when it unscales them, the maxima only with AMSGrad."""
    return (True, has_grad_scale, True, True, amsgrad)


# --------------------------------------------------------------------------- the lowering


def _opmath(dtype: Any) -> Any:
    """The scalar type torch's kernel computes a parameter of ``dtype`` in."""
    # numpy's scalar types: jax's would make traced constants of the hyperparameters.
    return np.float32 if dtype in (jnp.bfloat16, jnp.float16) else np.dtype(dtype).type


def _adam_one(
    param: Array,
    grad: Array,
    exp_avg: Array,
    exp_avg_sq: Array,
    max_exp_avg_sq: Array | None,
    step: Array,
    lr: Array,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
    grad_scale: Array | None,
    decoupled: bool,
) -> tuple[Array, Array | None, Array, Array, Array | None]:
    """One parameter's update, in the order and the types of torch's CPU kernel."""
    op = _opmath(param.dtype)
    step64 = jnp.asarray(step, jnp.float64)
    lr64 = jnp.asarray(lr, jnp.float64)
    bias_correction1 = 1 - jnp.power(np.float64(beta1), step64)
    bias_correction2 = 1 - jnp.power(np.float64(beta2), step64)
    step_size = (lr64 / bias_correction1).astype(op)
    bias_correction2_sqrt = jnp.sqrt(bias_correction2).astype(op)

    p = param.astype(op)
    g = grad.astype(op)
    new_grad = None
    if grad_scale is not None:
        g = g / jnp.reshape(grad_scale, ()).astype(op)
        new_grad = g.astype(grad.dtype)
    if maximize:
        g = -g
    if weight_decay != 0:
        if decoupled:
            p = p * (1 - lr64 * weight_decay).astype(op)
        else:
            g = g + p * op(weight_decay)
    # exp_avg.lerp_(grad, 1 - beta1), with lerp's two formulas.
    weight = op(1 - beta1)
    m = exp_avg.astype(op)
    m = m + weight * (g - m) if abs(weight) < 0.5 else g - (g - m) * (op(1) - weight)
    v = exp_avg_sq.astype(op) * op(beta2) + op(1 - beta2) * g * g
    new_max = None
    if max_exp_avg_sq is not None:
        v_max = jnp.maximum(max_exp_avg_sq.astype(op), v)
        new_max = v_max.astype(max_exp_avg_sq.dtype)
        denom = jnp.sqrt(v_max) / bias_correction2_sqrt + op(eps)
    else:
        denom = jnp.sqrt(v) / bias_correction2_sqrt + op(eps)
    p = p - step_size * m / denom
    return p.astype(param.dtype), new_grad, m.astype(exp_avg.dtype), v.astype(exp_avg_sq.dtype), new_max


def _adam(
    params: Sequence[Array],
    grads: Sequence[Array],
    exp_avgs: Sequence[Array],
    exp_avg_sqs: Sequence[Array],
    max_exp_avg_sqs: Sequence[Array],
    state_steps: Sequence[Array],
    *,
    lr: Array,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Array | None = None,
    found_inf: Array | None = None,
    decoupled: bool,
) -> tuple[Array, ...]:
    """The new values of the lists the kernel writes (``written``), flattened list by list."""
    lists: list[list[Array]] = [[], [], [], [], []]
    for i in range(len(params)):
        new = _adam_one(
            params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_exp_avg_sqs[i] if amsgrad else None,
            state_steps[i], lr, beta1, beta2, weight_decay, eps, maximize, grad_scale, decoupled,
        )  # fmt: skip
        old = (params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_exp_avg_sqs[i] if amsgrad else None)
        for k, (n, o) in enumerate(zip(new, old)):
            if n is None or o is None:
                continue
            if found_inf is not None:
                # The kernel returns before touching anything when found_inf == 1.
                n = jnp.where(jnp.reshape(found_inf, ()) == 1, o, n)
            lists[k].append(n)
    return tuple(a for per_list in lists for a in per_list)


@lowering(*[op for op, decoupled in {**INPLACE, **FUNCTIONAL}.items() if not decoupled])
def _fused_adam(*args: Any, **kwargs: Any) -> tuple[Array, ...]:
    return _adam(*args, **kwargs, decoupled=False)


@lowering(*[op for op, decoupled in {**INPLACE, **FUNCTIONAL}.items() if decoupled])
def _fused_adamw(*args: Any, **kwargs: Any) -> tuple[Array, ...]:
    return _adam(*args, **kwargs, decoupled=True)


# --------------------------------------------------------------------------- recording


def _bind(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The call's arguments by schema name (None when they do not bind)."""
    schema = func._schema.arguments
    if len(args) > len(schema):
        return None
    call = {a.name: v for a, v in zip(schema, args)}
    for a in schema[len(args) :]:
        if a.name in kwargs:
            call[a.name] = kwargs[a.name]
        elif a.has_default_value():
            call[a.name] = a.default_value
        else:
            return None
    return call if set(kwargs) <= set(call) else None


def _recordable(call: dict[str, Any]) -> bool:
    """Whether the call is one this lowering computes; anything else (mismatched lists, integer
    or complex parameters, CPU tensors) goes to eager's kernel, which raises its own error."""
    params = call["self"]
    n = len(params)
    want = {"grads": n, "exp_avgs": n, "exp_avg_sqs": n, "max_exp_avg_sqs": n if call["amsgrad"] else 0,
            "state_steps": n}  # fmt: skip
    if any(len(call[name]) != count for name, count in want.items()):
        return False
    tensors = [t for name in LISTS for t in call[name]]
    tensors += [call[k] for k in ("grad_scale", "found_inf") if call[k] is not None]
    if isinstance(call["lr"], torch.Tensor) and call["lr"].device.type != "cpu":
        tensors.append(call["lr"])
    if not all(type(t) is rt.XlaTensor for t in tensors):
        return False
    if len({t._st.device for t in tensors}) > 1:
        return False
    for i, p in enumerate(params):
        if not p.dtype.is_floating_point:
            return False
        for name in ("grads", "exp_avgs", "exp_avg_sqs") + (("max_exp_avg_sqs",) if call["amsgrad"] else ()):
            other = call[name][i]
            if other.shape != p.shape or other.dtype != p.dtype:  # the kernel reads them as p's type
                return False
    return True


def _record(func: OpOverload, call: dict[str, Any]) -> tuple[ir.Node, list[Any]]:
    """One node for the whole call; also the tensors its outputs are the new values of."""
    acc = rt._Args()
    template = tuple(acc.entry(list(call[name]), False) for name in LISTS)
    device = acc.device if acc.device >= 0 else 0
    lr = call["lr"]
    if isinstance(lr, torch.Tensor) and type(lr) is not rt.XlaTensor:
        lr = lr.item()  # a CPU learning rate: the kernel reads it as a number too
    if type(lr) is rt.XlaTensor:
        lr_entry = acc.entry(lr, False)
    else:
        # A float64 graph input, converted by an op of its own: a scalar input that feeds a
        # multi-output node directly would be rounded to the parameters' dtype.
        lr_entry = acc.add(rt.convert(ir.scalar(float(lr), device), torch.float64))
    options = [("lr", lr_entry)]
    for name in OPTIONS[1:]:
        value = call[name]
        if name in ("beta1", "beta2", "weight_decay", "eps"):
            value = float(value)
        options.append((name, acc.entry(value, False)))
    targets = [
        t for k, name in enumerate(LISTS[:5])
        if written(call["grad_scale"] is not None, call["amsgrad"])[k] for t in call[name]
    ]  # fmt: skip
    outs = tuple((tuple(t.shape), t.dtype) for t in targets)
    frames = ir_frames(rt._IR_DEBUG[1]) if rt._IR_DEBUG[0] else None
    node = ir.Node(func, tuple(acc.operands), (template, tuple(options)), None, None, device, outs=outs,
                   frames=frames)  # fmt: skip
    metrics.count(rt.info(func).counter)
    return node, targets


def _fused_step_(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = _bind(func, args, kwargs)
    if call is None or not _recordable(call):
        return rt.fallback(func, args, kwargs)
    if not call["self"]:
        return None
    node, targets = _record(func, call)
    for i, t in enumerate(targets):
        rt.assign(t, ir.item(node, i))
    return None


def _fused_step(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = _bind(func, args, kwargs)
    if call is None or not _recordable(call):
        return rt.fallback(func, args, kwargs)
    news: list[Any] = []
    if call["self"]:
        node, _ = _record(func, call)
        news = [rt.wrap(ir.item(node, i)) for i in range(len(node.outs or ()))]
    out: list[list[Any]] = []
    for k, name in enumerate(LISTS[:5]):
        if written(call["grad_scale"] is not None, call["amsgrad"])[k]:
            out.append(news[: len(call[name])])
            news = news[len(call[name]) :]
        else:
            out.append([rt.wrap(rt.value(t)) for t in call[name]])  # unchanged: a fresh copy
    return tuple(out)


for _op in INPLACE:
    rt._SPECIAL[_op] = _fused_step_
for _op in FUNCTIONAL:
    rt._SPECIAL[_op] = _fused_step


# --------------------------------------------------------------------------- GradScaler's ops
#
# ``torch.amp.GradScaler`` (and ``xlalab.amp.GradScaler``) checks and unscales the gradients with
# ``_amp_foreach_non_finite_check_and_unscale_`` and updates its scale with ``_amp_update_scale_``;
# with a fused optimizer it hands ``grad_scale``/``found_inf`` to the step above. Both ops follow
# torch's CPU kernels here, so that a scaled step never leaves the device.


@lowering(aten._amp_foreach_non_finite_check_and_unscale_.default)
def _non_finite_check_and_unscale(
    grads: Sequence[Array], found_inf: Array, inv_scale: Array
) -> tuple[Array, ...]:
    """Each gradient times ``inv_scale`` (untouched when it is 1), and ``found_inf`` set to 1 when
    any gradient holds an inf or a NaN (never reset: the scaler zeroes it per step)."""
    inv = jnp.reshape(inv_scale, ()).astype(jnp.float32)
    found = jnp.reshape(found_inf, ())
    unscaled = []
    for g in grads:
        v = g.astype(_opmath(g.dtype))
        found = jnp.where(jnp.all(jnp.isfinite(v)), found, jnp.ones_like(found))
        unscaled.append(jnp.where(inv == 1, v, v * inv.astype(v.dtype)).astype(g.dtype))
    return (*unscaled, jnp.reshape(found, found_inf.shape))


def _unscale_(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = _bind(func, args, kwargs)
    if call is None:
        return rt.fallback(func, args, kwargs)
    grads, found_inf, inv_scale = call["self"], call["found_inf"], call["inv_scale"]
    tensors = [*grads, found_inf, inv_scale]
    scalars_ok = all(t.numel() == 1 and t.dtype == torch.float32 for t in (found_inf, inv_scale))
    if (
        not scalars_ok
        or not all(type(t) is rt.XlaTensor for t in tensors)
        or len({t._st.device for t in tensors}) > 1
        or not all(g.dtype.is_floating_point for g in grads)
    ):
        return rt.fallback(func, args, kwargs)  # eager's kernel raises its own error
    acc = rt._Args()
    template = (acc.entry(list(grads), False), acc.entry(found_inf, False), acc.entry(inv_scale, False))
    targets = [*grads, found_inf]
    outs = tuple((tuple(t.shape), t.dtype) for t in targets)
    frames = ir_frames(rt._IR_DEBUG[1]) if rt._IR_DEBUG[0] else None
    node = ir.Node(func, tuple(acc.operands), (template, ()), None, None, max(acc.device, 0), outs=outs,
                   frames=frames)  # fmt: skip
    metrics.count(rt.info(func).counter)
    for i, t in enumerate(targets):
        rt.assign(t, ir.item(node, i))
    return None


@lowering(aten._amp_update_scale.default)
def _update_scale(
    scale: Array,
    growth_tracker: Array,
    found_inf: Array,
    scale_growth_factor: float,
    scale_backoff_factor: float,
    growth_interval: int,
) -> tuple[Array, Array]:
    """GradScaler's scale after a step: backed off after an inf/NaN, grown after
    ``growth_interval`` clean steps in a row (unless growing overflows)."""
    found = jnp.reshape(found_inf, ()) != 0
    current = jnp.reshape(scale, ())
    tracker = jnp.reshape(growth_tracker, ())
    # The kernel multiplies the float scale by the double factors, then stores a float.
    backed_off = (current.astype(jnp.float64) * scale_backoff_factor).astype(current.dtype)
    grown = (current.astype(jnp.float64) * scale_growth_factor).astype(current.dtype)
    successful = tracker + 1
    grow = successful == growth_interval
    new_scale = jnp.where(found, backed_off, jnp.where(grow & jnp.isfinite(grown), grown, current))
    new_tracker = jnp.where(found | grow, jnp.zeros_like(tracker), successful)
    return jnp.reshape(new_scale, scale.shape), jnp.reshape(new_tracker, growth_tracker.shape)


def _update_scale_(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # In place on the scale and the growth tracker: the functional op, written back.
    if kwargs or not all(type(a) is rt.XlaTensor for a in args[:3]):
        return rt.fallback(func, args, kwargs)
    node = rt.record(aten._amp_update_scale.default, args, kwargs)
    if node is None:
        return rt.fallback(func, args, kwargs)
    scale, tracker = rt.wrap_result(node)
    rt.assign(args[0], rt.value(scale))
    rt.assign(args[1], rt.value(tracker))
    metrics.count(rt.info(func).counter)
    return args[0]


rt._SPECIAL[aten._amp_foreach_non_finite_check_and_unscale_.default] = _unscale_
rt._SPECIAL[aten._amp_update_scale_.default] = _update_scale_
