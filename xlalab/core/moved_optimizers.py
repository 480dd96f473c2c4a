"""An optimizer built before ``model.to(xla)`` follows the model's Parameters to the device.

On CUDA, ``opt = SGD(model.parameters()); model.to("cuda")`` trains the model: the move swaps
each Parameter's data in place, so the optimizer's Parameters are the model's. A CPU tensor
and an xla tensor cannot share that shallow copy, so the move gives the model new Parameter
objects, and the optimizer, holding the old CPU ones, would update copies the model no longer
uses: the loss never improves and nothing says why (torch_xla behaves so).

After a move to or from an xla device (``weight_tying``'s ``Module._apply`` hook calls
:func:`follow`), an optimizer that still holds a replaced Parameter is given the new one in
its place, with its state (``exp_avg``, momentum buffers) moved along, and
:class:`XlaOptimizerBuiltBeforeMoveWarning` names it once, since the same script under torch_xla
would not train. Building the optimizer after ``.to(device)`` is the portable order.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import torch


class XlaOptimizerBuiltBeforeMoveWarning(UserWarning):
    """An optimizer held Parameters that ``.to(xla)`` replaced (xlalab pointed it at the new ones)."""


# sys.getrefcount of a replaced Parameter that nothing but the caller's list holds: the list's
# reference, the loop variable's and the call's argument.
_UNHELD = 3


def follow(moved: Sequence[tuple[torch.nn.Parameter, torch.nn.Parameter]], stacklevel: int) -> None:
    """Point every optimizer that holds an old Parameter of ``moved`` (old, new) at the new one."""
    held = {}
    for old, new in moved:
        if sys.getrefcount(old) > _UNHELD:  # something besides ``moved`` holds it: maybe an optimizer
            held[id(old)] = (old, new)
    if not held:
        return
    old_device = next(iter(held.values()))[0].device
    repointed = [opt for opt in _optimizers() if _repoint(opt, held)]
    for opt in repointed:
        device = next((p.device for g in opt.param_groups for p in g["params"]), "xla")
        warnings.warn(
            f"{type(opt).__name__} was built before the model moved to {device} and held the "
            f"Parameters the move replaced, so it would have gone on updating their {old_device} "
            "copies, which the model no longer uses (the loss would never improve). xlalab pointed "
            "it at the moved Parameters, as on CUDA; torch_xla would not. To be portable, build "
            "the optimizer after model.to(device).",
            XlaOptimizerBuiltBeforeMoveWarning,
            stacklevel=stacklevel,
        )


def _optimizers() -> list[torch.optim.Optimizer]:
    # By type, not isinstance: that would read ``__class__`` of every object, which some
    # (torch's deprecated module attributes) answer with a warning.
    optimizer = torch.optim.Optimizer
    return [o for o in gc.get_objects() if issubclass(type(o), optimizer)]


def _repoint(opt: torch.optim.Optimizer, held: dict[int, tuple[Any, Any]]) -> bool:
    changed = False
    for group in opt.param_groups:
        params = group["params"]
        for k, p in enumerate(params):
            pair = held.get(id(p))
            if pair is None or pair[0] is not p:
                continue
            new = pair[1]
            params[k] = new
            if p in opt.state:
                opt.state[new] = _moved_state(opt.state.pop(p), new, group)
            changed = True
    return changed


def _moved_state(state: dict[str, Any], param: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
    """A Parameter's optimizer state on the Parameter's new device, as ``load_state_dict`` puts
    it: a ``step`` counter stays where it is unless the step is capturable or fused."""
    out = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            out[key] = value
        elif key == "step":
            keep = not (group.get("capturable") or group.get("fused"))
            out[key] = value if keep else value.to(dtype=torch.float32, device=param.device)
        elif value.is_floating_point() and param.is_floating_point():
            out[key] = value.to(dtype=param.dtype, device=param.device)
        else:
            out[key] = value.to(device=param.device)
    return out


__all__ = ["XlaOptimizerBuiltBeforeMoveWarning", "follow"]
