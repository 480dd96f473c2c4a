"""Errors raised by an op during ``backward()`` reach the user as eager's do.

An exception that leaves ``__torch_dispatch__`` while autograd's engine runs a backward node
is not carried back cleanly by torch (a Python device guard is called while the error is in
flight): the user gets a ``SystemError`` or, worse, the process aborts and a notebook's kernel
dies. So inside the engine a failing op does not raise: it returns failed values (reading one
raises the error) and the error is kept; when the engine returns, ``backward()`` raises it, at
the user's line, with the op's own message. Outside backward nothing changes.

Python hooks the engine calls are guarded the same way (``guarded``): a tensor's hooks, its
post-accumulate-grad hooks and the hooks of a custom Function's node (a module's full backward
hooks are these). An exception from one on xla gradients, ``KeyboardInterrupt`` included, is
kept and the gradients pass on unchanged. Ctrl-C is held the same way (``_interrupts_held``).
"""

from __future__ import annotations

import _signal
import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
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


def _on_xla(args: tuple[Any, ...]) -> bool:
    for a in args:
        for t in a if isinstance(a, (tuple, list)) else (a,):
            if isinstance(t, torch.Tensor) and t.device.type == "xla":
                return True
    return False


def guarded(hook: Callable[..., Any], returns_grad: bool = False) -> Callable[..., Any]:
    """``hook`` as autograd's engine calls it on xla gradients: what it raises is kept for the end
    of backward and the gradients pass on unchanged. torch leaves a hook's Python error set while
    the engine unwinds, and the xla device's Python guard, called on the way, then aborted the
    process ("terminate called without an active exception"). So does a hook's result that is
    no tensor where it ``returns_grad`` (a tensor's hook), checked here with eager's message."""

    @functools.wraps(hook)  # the engine's messages name the hook
    def run(*args: Any) -> Any:
        try:
            result = hook(*args)
        except BaseException as e:
            if torch._C._current_autograd_node() is None or not _on_xla(args):
                raise
            _pending().append(e)
            return None
        if returns_grad and not (result is None or isinstance(result, torch.Tensor)) and _on_xla(args):
            _pending().append(TypeError(f"expected Variable, but hook returned '{type(result).__name__}'"))
            return None
        return result

    return run


def _function_node_hook(register: Callable[..., Any]) -> Callable[..., Any]:
    def register_guarded(node: Any, hook: Callable[..., Any]) -> Any:
        return register(node, guarded(hook))

    return register_guarded


def _raise_kept(cause: BaseException | None = None) -> None:
    errors = _pending()
    if errors:
        first = errors[0]
        errors.clear()
        raise first from cause


def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
    _pending().clear()
    with _interrupts_held(_on_xla(tuple(args[:1]))):
        try:
            result = _run_backward(*args, **kwargs)
        except Exception as e:
            _raise_kept(e)  # the op's own error, not what the failed values led to
            raise
        _raise_kept()
    return result


@contextlib.contextmanager
def _interrupts_held(hold: bool) -> Iterator[None]:
    """Ctrl-C (SIGINT) held until a backward of xla tensors returns, then handled as the handler
    in place would have. Raised inside the engine, in a Python callback torch cannot unwind
    through (the device guard's), it aborted the process: a notebook's kernel died. Backward on
    xla only records the graph, so the wait is short; a CPU backward keeps its interrupts."""
    if not hold:
        yield
        return
    # _signal's functions, not signal's wrappers: those convert to and from enums, which cost
    # more than the rest of a compiled step's backward call.
    previous = _signal.getsignal(_signal.SIGINT)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    _signal.signal(_signal.SIGINT, lambda signum, frame: held.append((signum, frame)))
    try:
        yield
    finally:
        _signal.signal(_signal.SIGINT, previous)
        if held:
            # The handler in place, from here: Python's raises KeyboardInterrupt; interrupts.py's
            # raises it at the next line of the code that called backward.
            previous(held[0][0], sys._getframe())


_run_backward = torch.autograd.graph._engine_run_backward


def install() -> None:
    """Route backward() through ``_engine_run_backward`` above (once)."""
    node = torch.autograd.function.BackwardCFunction
    if "register_hook" not in vars(node):  # a custom Function's node; generated ones are C types
        node.register_hook = _function_node_hook(torch._C._FunctionBase.register_hook)  # type: ignore[method-assign]
        node.register_prehook = _function_node_hook(torch._C._FunctionBase.register_prehook)  # type: ignore[method-assign]
    if torch.autograd._engine_run_backward is not _engine_run_backward:  # type: ignore[attr-defined]
        torch.autograd._engine_run_backward = _engine_run_backward  # type: ignore[attr-defined]
        torch.autograd.graph._engine_run_backward = _engine_run_backward
