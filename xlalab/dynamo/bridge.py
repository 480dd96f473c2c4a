"""``torch_xla.core.dynamo_bridge``: what torch's own ``openxla`` backends call.

torch's entry for ``backend="openxla"`` (``torch/_dynamo/backends/torchxla.py``) is AOTAutograd
with a compiler that, on a graph's first call, imports this module and calls
``extract_compiled_graph(graph_module, args)``, then calls what it returns with the arguments
on every call. While xlalab's torch_xla names are installed, ``backend="openxla"`` is xlalab's
own backend (``backend.register``) and does not come here; this module serves code that calls
the bridge directly, each graph becoming one program through xlalab's runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import integration, report
from .executable import CompiledGraph


def extract_compiled_graph(xla_model: fx.GraphModule, xla_args: Sequence[Any]) -> Callable[..., Any]:
    """The compiled form of ``xla_model`` (an FX graph over xla tensors, called with ``xla_args``).

    It traces and compiles on its first call, which the caller makes right after with these
    arguments: running it here too would apply the graph's in-place updates twice.
    """
    integration.install()
    label = report.note_dynamo_graph(xla_model)
    del xla_args
    compiled = CompiledGraph(xla_model, f"{label}, openxla")
    report.note_aot_graph(label, "openxla", xla_model, compiled)
    return compiled


def is_xla_tensor(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xla"


__all__ = ["extract_compiled_graph", "is_xla_tensor"]
