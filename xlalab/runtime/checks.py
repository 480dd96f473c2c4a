"""Checks computed on the device with a graph: a flag that, when set, becomes a Python error.

XLA has no errors at run time, so a condition eager PyTorch raises on is computed as a small
boolean node ("this check failed") that joins the next graph of its device as an extra output.
Two kinds read their flag at different times:

- an *immediate* check is read right after its program runs (XLALAB_CHECK_INDICES: a debugging
  mode that already pays a read per sync);
- a *deferred* check is an assertion the program makes without waiting for it,
  ``torch._assert_async`` (which torch's own decompositions emit, e.g. ``one_hot``'s class
  range in a compiled graph), or torch.linalg's error codes (a singular matrix for ``inv``,
  ``_linalg_check_errors``). Its flag is read at the next point the host waits for the device
  anyway (a value read to the CPU, ``wait_device_ops``), or at the next execution if the
  program has finished by then; the error names the assertion's message and the line that made
  it. This is how a device-side assert behaves on CUDA: asynchronous, reported at a sync.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from . import ir
from .frames import Frame, is_library, user_frames

ASSERT = "xla::assert_failed"


@dataclass
class Check:
    node: ir.Node  # bool (): the check failed
    error: type[Exception]
    message: str  # the whole error message
    deferred: bool = False


_pending: list[Check] = []  # recorded, not yet part of a program
_in_flight: list[tuple[Check, Any]] = []  # deferred checks run by a program: (check, flag array)


def add(check: Check) -> None:
    _pending.append(check)


def take(device: int) -> list[Check]:
    """The pending checks of ``device``, removed from the pending list: the caller computes them
    with its graph (their nodes become its last roots)."""
    if not _pending:
        return []
    mine = [c for c in _pending if c.node.device == device]
    if mine:
        _pending[:] = [c for c in _pending if c.node.device != device]
    return mine


def mark() -> int:
    return len(_pending)


def made_since(mark: int) -> list[Check]:
    """The checks recorded since ``mark()`` gave ``mark``, removed from the pending list: what
    one traced graph made (compiled mode), none of what was pending before it."""
    made = _pending[mark:]
    del _pending[mark:]
    return made


def devices(device: int | None = None) -> list[int]:
    """The devices with pending checks (``device`` alone, if given)."""
    return sorted({c.node.device for c in _pending if device is None or c.node.device == device})


def after_run(checks: list[Check], flags: list[Any]) -> None:
    """Raise the first failed immediate check; keep the deferred ones' flags for a later sync."""
    for check, flag in zip(checks, flags):
        if check.deferred:
            _in_flight.append((check, flag))
        elif bool(np.asarray(flag)):
            raise check.error(check.message)


def raise_deferred(wait: bool) -> None:
    """Raise the first failed deferred check (all of them, oldest first, if ``wait``; else only
    those whose program has already finished, without waiting)."""
    if not _in_flight:
        return
    kept: list[tuple[Check, Any]] = []
    failed: Check | None = None
    for check, flag in _in_flight:
        if wait or flag.is_ready():
            # After the first failure, the others read with it go unraised: like a device-side
            # assert's, one failure is one error (an op's checks often fail together: one_hot
            # of -1 without num_classes fails both of its bounds).
            if failed is None and bool(np.asarray(flag)):
                failed = check
        else:
            kept.append((check, flag))
    _in_flight[:] = kept
    if failed is not None:
        raise failed.error(failed.message)


# ----------------------------------------------------------------------------- torch._assert_async

# Where an assertion comes from when its caller is not on the stack: compiled mode sets it to
# the line of the FX node it is running (the frames then are dynamo's, not the user's).
origin: list[str | None] = [None]
_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def where_of(stack_trace: str | None) -> str | None:
    """``file:line`` of the innermost user frame of an FX node's stack trace (as ``where``
    picks on the stack: library files are skipped)."""
    found = [(f, line) for f, line in _FILE_LINE.findall(stack_trace or "") if not is_library(f)]
    return f"{found[-1][0]}:{found[-1][1]}" if found else None


def where() -> str:
    """``file:line`` of the user's code recording an op now."""
    if origin[0] is not None:
        return origin[0]
    frames: tuple[Frame, ...] = user_frames(1)
    return f"{frames[0].file}:{frames[0].line}" if frames else "an unknown line"


def assert_async(node_of: Any, cond: torch.Tensor, message: str | None) -> None:
    """Record ``torch._assert_async(cond, message)`` on an xla tensor: a deferred check that
    ``cond``, one element, is nonzero (``node_of`` gives an xla tensor's current value)."""
    if cond.numel() != 1:  # eager checks the shape before any value, as here
        amount = "no values" if cond.numel() == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {amount} is ambiguous")
    text = message or "Expected Tensor with single nonzero value, but got zero"
    defer(node_of(cond), RuntimeError, text, "torch._assert_async")


def defer(cond: ir.Node, error: type[Exception], message: str, made_by: str) -> None:
    """A deferred check that ``cond`` (one element) is nonzero: ``error(message)``, naming what
    made it and the user's line, at the sync after it fails."""
    add(
        Check(
            ir.Node(ASSERT, (cond,), None, (), torch.bool, cond.device),
            error,
            f"{message} ({made_by} at {where()}: checked on the device and reported at this sync, "
            "as a device-side assert is)",
            deferred=True,
        )
    )


def lower_assert(vals: list[Any], arg: Any, shape: Any, dtype: Any) -> Any:
    return jnp.all(vals[0] == 0)


# ----------------------------------------------------------------------------- linalg error codes

def _linalg_failure(api_name: str) -> tuple[type[Exception], str]:
    """Eager's error for a nonzero LAPACK ``info`` of ``api_name`` (its wording, less the
    index it reads from the device)."""
    if "inv" in api_name:
        return (
            torch.linalg.LinAlgError,
            "The inversion could not be completed because the input matrix is singular.",
        )
    if "solve" in api_name:
        return torch.linalg.LinAlgError, "The solver failed because the input matrix is singular."
    if "cholesky" in api_name:
        return torch.linalg.LinAlgError, (
            "The factorization could not be completed because the input is not positive-definite "
            "(one of its leading minors is not positive-definite)."
        )
    if "lu_factor" in api_name:
        return RuntimeError, (
            "U has a zero diagonal element and using it on lu_solve would result in a division by zero. "
            "If you still want to perform the factorization, consider calling linalg.lu(A, pivot) or "
            "linalg.lu_factor_ex(A, pivot)"
        )
    return torch.linalg.LinAlgError, "The computation failed (a nonzero LAPACK error code)."


def linalg_errors(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``aten._linalg_check_errors(info, api_name, is_matrix)`` on an xla ``info``: eager reads
    ``info`` and raises if any is nonzero; here that is a deferred check (no read per call), so
    ``torch.linalg.inv``/``solve``/``cholesky`` stay in the graph and a singular input raises
    eager's error at the next sync."""
    from . import replica_state, tensor  # tensor imports this module

    info, api_name = args[0], str(args[1])
    if type(info) is not tensor.XlaTensor or replica_state.current() is not None:
        # Replicas run their graphs as one program of their own: read the codes now instead.
        tensor.fallback(func, args, kwargs)
        return
    ok: Any = torch.all(info == 0)  # an xla tensor: recorded, not read
    error, text = _linalg_failure(api_name)
    defer(tensor.value(ok), error, f"{api_name}: {text}", api_name)


def linalg_ex_checked(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ``linalg_*_ex`` op called with ``check_errors=True``: the lowered op without it, then
    the deferred check of its ``info`` (its last output), named as eager names it."""
    from . import tensor

    if not kwargs.get("check_errors", False):
        return tensor._lowered(func, args, kwargs)
    out = tensor._lowered(func, args, {**kwargs, "check_errors": False})
    api = _EX_API_NAMES.get(func._schema.name, func._schema.name)
    linalg_errors(
        torch.ops.aten._linalg_check_errors.default, (out[-1], api), {"is_matrix": args[0].dim() == 2}
    )
    return out


def legacy_cholesky(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.cholesky`` (the older name): ``linalg.cholesky_ex``'s factor, and its deferred
    check under the name eager's error gives."""
    x = args[0]
    upper = args[1] if len(args) > 1 else kwargs.get("upper", False)
    factor, info = torch.ops.aten.linalg_cholesky_ex.default(x, upper=upper)
    check = torch.ops.aten._linalg_check_errors.default
    linalg_errors(check, (info, "cholesky"), {"is_matrix": x.dim() == 2})
    return factor


def ctc_lengths_checked(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``_ctc_loss.Tensor``: the lowered loss, and deferred checks of the lengths eager reads and
    checks on the host (lengths that do not fit the inputs or targets raise eager's error at the
    next sync instead of giving a loss of whatever the masks make of them)."""
    from . import tensor

    out = tensor._lowered(func, args, kwargs)
    log_probs, targets, input_lengths, target_lengths = args[:4]
    steps = log_probs.shape[0]
    conditions = [
        (input_lengths, (input_lengths >= 0) & (input_lengths <= steps),
         f"Expected input_lengths to have values from 0 to {steps}, the length of log_probs"),
        (target_lengths, target_lengths >= 0, "Expected target_lengths to have values at least 0"),
    ]  # fmt: skip
    if targets.dim() == 1:
        total = targets.shape[0]
        conditions.append((target_lengths, target_lengths.sum() == total,
                           f"Expected target_lengths to sum to {total}, the length of targets"))  # fmt: skip
    else:
        conditions.append((target_lengths, target_lengths <= targets.shape[1],
                           f"Expected target_lengths to have values at most {targets.shape[1]}, the "
                           "targets' size at dimension 1"))  # fmt: skip
    for lengths, ok, text in conditions:
        if type(lengths) is tensor.XlaTensor:
            message = f"{text} (while checking arguments for ctc_loss)"
            every: Any = torch.all(ok)  # an xla tensor: recorded, not read
            defer(tensor.value(every), RuntimeError, message, "ctc_loss")
    return out


def embedding_bag_offsets_checked(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``_embedding_bag``: the lowered bags, and deferred checks of the offsets eager reads on
    the host (offsets that do not start at 0, run backwards or end past the indices raise
    eager's error at the next sync instead of giving bags the masks make of them)."""
    from . import tensor

    out = tensor._lowered(func, args, kwargs)
    indices, offsets = args[1], args[2]
    if type(offsets) is not tensor.XlaTensor or indices.dim() != 1 or offsets.numel() == 0:
        return out
    length = indices.shape[0]
    with torch.no_grad():
        conditions = [
            (offsets[0] == 0, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
             "has to start from position 0"),
            (offsets[-1] <= length, f"offsets[-1] can not be greater than input's length {length}"),
            (torch.all(offsets[1:] >= offsets[:-1]), "offsets must be non-decreasing"),
        ]  # fmt: skip
    for ok, message in conditions:
        defer(tensor.value(ok), RuntimeError, message, "embedding_bag")
    return out


def one_hot_checked(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """``F.one_hot`` on xla tensors (and dynamo's fake ones). torch's C++ kernel skips eager's
    checks of the class values on any device but the CPU (a value out of range gave a row of
    zeros); its Python decomposition makes them ``torch._assert_async`` checks, deferred checks
    here. The C++ kernel still answers what it checks before any value: the dtype, an empty
    input."""
    if self.dtype != torch.int64:  # the C++ kernel's error
        composite = torch._C.DispatchKey.CompositeImplicitAutograd
        return torch.ops.aten.one_hot.default._op_dk(composite, self, num_classes)  # type: ignore[no-any-return]
    if self.numel() == 0 and num_classes <= 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    return torch.ops.aten.one_hot.default.decompose(self, num_classes)  # type: ignore[no-any-return]


def quantile_checked(name: str) -> Any:
    """``torch.quantile`` / ``torch.nanquantile`` with a tensor ``q`` on xla tensors: eager checks
    that every q lies in [0, 1] only for a CPU ``q`` (a read), so on another device a q of 1.5
    gave the largest value and a NaN q a NaN. Here it is a deferred check, raised at the next
    sync as eager's error; the op is torch's decomposition as before."""
    op = getattr(torch.ops.aten, name).default
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    message = f"{name}() q values must be in the range [0, 1]"

    def kernel(self: torch.Tensor, q: torch.Tensor, dim: int | None = None, keepdim: bool = False,
               *, interpolation: str = "linear") -> torch.Tensor:  # fmt: skip
        from . import tensor

        if type(q) is tensor.XlaTensor and q.numel() > 0:
            with torch.no_grad():
                inside: Any = torch.all((q >= 0) & (q <= 1))  # an xla tensor: recorded, not read
            defer(tensor.value(inside), RuntimeError, message, name)
        return op._op_dk(composite, self, q, dim, keepdim, interpolation=interpolation)  # type: ignore[no-any-return]

    return kernel


_EX_API_NAMES = {
    "aten::linalg_inv_ex": "linalg.inv_ex",
    "aten::linalg_cholesky_ex": "linalg.cholesky_ex",
    "aten::_linalg_solve_ex": "torch.linalg.solve_ex",
    "aten::linalg_lu_factor_ex": "torch.linalg.lu_factor_ex",
}
