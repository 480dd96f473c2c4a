"""Compiled mode: ``torch.compile`` on ``xla`` tensors through xlalab's lowering table.

::

    import xlalab.dynamo                     # backend="xlalab", once torch.compile loads dynamo
    model = torch.compile(model, backend="xlalab")

Each graph dynamo captures goes through AOTAutograd (a forward graph, and a backward graph
when gradients are needed); each becomes one XLA program, compiled on its first call by the
same runtime that compiles lazy mode's graphs (``xlalab.runtime.graph``), and called directly
from then on. With torch_xla's module names installed (``xlalab.use_torch_xla_names()``),
``backend="openxla"`` (and ``"openxla_eval"``) is this backend under torch_xla's name; code
that calls ``torch_xla.core.dynamo_bridge`` directly reaches :mod:`xlalab.dynamo.bridge`.

:func:`compiled_functions` reports, per compiled function, its graphs, graph breaks (dynamo's
reason and the user's line) and recompiles (the guard that failed, in plain words);
:func:`summary` says the same in a few lines.
"""

from __future__ import annotations

from . import report
from .backend import backend, register
from .executable import CompiledGraph
from .integration import install, install_when_dynamo_loads
from .report import (
    DynamoExecuteEvent,
    DynamoGraphEvent,
    FunctionReport,
    GraphBreakEvent,
    RecompileEvent,
    compiled_functions,
    explain_guard,
    summary,
)


def reset() -> None:
    """``torch._dynamo.reset()`` (every function compiles again) and a fresh report."""
    import torch._dynamo

    torch._dynamo.reset()
    report.reset()


# torch._dynamo takes seconds to import: wait for torch.compile to import it, then register.
install_when_dynamo_loads()

__all__ = [
    "CompiledGraph",
    "DynamoExecuteEvent",
    "DynamoGraphEvent",
    "FunctionReport",
    "GraphBreakEvent",
    "RecompileEvent",
    "backend",
    "compiled_functions",
    "explain_guard",
    "install",
    "install_when_dynamo_loads",
    "register",
    "reset",
    "summary",
]
