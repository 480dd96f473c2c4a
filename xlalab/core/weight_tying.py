"""Weight ties survive ``module.to(xla)``, and a tie made before the move is reported.

Eager PyTorch moves a parameter with ``param.data = moved``, so every module holding that
Parameter object still holds it afterwards. A CPU tensor and an xla tensor cannot share
that shallow copy, so ``Module._apply`` builds a new Parameter for each place the old one
was found: two modules that shared one weight end up with two independent copies on the
device. That is the seeds' warning ("tie after moving to the XLA device"): the copies drift
apart at the first optimizer step, silently.

xlalab checks every outermost ``Module._apply`` (``.to()``, ``.cpu()``, ``.xla()``,
``.half()``, ...). When a Parameter shared by several paths before the call is several
objects after it, and one side of the move is an xla device, it:

* **re-ties** them: every path gets the Parameter of the first path, so the model means
  what it meant before the move (as in eager PyTorch). The copies were made by the same
  function from the same tensor, so nothing is lost;
* warns once per model class and set of ties with :class:`XlaWeightTyingWarning`, naming
  the paths, because the same script under torch_xla keeps two copies. Tying after
  ``.to(device)`` is the portable fix.

Buffers are not re-tied: eager PyTorch replaces every buffer on a move and breaks their
sharing too.

The same hook hands the Parameters a move replaced to :mod:`xlalab.core.moved_optimizers`, so
that an optimizer built before the move follows them.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from xlalab.runtime.frames import is_library

from . import moved_optimizers


class XlaWeightTyingWarning(UserWarning):
    """A Parameter tied before ``.to(xla)`` was split in two by the move (xlalab re-ties it)."""


_state = threading.local()
_reported: set[tuple[type, tuple[tuple[str, ...], ...]]] = set()
_original_apply: Callable[..., Any] | None = None

# (module, attribute name, dotted path) of each place a Parameter is held.
_Place = tuple[torch.nn.Module, str, str]


def _ties(root: torch.nn.Module) -> list[list[_Place]]:
    """Groups of places that hold one Parameter object, for Parameters held in 2+ places."""
    by_id: dict[int, list[_Place]] = {}
    for prefix, mod in root.named_modules(remove_duplicate=False):
        for name, p in mod._parameters.items():
            if p is not None:
                by_id.setdefault(id(p), []).append((mod, name, f"{prefix}.{name}" if prefix else name))
    groups = []
    for places in by_id.values():
        # A shared submodule shows up once per path but is one place: dedupe by (module, name).
        distinct = list({(id(m), n): (m, n, path) for m, n, path in places}.values())
        if len(distinct) > 1:
            groups.append(distinct)
    return groups


def _places(root: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Parameter]]:
    return [(m, n, p) for m in root.modules() for n, p in m._parameters.items() if p is not None]


def _moved(
    places: list[tuple[torch.nn.Module, str, torch.nn.Parameter]],
) -> list[tuple[torch.nn.Parameter, torch.nn.Parameter]]:
    """(old, new) per Parameter that a move to or from xla replaced, once per old one."""
    moved: dict[int, tuple[torch.nn.Parameter, torch.nn.Parameter]] = {}
    for m, n, old in places:
        new = m._parameters.get(n)
        if new is not None and new is not old and (_on_xla(new) or _on_xla(old)):
            moved.setdefault(id(old), (old, new))
    return list(moved.values())


def _on_xla(t: torch.Tensor | None) -> bool:
    return t is not None and t.device.type == "xla"


def _retie(root: torch.nn.Module, before: list[list[_Place]], was_on_xla: list[bool]) -> None:
    split: list[tuple[str, ...]] = []
    moved_to = ""
    for group, before_xla in zip(before, was_on_xla):
        params = [m._parameters[n] for m, n, _ in group]
        if all(p is params[0] for p in params):
            continue  # the move kept the object (same device type, or swap_tensors)
        if not (before_xla or any(_on_xla(p) for p in params)):
            continue  # not an xla move: not ours to change
        keep = params[0]
        if keep is None:
            continue  # the move set it to None: nothing to tie
        moved_to = str(keep.device)
        for m, n, _ in group[1:]:
            m._parameters[n] = keep
        split.append(tuple(path for _, _, path in group))
    if not split:
        return
    key = (type(root), tuple(split))
    if key in _reported:
        return
    _reported.add(key)
    ties = "; ".join(" and ".join(paths) for paths in split)
    warnings.warn(
        f"{type(root).__name__}: {ties} shared one Parameter before moving to {moved_to}, and the "
        "move made a separate copy for each. xlalab re-tied them, so they are one Parameter again; "
        "torch_xla would keep independent copies that drift apart at the first optimizer step. "
        f"To be portable, tie them after .to(device): {_tie_example(root, split)}.",
        XlaWeightTyingWarning,
        stacklevel=_user_stacklevel(),
    )


def _tie_example(root: torch.nn.Module, split: list[tuple[str, ...]]) -> str:
    """How to tie after the move: the model's own ``tie_weights()`` where it has one (Hugging
    Face models), else an assignment of the model's own paths."""
    if callable(getattr(root, "tie_weights", None)):
        return "model = model.to(dev); model.tie_weights()"
    first = split[0]
    assignments = "; ".join(f"{_expression(p)} = {_expression(first[0])}" for p in first[1:])
    return f"model = model.to(dev); {assignments}"


def _expression(path: str) -> str:
    """A parameter's dotted path as Python spells it: ``layers.0.weight`` -> ``model.layers[0].weight``."""
    return "model" + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in path.split("."))


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside torch, xlalab and installed libraries
    (transformers' ``PreTrainedModel.to``): the user's ``.to()`` line."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level if frame is not None else 1


def install() -> None:
    """Wrap ``torch.nn.Module._apply`` (once per process)."""
    global _original_apply
    if _original_apply is not None:
        return
    original = torch.nn.Module._apply
    _original_apply = original

    @functools.wraps(original)
    def _apply(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        # Only the outermost call checks: children are walked by the parent's check.
        if getattr(_state, "depth", 0):
            return original(self, *args, **kwargs)
        before = _ties(self)
        was_on_xla = [_on_xla(g[0][0]._parameters[g[0][1]]) for g in before]
        held = _places(self)
        _state.depth = 1
        try:
            out = original(self, *args, **kwargs)
        finally:
            _state.depth = 0
        if before:
            _retie(self, before, was_on_xla)
        moved = _moved(held)
        held = []  # ``moved`` holds the replaced Parameters now, and nothing else here does
        if moved:
            moved_optimizers.follow(moved, stacklevel=_user_stacklevel() + 1)
        return out

    torch.nn.Module._apply = _apply  # type: ignore[method-assign]


def uninstall() -> None:
    """Put torch's own ``Module._apply`` back."""
    global _original_apply
    if _original_apply is not None:
        torch.nn.Module._apply = _original_apply  # type: ignore[method-assign]
        _original_apply = None


__all__ = ["XlaWeightTyingWarning", "install", "uninstall"]
