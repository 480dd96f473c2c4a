"""``torch.optim.Adam/AdamW(fused=True)`` on xla: the step is lowered, and equals torch's CPU kernel.

The fused optimizers (Hugging Face Trainer's default is ``adamw_torch_fused``) call
``aten._fused_adam_``/``_fused_adamw_``. On xla these record one node per call, never the CPU
fallback, and a steady training loop compiles no new graph, whatever the learning-rate schedule.

The reference is torch's own fused CPU kernel on the same inputs: float32 agrees to an ulp or two
(torch's kernel is vectorized with fused multiply-adds), bfloat16 bit for bit nearly everywhere.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import xlalab
import xlalab.debug.metrics as met

SHAPES = [(7,), (3, 5), (33,)]  # 33: torch's kernel takes both its vector loop and its scalar tail


def _close(cpu: torch.Tensor, lazy: torch.Tensor, what: str) -> None:
    if cpu.dtype == torch.bfloat16:
        # One bfloat16 ulp at most, and almost every element bit-equal.
        torch.testing.assert_close(lazy, cpu, rtol=2**-7, atol=1e-30, msg=what)
        assert (lazy != cpu).float().mean().item() < 0.02, what
    else:
        torch.testing.assert_close(lazy, cpu, rtol=1e-6, atol=1e-7, msg=what)


def _kernel_run(device: Any, dtype: torch.dtype, case: dict[str, Any], steps: int = 3) -> list[torch.Tensor]:
    """``steps`` direct calls of the fused kernel; every list it reads or writes, back on the CPU."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).to(dtype) for s in SHAPES]
    states = [[torch.zeros_like(p) for p in params] for _ in range(3 if case["amsgrad"] else 2)]
    exp_avgs, exp_avg_sqs = states[0], states[1]
    maxima = states[2] if case["amsgrad"] else []
    counts = [torch.tensor(0.0) for _ in params]
    params, exp_avgs, exp_avg_sqs, maxima, counts = (
        [t.to(device) for t in ts] for ts in (params, exp_avgs, exp_avg_sqs, maxima, counts)
    )
    kernel = torch._fused_adamw_ if case["adamw"] else torch._fused_adam_
    scale = case["grad_scale"]
    grads_seen = []
    for k in range(steps):
        grads = [(torch.randn(p.shape, generator=gen) * (scale or 1.0)).to(dtype).to(device) for p in params]
        torch._foreach_add_(counts, 1)
        lr: float | torch.Tensor = 1e-2 * (k + 1) / steps  # a schedule: a new value every step
        if case["tensor_lr"]:
            lr = torch.tensor(lr).to(device)
        found_inf = None
        if case["found_inf"]:
            found_inf = torch.tensor(float(k == 1)).to(device)  # the second step is skipped
        kernel(
            params, grads, exp_avgs, exp_avg_sqs, maxima, counts,
            lr=lr, beta1=0.9, beta2=0.999, weight_decay=case["weight_decay"], eps=1e-8,
            amsgrad=case["amsgrad"], maximize=case["maximize"],
            grad_scale=None if scale is None else torch.tensor(scale).to(device), found_inf=found_inf,
        )  # fmt: skip
        grads_seen += grads
        if device != "cpu":
            xlalab.mark_step()
    return [t.cpu() for t in (*params, *exp_avgs, *exp_avg_sqs, *maxima, *grads_seen)]


_OPTIONS = {
    "adamw": (False, True),
    "amsgrad": (False, True),
    "maximize": (False, True),
    "weight_decay": (0.0, 0.1),
    "grad_scale": (None, 1024.0),
    "found_inf": (False, True),
    "tensor_lr": (False, True),
}


def _cases() -> list[dict[str, Any]]:
    """Every pair of option values appears together in some case (a greedy pairwise cover)."""
    names = list(_OPTIONS)
    every = [dict(zip(names, vs)) for vs in itertools.product(*_OPTIONS.values())]
    uncovered = {
        (a, va, b, vb)
        for a, b in itertools.combinations(names, 2)
        for va in _OPTIONS[a]
        for vb in _OPTIONS[b]
    }
    chosen = []
    while uncovered:
        best = max(
            every,
            key=lambda c: sum((a, c[a], b, c[b]) in uncovered for a, b in itertools.combinations(names, 2)),
        )
        chosen.append(best)
        uncovered -= {(a, best[a], b, best[b]) for a, b in itertools.combinations(names, 2)}
    return chosen


CASES = _cases()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(
    "case",
    CASES,
    ids=["-".join(f"{k}={v}" for k, v in c.items() if v not in (False, None, 0.0)) for c in CASES],
)
def test_fused_kernel_matches_torch_cpu_kernel(
    dev: torch.device, dtype: torch.dtype, case: dict[str, Any]
) -> None:
    xlalab.mark_step()
    met.clear_all()
    lazy = _kernel_run(dev, dtype, case)
    assert met.executed_fallback_ops() == []
    eager = _kernel_run("cpu", dtype, case)
    for i, (e, z) in enumerate(zip(eager, lazy)):
        _close(e, z, f"output {i} of {case}")


def test_found_inf_skips_the_whole_step(dev: torch.device) -> None:
    # GradScaler's overflow flag: the kernel writes nothing, not even the unscaled gradients.
    xlalab.mark_step()
    met.clear_all()
    before = [torch.randn(4) for _ in range(5)]
    lists = [[t.to(dev)] for t in before]
    torch._fused_adamw_(
        *lists, [torch.tensor(3.0, device=dev)], lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8,
        amsgrad=True, maximize=False, grad_scale=torch.tensor(8.0, device=dev),
        found_inf=torch.tensor(1.0, device=dev),
    )  # fmt: skip
    assert met.executed_fallback_ops() == []
    for b, (t,) in zip(before, lists):
        torch.testing.assert_close(t.cpu(), b, rtol=0, atol=0)


# --------------------------------------------------------------------------- through torch.optim


def _gpt2_params() -> tuple[list[torch.nn.Parameter], list[list[torch.Tensor]]]:
    """A small GPT-2's parameters (from its config) and per-step gradients of its LM loss."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=8, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = []
    for step in range(5):
        ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(step))
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append([p.grad.clone() for p in params])
    return [torch.nn.Parameter(p.detach().clone()) for p in params], grads


@pytest.fixture(scope="module")
def gpt2() -> tuple[list[torch.nn.Parameter], list[list[torch.Tensor]]]:
    return _gpt2_params()


def _train(
    device: Any, gpt2: Any, make: Any, dtype: torch.dtype, compiles: list[int] | None = None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    params0, grads = gpt2
    params = [torch.nn.Parameter(p.detach().to(dtype).to(device)) for p in params0]
    opt = make(params)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / 10)  # linear decay, as HF's
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.to(dtype).to(device)
        opt.step()
        sched.step()
        if device != "cpu":
            xlalab.mark_step()
            if compiles is not None:
                compiles.append(met.counter_value("UncachedCompile") or 0)
    state = [v for p in params for k, v in sorted(opt.state[p].items()) if k != "step"]
    return [p.detach().cpu() for p in params], [t.cpu() for t in state]


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True),
    "adam-wd-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.01, amsgrad=True, fused=True),
    "adamw-maximize": lambda ps: torch.optim.AdamW(ps, lr=1e-2, maximize=True, fused=True),
}
RUNS = [("adamw", torch.float32), ("adam-wd-amsgrad", torch.float32), ("adamw-maximize", torch.float32),
        ("adamw", torch.bfloat16)]  # fmt: skip


@pytest.mark.parametrize(("name", "dtype"), RUNS, ids=[f"{n}-{str(d)[6:]}" for n, d in RUNS])
def test_fused_optimizer_step_is_lowered_and_compiles_once(
    dev: torch.device, gpt2: Any, name: str, dtype: torch.dtype
) -> None:
    xlalab.mark_step()
    met.clear_all()
    compiles: list[int] = []
    lazy_params, lazy_state = _train(dev, gpt2, OPTIMIZERS[name], dtype, compiles)
    assert met.executed_fallback_ops() == []
    assert (met.counter_value(f"xla::_fused_{'adamw' if 'adamw' in name else 'adam'}_") or 0) == 5
    # The first step also creates the optimizer state; every later one runs the same program,
    # though the learning rate changes every step.
    assert compiles[-1] == compiles[1], compiles
    eager_params, eager_state = _train("cpu", gpt2, OPTIMIZERS[name], dtype)
    for i, (e, z) in enumerate(zip(eager_params + eager_state, lazy_params + lazy_state)):
        _close(e, z, f"{name}: tensor {i}")


def test_functional_fused_adamw_returns_new_tensors(dev: torch.device) -> None:
    # What a functionalized graph (torch.compile) calls: the inputs stay as they were.
    p, g = torch.randn(5), torch.randn(5)
    state = [torch.zeros(5), torch.zeros(5)]
    step = torch.tensor(1.0)
    kw: dict[str, Any] = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                              maximize=False)  # fmt: skip
    on_xla = [t.to(dev) for t in (p, g, *state, step)]
    xlalab.mark_step()
    met.clear_all()
    outs = torch.ops.aten._fused_adamw(*([t] for t in on_xla[:4]), [], [on_xla[4]], **kw)
    assert met.executed_fallback_ops() == []
    torch.testing.assert_close(on_xla[0].cpu(), p, rtol=0, atol=0)
    inplace = [[t.clone()] for t in (p, g, *state)]
    torch._fused_adamw_(*inplace, [], [step], **kw)
    for lazy, eager in zip(outs[:4], inplace):
        _close(eager[0], lazy[0].cpu(), "functional output")
    assert outs[4] == []


# --------------------------------------------------------------------------- GradScaler's ops


def _scaler_ops(device: Any, dtype: torch.dtype) -> list[torch.Tensor]:
    """Four steps of GradScaler's two ops on gradients that overflow at the second step."""
    gen = torch.Generator().manual_seed(1)
    scale = torch.tensor([2.0**16]).to(device)
    tracker = torch.tensor([0], dtype=torch.int32).to(device)
    seen = []
    for step, bad in enumerate([None, float("inf"), None, float("nan")]):
        grads = [torch.randn(s, generator=gen).to(dtype) * 1000 for s in SHAPES]
        if bad is not None:
            grads[1][0, 2] = bad
        grads = [g.to(device) for g in grads]
        found_inf = torch.zeros(1).to(device)
        inv_scale = scale.double().reciprocal().float() if step != 2 else torch.ones(1).to(device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
        seen += [*grads, found_inf.clone(), scale.clone(), tracker.clone()]
        if device != "cpu":
            xlalab.mark_step()
    # Growing past the largest float keeps the scale (and restarts the count).
    big = torch.tensor([3e38]).to(device)
    count = torch.tensor([1], dtype=torch.int32).to(device)
    torch._amp_update_scale_(big, count, torch.zeros(1).to(device), 2.0, 0.5, 2)
    return [t.cpu() for t in (*seen, big, count)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_grad_scaler_ops_match_torch_cpu_kernels(dev: torch.device, dtype: torch.dtype) -> None:
    xlalab.mark_step()
    met.clear_all()
    lazy = _scaler_ops(dev, dtype)
    assert met.executed_fallback_ops() == []
    eager = _scaler_ops("cpu", dtype)
    for i, (e, z) in enumerate(zip(eager, lazy)):
        torch.testing.assert_close(z, e, rtol=0, atol=0, equal_nan=True, msg=f"tensor {i}")


def test_grad_scaler_with_fused_adamw_skips_the_overflowing_step_on_the_device(dev: torch.device) -> None:
    def run(device: Any) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=2.0**10, growth_interval=2)
        x = torch.randn(4, 6).to(device)
        for step in range(4):
            opt.zero_grad()
            loss = model(x).pow(2).mean() * (float("inf") if step == 1 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if device != "cpu":
                xlalab.mark_step()
        return [t.detach().cpu() for t in (*model.parameters(), scaler._scale)]  # type: ignore[misc]

    xlalab.mark_step()
    met.clear_all()
    lazy = run(str(dev))
    assert met.executed_fallback_ops() == []
    for e, z in zip(run("cpu"), lazy):
        torch.testing.assert_close(z, e, rtol=1e-6, atol=1e-7)
