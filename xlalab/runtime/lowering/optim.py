"""Fused optimizer steps (``torch.optim.Adam/AdamW/SGD/Adagrad(fused=True)``) and the two ops of
``GradScaler`` that feed them (at the end of the module).

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

SGD's (``_fused_sgd_``) and Adagrad's (``_fused_adagrad_``) steps are recorded the same way and
follow their CPU kernels (``FusedSGDKernel.cpp``, ``FusedAdagradKernel.cpp``) likewise.

The learning rate and the other float hyperparameters (betas, eps, momentum, dampening, weight
decay, Adagrad's lr_decay) are graph inputs (float64 scalars), so a scheduler changing them every
step (OneCycleLR cycles beta1 or momentum) does not recompile; a zero is baked in instead, since
the kernels skip weight decay and momentum on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

@dataclass(frozen=True)
class Family:
    """The list arguments of one kind of fused step, as its schema names them.

    ``optional`` is the list a call leaves empty when its option does not use it (AMSGrad's
    maxima, SGD's momentum buffers without momentum). ``state_steps`` holds step counts: read,
    never written. The gradients are written when the kernel unscales them (``grad_scale``); the
    parameters and the other lists always."""

    lists: tuple[str, ...]
    optional: str | None = None
    uses_optional: Callable[[dict[str, Any]], bool] = lambda call: True

    def used(self, call: dict[str, Any], name: str) -> bool:
        return name != self.optional or self.uses_optional(call)

    def written(self, call: dict[str, Any]) -> tuple[bool, ...]:
        """Per list: whether the kernel writes it."""
        return tuple(
            call["grad_scale"] is not None if name == "grads"
            else name != "state_steps" and self.used(call, name)
            for name in self.lists
        )  # fmt: skip


ADAM = Family(
    ("self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps"),
    "max_exp_avg_sqs", lambda call: bool(call["amsgrad"]),
)  # fmt: skip
SGD = Family(
    ("self", "grads", "momentum_buffer_list"), "momentum_buffer_list", lambda call: call["momentum"] != 0
)
ADAGRAD = Family(("self", "grads", "state_sums", "state_steps"))

INPLACE: dict[OpOverload, Family] = {
    aten._fused_adam_.default: ADAM,
    aten._fused_adam_.tensor_lr: ADAM,
    aten._fused_adamw_.default: ADAM,
    aten._fused_adamw_.tensor_lr: ADAM,
    aten._fused_sgd_.default: SGD,
    aten._fused_sgd_.tensor_lr: SGD,
    aten._fused_adagrad_.default: ADAGRAD,
    aten._fused_adagrad_.tensor_lr: ADAGRAD,
}
FUNCTIONAL: dict[OpOverload, Family] = {
    aten._fused_adam.default: ADAM,
    aten._fused_adam.tensor_lr: ADAM,
    aten._fused_adamw.default: ADAM,
    aten._fused_adamw.tensor_lr: ADAM,
    aten._fused_sgd.default: SGD,
    aten._fused_sgd.tensor_lr: SGD,
    aten._fused_adagrad.default: ADAGRAD,
    aten._fused_adagrad.tensor_lr: ADAGRAD,
}


# --------------------------------------------------------------------------- the lowering


def _opmath(dtype: Any) -> Any:
    """The scalar type torch's kernel computes a parameter of ``dtype`` in."""
    return np.float32 if dtype in (jnp.bfloat16, jnp.float16) else np.dtype(dtype).type


def _used(h: Array | float) -> bool:
    """Whether a hyperparameter's term is computed: a zero is baked in as a number (the kernels
    skip weight decay and momentum on it); any other value is a float64 graph input."""
    return not (isinstance(h, float) and h == 0)


def _f64(h: Array | float) -> Array:
    """A hyperparameter as the double the kernel is given."""
    return jnp.asarray(h, jnp.float64)


def _kernel_grad(
    p: Array, grad: Array, op: Any, grad_scale: Array | None, maximize: bool, weight_decay: Array | float
) -> tuple[Array, Array | None]:
    """The gradient the fused kernels (Adam's, SGD's, Adagrad's) step with, in the compute type
    ``op``: unscaled (the unscaled gradient is also written back, as the kernels do), negated to
    maximize, with weight decay added; and the written-back gradient (None without a scale)."""
    g = grad.astype(op)
    new_grad = None
    if grad_scale is not None:
        g = g / jnp.reshape(grad_scale, ()).astype(op)
        new_grad = g.astype(grad.dtype)
    if maximize:
        g = -g
    if _used(weight_decay):
        g = g + p * _f64(weight_decay).astype(op)
    return g, new_grad


def _lerp(start: Array, end: Array, weight: Array) -> Array:
    """torch's ``lerp``: two formulas, picked by ``|weight| < 0.5`` (a graph input here)."""
    diff = end - start
    return jnp.where(jnp.abs(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))


def _adam_one(
    param: Array,
    grad: Array,
    exp_avg: Array,
    exp_avg_sq: Array,
    max_exp_avg_sq: Array | None,
    step: Array,
    lr: Array,
    beta1: Array | float,
    beta2: Array | float,
    weight_decay: Array | float,
    eps: Array | float,
    maximize: bool,
    grad_scale: Array | None,
    decoupled: bool,
) -> tuple[Array, Array | None, Array, Array, Array | None]:
    """One parameter's update, in the order and the types of torch's CPU kernel."""
    op = _opmath(param.dtype)
    step64 = jnp.asarray(step, jnp.float64)
    lr64 = jnp.asarray(lr, jnp.float64)
    bias_correction1 = 1 - jnp.power(_f64(beta1), step64)
    bias_correction2 = 1 - jnp.power(_f64(beta2), step64)
    step_size = (lr64 / bias_correction1).astype(op)
    bias_correction2_sqrt = jnp.sqrt(bias_correction2).astype(op)

    p = param.astype(op)
    if decoupled and _used(weight_decay):  # AdamW: the decay scales the parameter, not the gradient
        p = p * (1 - lr64 * _f64(weight_decay)).astype(op)
    coupled_decay = 0.0 if decoupled else weight_decay
    g, new_grad = _kernel_grad(param.astype(op), grad, op, grad_scale, maximize, coupled_decay)
    m = _lerp(exp_avg.astype(op), g, (1 - _f64(beta1)).astype(op))  # exp_avg.lerp_(grad, 1 - beta1)
    v = exp_avg_sq.astype(op) * _f64(beta2).astype(op) + (1 - _f64(beta2)).astype(op) * g * g
    new_max = None
    if max_exp_avg_sq is not None:
        v_max = jnp.maximum(max_exp_avg_sq.astype(op), v)
        new_max = v_max.astype(max_exp_avg_sq.dtype)
        denom = jnp.sqrt(v_max) / bias_correction2_sqrt + _f64(eps).astype(op)
    else:
        denom = jnp.sqrt(v) / bias_correction2_sqrt + _f64(eps).astype(op)
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
    beta1: Array | float,
    beta2: Array | float,
    weight_decay: Array | float,
    eps: Array | float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Array | None = None,
    found_inf: Array | None = None,
    decoupled: bool,
) -> tuple[Array, ...]:
    """The new values of the lists the kernel writes (``Family.written``), flattened list by list."""
    per_param = [
        _adam_one(
            params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_exp_avg_sqs[i] if amsgrad else None,
            state_steps[i], lr, beta1, beta2, weight_decay, eps, maximize, grad_scale, decoupled,
        )
        for i in range(len(params))
    ]  # fmt: skip
    return _written(per_param, [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs], found_inf)


def _written(
    per_param: Sequence[Sequence[Array | None]], old: Sequence[Sequence[Array]], found_inf: Array | None
) -> tuple[Array, ...]:
    """Each parameter's new values (None where a list is not written), flattened list by list;
    with ``found_inf`` equal to 1 the old values, as the kernels return before writing."""
    out = []
    for k, old_list in enumerate(old):
        for i, new in enumerate(n[k] for n in per_param):
            if new is None:
                continue
            if found_inf is not None:
                new = jnp.where(jnp.reshape(found_inf, ()) == 1, old_list[i], new)
            out.append(new)
    return tuple(out)


_ADAM_OPS = [op for op, family in {**INPLACE, **FUNCTIONAL}.items() if family is ADAM]


@lowering(*[op for op in _ADAM_OPS if "adamw" not in op.name()])
def _fused_adam(*args: Any, **kwargs: Any) -> tuple[Array, ...]:
    return _adam(*args, **kwargs, decoupled=False)


@lowering(*[op for op in _ADAM_OPS if "adamw" in op.name()])
def _fused_adamw(*args: Any, **kwargs: Any) -> tuple[Array, ...]:
    return _adam(*args, **kwargs, decoupled=True)


# ---- SGD


def _sgd_one(
    param: Array,
    grad: Array,
    buf: Array | None,
    lr: Array,
    weight_decay: Array | float,
    momentum: Array | float,
    dampening: Array | float,
    nesterov: bool,
    maximize: bool,
    is_first_step: bool,
    grad_scale: Array | None,
) -> tuple[Array, Array | None, Array | None]:
    """One parameter's update, in the order and the types of torch's CPU kernel."""
    op = _opmath(param.dtype)
    p = param.astype(op)
    g, new_grad = _kernel_grad(p, grad, op, grad_scale, maximize, weight_decay)
    new_buf = None
    if buf is not None:
        # The kernel goes on with the buffer before it is rounded to the parameter dtype.
        mom = _f64(momentum).astype(op)
        m = g if is_first_step else buf.astype(op) * mom + g * (1 - _f64(dampening)).astype(op)
        new_buf = m.astype(buf.dtype)
        g = g + m * mom if nesterov else m
    p = p - g * jnp.asarray(lr, jnp.float64).astype(op)
    return p.astype(param.dtype), new_grad, new_buf


@lowering(*[op for op, family in {**INPLACE, **FUNCTIONAL}.items() if family is SGD])
def _fused_sgd(
    params: Sequence[Array],
    grads: Sequence[Array],
    momentum_buffer_list: Sequence[Array],
    *,
    weight_decay: Array | float,
    momentum: Array | float,
    lr: Array,
    dampening: Array | float,
    nesterov: bool,
    maximize: bool,
    is_first_step: bool,
    grad_scale: Array | None = None,
    found_inf: Array | None = None,
) -> tuple[Array, ...]:
    per_param = [
        _sgd_one(params[i], grads[i], momentum_buffer_list[i] if _used(momentum) else None, lr, weight_decay,
                 momentum, dampening, nesterov, maximize, is_first_step, grad_scale)
        for i in range(len(params))
    ]  # fmt: skip
    return _written(per_param, [params, grads, momentum_buffer_list], found_inf)


# ---- Adagrad


def _adagrad_one(
    param: Array,
    grad: Array,
    state_sum: Array,
    step: Array,
    lr: Array,
    lr_decay: Array | float,
    weight_decay: Array | float,
    eps: Array | float,
    maximize: bool,
    grad_scale: Array | None,
) -> tuple[Array, Array | None, Array]:
    """One parameter's update, in the order and the types of torch's CPU kernel."""
    op = _opmath(param.dtype)
    # The kernel's clr, in double on the host from the float step count.
    step64 = jnp.asarray(step, jnp.float32).astype(jnp.float64)
    clr = (_f64(lr) / (1.0 + (step64 - 1.0) * _f64(lr_decay))).astype(op)
    p = param.astype(op)
    g, new_grad = _kernel_grad(p, grad, op, grad_scale, maximize, weight_decay)
    total = state_sum.astype(op) + g * g
    std = jnp.sqrt(total) + _f64(eps).astype(op)
    p = p - clr * g / std
    return p.astype(param.dtype), new_grad, total.astype(state_sum.dtype)


@lowering(*[op for op, family in {**INPLACE, **FUNCTIONAL}.items() if family is ADAGRAD])
def _fused_adagrad(
    params: Sequence[Array],
    grads: Sequence[Array],
    state_sums: Sequence[Array],
    state_steps: Sequence[Array],
    *,
    lr: Array,
    lr_decay: Array | float,
    weight_decay: Array | float,
    eps: Array | float,
    maximize: bool,
    grad_scale: Array | None = None,
    found_inf: Array | None = None,
) -> tuple[Array, ...]:
    per_param = [
        _adagrad_one(params[i], grads[i], state_sums[i], state_steps[i], lr, lr_decay, weight_decay, eps,
                     maximize, grad_scale)
        for i in range(len(params))
    ]  # fmt: skip
    return _written(per_param, [params, grads, state_sums], found_inf)


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


def _recordable(family: Family, call: dict[str, Any]) -> bool:
    """Whether the call is one this lowering computes; anything else (mismatched lists, integer
    or complex parameters, CPU tensors) goes to eager's kernel, which raises its own error."""
    params = call["self"]
    n = len(params)
    if any(len(call[name]) != (n if family.used(call, name) else 0) for name in family.lists):
        return False
    tensors = [t for name in family.lists for t in call[name]]
    tensors += [call[k] for k in ("grad_scale", "found_inf") if call[k] is not None]
    if isinstance(call["lr"], torch.Tensor) and call["lr"].device.type != "cpu":
        tensors.append(call["lr"])
    if not all(type(t) is rt.XlaTensor for t in tensors):
        return False
    if len({t._st.device for t in tensors}) > 1:
        return False
    # The state read element by element as the parameter's type: the lists the kernel writes.
    written = zip(family.lists, family.written(call))
    state = [name for name, w in written if w and name not in ("self", "grads")]
    for i, p in enumerate(params):
        if not p.dtype.is_floating_point:
            return False
        for name in ("grads", *state):
            other = call[name][i]
            if other.shape != p.shape or other.dtype != p.dtype:
                return False
    return True


def _float_input(value: float, device: int) -> ir.Node:
    # A float64 graph input, converted by an op of its own: a scalar input that feeds a
    # multi-output node directly would be rounded to the parameters' dtype.
    return rt.convert(ir.scalar(value, device), torch.float64)


def _record(func: OpOverload, family: Family, call: dict[str, Any]) -> tuple[ir.Node, list[Any]]:
    """One node for the whole call; also the tensors its outputs are the new values of."""
    acc = rt._Args()
    template = tuple(acc.entry(list(call[name]), False) for name in family.lists)
    device = acc.device if acc.device >= 0 else 0
    lr = call["lr"]
    if isinstance(lr, torch.Tensor) and type(lr) is not rt.XlaTensor:
        lr = lr.item()  # a CPU learning rate: the kernel reads it as a number too
    lr_entry = acc.entry(lr, False) if type(lr) is rt.XlaTensor else acc.add(_float_input(float(lr), device))
    options = [("lr", lr_entry)]
    for arg in func._schema.arguments:
        if arg.name in family.lists or arg.name == "lr":
            continue
        value = call[arg.name]
        if str(arg.type) == "float" and float(value) != 0:
            # A schedule may change any of them every step (OneCycleLR cycles Adam's beta1 and
            # SGD's momentum): graph inputs, as the learning rate. A zero is baked in (``_used``).
            options.append((arg.name, acc.add(_float_input(float(value), device))))
        else:
            options.append((arg.name, acc.entry(float(value) if str(arg.type) == "float" else value, False)))
    targets = [t for name, w in zip(family.lists, family.written(call)) if w for t in call[name]]
    outs = tuple((tuple(t.shape), t.dtype) for t in targets)
    frames = ir_frames(rt._IR_DEBUG[1]) if rt._IR_DEBUG[0] else None
    node = ir.Node(func, tuple(acc.operands), (template, tuple(options)), None, None, device, outs=outs,
                   frames=frames)  # fmt: skip
    metrics.count(rt.info(func).counter)
    return node, targets


def _fused_step_(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    family = INPLACE[func]
    call = _bind(func, args, kwargs)
    if call is None or not _recordable(family, call):
        return rt.fallback(func, args, kwargs)
    if not call["self"]:
        return None
    node, targets = _record(func, family, call)
    for i, t in enumerate(targets):
        rt.assign(t, ir.item(node, i))
    return None


def _fused_step(func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    family = FUNCTIONAL[func]
    call = _bind(func, args, kwargs)
    if call is None or not _recordable(family, call):
        return rt.fallback(func, args, kwargs)
    news: list[Any] = []
    if call["self"]:
        node, _ = _record(func, family, call)
        news = [rt.wrap(ir.item(node, i)) for i in range(len(node.outs or ()))]
    out: list[list[Any]] = []
    # One list per return of the schema (the lists before the step counts, for most).
    for name, w in list(zip(family.lists, family.written(call)))[: len(func._schema.returns)]:
        if w:
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
