"""``torch_xla.experimental.scan_layers``: a stack of identical layers as one loop.

``scan_layers(layers, x)`` equals ``nn.Sequential(*layers)(x)``, with the layers' parameters and
buffers stacked along a new leading dimension and the first layer's computation scanned over
them: the program holds one layer, however deep the stack, so it compiles as fast as one layer
does. Gradients reach each layer's own parameters (through the stacking).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .scan import scan

__all__ = ["scan_layers"]


def scan_layers(
    layers: Iterable[nn.Module],
    input_data: Any,
    partition_fn: Callable[..., Any] | None = None,
    is_layer_pure: bool = False,
) -> Any:
    """The output of the last of ``layers``, each fed the previous one's output."""
    layers = list(layers)
    if not layers:
        return input_data
    params = [dict(layer.named_parameters()) for layer in layers]
    buffers = [dict(layer.named_buffers()) for layer in layers]
    _same_structure(params, "parameter")
    _same_structure(buffers, "buffer")
    stacked = (
        {name: torch.stack([p[name] for p in params]) for name in params[0]},
        {name: torch.stack([b[name] for b in buffers]) for name in buffers[0]},
    )
    template = copy.deepcopy(layers[0])  # its own tensors are never read: functional_call swaps them

    @torch._dynamo.dont_skip_tracing  # dynamo traces xlalab's own code only where asked
    def one_layer(carry: Any, weights: tuple[dict[str, Any], dict[str, Any]]) -> tuple[Any, Any]:
        out = torch.func.functional_call(template, {**weights[0], **weights[1]}, (carry,), strict=True)
        return out, ()

    final, _ = scan(one_layer, input_data, stacked, partition_fn, is_layer_pure)
    return final


def _same_structure(tensors: Sequence[Mapping[str, torch.Tensor]], kind: str) -> None:
    first = tensors[0]
    for i, other in enumerate(tensors[1:], start=1):
        if set(other) != set(first):
            raise ValueError(
                f"layer {i} has other {kind}s than layer 0: missing {sorted(set(first) - set(other))}, "
                f"extra {sorted(set(other) - set(first))}; scan_layers needs layers of one structure"
            )
        for name, t in first.items():
            if other[name].shape != t.shape:
                raise ValueError(
                    f"{kind} {name!r} of layer {i} has shape {tuple(other[name].shape)}, layer 0's "
                    f"{tuple(t.shape)}; scan_layers needs layers of one structure"
                )
