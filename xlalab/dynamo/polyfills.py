"""What dynamo traces in place of xlalab functions that user code calls inside a compiled function.

Dynamo never traces xlalab's machinery (``integration``): a call into it is a graph break. For
the xlalab functions that user code calls between tensor ops, this module gives dynamo
traceable twins made of torch ops (``integration`` registers each with
``torch._dynamo.substitute_in_graph``); it is the one module of ``xlalab.dynamo`` dynamo traces.

- ``xs.mark_sharding``: the op ``xla::dynamo_mark_sharding``, a sharding constraint in the graph.
"""

from __future__ import annotations

from typing import Any

import torch

import xlalab.experimental.dynamo_mark_sharding  # noqa: F401  (defines the op mark_sharding's twin calls)


def mark_sharding(t: Any, mesh: Any, partition_spec: Any, use_dynamo_custom_op: bool = False) -> Any:
    """``xs.mark_sharding`` in a graph: the op on the mesh's constants. It returns ``t`` itself
    (annotated), not torch_xla's ``XLAShardedTensor`` holder."""
    device_ids, mesh_shape, axis_names = mesh.dynamo_arguments
    torch.ops.xla.dynamo_mark_sharding(t, device_ids, mesh_shape, axis_names, repr(tuple(partition_spec)))
    return t
