"""torch_xla's sync-free optimizers: ``step(found_inf=t)`` skips the update when ``t != 0``.

``found_inf`` is the overflow flag of float16 loss scaling, a tensor on the device. Reading it
on the host to decide whether to step would cost a sync every step; here the decision is in
the graph: the update is computed, then each parameter and each optimizer-state tensor keeps
its old value where ``found_inf`` is set (``torch.where``). Adam's and AdamW's step counters
are device tensors (``capturable=True``) for the same reason. Without ``found_inf`` they are
PyTorch's optimizers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _guarded_step(
    opt: torch.optim.Optimizer, base: Any, closure: Callable[[], Any] | None, found_inf: Any
) -> Any:
    if found_inf is None:
        return base.step(opt, closure)
    if not isinstance(found_inf, torch.Tensor) or found_inf.dim() != 0:
        raise ValueError("found_inf must be a 0-d tensor (the GradScaler's overflow flag)")
    params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    had_state = {id(p) for p in params if opt.state.get(p)}
    with torch.no_grad():
        for p in params:
            saved.append((p, p.detach().clone()))
            for v in opt.state.get(p, {}).values():
                if isinstance(v, torch.Tensor):
                    saved.append((v, v.detach().clone()))
    loss = base.step(opt, closure)
    with torch.no_grad():
        skip = found_inf.to(params[0].device if params else found_inf.device) != 0
        for t, old in saved:
            t.copy_(torch.where(skip, old, t))
        for p in params:
            if id(p) not in had_state:
                # State the skipped step created starts from zero, as if the step had not run.
                for v in opt.state[p].values():
                    if isinstance(v, torch.Tensor):
                        v.copy_(torch.where(skip, torch.zeros_like(v), v))
    return loss


class SGD(torch.optim.SGD):
    """``torch.optim.SGD`` whose ``step(found_inf=...)`` skips the update in the graph."""

    def step(self, closure: Callable[[], Any] | None = None, found_inf: torch.Tensor | None = None) -> Any:  # type: ignore[override]
        return _guarded_step(self, torch.optim.SGD, closure, found_inf)


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` (step counters on the device) whose ``step(found_inf=...)`` skips the
    update in the graph."""

    def __init__(self, params: Any, *args: Any, capturable: bool = True, **kwargs: Any) -> None:
        super().__init__(params, *args, capturable=capturable, **kwargs)

    def step(self, closure: Callable[[], Any] | None = None, found_inf: torch.Tensor | None = None) -> Any:  # type: ignore[override]
        return _guarded_step(self, torch.optim.Adam, closure, found_inf)


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (step counters on the device) whose ``step(found_inf=...)`` skips
    the update in the graph."""

    def __init__(self, params: Any, *args: Any, capturable: bool = True, **kwargs: Any) -> None:
        super().__init__(params, *args, capturable=capturable, **kwargs)

    def step(self, closure: Callable[[], Any] | None = None, found_inf: torch.Tensor | None = None) -> Any:  # type: ignore[override]
        return _guarded_step(self, torch.optim.AdamW, closure, found_inf)


__all__ = ["SGD", "Adam", "AdamW"]
