"""torch.optim with its less common options trains on xla:0 as in eager PyTorch on the CPU.

A small model, three steps, parameters (and losses) against eager's, lazily (``mark_step`` each
step) and compiled (``torch.compile`` of a whole step, ``optimizer.step()`` included); after the
second step no step compiles again. Also: the fused SGD and Adagrad kernels against torch's CPU
kernels, learning-rate schedulers, ``zero_grad(set_to_none=False)``, optimizer state dicts moved
between devices, a parameter group added mid-training, gradient clipping, gradient accumulation,
SWA and EMA averages, LBFGS's closure and line search, and Hugging Face models trained with AdamW
and a warm-up schedule.

Tolerances: eager's float32 ``sqrt`` on the CPU is not correctly rounded (an ulp off on about a
sixth of the values; XLA's is), and XLA contracts a multiply and an add into one rounding, so
states divided by a square root (Adam's, RMSprop's) differ by an ulp or two after a step.
(Fused Adam/AdamW and the GradScaler ops: tests/test_fused_optimizers.py.)
"""

from __future__ import annotations

import copy
import io
import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import xlalab
import xlalab.debug.metrics as met
import xlalab.dynamo as dynamo

optim = torch.optim
Device = torch.device | str


def _model(device: Device, norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(4, 5)]
    if norm:
        layers.append(nn.BatchNorm1d(5))
    return nn.Sequential(*layers, nn.Tanh(), nn.Linear(5, 3)).to(device)


def _batch(step: int, device: Device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(6, 4, generator=g).to(device), torch.randn(6, 3, generator=g).to(device)


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


def _sync(device: Device) -> None:
    if torch.device(device).type == "xla":
        xlalab.mark_step()


def _compiles() -> int:
    return met.counter_value("UncachedCompile") or 0


def _close(got: list[torch.Tensor], want: list[torch.Tensor], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(
            g.detach().cpu(), w.detach().cpu(), rtol=rtol, atol=atol, msg=f"tensor {i}"
        )


def _xla_matches_eager(run: Any, dev: torch.device) -> list[int]:
    """Run ``run`` (device -> (parameters, compile counts)) eagerly and on xla, check the
    parameters agree, and return xla's compile counts; metrics are cleared before the xla run."""
    want, _ = run("cpu")
    xlalab.mark_step()
    met.clear_all()
    got, compiles = run(dev)
    _close(got, want)
    return compiles  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- every optimizer

MakeOpt = Callable[[list[nn.Parameter]], optim.Optimizer]

OPTIMIZERS: dict[str, MakeOpt] = {
    "adam-amsgrad-maximize": lambda ps: optim.Adam(ps, lr=1e-2, amsgrad=True, maximize=True),
    "adam-foreach-weight_decay": lambda ps: optim.Adam(ps, lr=1e-2, foreach=True, weight_decay=0.1),
    "adam-single-decoupled": lambda ps: optim.Adam(ps, lr=1e-2, foreach=False, weight_decay=0.1,
                                               decoupled_weight_decay=True),
    "adam-tensor_lr": lambda ps: optim.Adam(ps, lr=torch.tensor(1e-2), foreach=False),
    "adamw-amsgrad-foreach": lambda ps: optim.AdamW(ps, lr=1e-2, amsgrad=True, foreach=True),
    "sgd-nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "sgd-dampening-maximize": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5, weight_decay=0.01,
                                               maximize=True, foreach=False),
    "sgd-fused-nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01,
                                           fused=True),
    "nadam-momentum_decay": lambda ps: optim.NAdam(ps, lr=1e-2, momentum_decay=8e-3, weight_decay=0.1),
    "nadam-decoupled": lambda ps: optim.NAdam(ps, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True,
                                          foreach=False),
    "radam-decoupled": lambda ps: optim.RAdam(ps, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True),
    "adagrad-lr_decay": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1,
                                             weight_decay=0.01),
    "adagrad-fused": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1,
                                          weight_decay=0.01, fused=True),
    "adadelta": lambda ps: optim.Adadelta(ps, lr=1.0, rho=0.8, weight_decay=0.01, maximize=True),
    "adamax": lambda ps: optim.Adamax(ps, lr=1e-2, weight_decay=0.01, foreach=False),
    "asgd": lambda ps: optim.ASGD(ps, lr=1e-2, t0=1, weight_decay=0.01, foreach=True),
    "rprop-maximize": lambda ps: optim.Rprop(ps, lr=1e-2, maximize=True),
    "rmsprop-centered-momentum": lambda ps: optim.RMSprop(ps, lr=1e-2, centered=True, momentum=0.9,
                                                      weight_decay=0.1),
}  # fmt: skip


def _train(device: Device, make: MakeOpt, steps: int = 3, step_fn: Callable[..., Any] | None = None
           ) -> tuple[list[torch.Tensor], list[float], list[int]]:  # fmt: skip
    model = _model(device)
    opt = make(list(model.parameters()))

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    run = step if step_fn is None else step_fn(step)
    losses, compiles = [], []
    for i in range(steps):
        losses.append(run(*_batch(i, device)))
        _sync(device)
        compiles.append(_compiles())
    return [p.detach().cpu() for p in model.parameters()], [float(x) for x in losses], compiles


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_lazy_step_matches_eager(name: str, dev: torch.device) -> None:
    want, want_losses, _ = _train("cpu", OPTIMIZERS[name], steps=4)
    xlalab.mark_step()
    met.clear_all()
    got, losses, compiles = _train(dev, OPTIMIZERS[name], steps=4)
    _close(got, want)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    # No CPU fallback: the only host reads are the losses, read at the end.
    assert set(met.executed_fallback_ops()) <= {"aten::_local_scalar_dense"}
    assert compiles[1] == compiles[-1], compiles  # the first step also creates the state


COMPILED = [
    "adam-amsgrad-maximize",
    "sgd-fused-nesterov",
    "adagrad-fused",
    "rprop-maximize",
    "rmsprop-centered-momentum",
]


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_step_matches_torch_compile_on_the_cpu(name: str, dev: torch.device) -> None:
    # The reference is torch.compile's own program on the CPU: a compiled Adam computes its bias
    # corrections from a float32 step tensor, where eager takes a Python float (2e-7 apart).
    torch._dynamo.reset()
    want, want_losses, _ = _train(
        "cpu", OPTIMIZERS[name], step_fn=lambda f: torch.compile(f, backend="aot_eager")
    )
    dynamo.reset()
    xlalab.mark_step()
    met.clear_all()
    got, losses, compiles = _train(
        dev, OPTIMIZERS[name], step_fn=lambda f: torch.compile(f, backend="xlalab")
    )
    _close(got, want)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    assert compiles[1] == compiles[-1], compiles
    # The fused steps' functional forms (what the compiled graph calls) are lowered too.
    assert set(met.executed_fallback_ops()) <= {"aten::_local_scalar_dense"}


def test_lbfgs_closure_and_strong_wolfe_line_search(dev: torch.device) -> None:
    # The line search's branches read values on the host (data-dependent control flow). One step
    # of 3 iterations: a one-ulp change of the start moves eager's own result by 1e-6 here.
    def run(device: Device, line_search: str | None) -> tuple[list[torch.Tensor], dict[str, Any]]:
        model = _model(device)
        opt = optim.LBFGS(model.parameters(), lr=1, max_iter=3, line_search_fn=line_search)
        x, y = _batch(0, device)

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = _loss(model, x, y)
            loss.backward()
            return loss

        opt.step(closure)
        _sync(device)
        state = opt.state[opt._params[0]]
        return [p.detach().cpu() for p in model.parameters()], {k: state[k] for k in ("func_evals", "n_iter")}

    for line_search in (None, "strong_wolfe"):
        want, want_counts = run("cpu", line_search)
        got, counts = run(dev, line_search)
        assert counts == want_counts
        _close(got, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- fused SGD and Adagrad kernels

SHAPES = [(7,), (3, 5), (33,)]  # 33: torch's kernel takes both its vector loop and its scalar tail

_SGD_OPTIONS = {
    "momentum": (0.0, 0.9),
    "nesterov": (False, True),
    "dampening": (0.0, 0.3),
    "weight_decay": (0.0, 0.1),
    "maximize": (False, True),
    "grad_scale": (None, 1024.0),
    "found_inf": (False, True),
    "tensor_lr": (False, True),
}
_ADAGRAD_OPTIONS = {
    "lr_decay": (0.0, 0.05),
    "weight_decay": (0.0, 0.1),
    "maximize": (False, True),
    "grad_scale": (None, 1024.0),
    "found_inf": (False, True),
    "tensor_lr": (False, True),
}


def _pairwise(options: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Every pair of option values appears together in some case (a greedy pairwise cover)."""
    names = list(options)
    every = [dict(zip(names, vs)) for vs in itertools.product(*options.values())]
    pairs = list(itertools.combinations(names, 2))
    uncovered = {(a, va, b, vb) for a, b in pairs for va in options[a] for vb in options[b]}
    chosen = []
    while uncovered:
        best = max(every, key=lambda c: sum((a, c[a], b, c[b]) in uncovered for a, b in pairs))
        chosen.append(best)
        uncovered -= {(a, best[a], b, best[b]) for a, b in pairs}
    return chosen


def _kernel_run(device: Device, dtype: torch.dtype, kind: str, case: dict[str, Any], steps: int = 3
                ) -> list[torch.Tensor]:  # fmt: skip
    """``steps`` direct calls of the fused kernel; every list it reads or writes, on the CPU.

    For bfloat16 on the CPU each element is a tensor of its own: torch's kernels run their scalar
    loop on it. Their vector loop for half types rounds the hyperparameters to the half type, and
    SGD's does not update the parameters at all (torch 2.13; CUDA's kernel computes as the scalar
    loop does)."""
    gen = torch.Generator().manual_seed(0)
    one_by_one = device == "cpu" and dtype == torch.bfloat16

    def pieces(ts: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t.view(-1)[i : i + 1] for t in ts for i in range(t.numel())] if one_by_one else ts

    params = [torch.randn(s, generator=gen).to(dtype).to(device) for s in SHAPES]
    if kind == "sgd":
        state = [torch.zeros(s).to(dtype).to(device) for s in SHAPES] if case["momentum"] else []
    else:
        state = [torch.full(s, 0.1).to(dtype).to(device) for s in SHAPES]
    counts = [torch.tensor(0.0).to(device) for _ in pieces(params)]
    scale = case["grad_scale"]
    seen = []
    for k in range(steps):
        grads = [(torch.randn(s, generator=gen) * (scale or 1.0)).to(dtype).to(device) for s in SHAPES]
        lr: float | torch.Tensor = 0.1 * (k + 1) / steps  # a schedule: a new value every step
        if case["tensor_lr"]:
            lr = torch.tensor(lr).to(device)
        extra = {
            "grad_scale": None if scale is None else torch.tensor(scale).to(device),
            "found_inf": torch.tensor(float(k == 1)).to(device) if case["found_inf"] else None,
        }
        if kind == "sgd":
            torch._fused_sgd_(
                pieces(params), pieces(grads), pieces(state), weight_decay=case["weight_decay"],
                momentum=case["momentum"], lr=lr, dampening=case["dampening"], nesterov=case["nesterov"],
                maximize=case["maximize"], is_first_step=k == 0, **extra,
            )  # fmt: skip
        else:
            torch._foreach_add_(counts, 1)
            torch._fused_adagrad_(
                pieces(params), pieces(grads), pieces(state), counts, lr=lr, lr_decay=case["lr_decay"],
                weight_decay=case["weight_decay"], eps=1e-10, maximize=case["maximize"], **extra,
            )  # fmt: skip
        seen += grads
        _sync(device)
    return [t.cpu() for t in (*params, *state, *seen)]


def _kernel_close(eager: list[torch.Tensor], lazy: list[torch.Tensor], what: str) -> None:
    for i, (e, z) in enumerate(zip(eager, lazy)):
        if e.dtype == torch.bfloat16:
            # One bfloat16 ulp at most, and almost every element bit-equal.
            torch.testing.assert_close(z, e, rtol=2**-7, atol=1e-30, msg=f"{what}: output {i}")
            assert (z != e).float().mean().item() < 0.1, f"{what}: output {i}"
        else:
            torch.testing.assert_close(z, e, rtol=1e-6, atol=1e-7, msg=f"{what}: output {i}")


KERNEL_CASES = [("sgd", c) for c in _pairwise(_SGD_OPTIONS)] + [
    ("adagrad", c) for c in _pairwise(_ADAGRAD_OPTIONS)
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(
    ("kind", "case"),
    KERNEL_CASES,
    ids=[
        k + "-" + "-".join(f"{n}={v}" for n, v in c.items() if v not in (False, None, 0.0))
        for k, c in KERNEL_CASES
    ],
)
def test_fused_sgd_and_adagrad_kernels_match_torch_cpu_kernels(
    dev: torch.device, dtype: torch.dtype, kind: str, case: dict[str, Any]
) -> None:
    xlalab.mark_step()
    met.clear_all()
    lazy = _kernel_run(dev, dtype, kind, case)
    assert met.executed_fallback_ops() == []  # one node per call, never torch's CPU kernel
    assert (met.counter_value(f"xla::_fused_{kind}_") or 0) == 3
    _kernel_close(_kernel_run("cpu", dtype, kind, case), lazy, f"{kind} {case}")


def test_functional_fused_sgd_returns_new_tensors(dev: torch.device) -> None:
    # What a functionalized graph (torch.compile) calls: the inputs stay as they were.
    p, g, buf = (torch.randn(5, generator=torch.Generator().manual_seed(i)) for i in range(3))
    kw: dict[str, Any] = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0, nesterov=True,
                              maximize=False, is_first_step=False)  # fmt: skip
    on_xla = [t.to(dev) for t in (p, g, buf)]
    xlalab.mark_step()
    met.clear_all()
    outs = torch.ops.aten._fused_sgd([on_xla[0]], [on_xla[1]], [on_xla[2]], **kw)
    assert met.executed_fallback_ops() == []
    torch.testing.assert_close(on_xla[0].cpu(), p, rtol=0, atol=0)
    inplace = [[t.clone()] for t in (p, g, buf)]
    torch._fused_sgd_(*inplace, **kw)
    for lazy, eager in zip(outs, inplace):
        torch.testing.assert_close(lazy[0].cpu(), eager[0], rtol=1e-6, atol=1e-7)


FUSED: dict[str, MakeOpt] = {
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
    "adam-amsgrad": lambda ps: optim.Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True, fused=True),
    "sgd-nesterov": lambda ps: optim.SGD(
        ps, lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True, fused=True
    ),
    "sgd-dampening": lambda ps: optim.SGD(
        ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.1, fused=True
    ),
    "adagrad": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01, weight_decay=0.1, fused=True),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_step_with_every_hyperparameter_scheduled_compiles_once(name: str, dev: torch.device) -> None:
    # OneCycleLR cycles Adam's beta1 and SGD's momentum with the learning rate; some schedules move
    # weight decay too. A fused step takes them as inputs, as it takes the learning rate.
    def run(device: Device) -> tuple[list[torch.Tensor], list[int]]:
        def after(model: nn.Module, opt: optim.Optimizer, loss: torch.Tensor, i: int) -> None:
            group = opt.param_groups[0]
            scale = 1 - 0.05 * (i + 1)
            for key in ("lr", "weight_decay", "momentum", "dampening", "eps", "lr_decay"):
                if key in group:
                    group[key] *= scale
            if "betas" in group:
                group["betas"] = (group["betas"][0] * scale, group["betas"][1] * scale)

        model, compiles = _loop(device, lambda m: FUSED[name](list(m.parameters())), 5, after)
        return list(model.parameters()), compiles

    compiles = _xla_matches_eager(run, dev)
    assert compiles[1] == compiles[-1], compiles
    assert met.executed_fallback_ops() == []


# ----------------------------------------------------------------------------- around the optimizer


def _loop(
    device: Device, opt_of: Callable[[nn.Module], Any], steps: int, after: Callable[..., None] | None = None
) -> tuple[nn.Module, list[int]]:
    """``steps`` plain training steps; ``after(model, opt, loss, step)`` runs after each update."""
    model = _model(device)
    opt = opt_of(model)
    compiles = []
    for i in range(steps):
        opt.zero_grad()
        loss = _loss(model, *_batch(i, device))
        loss.backward()
        opt.step()
        if after is not None:
            after(model, opt, loss, i)
        _sync(device)
        compiles.append(_compiles())
    return model, compiles


SCHEDULERS: dict[str, Callable[[optim.Optimizer], Any]] = {
    "one_cycle": lambda o: optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=10),
    "cosine_warm_restarts": lambda o: optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2),
    "reduce_on_plateau": lambda o: optim.lr_scheduler.ReduceLROnPlateau(o, patience=0, factor=0.5),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_lr_schedulers(name: str, dev: torch.device) -> None:
    def run(device: Device) -> tuple[list[torch.Tensor], list[float], list[int]]:
        lrs: list[float] = []
        sched: list[Any] = []

        def opt_of(model: nn.Module) -> optim.Optimizer:
            opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            sched.append(SCHEDULERS[name](opt))
            return opt

        def after(model: nn.Module, opt: optim.Optimizer, loss: torch.Tensor, i: int) -> None:
            # ReduceLROnPlateau is given the loss tensor: it reads it on the host.
            sched[0].step(loss) if name == "reduce_on_plateau" else sched[0].step()
            lrs.append(float(opt.param_groups[0]["lr"]))

        model, compiles = _loop(device, opt_of, 5, after)
        return list(model.parameters()), lrs, compiles

    want, want_lrs, _ = run("cpu")
    xlalab.mark_step()
    met.clear_all()
    got, lrs, compiles = run(dev)
    assert lrs == want_lrs
    _close(got, want)
    assert compiles[1] == compiles[-1], compiles  # a new learning rate is a new input, not a program


def test_zero_grad_keeping_the_gradients(dev: torch.device) -> None:
    def run(device: Device) -> list[torch.Tensor]:
        model = _model(device)
        opt = optim.Adam(model.parameters(), lr=1e-2)
        for i in range(3):
            opt.zero_grad(set_to_none=False)
            _loss(model, *_batch(i, device)).backward()
            opt.step()
            _sync(device)
        return [*model.parameters(), *(p.grad for p in model.parameters())]  # type: ignore[misc]

    _close(run(dev), run("cpu"))


@pytest.mark.parametrize(("saved_on", "loaded_on"), [("xla", "cpu"), ("cpu", "xla"), ("xla", "xla")])
def test_state_dict_round_trip_across_devices(saved_on: str, loaded_on: str, dev: torch.device) -> None:
    """Two AMSGrad steps on one device, saved with torch.save; two more after loading on another."""

    def run(src: Device, dst: Device) -> list[torch.Tensor]:
        model = _model(src)
        opt = optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
        for i in range(2):
            opt.zero_grad()
            _loss(model, *_batch(i, src)).backward()
            opt.step()
            _sync(src)
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
        buf.seek(0)
        saved = torch.load(buf, map_location="cpu" if dst == "cpu" else None)
        model = _model(dst)
        model.load_state_dict(saved["model"])
        opt = optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
        opt.load_state_dict(saved["opt"])
        for i in range(2, 4):
            opt.zero_grad()
            _loss(model, *_batch(i, dst)).backward()
            opt.step()
            _sync(dst)
        state = [v for per_param in opt.state.values() for _, v in sorted(per_param.items())]
        for t in state:
            # Adam keeps its (non-capturable) step counts on the CPU, the moments with the parameter.
            assert t.device == (torch.device("cpu") if t.dim() == 0 else next(model.parameters()).device)
        return [*model.parameters(), *state]

    def on(where: str) -> Device:
        return dev if where == "xla" else "cpu"

    _close(run(on(saved_on), on(loaded_on)), run("cpu", "cpu"))


def test_param_group_added_mid_training(dev: torch.device) -> None:
    def run(device: Device) -> tuple[list[torch.Tensor], list[int]]:
        def opt_of(model: nn.Module) -> optim.Optimizer:
            return optim.Adam(model[0].parameters(), lr=1e-2)

        def after(model: nn.Module, opt: optim.Optimizer, loss: torch.Tensor, i: int) -> None:
            if i == 1:
                opt.add_param_group({"params": model[2].parameters(), "lr": 0.05, "betas": (0.8, 0.99)})

        model, compiles = _loop(device, opt_of, 5, after)
        return list(model.parameters()), compiles

    compiles = _xla_matches_eager(run, dev)
    assert compiles[3] == compiles[-1], compiles  # the new group's first step, then steady again


@pytest.mark.parametrize("foreach", [None, True, False])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_and_value(foreach: bool | None, norm_type: float, dev: torch.device) -> None:
    def run(device: Device) -> list[torch.Tensor]:
        model = _model(device)
        (_loss(model, *_batch(0, device)) * 10).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 0.1, norm_type=norm_type, foreach=foreach)
        grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
        nn.utils.clip_grad_value_(model.parameters(), 0.01, foreach=foreach)
        return [norm, *grads, *(p.grad for p in model.parameters())]  # type: ignore[misc]

    _close(run(dev), run("cpu"))


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_clip_grad_norm_of_non_finite_gradients(bad: float, dev: torch.device) -> None:
    def params(device: Device) -> list[nn.Parameter]:
        model = _model(device)
        (_loss(model, *_batch(0, device)) * bad).backward()
        return list(model.parameters())

    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        nn.utils.clip_grad_norm_(params(dev), 0.1, error_if_nonfinite=True)
    want, got = params("cpu"), params(dev)
    want_norm = nn.utils.clip_grad_norm_(want, 0.1)
    got_norm = nn.utils.clip_grad_norm_(got, 0.1)
    for g, w in zip([got_norm, *(p.grad for p in got)], [want_norm, *(p.grad for p in want)]):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)  # type: ignore[union-attr]


def test_gradient_accumulation_over_micro_batches(dev: torch.device) -> None:
    def run(device: Device) -> tuple[list[torch.Tensor], list[int]]:
        model = _model(device)
        opt = optim.AdamW(model.parameters(), lr=1e-2)
        compiles = []
        for i in range(4):
            opt.zero_grad()
            for k in range(3):
                (_loss(model, *_batch(10 * i + k, device)) / 3).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            _sync(device)
            compiles.append(_compiles())
        return list(model.parameters()), compiles

    compiles = _xla_matches_eager(run, dev)
    assert compiles[1] == compiles[-1], compiles


def test_swa_averaged_model_update_bn_and_ema(dev: torch.device) -> None:
    def run(device: Device) -> list[torch.Tensor]:
        model = _model(device, norm=True)
        opt = optim.SGD(model.parameters(), lr=0.1)
        swa = optim.swa_utils.AveragedModel(model)
        ema = optim.swa_utils.AveragedModel(model, multi_avg_fn=optim.swa_utils.get_ema_multi_avg_fn(0.9))
        sched = optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=2)
        shadow = [p.detach().clone() for p in model.parameters()]  # an EMA by hand
        for i in range(3):
            opt.zero_grad()
            _loss(model, *_batch(i, device)).backward()
            opt.step()
            swa.update_parameters(model)
            ema.update_parameters(model)
            with torch.no_grad():
                torch._foreach_lerp_(shadow, list(model.parameters()), 0.1)
            sched.step()
            _sync(device)
        optim.swa_utils.update_bn([_batch(i, device)[0] for i in range(3)], swa)
        buffers = [b.float().reshape(-1) for b in swa.buffers()]  # running stats, counts, n_averaged
        return [*swa.parameters(), *buffers, *ema.parameters(), *shadow]

    _close(run(dev), run("cpu"))


# ----------------------------------------------------------------------------- Hugging Face models


def _hf_model(name: str) -> tuple[nn.Module, Callable[[int], dict[str, torch.Tensor]]]:
    transformers = pytest.importorskip("transformers")
    from .zoo.models import no_dropout

    hidden = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}

    def batch(seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 64, (2, 8), generator=g)
        mask = torch.ones(2, 8, dtype=torch.long)
        mask[1, 6:] = 0  # a padded row
        labels = torch.tensor([0, 2]) if name == "bert" else ids
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    torch.manual_seed(0)
    model: nn.Module
    if name == "bert":
        config = transformers.BertConfig(vocab_size=64, max_position_embeddings=32, num_labels=3, **hidden)
        model = transformers.BertForSequenceClassification(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=64, max_position_embeddings=32, num_key_value_heads=1, **hidden
        )
        model = transformers.LlamaForCausalLM(config)
        model.config.use_cache = False
    no_dropout(model)
    return model, batch


@pytest.mark.parametrize("name", ["llama"])  # bert: as fast to check, twice as slow to compile
def test_hf_model_with_adamw_and_a_warmup_schedule(name: str, dev: torch.device) -> None:
    import transformers

    model, batch = _hf_model(name)

    def run(device: Device) -> tuple[list[torch.Tensor], list[float], list[int]]:
        m = copy.deepcopy(model).to(device)
        opt = optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)
        losses, compiles = [], []
        for i in range(3):
            opt.zero_grad()
            loss = m(**{k: v.to(device) for k, v in batch(i).items()}).loss
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            sched.step()
            _sync(device)
            losses.append(loss.detach())
            compiles.append(_compiles())
        return list(m.parameters()), [float(x) for x in losses], compiles

    want, want_losses, _ = run("cpu")
    xlalab.mark_step()
    met.clear_all()
    got, losses, compiles = run(dev)
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    _close(got, want)
    # The schedule's new learning rate every step, and AdamW's step count, are inputs: after the
    # first step (which also creates the state) every step runs the same programs.
    assert compiles[1] == compiles[-1], compiles
    assert set(met.executed_fallback_ops()) <= {"aten::_local_scalar_dense"}
