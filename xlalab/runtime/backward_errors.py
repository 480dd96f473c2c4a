"""Errors raised by an op during ``backward()`` reach the user as eager's do.

An exception that leaves ``__torch_dispatch__`` while autograd's engine runs a backward node
is not carried back cleanly by torch (a Python device guard is called while the error is in
flight): the user gets a ``SystemError`` or, worse, the process aborts and a notebook's kernel
dies. So inside the engine a failing op does not raise: it returns failed values (reading one
raises the error) and the error is kept; when the engine returns, ``backward()`` raises it, at
the user's line, with the op's own message. Outside backward nothing changes.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.autograd
import torch.autograd.graph

from . import ir

_local = threading.local()


def _pending() -> list[BaseException]:
    errors = getattr(_local, "errors", None)
    if errors is None:
        errors = _local.errors = []
    return errors  # type: ignore[no-any-return]


def _keep(error: BaseException, func: Any, args: tuple[Any, ...]) -> tuple[torch.Tensor, int]:
    """Keep ``error`` for the end of backward: the op's first xla input and its output count,
    which the failed values are shaped from. Raises ``error`` when they cannot be."""
    returns = func._schema.returns
    like = next((a for a in args if isinstance(a, torch.Tensor) and a.device.type == "xla"), None)
    if like is None or not returns or any("Tensor" not in str(r.type) for r in returns):
        raise error
    _pending().append(error)
    return like, len(returns)


def defer(error: BaseException, func: Any, args: tuple[Any, ...]) -> list[ir.Node]:
    """Keep ``error`` for the end of backward; return failed values (one per output) shaped
    like the op's first xla input."""
    like, n = _keep(error, func, args)
    return [ir.error(error, tuple(like.shape), like.dtype, like.device.index or 0) for _ in range(n)]


def defer_fake(error: BaseException, func: Any, args: tuple[Any, ...]) -> Any:
    """``defer`` for an op on fake xla tensors (dynamo tracing a backward): the error is kept
    and the op returns fakes shaped like its first xla input."""
    like, n = _keep(error, func, args)
    outs = [torch.empty_like(like) for _ in range(n)]
    return outs[0] if n == 1 else tuple(outs)


def _raise_kept(cause: BaseException | None = None) -> None:
    errors = _pending()
    if errors:
        first = errors[0]
        errors.clear()
        raise first from cause


def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
    _pending().clear()
    try:
        result = _run_backward(*args, **kwargs)
    except Exception as e:
        _raise_kept(e)  # the op's own error, not what the failed values led to
        raise
    _raise_kept()
    return result


_run_backward = torch.autograd.graph._engine_run_backward


def install() -> None:
    """Route backward() through ``_engine_run_backward`` above (once)."""
    if torch.autograd._engine_run_backward is not _engine_run_backward:  # type: ignore[attr-defined]
        torch.autograd._engine_run_backward = _engine_run_backward  # type: ignore[attr-defined]
        torch.autograd.graph._engine_run_backward = _engine_run_backward
