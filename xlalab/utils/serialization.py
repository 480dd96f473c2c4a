"""``torch_xla.utils.serialization`` (``xser``): save a checkpoint tensor by tensor.

``save(data, path)`` writes ``data`` to ``path`` with every xla tensor replaced by a reference,
and each tensor's CPU copy to its own file in ``path + ".tensors"``, so a large state dict is
never held on the host twice. ``load(path)`` reads it back with CPU tensors in place of the
references (``model.load_state_dict`` moves them to the model's device). Both files load
with ``torch.load``'s default ``weights_only=True``.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch

from ..core import xla_model as xm


class TensorReference:
    """Stands for the tensor saved as ``tensor_<tid>.pt`` in the tensors folder."""

    def __init__(self, tid: int) -> None:
        self.tid = tid

    def __repr__(self) -> str:
        return f"TensorReference({self.tid})"


def _tensors_folder(path: str) -> str:
    return os.fspath(path) + ".tensors"


def _tensor_file(folder: str, tid: int) -> str:
    return os.path.join(folder, f"tensor_{tid}.pt")


def _rewrite(data: Any, replace: Any) -> Any:
    """``data`` with each xla tensor swapped for ``replace(tensor)``; containers keep their types."""
    if isinstance(data, torch.Tensor):
        return replace(data) if xm.is_xla_tensor(data) else data
    if isinstance(data, dict):
        out = type(data)() if type(data) is not dict else {}
        for k, v in data.items():
            out[k] = _rewrite(v, replace)
        if hasattr(data, "_metadata"):
            out._metadata = data._metadata  # type: ignore[attr-defined]
        return out
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*[_rewrite(v, replace) for v in data])
    if isinstance(data, (list, tuple, set)):
        return type(data)(_rewrite(v, replace) for v in data)
    return data


def save(data: Any, path: str, master_only: bool = True, global_master: bool = False) -> None:
    """Save ``data`` to ``path``, its xla tensors one file each in ``path + ".tensors"``.

    ``master_only``/``global_master`` as in :func:`xlalab.core.xla_model.save`.
    """
    write = not master_only or xm.is_master_ordinal(local=not global_master)
    found: list[torch.Tensor] = []
    index: dict[int, int] = {}

    def collect(t: torch.Tensor) -> TensorReference:
        if id(t) not in index:
            index[id(t)] = len(found)
            found.append(t)
        return TensorReference(index[id(t)])

    refs = _rewrite(data, collect)
    xm.unlazy(found)  # one execution for everything pending, before the transfers
    if not write:
        return
    folder = _tensors_folder(path)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.mkdir(folder)
    for tid, t in enumerate(found):
        torch.save(t.detach().cpu(), _tensor_file(folder, tid))
    torch.save(refs, path)


def load(path: str) -> Any:
    """The data saved by :func:`save` at ``path``, with CPU tensors in place of the references."""
    folder = _tensors_folder(path)
    with torch.serialization.safe_globals([TensorReference]):
        refs = torch.load(path)

    def restore(v: Any) -> Any:
        if isinstance(v, TensorReference):
            return torch.load(_tensor_file(folder, v.tid))
        if isinstance(v, dict):
            out = type(v)() if type(v) is not dict else {}
            for k, x in v.items():
                out[k] = restore(x)
            if hasattr(v, "_metadata"):
                out._metadata = v._metadata  # type: ignore[attr-defined]
            return out
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return type(v)(*[restore(x) for x in v])
        if isinstance(v, (list, tuple, set)):
            return type(v)(restore(x) for x in v)
        return v

    return restore(refs)


__all__ = ["TensorReference", "load", "save"]
